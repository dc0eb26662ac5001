"""Auto-batching: async single sends made in one turn of the loop leave as one batch, and each caller still gets
its own message's result; order, cancellation, failures and messages that cannot share a batch."""

from __future__ import annotations

import asyncio
import zlib
from datetime import timedelta

import uvloop

from sluice.aio import Producer
from sluice.client.message import Message, SendResult, SendStatus
from sluice.common.errors import ClientError
from sluice.common.message import decode_message_id
from sluice.common.message_codec import decode_records
from sluice.common.structs import MessageQueue
from sluice.common.sysflag import COMPRESSED_FLAG
from tests.conftest import Cluster


def puts(cluster: Cluster) -> int:
    """Store appends the broker has made (one per send request, whatever it holds)."""
    return cluster.brokers[0].stats._lat_n


def stored_bodies(cluster: Cluster, mq: MessageQueue) -> list[bytes]:
    store = cluster.brokers[0].store
    msgs, offset = [], 0
    while offset < store.get_max_offset_in_queue(mq.topic, mq.queue_id):
        r = store.get_messages("reader", mq.topic, mq.queue_id, offset, 32)
        try:
            msgs += [m for buf in r.buffers for m in decode_records(buf)]
        finally:
            r.release()
        offset = r.next_begin_offset
    return [zlib.decompress(m.body) if m.sys_flag & COMPRESSED_FLAG else bytes(m.body) for m in msgs]


def test_async_sends_of_one_turn_leave_as_one_batch_each_with_its_own_result(cluster: Cluster):
    topic = "auto-batch"
    cluster.create_topic(topic, 4)

    async def go() -> tuple[list[SendResult], int]:
        async with Producer("auto-batch-pg", namesrv=cluster.namesrv_addr) as p:
            await p.send(Message(topic, b"warm-up"))
            before = puts(cluster)
            futures = [p.send_async(Message(topic, b"m%d" % i, keys=f"k{i}")) for i in range(100)]
            results = await asyncio.gather(*futures)
            return results, puts(cluster) - before

    results, requests = uvloop.run(go())
    assert [r.status for r in results] == [SendStatus.SEND_OK] * 100
    assert requests == 1
    assert len({r.msg_id for r in results}) == 100 and all(r.msg_ids == [r.msg_id] for r in results)
    mq = results[0].queue
    assert all(r.queue == mq for r in results)
    first = results[0].queue_offset
    assert [r.queue_offset for r in results] == list(range(first, first + 100))
    # The broker's id of each message points at that message in the commit log.
    store = cluster.brokers[0].store
    for i in (0, 37, 99):
        _, phys = decode_message_id(results[i].offset_msg_id)
        msg = store.look_message_by_offset(phys)
        assert msg is not None and msg.body == b"m%d" % i and msg.properties["UNIQ_KEY"] == results[i].msg_id
    assert stored_bodies(cluster, mq)[first:first + 100] == [b"m%d" % i for i in range(100)]


def test_batches_are_cut_at_batch_max_bytes(cluster: Cluster):
    topic = "auto-batch-cut"
    cluster.create_topic(topic, 4)

    async def go() -> tuple[list[SendResult], int]:
        async with Producer("auto-batch-cut-pg", namesrv=cluster.namesrv_addr, batch_max_bytes=4096) as p:
            await p.send(Message(topic, b"warm-up"))
            before = puts(cluster)
            results = await asyncio.gather(*(p.send_async(Message(topic, bytes(1000))) for _ in range(20)))
            return results, puts(cluster) - before

    results, requests = uvloop.run(go())
    assert all(r.status == SendStatus.SEND_OK for r in results)
    assert requests == 7  # ~1,050 bytes a record: three fit under 4 KiB, a fourth would not


def test_sends_of_one_key_keep_their_order_whatever_their_timeout_wait_or_way_of_sending(cluster: Cluster):
    topic = "auto-batch-order"
    cluster.create_topic(topic, 4)

    async def go() -> list[SendResult]:
        async with Producer("auto-batch-order-pg", namesrv=cluster.namesrv_addr) as p:
            await p.send(Message(topic, b"warm-up"))
            futures = [p.send_async(Message(topic, b"1"), sharding_key="k"),
                       p.send_async(Message(topic, b"2"), sharding_key="k", timeout=5),
                       p.send_async(Message(topic, b"3", wait_store_msg_ok=False), sharding_key="k"),
                       p.send_async(Message(topic, b"4"), sharding_key="k")]
            last = await p.send(Message(topic, b"5"), sharding_key="k")  # written at once: after the four
            return [*(await asyncio.gather(*futures)), last]

    results = uvloop.run(go())
    assert len({r.queue for r in results}) == 1
    stored = stored_bodies(cluster, results[0].queue)
    assert [b for b in stored if b in (b"1", b"2", b"3", b"4", b"5")] == [b"1", b"2", b"3", b"4", b"5"]


def test_a_sharding_key_keeps_its_queue_and_order_across_batches(cluster: Cluster):
    topic = "auto-batch-keyed"
    cluster.create_topic(topic, 4)

    async def go() -> list[SendResult]:
        async with Producer("auto-batch-keyed-pg", namesrv=cluster.namesrv_addr) as p:
            await p.send(Message(topic, b"warm-up"))
            futures = []
            for turn in range(5):
                futures += [p.send_async(Message(topic, b"%s-%d-%d" % (key, turn, i)), sharding_key=key.decode())
                            for key in (b"a", b"b") for i in range(10)]
                await asyncio.sleep(0)
            return await asyncio.gather(*futures)

    results = uvloop.run(go())
    for k, key in enumerate((b"a", b"b")):
        mine = [r for turn in range(5) for r in results[turn * 20 + k * 10:turn * 20 + k * 10 + 10]]
        assert len({r.queue for r in mine}) == 1
        offsets = [r.queue_offset for r in mine]
        assert offsets == sorted(offsets)
        bodies = [b for b in stored_bodies(cluster, mine[0].queue) if b.startswith(key + b"-")]
        assert bodies == [b"%s-%d-%d" % (key, turn, i) for turn in range(5) for i in range(10)]


