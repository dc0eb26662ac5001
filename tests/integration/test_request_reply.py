"""Request-reply (RocketMQ 4.6, RIP-16) between Sluice's own clients: a requester waits for the reply its responder
sends, the broker pushes it over the requester's connection and keeps it in the cluster's reply topic."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from sluice import Producer as SyncProducer
from sluice.aio import ConsumeStatus, Producer, PushConsumer, RequestTimeoutError, create_reply_message
from sluice.client.admin import Admin
from sluice.client.message import Message
from sluice.client.request_reply import ReplyMessage
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.common.message import MessageExt
from sluice.remoting.codes import ResponseCode
from tests.conftest import Cluster


async def _responder(ns: str, topic: str, group: str) -> tuple[PushConsumer, Producer, list[MessageExt]]:
    """A consumer of ``topic`` that answers every request with its body upper-cased."""
    replier = await Producer(f"{group}-replier", ns).start()
    seen: list[MessageExt] = []
    consumer = PushConsumer(group, ns, consume_from="first")
    consumer.subscribe(topic)

    @consumer.listener
    async def answer(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            seen.append(m)
            await replier.send(create_reply_message(m, m.body.upper()))
        return ConsumeStatus.CONSUME_SUCCESS

    await consumer.start()
    return consumer, replier, seen


def test_a_request_gets_the_reply_its_responder_sent(cluster: Cluster) -> None:
    cluster.create_topic("rr-t", 2)
    ns = cluster.namesrv_addr

    async def go() -> None:
        consumer, replier, seen = await _responder(ns, "rr-t", "rr-g")
        try:
            async with Producer("rr-requester", ns) as requester:
                t0 = time.time() * 1000
                replies = await asyncio.gather(*(requester.request(Message("rr-t", f"ping {i}".encode()), 20)
                                                 for i in range(5)))
                assert sorted(r.body for r in replies) == [f"PING {i}".encode() for i in range(5)]
                for r in replies:
                    assert r.topic == "DefaultCluster_REPLY_TOPIC"
                    assert r.properties["MSG_TYPE"] == "reply"
                    assert r.properties["REPLY_TO_CLIENT"] == requester.client.client_id
                    assert int(r.properties["ARRIVE_TIME"]) >= int(r.properties["PUSH_REPLY_TIME"]) >= t0
                assert {r.properties["CORRELATION_ID"] for r in replies} == \
                    {m.properties["CORRELATION_ID"] for m in seen}
                assert {m.properties["TTL"] for m in seen} == {"20000"}
                assert len(requester.client.replies) == 0  # (nothing left waiting)
        finally:
            await consumer.shutdown()
            await replier.shutdown()
        async with Admin(ns) as admin:  # the replies are kept in the reply topic too (stored after the push)
            async with asyncio.timeout(30):
                while sum(q.max_offset for q in await admin.topic_status("DefaultCluster_REPLY_TOPIC")) < 5:
                    await asyncio.sleep(0.02)

    asyncio.run(go())


def test_a_request_nobody_answers_times_out(cluster: Cluster) -> None:
    cluster.create_topic("rr-silent", 1)

    async def go() -> None:
        async with Producer("rr-requester", cluster.namesrv_addr) as requester:
            t0 = time.monotonic()
            with pytest.raises(RequestTimeoutError, match=r"send request message to <rr-silent> OK, but wait reply "
                                                          r"message timeout, 1500 ms\."):
                await requester.request(Message("rr-silent", b"anyone?"), 1.5)
            assert 1.4 <= time.monotonic() - t0 < 10
            assert len(requester.client.replies) == 0

    asyncio.run(go())


def test_the_threaded_producer_requests_with_a_future_too(cluster: Cluster) -> None:
    cluster.create_topic("rr-sync", 1)
    ns = cluster.namesrv_addr

    async def serve(stop: asyncio.Event) -> None:
        consumer, replier, _ = await _responder(ns, "rr-sync", "rr-sync-g")
        try:
            await stop.wait()
        finally:
            await consumer.shutdown()
            await replier.shutdown()

    from sluice.client import _loop
    stop = asyncio.Event()
    serving = _loop.submit(serve(stop))
    try:
        with SyncProducer("rr-sync-requester", ns) as requester:
            assert requester.request(Message("rr-sync", b"one"), 20).body == b"ONE"
            got: list[bytes] = []
            called = threading.Event()
            fut = requester.request_async(Message("rr-sync", b"two"), 20)
            fut.add_done_callback(lambda f: (got.append(f.result().body), called.set()))
            assert fut.result(30).body == b"TWO"
            assert called.wait(30) and got == [b"TWO"]
    finally:
        _loop.call_soon(stop.set)
        serving.result(30)


def test_a_reply_to_a_client_that_is_not_connected_is_refused_naming_it(cluster: Cluster,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Refused with RocketMQ's remark, counted in the runtime info (``replyUndeliveredTotal``), logged once per
    requester however many replies come for it."""
    async def go() -> dict[str, str]:
        async with Producer("rr-orphan", cluster.namesrv_addr, retry_times_when_send_failed=0) as p:
            reply = ReplyMessage("DefaultCluster_REPLY_TOPIC", b"late", correlation_id="c-1",
                                 reply_to_client="10.0.0.9@gone", ttl="3000")
            for _ in range(3):
                with pytest.raises(ClientError) as err:
                    await p.send(reply)
            exc: BaseException | None = err.value
            while exc is not None and not isinstance(exc, BrokerResponseError):
                exc = exc.__cause__
            assert isinstance(exc, BrokerResponseError), repr(err.value)
            assert exc.code == ResponseCode.SYSTEM_ERROR
            assert exc.remark == "push reply message fail, channel of <10.0.0.9@gone> not found."
            with pytest.raises(Exception, match="batch"):
                await p.send_batch([reply])
        async with Admin(cluster.namesrv_addr) as admin:
            return await admin.broker_runtime_info("broker-a")

    with caplog.at_level(logging.WARNING, logger="sluice.broker.processors.reply_message_processor"):
        info = asyncio.run(go())
    assert info["replyUndeliveredTotal"] == "3"
    assert sum("10.0.0.9@gone" in r.getMessage() for r in caplog.records
               if r.name == "sluice.broker.processors.reply_message_processor") == 1


