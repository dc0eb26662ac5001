"""Namespaces on the gRPC front, against what a hostile or careless client sends: a namespace's reply-like topic is
its own; a settings command with a bad namespace is refused alone, the stream going on; a request carrying a million
resources is refused at once, without holding up anyone else."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from sluice.proxy.grpc_converter import Refused
from sluice.proxy.messaging_service import serve, stop
from sluice.proxy.namespaces import wrap_request
from sluice.proxy.protocol import CODE, SERVICE, pb
from tests.conftest import Cluster


def _endpoints() -> Any:
    e = pb.Endpoints(scheme=1)
    e.addresses.add(host="127.0.0.1", port=8081)
    return e


def test_a_namespaces_reply_like_topic_is_its_own_not_the_global_one(cluster: Cluster) -> None:
    cluster.create_topic("orders_REPLY_TOPIC", 1)  # in no namespace
    cluster.create_topic("tenant-a%orders_REPLY_TOPIC", 2)  # what a Java setNamespace("tenant-a") client uses

    async def go() -> Any:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                route = ch.unary_unary(f"/{SERVICE}/QueryRoute",
                                       request_serializer=pb.QueryRouteRequest.SerializeToString,
                                       response_deserializer=pb.QueryRouteResponse.FromString)
                topic = pb.Resource(resource_namespace="tenant-a", name="orders_REPLY_TOPIC")
                return await route(pb.QueryRouteRequest(topic=topic, endpoints=_endpoints()), timeout=10)
        finally:
            await stop(server, service)

    r = cluster.loop.run(go())
    assert r.status.code == CODE["OK"] and len(r.message_queues) == 2
    assert {(q.topic.resource_namespace, q.topic.name) for q in r.message_queues} == {("tenant-a",
                                                                                       "orders_REPLY_TOPIC")}


def _settings(ns: str) -> Any:
    cmd = pb.TelemetryCommand()
    cmd.settings.client_type = 1
    cmd.settings.publishing.topics.add(resource_namespace=ns, name="t")
    return cmd


def test_one_bad_namespace_is_refused_and_the_telemetry_stream_goes_on(cluster: Cluster) -> None:
    async def go() -> list[Any]:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                telemetry = ch.stream_stream(f"/{SERVICE}/Telemetry",
                                             request_serializer=pb.TelemetryCommand.SerializeToString,
                                             response_deserializer=pb.TelemetryCommand.FromString)
                q: asyncio.Queue[Any] = asyncio.Queue()

                async def commands() -> Any:
                    while (c := await q.get()) is not None:
                        yield c

                call = telemetry(commands(), timeout=30)
                got = []
                for ns in ("ns1", "a%b", "ns1"):
                    await q.put(_settings(ns))
                    answer = await asyncio.wait_for(call.read(), 10)
                    got.append((answer.status.code, answer.settings.publishing.topics[0].resource_namespace
                                if answer.HasField("settings") else "-"))
                await q.put(None)
                return got
        finally:
            await stop(server, service)

    assert cluster.loop.run(go()) == [(CODE["OK"], "ns1"), (CODE["BAD_REQUEST"], "-"), (CODE["OK"], "ns1")]


def test_a_request_of_a_million_resources_is_refused_at_once_and_holds_no_one_up(cluster: Cluster) -> None:
    one = pb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="t"))]).SerializeToString()
    data = one * ((7 << 20) // len(one))

    async def go() -> tuple[float, Any]:
        server, service, port = await serve(cluster.namesrv_addr, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                                 options=[("grpc.max_send_message_length", -1)]) as ch:
                send = ch.unary_unary(f"/{SERVICE}/SendMessage", request_serializer=lambda b: b,
                                      response_deserializer=pb.SendMessageResponse.FromString)
                heartbeat = ch.unary_unary(f"/{SERVICE}/Heartbeat",
                                           request_serializer=pb.HeartbeatRequest.SerializeToString,
                                           response_deserializer=pb.HeartbeatResponse.FromString)
                await heartbeat(pb.HeartbeatRequest(), timeout=10)
                big = asyncio.ensure_future(send(data, metadata=(("x-mq-namespace", "ns1"),), timeout=60))
                slowest = 0.0
                while not big.done():
                    t = time.monotonic()
                    await heartbeat(pb.HeartbeatRequest(), timeout=30)
                    slowest = max(slowest, time.monotonic() - t)
                    await asyncio.sleep(0.02)
                return slowest, (await big).status
        finally:
            await stop(server, service)

    slowest, status = cluster.loop.run(go())
    assert status.code == CODE["BAD_REQUEST"] and "at most 1024" in status.message
    # The request's parse (protobuf's, ~0.2 s on a quiet machine) is the one wait; a walk of its million
    # resources in Python would take seconds more.
    assert slowest < 3.0, f"a heartbeat waited {slowest:.1f} s behind the request"

    request = pb.SendMessageRequest.FromString(data)
    cpu = time.process_time()
    with pytest.raises(Refused, match="at most 1024"):
        wrap_request(request, "ns1")
    cpu = time.process_time() - cpu
    assert cpu < 0.05, f"refusing a million resources took {cpu:.2f} s of CPU: they were walked"
