"""Async sends: on the wire before ``send_async`` returns, retried like ``send``, bounded in number."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
import uvloop

import sluice
from sluice.aio import Producer
from sluice.client import _loop
from sluice.client.message import Message, SendResult, SendStatus
from sluice.common.errors import BrokerResponseError, ClientError, MessageFormatError
from sluice.remoting import ResponseCode
from tests.conftest import Cluster


def stored(cluster: Cluster, topic: str) -> int:
    """Messages of ``topic`` in the broker's consume queues (read from the servers' thread's store)."""
    store = cluster.brokers[0].store
    return sum(cq.max_offset for (t, _), cq in list(store.consume_queues.items()) if t == topic)


def _hold_loop(loop: asyncio.AbstractEventLoop) -> threading.Event:
    """Block ``loop`` (running in another thread) until the returned event is set; the hold has started when
    this returns."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(60)

    loop.call_soon_threadsafe(hold)
    assert held.wait(60)
    return release


def test_send_async_is_on_the_wire_before_the_loop_runs_again(cluster: Cluster):
    """Without auto-batching, each send leaves at once (with it, see test_auto_batch.py: at the turn's end)."""
    topic = "async-wire"
    cluster.create_topic(topic, 4)

    async def go() -> tuple[int, list[SendStatus]]:
        async with Producer("async-wire-pg", namesrv=cluster.namesrv_addr, auto_batch=False) as p:
            await p.send(Message(topic, b"warm-up"))  # the route and the connection are known from here
            before = stored(cluster, topic)
            futures = [p.send_async(Message(topic, b"m%d" % i)) for i in range(5)]
            # This loop is blocked: a send made by a task would not have left yet; the broker runs on its own.
            deadline = time.monotonic() + 60
            while stored(cluster, topic) - before < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            on_the_wire = stored(cluster, topic) - before
            return on_the_wire, [r.status for r in await asyncio.gather(*futures)]

    on_the_wire, statuses = uvloop.run(go())
    assert on_the_wire == 5
    assert statuses == [SendStatus.SEND_OK] * 5


def test_send_async_refused_first_attempt_is_retried_as_async_sends_are(empty_cluster: Cluster,
                                                                         caplog: pytest.LogCaptureFixture):
    """An async send retries ``retry_times_when_send_async_failed`` times, a sync send
    ``retry_times_when_send_failed`` times (RocketMQ's two settings)."""
    cluster = empty_cluster
    broker = cluster.start_broker("broker-a", auto_create_topic_enable=False)
    topic = "async-refused"
    cluster.create_topic(topic, 2)

    async def go() -> tuple[BaseException | None, BaseException | None]:
        async with Producer("async-refused-pg", namesrv=cluster.namesrv_addr, retry_times_when_send_failed=3,
                            retry_times_when_send_async_failed=2, auto_batch=False) as p:
            await p.send(Message(topic, b"warm-up"))
            broker.topic_config_manager.delete(topic)  # the name server (and the producer) still route here
            fut = p.send_async(Message(topic, b"refused"))
            assert p.in_flight.count == 1  # the first attempt left at once, not from a task
            try:
                await fut
                async_err = None
            except ClientError as exc:
                async_err = exc
            finally:
                assert p.in_flight.count == 0
            try:
                await p.send(Message(topic, b"refused too"))
                return async_err, None
            except ClientError as exc:
                return async_err, exc

    with caplog.at_level(logging.INFO, logger="sluice.client.aio.producer"):
        async_err, sync_err = uvloop.run(go())
    assert isinstance(async_err, ClientError) and "after 3 attempt(s)" in str(async_err)
    assert isinstance(async_err.__cause__, BrokerResponseError)
    assert async_err.__cause__.code == ResponseCode.TOPIC_NOT_EXIST
    assert isinstance(sync_err, ClientError) and "after 4 attempt(s)" in str(sync_err)
    attempts = [r.getMessage() for r in caplog.records if "failed on attempt" in r.getMessage()]
    assert [a.rsplit("failed on attempt ", 1)[1].split(":")[0] for a in attempts] == ["1", "2", "3",
                                                                                     "1", "2", "3", "4"]


def test_send_async_pinned_to_a_queue_is_not_retried_so_later_sends_cannot_overtake_it(empty_cluster: Cluster):
    """A retry of an async send with a sharding key would store it after the sends made after it."""
    cluster = empty_cluster
    broker = cluster.start_broker("broker-a", auto_create_topic_enable=False)
    topic = "async-pinned-refused"
    cluster.create_topic(topic, 2)

    async def go() -> tuple[BaseException | None, BaseException | None]:
        async with Producer("async-pinned-pg", namesrv=cluster.namesrv_addr, retry_times_when_send_failed=3,
                            retry_times_when_send_async_failed=2, auto_batch=False) as p:
            await p.send(Message(topic, b"warm-up"), sharding_key="k")
            broker.topic_config_manager.delete(topic)  # the name server (and the producer) still route here
            errors: list[BaseException | None] = []
            for send in (lambda: p.send_async(Message(topic, b"refused"), sharding_key="k"),
                         lambda: p.send(Message(topic, b"refused too"), sharding_key="k")):
                try:
                    await send()
                    errors.append(None)
                except ClientError as exc:
                    errors.append(exc)
            return errors[0], errors[1]

    async_err, sync_err = uvloop.run(go())
    assert isinstance(async_err, ClientError) and "after 1 attempt(s)" in str(async_err)
    assert isinstance(async_err.__cause__, BrokerResponseError)
    assert async_err.__cause__.code == ResponseCode.TOPIC_NOT_EXIST
    # A sync send is retried on its queue: nothing of the key was sent after it meanwhile.
    assert isinstance(sync_err, ClientError) and "after 4 attempt(s)" in str(sync_err)


def test_send_async_keeps_at_most_max_inflight_async_sends_in_flight(cluster: Cluster):
    topic = "async-bounded"
    cluster.create_topic(topic, 4)

    async def go() -> tuple[int, list[SendStatus], int, int]:
        async with Producer("async-bounded-pg", namesrv=cluster.namesrv_addr, max_inflight_async_sends=2) as p:
            await p.send(Message(topic, b"warm-up"))
            futures = [p.send_async(Message(topic, b"m%d" % i)) for i in range(20)]
            started_at_once = p.in_flight.count
            await asyncio.sleep(0)  # the waiting sends' tasks run and park
            parked = len(p.in_flight.waiters)
            futures[5].cancel()  # a send waiting for room gives up: the others still get theirs
            results = await asyncio.gather(*futures, return_exceptions=True)
            statuses = [r.status for r in results if not isinstance(r, BaseException)]
            return started_at_once, statuses, parked, p.in_flight.count

    started_at_once, statuses, parked, left = uvloop.run(go())
    assert started_at_once == 2 and parked == 18
    assert statuses == [SendStatus.SEND_OK] * 19
    assert left == 0


def test_send_async_waiting_for_room_keeps_its_turn(cluster: Cluster):
    topic = "async-turns"
    cluster.create_topic(topic, 4)

    async def go() -> list[int]:
        async with Producer("async-turns-pg", namesrv=cluster.namesrv_addr, max_inflight_async_sends=1) as p:
            await p.send(Message(topic, b"warm-up"), sharding_key="k")
            later: list[asyncio.Future[SendResult]] = []
            a = p.send_async(Message(topic, b"a"), sharding_key="k")
            b = p.send_async(Message(topic, b"b"), sharding_key="k")  # waits for a's slot
            # When a is answered, c comes after b, which was waiting: it may not take the slot a frees.
            a.add_done_callback(lambda _: later.append(p.send_async(Message(topic, b"c"), sharding_key="k")))
            await asyncio.gather(a, b)
            await asyncio.sleep(0)
            c = await later[0]
            return [(await a).queue_offset, (await b).queue_offset, c.queue_offset]

    offsets = uvloop.run(go())
    assert offsets == sorted(offsets) and len(set(offsets)) == 3


def test_cancelled_send_async_holds_its_slot_until_its_request_is_answered(cluster: Cluster):
    topic = "async-cancelled"
    cluster.create_topic(topic, 4)

    async def go() -> tuple[int, int, int]:
        async with Producer("async-cancelled-pg", namesrv=cluster.namesrv_addr, auto_batch=False) as p:
            await p.send(Message(topic, b"warm-up"))
            before = stored(cluster, topic)
            release = _hold_loop(cluster.loop.loop)  # the broker answers nothing until released
            try:
                fut = p.send_async(Message(topic, b"cancelled"))
                fut.cancel()
                # Done once the future's callbacks have run: the producer's own, added before wait()'s, first.
                await asyncio.wait([fut], timeout=60)
                held = p.in_flight.count  # the request is on the wire: it counts until its answer comes
            finally:
                release.set()
            deadline = time.monotonic() + 60
            while p.in_flight.count and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return held, p.in_flight.count, stored(cluster, topic) - before

    held, left, stored_after = uvloop.run(go())
    assert (held, left, stored_after) == (1, 0, 1)


@pytest.mark.parametrize("bad", [Message("async-bad", b"x" * 2000), "not a message"])
def test_send_async_of_a_bad_message_fails_its_future(cluster: Cluster, bad: object):
    async def go() -> BaseException:
        async with Producer("async-bad-pg", namesrv=cluster.namesrv_addr, max_message_size=1024) as p:
            await p.send(Message("async-bad", b"fits"))  # a route and a connection: the fast path is open
            fut = p.send_async(bad)  # type: ignore[arg-type]
            with pytest.raises((MessageFormatError, TypeError)) as info:
                await fut
            return info.value

    err = uvloop.run(go())
    assert ("over the limit of 1024" in str(err)) if isinstance(bad, Message) else isinstance(err, TypeError)


# -- the threaded API (``sluice.Producer.send_async``): the same send, started from any thread -----------------


def _hold_background_loop() -> threading.Event:
    """Block the threaded API's loop until the returned event is set (the hold starts before this returns)."""
    return _hold_loop(_loop.background_loop())


def test_threaded_send_async_sends_in_order_and_returns_results(cluster: Cluster):
    topic = "threaded-async"
    cluster.create_topic(topic, 4)
    with sluice.Producer("threaded-async-pg", namesrv=cluster.namesrv_addr) as p:
        futures = [p.send_async(Message(topic, b"m%d" % i), sharding_key="k") for i in range(200)]
        results: list[SendResult] = []
        for f in futures:
            try:
                results.append(f.result(10))
            except ClientError as exc:
                # A broker pushing back (a loaded machine) may refuse some; a pinned async send is not retried.
                assert isinstance(exc.__cause__, BrokerResponseError), exc
                assert exc.__cause__.code == ResponseCode.SYSTEM_BUSY, exc
    assert len(results) >= 10 and all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.queue.queue_id for r in results}) == 1  # one sharding key, one queue
    assert [r.queue_offset for r in results] == sorted(r.queue_offset for r in results)  # stored in call order


