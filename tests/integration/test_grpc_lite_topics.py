"""Lite topics on the gRPC front, from raw RocketMQ 5 calls (``sluice.proxy.protocol``): a lite group's receive is
a lite pop whatever the front knows of the client (its settings never sent, the front restarted), a lite message
given up on goes to the group's dead-letter queue and releases its lite topic, and bad lite requests get the
status RocketMQ's proxy gives."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from sluice.client.admin import Admin
from sluice.proxy.messaging_service import serve, stop
from sluice.proxy.protocol import CODE, SERVICE, pb
from tests.conftest import Cluster

PARENT = "Sessions"
GROUP = "session-readers"
CLIENT = (("x-mq-client-id", "lite-client-1"),)


def setup(cluster: Cluster) -> None:
    cluster.start_broker("broker-a", store_enable_lmq=True, store_enable_multi_dispatch=True)
    cluster.create_topic(PARENT, 2, attributes="+message.type=LITE")

    async def group() -> None:
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.update_group(GROUP, attributes=f"+lite.bind.topic={PARENT}", retryMaxTimes=2)

    cluster.loop.run(group())


def lite_message(lite: str, body: bytes, n: int) -> Any:
    m = pb.Message(topic=pb.Resource(name=PARENT), body=body)
    m.system_properties.message_id = f"01{n:030X}"
    m.system_properties.message_type = 5
    m.system_properties.lite_topic = lite
    return m


def test_a_lite_groups_receive_pops_its_lite_topics_and_a_message_given_up_on_goes_to_the_dlq(
        empty_cluster: Cluster) -> None:
    setup(empty_cluster)

    async def go() -> None:
        server, service, port = await serve(empty_cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                def rpc(name: str, resp: str, stream: bool = False) -> Any:
                    make = ch.unary_stream if stream else ch.unary_unary
                    return make(f"/{SERVICE}/{name}", request_serializer=lambda r: r.SerializeToString(),
                                response_deserializer=getattr(pb, resp).FromString)

                send = rpc("SendMessage", "SendMessageResponse")
                for i, (lite, body) in enumerate((("alpha", b"a-0"), ("beta", b"b-0"), ("alpha", b"a-1"))):
                    r = await send(pb.SendMessageRequest(messages=[lite_message(lite, body, i)]), timeout=10)
                    assert r.status.code == CODE["OK"], r.status
                r = await send(pb.SendMessageRequest(messages=[lite_message("not ok", b"x", 9)]), timeout=10)
                assert r.status.code == CODE["ILLEGAL_LITE_TOPIC"]

                sync = rpc("SyncLiteSubscription", "SyncLiteSubscriptionResponse")
                req = pb.SyncLiteSubscriptionRequest(action=0, topic=pb.Resource(name=PARENT),
                                                     group=pb.Resource(name=GROUP), lite_topic_set=["alpha"])
                assert (await sync(req, timeout=10)).status.code == CODE["CLIENT_ID_REQUIRED"]
                r = await sync(req, metadata=CLIENT, timeout=10)
                assert r.status.code == CODE["OK"], r.status

                async def receive() -> list[Any]:
                    rq = pb.ReceiveMessageRequest(group=pb.Resource(name=GROUP), batch_size=1, auto_renew=False)
                    rq.message_queue.topic.name = PARENT
                    rq.message_queue.id = -1
                    rq.message_queue.broker.name = "broker-a"
                    rq.invisible_duration.FromSeconds(30)
                    rq.long_polling_timeout.FromSeconds(5)
                    frames = [f async for f in rpc("ReceiveMessage", "ReceiveMessageResponse", stream=True)(
                        rq, metadata=CLIENT, timeout=20)]
                    return [f.message for f in frames if f.HasField("message")]

                # No Telemetry settings were ever sent: the group's bind topic makes it a lite pop.
                (m,) = await receive()
                assert (m.body, m.system_properties.lite_topic, m.system_properties.message_type) == \
                    (b"a-0", "alpha", 5)
                forward = rpc("ForwardMessageToDeadLetterQueue", "ForwardMessageToDeadLetterQueueResponse")
                r = await forward(pb.ForwardMessageToDeadLetterQueueRequest(
                    group=pb.Resource(name=GROUP), topic=pb.Resource(name=PARENT),
                    receipt_handle=m.system_properties.receipt_handle, message_id=m.system_properties.message_id,
                    delivery_attempt=3, max_delivery_attempts=3), timeout=10)
                assert r.status.code == CODE["OK"], r.status
                # Given up on and acknowledged: the lite topic goes on with its next message.
                (m2,) = await receive()
                assert m2.body == b"a-1"
                ack = pb.AckMessageRequest(group=pb.Resource(name=GROUP), topic=pb.Resource(name=PARENT))
                ack.entries.add(message_id=m2.system_properties.message_id,
                                receipt_handle=m2.system_properties.receipt_handle)  # (no lite_topic: the handle's)
                r = await rpc("AckMessage", "AckMessageResponse")(ack, timeout=10)
                assert r.status.code == CODE["OK"], r.status
        finally:
            await stop(server, service)

    empty_cluster.loop.run(go(), 90)
    broker = empty_cluster.brokers[0]
    assert broker.store.get_max_offset_in_queue(f"%DLQ%{GROUP}", 0) == 1


def test_a_lite_consumers_subscriptions_go_when_its_telemetry_stream_is_cut(empty_cluster: Cluster) -> None:
    """RocketMQ's proxy drops a lite push consumer's subscriptions when its stream is cancelled (the client's
    process gone), not after they go unrenewed; a stream the client ends keeps them."""
    setup(empty_cluster)
    broker = empty_cluster.brokers[0]

    def settings_command() -> Any:
        cmd = pb.TelemetryCommand()
        cmd.settings.client_type = 5  # LITE_PUSH_CONSUMER
        cmd.settings.subscription.group.name = GROUP
        cmd.settings.subscription.subscriptions.add().topic.name = PARENT
        return cmd

    async def go() -> None:
        server, service, port = await serve(empty_cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            for client, cut in (("lite-client-cut", True), ("lite-client-ends", False)):
                meta = (("x-mq-client-id", client),)
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                    telemetry = ch.stream_stream(f"/{SERVICE}/Telemetry",
                                                 request_serializer=lambda r: r.SerializeToString(),
                                                 response_deserializer=pb.TelemetryCommand.FromString)
                    sync = ch.unary_unary(f"/{SERVICE}/SyncLiteSubscription",
                                          request_serializer=lambda r: r.SerializeToString(),
                                          response_deserializer=pb.SyncLiteSubscriptionResponse.FromString)
                    call = telemetry(metadata=meta)
                    await call.write(settings_command())
                    assert (await call.read()).status.code == CODE["OK"]
                    req = pb.SyncLiteSubscriptionRequest(action=0, topic=pb.Resource(name=PARENT),
                                                         group=pb.Resource(name=GROUP), lite_topic_set=["gamma"])
                    assert (await sync(req, metadata=meta, timeout=10)).status.code == CODE["OK"]
                    assert client in broker.lite.registry.clients
                    if cut:
                        call.cancel()
                    else:
                        await call.done_writing()
                        while await call.read() is not grpc.aio.EOF:
                            pass
                async with asyncio.timeout(10):
                    while cut and client in broker.lite.registry.clients:
                        await asyncio.sleep(0.05)
                assert (client in broker.lite.registry.clients) is not cut
        finally:
            await stop(server, service)

    empty_cluster.loop.run(go(), 60)