def test_only_a_request_can_be_replied_to(cluster: Cluster) -> None:
    cluster.create_topic("rr-plain", 1)

    async def go() -> None:
        async with Producer("rr-plain-p", cluster.namesrv_addr) as p:
            sent = await p.send(Message("rr-plain", b"not a request"))
        async with Admin(cluster.namesrv_addr) as admin:
            (plain,) = await admin.get_message(sent.msg_id, "rr-plain")
        with pytest.raises(ClientError, match="is not a request"):
            create_reply_message(plain, b"no")
        del plain.properties["CLUSTER"]
        with pytest.raises(ClientError, match=r"property\[CLUSTER\] is null"):
            create_reply_message(plain, b"no")

    asyncio.run(go())


def test_a_reply_goes_to_the_reply_topic_only_and_that_topic_is_the_systems(cluster: Cluster) -> None:
    cluster.create_topic("rr-elsewhere", 1)

    async def go() -> None:
        async with Producer("rr-elsewhere-p", cluster.namesrv_addr, retry_times_when_send_failed=0) as p:
            with pytest.raises(ClientError) as err:
                await p.send(ReplyMessage("rr-elsewhere", b"x", correlation_id="c", reply_to_client="a@1", ttl="1"))
            exc: BaseException | None = err.value
            while exc is not None and not isinstance(exc, BrokerResponseError):
                exc = exc.__cause__
            assert isinstance(exc, BrokerResponseError) and exc.code == ResponseCode.MESSAGE_ILLEGAL
            assert exc.remark == "a reply goes to the reply topic DefaultCluster_REPLY_TOPIC, not rr-elsewhere"
        async with Admin(cluster.namesrv_addr) as admin:
            broker = cluster.brokers[0].broker_addr
            for call in (admin.api.delete_topic_in_broker(broker, "DefaultCluster_REPLY_TOPIC"),
                         admin.api.create_topic(broker, "DefaultCluster_REPLY_TOPIC", 1, 1, 0)):
                with pytest.raises(BrokerResponseError, match="conflict with system topic"):
                    await call
        assert cluster.brokers[0].topic_config_manager.get("DefaultCluster_REPLY_TOPIC") is not None

    asyncio.run(go())