def test_threaded_send_async_cancelled_before_it_starts_is_never_sent(cluster: Cluster):
    topic = "threaded-async-cancel"
    cluster.create_topic(topic, 2)
    with sluice.Producer("threaded-async-cancel-pg", namesrv=cluster.namesrv_addr) as p:
        p.send(Message(topic, b"warm-up"))
        before = stored(cluster, topic)
        release = _hold_background_loop()
        try:
            cancelled = p.send_async(Message(topic, b"never"))
            kept = p.send_async(Message(topic, b"kept"))
            assert cancelled.cancel()
        finally:
            release.set()
        assert kept.result(60).status is SendStatus.SEND_OK
        assert cancelled.cancelled()
        # Sends leave in call order: had the cancelled one gone out, it would be stored before this one is.
        assert p.send(Message(topic, b"after")).status is SendStatus.SEND_OK
        assert stored(cluster, topic) - before == 2


def test_threaded_send_async_failure_reaches_its_future():
    p = sluice.Producer("threaded-async-unstarted", namesrv="127.0.0.1:1")
    fut = p.send_async(Message("t", b"m"))
    with pytest.raises(ClientError, match="not started"):
        fut.result(10)


def test_async_sends_made_while_the_route_is_being_found_keep_their_order(cluster: Cluster):
    """The first sends wait for the route and the connection (the task path); sends made meanwhile, once those
    are known, must not go out ahead of them."""
    topic = "async-order-at-start"
    cluster.create_topic(topic, 4)

    async def go() -> list[int]:
        async with Producer("async-order-pg", namesrv=cluster.namesrv_addr) as p:
            futures = []
            for i in range(300):
                futures.append(p.send_async(Message(topic, b"m%d" % i), sharding_key="k"))
                for _ in range(i % 3):
                    await asyncio.sleep(0)  # earlier sends get part of their way meanwhile
            return [(await f).queue_offset for f in futures]

    offsets = uvloop.run(go())
    assert offsets == sorted(offsets) and len(set(offsets)) == 300