def test_messages_that_cannot_share_a_batch_keep_their_place_in_the_topics_order(cluster: Cluster):
    """A body over the compression threshold leaves on its own, after the batch held before it."""
    topic = "auto-batch-mixed"
    cluster.create_topic(topic, 1)
    big = b"x" * 10_000

    async def go() -> list[SendResult]:
        async with Producer("auto-batch-mixed-pg", namesrv=cluster.namesrv_addr) as p:
            await p.send(Message(topic, b"warm-up"))
            futures = [p.send_async(Message(topic, b"a1")), p.send_async(Message(topic, b"a2")),
                       p.send_async(Message(topic, big)), p.send_async(Message(topic, b"a3")),
                       p.send_async(Message(topic, b"a4"))]
            return await asyncio.gather(*futures)

    results = uvloop.run(go())
    assert [r.queue_offset for r in results] == [1, 2, 3, 4, 5]
    assert stored_bodies(cluster, results[0].queue) == [b"warm-up", b"a1", b"a2", big, b"a3", b"a4"]


def test_a_delayed_message_is_not_batched_and_still_arrives_delayed(cluster: Cluster):
    topic = "auto-batch-delay"
    cluster.create_topic(topic, 1)

    async def go() -> list[SendResult]:
        async with Producer("auto-batch-delay-pg", namesrv=cluster.namesrv_addr) as p:
            await p.send(Message(topic, b"warm-up"))
            return await asyncio.gather(p.send_async(Message(topic, b"now")),
                                        p.send_async(Message(topic, b"later", delay=timedelta(hours=1))),
                                        p.send_async(Message(topic, b"now too")))

    results = uvloop.run(go())
    assert all(r.status == SendStatus.SEND_OK for r in results)
    assert stored_bodies(cluster, results[0].queue) == [b"warm-up", b"now", b"now too"]


def test_a_send_cancelled_before_its_batch_leaves_is_not_sent(cluster: Cluster):
    topic = "auto-batch-cancel"
    cluster.create_topic(topic, 1)

    async def go() -> list[SendResult]:
        async with Producer("auto-batch-cancel-pg", namesrv=cluster.namesrv_addr) as p:
            await p.send(Message(topic, b"warm-up"))
            futures = [p.send_async(Message(topic, b"m%d" % i)) for i in range(4)]
            futures[1].cancel()
            results = await asyncio.gather(futures[0], futures[2], futures[3])
            assert p.in_flight.count == 0 and p.accumulator.pending == 0
            return results

    results = uvloop.run(go())
    assert stored_bodies(cluster, results[0].queue) == [b"warm-up", b"m0", b"m2", b"m3"]
    assert [r.queue_offset for r in results] == [1, 2, 3]


def test_a_batch_the_broker_refuses_fails_every_members_future(empty_cluster: Cluster):
    cluster = empty_cluster
    broker = cluster.start_broker("broker-a", auto_create_topic_enable=False)
    topic = "auto-batch-refused"
    cluster.create_topic(topic, 2)

    async def go() -> list[BaseException | SendResult]:
        async with Producer("auto-batch-refused-pg", namesrv=cluster.namesrv_addr,
                            retry_times_when_send_async_failed=1) as p:
            await p.send(Message(topic, b"warm-up"))
            broker.topic_config_manager.delete(topic)  # the name server (and the producer) still route here
            out = await asyncio.gather(*(p.send_async(Message(topic, b"m%d" % i)) for i in range(10)),
                                       return_exceptions=True)
            assert p.in_flight.count == 0
            return out

    out = uvloop.run(go())
    assert all(isinstance(e, ClientError) and "after 2 attempt(s)" in str(e) for e in out), out


def test_without_auto_batch_each_async_send_is_a_request_of_its_own(cluster: Cluster):
    topic = "auto-batch-off"
    cluster.create_topic(topic, 4)

    async def go() -> int:
        async with Producer("auto-batch-off-pg", namesrv=cluster.namesrv_addr, auto_batch=False) as p:
            await p.send(Message(topic, b"warm-up"))
            before = puts(cluster)
            await asyncio.gather(*(p.send_async(Message(topic, b"m%d" % i)) for i in range(20)))
            return puts(cluster) - before

    assert uvloop.run(go()) == 20


def test_threaded_send_async_batches_too_and_keeps_order(cluster: Cluster):
    import sluice

    topic = "auto-batch-threaded"
    cluster.create_topic(topic, 1)
    with sluice.Producer("auto-batch-threaded-pg", namesrv=cluster.namesrv_addr) as p:
        p.send(Message(topic, b"warm-up"))
        futures = [p.send_async(Message(topic, b"m%03d" % i)) for i in range(300)]
        results = [f.result(60) for f in futures]
    assert [r.queue_offset for r in results] == list(range(1, 301))
    assert stored_bodies(cluster, results[0].queue)[1:] == [b"m%03d" % i for i in range(300)]
