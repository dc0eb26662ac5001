"""The gRPC front answers bad requests in-band with a status and a message, never acks another message, and keeps
serving after a malformed frame (raw gRPC calls built from ``sluice.proxy.protocol``)."""

from __future__ import annotations

from typing import Any

import grpc

from sluice import Message, Producer
from sluice.proxy.messaging_service import serve, stop
from sluice.proxy.protocol import CODE, SERVICE, pb
from tests.conftest import Cluster


def call(cluster: Cluster, method: str, request: Any, response: str) -> Any:
    async def go() -> Any:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                fn = channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=lambda r: r.SerializeToString(),
                                         response_deserializer=getattr(pb, response).FromString)
                return await fn(request, timeout=10)
        finally:
            await stop(server, service)

    return cluster.loop.run(go())


def endpoints() -> Any:
    e = pb.Endpoints(scheme=1)
    e.addresses.add(host="127.0.0.1", port=8081)
    return e


def test_unknown_topics_bad_messages_and_forged_receipts_get_a_status_with_a_reason(cluster: Cluster):
    r = call(cluster, "QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic"),
                                                         endpoints=endpoints()), "QueryRouteResponse")
    assert r.status.code == CODE["TOPIC_NOT_FOUND"] and r.status.message
    cluster.create_topic("GrpcBad", 2)
    r = call(cluster, "QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="GrpcBad"), endpoints=endpoints()),
             "QueryRouteResponse")
    assert r.status.code == CODE["OK"] and len(r.message_queues) == 2
    assert all(q.broker.endpoints == endpoints() and q.permission == 4 for q in r.message_queues)
    for mutate, code in ((lambda m: m.ClearField("body"), "MESSAGE_BODY_EMPTY"),
                         (lambda m: m.user_properties.__setitem__("TAGS", "x"), "ILLEGAL_MESSAGE_PROPERTY_KEY"),
                         (lambda m: setattr(m.system_properties, "message_group", "g" * 64), "ILLEGAL_MESSAGE_GROUP"),
                         (lambda m: setattr(m.system_properties, "tag", "a|b"), "ILLEGAL_MESSAGE_TAG")):
        m = pb.Message(topic=pb.Resource(name="GrpcBad"), body=b"x")
        m.system_properties.message_id = "01AB"
        m.system_properties.message_type = 1
        mutate(m)
        r = call(cluster, "SendMessage", pb.SendMessageRequest(messages=[m]), "SendMessageResponse")
        assert r.status.code == CODE[code] and r.status.message, (code, r.status)
    with Producer("grpc-bad-pg", namesrv=cluster.namesrv_addr) as p:
        p.send(Message("GrpcBad", b"one"))
    for handle in ("garbage", "1 2 3 4 0 broker-a 0 0", "0 1 60000 0 0 broker-a 0 0#12"):
        req = pb.AckMessageRequest(group=pb.Resource(name="grpc-bad"), topic=pb.Resource(name="GrpcBad"))
        req.entries.add(message_id="x", receipt_handle=handle)
        r = call(cluster, "AckMessage", req, "AckMessageResponse")
        assert r.status.code == CODE["INVALID_RECEIPT_HANDLE"] and r.entries[0].status.message, handle
    req = pb.ChangeInvisibleDurationRequest(group=pb.Resource(name="grpc-bad"), topic=pb.Resource(name="GrpcBad"),
                                            receipt_handle="0 1 60000 0 0 broker-a 0 0")
    req.invisible_duration.FromSeconds(13 * 3600)
    r = call(cluster, "ChangeInvisibleDuration", req, "ChangeInvisibleDurationResponse")
    assert r.status.code == CODE["ILLEGAL_INVISIBLE_TIME"]
    r = call(cluster, "EndTransaction", pb.EndTransactionRequest(topic=pb.Resource(name="GrpcBad"),
                                                                 transaction_id="nope", resolution=1),
             "EndTransactionResponse")
    assert r.status.code == CODE["INVALID_TRANSACTION_ID"]


def test_a_malformed_frame_is_refused_and_the_front_keeps_serving(cluster: Cluster):
    cluster.create_topic("GrpcMal", 1)

    async def go() -> tuple[grpc.StatusCode, str, int]:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                raw = channel.unary_unary(f"/{SERVICE}/SendMessage")  # bytes in, bytes out
                try:
                    await raw(b"\xff\xff\xff\xff not a protobuf", timeout=10)
                    code, details = grpc.StatusCode.OK, ""
                except grpc.aio.AioRpcError as exc:
                    code, details = exc.code(), exc.details() or ""
                route = channel.unary_unary(f"/{SERVICE}/QueryRoute",
                                            request_serializer=lambda r: r.SerializeToString(),
                                            response_deserializer=pb.QueryRouteResponse.FromString)
                ok = await route(pb.QueryRouteRequest(topic=pb.Resource(name="GrpcMal"), endpoints=endpoints()),
                                 timeout=10)
                return code, details, ok.status.code
        finally:
            await stop(server, service)

    code, details, after = cluster.loop.run(go())
    assert code != grpc.StatusCode.OK and details  # a status with a message
    assert after == CODE["OK"]  # and the next call is served
