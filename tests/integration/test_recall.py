"""Recall (RocketMQ 5.x): a timer message taken back before it is due, with the recall handle its send returned —
through Sluice's producer and the gRPC front; the broker refuses what RocketMQ refuses, with its codes and remarks;
a recall survives a restart of the broker."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import grpc
import pytest

from sluice import Message, Producer, PullConsumer
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.common.recall_handle import RecallHandle
from sluice.proxy.messaging_service import serve, stop
from sluice.proxy.protocol import CODE, SERVICE, pb
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.headers import RecallMessageRequestHeader
from tests.conftest import Cluster
from tests.integration.helpers import wait_until

DELAY = timedelta(seconds=4)


def _refusal(fn: Any) -> BrokerResponseError:
    with pytest.raises(ClientError) as err:
        fn()
    exc: BaseException | None = err.value
    while exc is not None and not isinstance(exc, BrokerResponseError):
        exc = exc.__cause__
    assert isinstance(exc, BrokerResponseError), repr(err.value)
    return exc


def _delivered(cluster: Cluster, topic: str, until: bytes, timeout: float = 60) -> list[bytes]:
    """Every body delivered to ``topic`` once ``until`` has been."""
    got: list[bytes] = []
    with PullConsumer(f"{topic}-reader", namesrv=cluster.namesrv_addr, consume_from="first") as reader:
        reader.subscribe(topic)
        wait_until(lambda: got.extend(m.body for m in reader.poll(0.2)) or until in got, timeout, f"{until!r}")
        for _ in range(3):  # (anything due with it would be here by now)
            got.extend(m.body for m in reader.poll(0.2))
    return got


def test_a_recalled_timer_message_is_never_delivered_and_its_neighbour_is(cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    broker.config.recall_message_enable = True
    cluster.create_topic("recall-t", 1)
    with Producer("recall-pg", namesrv=cluster.namesrv_addr) as p:
        recalled = p.send(Message("recall-t", b"take me back", delay=DELAY))
        kept = p.send(Message("recall-t", b"keep me", delay=DELAY))
        assert recalled.recall_handle and kept.recall_handle
        handle = RecallHandle.decode(recalled.recall_handle)
        assert (handle.topic, handle.broker_name, handle.message_id) == ("recall-t", "broker-a", recalled.msg_id)
        assert p.recall_message("recall-t", recalled.recall_handle) == recalled.msg_id
        plain = p.send(Message("recall-t", b"plain"))
        assert plain.recall_handle is None  # (only a timer message has one)
    got = _delivered(cluster, "recall-t", b"keep me")
    assert b"take me back" not in got and got.count(b"keep me") == 1
    assert broker.timer_service.recalled == 1


def test_a_recall_survives_a_restart_of_the_broker(cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    broker.config.recall_message_enable = True
    cluster.create_topic("recall-r", 1)
    with Producer("recall-pg", namesrv=cluster.namesrv_addr) as p:
        recalled = p.send(Message("recall-r", b"take me back", delay=timedelta(seconds=6)))
        p.send(Message("recall-r", b"keep me", delay=timedelta(seconds=6)))
        assert recalled.recall_handle is not None
        p.recall_message("recall-r", recalled.recall_handle)
    wait_until(lambda: broker.timer_service.enqueue_offset >= 3, 30, "the recall in the wheel")
    cluster.restart_broker(broker)
    got = _delivered(cluster, "recall-r", b"keep me")
    assert b"take me back" not in got


def _recall_at(addr: str, topic: str, handle: str) -> tuple[int, str]:
    """RECALL_MESSAGE sent to ``addr`` whatever broker the handle names (a client sends it to that one)."""
    async def go() -> tuple[int, str]:
        remoting = RemotingClient()
        try:
            header = RecallMessageRequestHeader("recall-pg", topic, handle)
            resp = await MQClientAPI(remoting, []).invoke(addr, RequestCode.RECALL_MESSAGE, header.encode())
            return resp.code, resp.remark
        finally:
            await remoting.close()
    return asyncio.run(go())


def test_recalls_are_refused_as_rocketmq_refuses_them(cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    cluster.create_topic("recall-bad", 1)
    cluster.create_topic("recall-other", 1)
    with Producer("recall-pg", namesrv=cluster.namesrv_addr) as p:
        sent = p.send(Message("recall-bad", b"x", delay=DELAY))
        handle = sent.recall_handle
        assert handle is not None
        off = _refusal(lambda: p.recall_message("recall-bad", handle))
        assert (off.code, off.remark) == (ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
        broker.config.recall_message_enable = True
        now = int(time.time() * 1000)
        for topic, h, remark in (
                ("recall-other", handle, "recall failed, topic not match"),
                ("recall-bad", RecallHandle("recall-bad", "broker-z", str(now + 5000), sent.msg_id).encode(),
                 "recall failed, broker service not available"),
                ("recall-bad", RecallHandle("recall-bad", "broker-a", str(now - 1), sent.msg_id).encode(),
                 "recall failed, timestamp invalid"),
                ("recall-bad", RecallHandle("recall-bad", "broker-a", str(now + 10 ** 10), sent.msg_id).encode(),
                 "recall failed, timestamp invalid"),
                ("recall-bad", "bm90IGEgaGFuZGxl", "recall handle is invalid")):
            assert _recall_at(broker.broker_addr, topic, h) == (ResponseCode.ILLEGAL_OPERATION, remark), topic
        assert _recall_at(broker.broker_addr, "recall-none", handle) == (
            ResponseCode.TOPIC_NOT_EXIST, "recall failed, the topic[recall-none] not exist")
        with pytest.raises(ClientError, match="recall handle is invalid"):
            p.recall_message("recall-bad", "not-a-handle")
        with pytest.raises(ClientError, match="retry or dead-letter"):
            p.recall_message("%RETRY%g", handle)
        # The message refused recalls was never recalled: it is delivered.
    assert b"x" in _delivered(cluster, "recall-bad", b"x")


def test_the_grpc_front_returns_recall_handles_and_recalls(cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    broker.config.recall_message_enable = True
    cluster.create_topic("recall-g", 1)

    async def go() -> tuple[Any, Any, Any]:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                def rpc(method: str, response: str) -> Any:
                    return channel.unary_unary(f"/{SERVICE}/{method}",
                                               request_serializer=lambda r: r.SerializeToString(),
                                               response_deserializer=getattr(pb, response).FromString)
                sent = []
                due = int(time.time() * 1000) + 4000
                for i, body in enumerate((b"grpc recall me", b"grpc keep me")):
                    m = pb.Message(topic=pb.Resource(name="recall-g"), body=body)
                    m.system_properties.message_id = f"01RECALLGRPC000000000000000{i}"
                    m.system_properties.message_type = 3  # DELAY
                    m.system_properties.delivery_timestamp.FromMilliseconds(due)
                    sent.append(await rpc("SendMessage", "SendMessageResponse")(pb.SendMessageRequest(messages=[m]),
                                                                                timeout=10))
                handle = sent[0].entries[0].recall_handle
                ok = await rpc("RecallMessage", "RecallMessageResponse")(
                    pb.RecallMessageRequest(topic=pb.Resource(name="recall-g"), recall_handle=handle), timeout=10)
                bad = await rpc("RecallMessage", "RecallMessageResponse")(
                    pb.RecallMessageRequest(topic=pb.Resource(name="recall-g"), recall_handle="garbage"), timeout=10)
                return sent[0], ok, bad
        finally:
            await stop(server, service)

    sent, ok, bad = cluster.loop.run(go())
    assert sent.status.code == CODE["OK"] and sent.entries[0].recall_handle
    assert ok.status.code == CODE["OK"] and ok.message_id == "01RECALLGRPC0000000000000000"
    assert bad.status.code == CODE["INTERNAL_SERVER_ERROR"] and bad.status.message == "recall handle is invalid"
    got = _delivered(cluster, "recall-g", b"grpc keep me")
    assert b"grpc recall me" not in got and broker.timer_service.recalled == 1


def test_a_recall_on_a_broker_with_timers_off_fails_as_on_rocketmq(cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    broker.config.recall_message_enable = True
    broker.timer_service.enabled = False
    cluster.create_topic("recall-off", 1)
    handle = RecallHandle("recall-off", "broker-a", str(int(time.time() * 1000) + 5000), "01AB").encode()
    assert _recall_at(broker.broker_addr, "recall-off", handle) == (ResponseCode.SYSTEM_ERROR,
                                                                    "recall failed, execute error")
