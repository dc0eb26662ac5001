"""The gRPC front answers bad requests in-band with a status and a message, never acks another message, and keeps
serving after a malformed frame (raw gRPC calls built from ``sluice.proxy.protocol``)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import grpc

from sluice import Message, Producer
from sluice.proxy.messaging_service import serve, stop
from sluice.proxy.protocol import CODE, SERVICE, pb
from sluice.remoting import RemotingCommand, RequestCode
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


def test_smuggled_properties_system_topics_and_oversized_bodies_are_refused(cluster: Cluster):
    cluster.create_topic("GrpcSmuggle", 1)

    def send(mutate, topic: str = "GrpcSmuggle", body: bytes = b"x") -> Any:
        m = pb.Message(topic=pb.Resource(name=topic), body=body)
        m.system_properties.message_id = "01AB"
        m.system_properties.message_type = 1
        mutate(m)
        return call(cluster, "SendMessage", pb.SendMessageRequest(messages=[m]), "SendMessageResponse").status

    assert send(lambda m: m.system_properties.keys.append("k\x02TIMER_DELAY_SEC\x015")).code == \
        CODE["ILLEGAL_MESSAGE_KEY"]
    assert send(lambda m: setattr(m.system_properties, "message_id", "01AB\x02TAGS\x01x")).code == \
        CODE["ILLEGAL_MESSAGE_ID"]
    assert send(lambda m: setattr(m.system_properties, "message_group", "g\x02TAGS\x01evil")).code == \
        CODE["ILLEGAL_MESSAGE_GROUP"]
    for name in ("TIMER_DELAY_SEC", "POP_CK", "MAX_RECONSUME_TIMES", "__SHARDINGKEY"):
        assert send(lambda m, n=name: m.user_properties.__setitem__(n, "1")).code == \
            CODE["ILLEGAL_MESSAGE_PROPERTY_KEY"], name
    for topic in ("rmq_sys_REVIVE_LOG_DefaultCluster", "TBW102", "%RETRY%g_GrpcSmuggle", "%DLQ%g",
                  "SCHEDULE_TOPIC_XXXX"):
        assert send(lambda m: None, topic=topic).code == CODE["ILLEGAL_TOPIC"], topic
        r = call(cluster, "QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=endpoints()),
                 "QueryRouteResponse")
        assert r.status.code in (CODE["ILLEGAL_TOPIC"], CODE["TOPIC_NOT_FOUND"]), topic
    big = send(lambda m: None, body=b"b" * (4 * 1024 * 1024 + 1))
    assert big.code == CODE["MESSAGE_BODY_TOO_LARGE"] and big.message  # in-band, not a transport error
    assert send(lambda m: None, body=b"b" * (4 * 1024 * 1024 - 1024)).code == CODE["OK"]
    assert cluster.brokers[0].store.get_max_offset_in_queue("GrpcSmuggle", 0) == 1


def test_a_receive_cancelled_while_waiting_leaves_the_message_it_popped_visible_again(cluster: Cluster):
    cluster.create_topic("GrpcCancel", 1)

    async def go() -> list[Any]:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                receive = channel.unary_stream(f"/{SERVICE}/ReceiveMessage",
                                               request_serializer=lambda r: r.SerializeToString(),
                                               response_deserializer=pb.ReceiveMessageResponse.FromString)
                req = pb.ReceiveMessageRequest(group=pb.Resource(name="grpc-cancel"), batch_size=8)
                req.message_queue.topic.name = "GrpcCancel"
                req.message_queue.broker.name = "broker-a"
                req.message_queue.id = -1
                req.filter_expression.type = 1
                req.filter_expression.expression = "*"
                req.invisible_duration.FromSeconds(3600)
                req.long_polling_timeout.FromSeconds(10)
                waiting = receive(req, timeout=15)
                first = asyncio.ensure_future(waiting.read())
                while service.client.find_broker_addr("broker-a") is None or \
                        cluster.brokers[0].pop_polling.waiting("GrpcCancel", -1) == 0:
                    await asyncio.sleep(0.01)
                waiting.cancel()  # the client gives up: the pop it left behind still gets the message
                await asyncio.gather(first, return_exceptions=True)
                await asyncio.get_running_loop().run_in_executor(None, _send_one, cluster.namesrv_addr)
                req.long_polling_timeout.FromSeconds(5)
                req.invisible_duration.FromSeconds(30)
                for _ in range(10):  # put back at once: a later receive gets it, not one an hour later
                    frames = [f async for f in receive(req, timeout=15)]
                    got = [f.message for f in frames if f.HasField("message")]
                    if got:
                        return got
                return []
        finally:
            await stop(server, service)

    got = cluster.loop.run(go(), timeout=120)
    assert [m.body for m in got] == [b"late"]


def _send_one(namesrv: str) -> None:
    with Producer("grpc-cancel-pg", namesrv=namesrv) as p:
        p.send(Message("GrpcCancel", b"late"))


def test_tags_that_share_a_hash_code_are_told_apart(cluster: Cluster):
    cluster.create_topic("GrpcTags", 1)
    with Producer("grpc-tags-pg", namesrv=cluster.namesrv_addr) as p:
        for tag in ("BB", "Aa", "C"):  # "Aa" and "BB": one Java hash code
            p.send(Message("GrpcTags", f"tagged-{tag}".encode(), tags=tag))
    frames = receive_frames(cluster, "GrpcTags", "grpc-tags", "Aa")
    assert [f.message.body for f in frames if f.HasField("message")] == [b"tagged-Aa"]


def test_a_port_in_use_and_an_unreachable_name_server_are_said_plainly(cluster: Cluster):
    async def go() -> tuple[str, Any]:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            try:
                second = await serve(cluster.namesrv_addr, "127.0.0.1", port)
                await stop(*second[:2])
                taken = "bound twice"
            except OSError as exc:
                taken = str(exc)
        finally:
            await stop(server, service)
        lost, lost_service, lost_port = await serve("127.0.0.1:1", "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{lost_port}") as channel:
                send = channel.unary_unary(f"/{SERVICE}/SendMessage",
                                           request_serializer=lambda r: r.SerializeToString(),
                                           response_deserializer=pb.SendMessageResponse.FromString)
                m = pb.Message(topic=pb.Resource(name="Anything"), body=b"x")
                m.system_properties.message_id = "01AB"
                return taken, (await send(pb.SendMessageRequest(messages=[m]), timeout=20)).status
        finally:
            await stop(lost, lost_service)

    taken, st = cluster.loop.run(go(), timeout=60)
    assert "cannot listen" in taken
    assert st.code == CODE["INTERNAL_SERVER_ERROR"] and st.message  # in-band, not a failed call


def test_a_group_config_of_the_wrong_types_or_out_of_range_is_refused_naming_the_field(cluster: Cluster):
    from sluice.client.mq_client_api import MQClientAPI
    from sluice.common.errors import BrokerResponseError
    from sluice.remoting.client import RemotingClient

    broker = cluster.brokers[0]

    async def update(config: dict[str, Any]) -> str:
        rc = RemotingClient()
        try:
            await MQClientAPI(rc, []).update_subscription_group(broker.broker_addr, config)
            return "ok"
        except BrokerResponseError as exc:
            return exc.remark
        finally:
            await rc.close()

    for bad, field in (({"retryMaxTimes": 2**40}, "retryMaxTimes"), ({"retryQueueNums": 5000}, "retryQueueNums"),
                       ({"retryMaxTimes": 3.7}, "retryMaxTimes"), ({"consumeMessageOrderly": "maybe"},
                                                                   "consumeMessageOrderly"), ({}, "groupName")):
        config = {"groupName": "cfg-g", **bad} if field != "groupName" else bad
        assert field in cluster.loop.run(update(config)), bad
    ok = {"groupName": "cfg-g", "consumeMessageOrderly": "false", "retryMaxTimes": 3}
    assert cluster.loop.run(update(ok)) == "ok"
    g = broker.subscription_group_manager.find("cfg-g")
    assert (g.consume_message_orderly, g.retry_max_times) == (False, 3)


def receive_frames(cluster: Cluster, topic: str, group: str, expression: str = "*", invisible: int = 30) -> list[Any]:
    req = pb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=16)
    req.message_queue.topic.name = topic
    req.message_queue.broker.name = "broker-a"
    req.filter_expression.type = 1
    req.filter_expression.expression = expression
    req.invisible_duration.FromSeconds(invisible)
    req.long_polling_timeout.FromSeconds(1)

    async def go() -> list[Any]:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                receive = channel.unary_stream(f"/{SERVICE}/ReceiveMessage",
                                               request_serializer=lambda r: r.SerializeToString(),
                                               response_deserializer=pb.ReceiveMessageResponse.FromString)
                return [f async for f in receive(req, timeout=10)]
        finally:
            await stop(server, service)

    return cluster.loop.run(go())


def test_an_odd_stored_message_or_a_loose_tag_expression_never_fails_a_receive(cluster: Cluster):
    from tests.integration.test_send_groups import exchange, send_v2

    cluster.create_topic("GrpcOdd", 1)
    addr = cluster.brokers[0].broker_addr
    reqs = []
    for i, times in enumerate((0, 2**31 - 1, 0)):  # the middle one: a reconsume count no int32 attempt can hold
        ext = send_v2("GrpcOdd", 0, "TAGS\x01TagA\x02WAIT\x01true")
        ext["j"] = str(times)
        reqs.append(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, f"odd-{i}".encode()))
    assert all(r.code == 0 for r in exchange(addr, reqs).values())
    frames = receive_frames(cluster, "GrpcOdd", "grpc-odd", "TagA ||")  # the broker reads it as TagA
    assert frames[0].status.code == CODE["OK"]
    got = [f.message for f in frames if f.HasField("message")]
    assert sorted(m.body for m in got) == [b"odd-0", b"odd-1", b"odd-2"]
    assert max(m.system_properties.delivery_attempt for m in got) == 2**31 - 1


def test_a_forward_to_the_dlq_with_an_expired_receipt_copies_nothing(cluster: Cluster):
    cluster.create_topic("GrpcFwd", 1)
    with Producer("grpc-fwd-pg", namesrv=cluster.namesrv_addr) as p:
        p.send(Message("GrpcFwd", b"poison"))
    (frame,) = [f.message for f in receive_frames(cluster, "GrpcFwd", "grpc-fwd", invisible=10)
                if f.HasField("message")]
    req = pb.ForwardMessageToDeadLetterQueueRequest(group=pb.Resource(name="grpc-fwd"),
                                                    topic=pb.Resource(name="GrpcFwd"),
                                                    receipt_handle=frame.system_properties.receipt_handle,
                                                    message_id=frame.system_properties.message_id,
                                                    delivery_attempt=1, max_delivery_attempts=3)
    forged = pb.ForwardMessageToDeadLetterQueueRequest()
    forged.CopyFrom(req)
    forged.receipt_handle = frame.system_properties.receipt_handle.rsplit("#", 1)[0] + "#987654321"
    r = call(cluster, "ForwardMessageToDeadLetterQueue", forged, "ForwardMessageToDeadLetterQueueResponse")
    assert r.status.code != CODE["OK"]  # the offset names no message of that receipt: nothing copied
    assert cluster.brokers[0].store.get_max_offset_in_queue("%DLQ%grpc-fwd", 0) == 0
    assert call(cluster, "ForwardMessageToDeadLetterQueue", req,
                "ForwardMessageToDeadLetterQueueResponse").status.code == CODE["OK"]
    for _ in range(3):  # again, as the official client does until it hears OK: the receipt is settled now
        r = call(cluster, "ForwardMessageToDeadLetterQueue", req, "ForwardMessageToDeadLetterQueueResponse")
        assert r.status.code == CODE["INVALID_RECEIPT_HANDLE"]
    assert cluster.brokers[0].store.get_max_offset_in_queue("%DLQ%grpc-fwd", 0) == 1  # one copy


def test_a_priority_topic_accepts_priority_messages_and_a_priority_is_a_non_negative_number(cluster: Cluster):
    cluster.create_topic("GrpcPrio", 4, attributes="+message.type=PRIORITY")
    cluster.create_topic("GrpcPlain", 2)
    for topic, accepted in (("GrpcPrio", [6]), ("GrpcPlain", [1, 2, 3, 4])):  # (PRIORITY; untyped: the four)
        r = call(cluster, "QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=endpoints()),
                 "QueryRouteResponse")
        assert r.status.code == CODE["OK"]
        assert all(list(q.accept_message_types) == accepted for q in r.message_queues), (topic, r.message_queues)

    def send(priority: int, mutate: Any = None) -> Any:
        m = pb.Message(topic=pb.Resource(name="GrpcPrio"), body=b"x")
        m.system_properties.message_id = f"01AB{priority & 0xFFFF:04X}"
        m.system_properties.message_type = 6
        m.system_properties.priority = priority
        if mutate is not None:
            mutate(m)
        return call(cluster, "SendMessage", pb.SendMessageRequest(messages=[m]), "SendMessageResponse")

    assert send(-1).status.code == CODE["BAD_REQUEST"]
    fifo = send(3, lambda m: setattr(m.system_properties, "message_group", "g"))  # (as RocketMQ's proxy: the
    assert fifo.status.code == CODE["OK"]  # broker keeps the group's queue and drops the priority)
    ok = send(9)
    assert ok.status.code == CODE["OK"]
    store = cluster.brokers[0].store
    assert store.get_max_offset_in_queue("GrpcPrio", 3) >= 1  # min(priority, queues - 1)
    assert sum(store.get_max_offset_in_queue("GrpcPrio", q) for q in range(4)) == 2


def test_a_namespace_wraps_every_name_and_answers_split_them_back(cluster: Cluster):
    cluster.create_topic("ns1%GrpcNs", 2)

    async def go() -> tuple[Any, Any, Any, Any]:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                route = channel.unary_unary(f"/{SERVICE}/QueryRoute",
                                            request_serializer=lambda r: r.SerializeToString(),
                                            response_deserializer=pb.QueryRouteResponse.FromString)
                mine = pb.Resource(resource_namespace="ns1", name="GrpcNs")
                by_field = await route(pb.QueryRouteRequest(topic=mine, endpoints=endpoints()), timeout=10)
                by_header = await route(pb.QueryRouteRequest(topic=pb.Resource(name="GrpcNs"), endpoints=endpoints()),
                                        metadata=(("x-mq-namespace", "ns1"),), timeout=10)
                elsewhere = await route(pb.QueryRouteRequest(topic=pb.Resource(name="GrpcNs"), endpoints=endpoints()),
                                        metadata=(("x-mq-namespace", "ns2"),), timeout=10)
                bad = await route(pb.QueryRouteRequest(topic=pb.Resource(resource_namespace="a%b", name="GrpcNs"),
                                                       endpoints=endpoints()), timeout=10)
                return by_field, by_header, elsewhere, bad
        finally:
            await stop(server, service)

    by_field, by_header, elsewhere, bad = cluster.loop.run(go())
    for r in (by_field, by_header):
        assert r.status.code == CODE["OK"] and len(r.message_queues) == 2
        assert {(q.topic.resource_namespace, q.topic.name) for q in r.message_queues} == {("ns1", "GrpcNs")}
    assert elsewhere.status.code == CODE["TOPIC_NOT_FOUND"]  # ns2%GrpcNs: another namespace's topic
    assert bad.status.code == CODE["BAD_REQUEST"] and "namespace 'a%b'" in bad.status.message


def test_a_silent_master_costs_a_route_at_most_a_second_and_only_once(cluster: Cluster):
    """The front asks every master at once for a topic's message type and keeps what it learnt, a failure too."""
    cluster.create_topic("GrpcTyped", 2, attributes="+message.type=PRIORITY")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # (accepts, never answers)
    dead = f"127.0.0.1:{silent.getsockname()[1]}"

    async def go() -> list[tuple[str, float]]:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        out = []
        try:
            for addrs in ([dead, cluster.brokers[0].broker_addr], [dead, cluster.brokers[0].broker_addr]):
                t0 = time.monotonic()
                out.append((await service._topic_message_type("GrpcTyped", addrs), time.monotonic() - t0))
            for _ in range(2):
                t0 = time.monotonic()
                out.append((await service._topic_message_type("GrpcUnknown", [dead]), time.monotonic() - t0))
        finally:
            await stop(server, service)
        return out

    try:
        (kind, first), (again, cached), (none, waited), (still, remembered) = cluster.loop.run(go())
    finally:
        silent.close()
    assert (kind, again, none, still) == ("PRIORITY", "PRIORITY", "", "")
    assert first < 1.0 and cached < 0.05  # (the live master's answer, not the silent one's timeout)
    assert waited < 2.0 and remembered < 0.05  # (no answer: one wait, then the failure is kept)
