"""ACL 2.0 on the gRPC front, from the official RocketMQ 5 Python client's side (its ``Credentials``: the
``authorization: MQv2-HMAC-SHA1 ...`` header) and from a bare gRPC call: allowed with the right user and rules;
refused with UNAUTHORIZED (40100) and RocketMQ's message otherwise, nothing stored."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from sluice.auth.audit import AuditLog
from sluice.auth.evaluator import Authenticator, Authorizer
from sluice.auth.signature import grpc_authorization, grpc_date_time
from sluice.client.admin import Admin
from sluice.client.auth_admin import policy_entry
from sluice.common.config import AuthCredentials, AuthUser
from sluice.proxy.grpc_auth import GrpcAuth
from sluice.proxy.protocol import SERVICE, pb
from tests.conftest import Cluster
from tests.interop.conftest import CLIENTS
from tests.interop.test_python5_client import python5 as python5  # (the fixture)

ROOT = ("root", "root-secret")
INNER = AuthCredentials(access_key="sluice-inner", secret_key="inner-secret")


@pytest.fixture
def secured_front(empty_cluster: Cluster) -> Iterator[tuple[Cluster, str]]:
    """broker-a with authentication and authorization on, user alice allowed g5 (Pub, Sub) and group g5-readers;
    the gRPC front checking every RPC against the broker's users and signing with the inner credentials."""
    from sluice.proxy.messaging_service import serve, stop

    c = empty_cluster
    c.credentials = ROOT
    broker = c.start_broker(authentication_enabled=True, authorization_enabled=True,
                            init_authentication_user=AuthUser(username=ROOT[0], password=ROOT[1]),
                            inner_client_authentication_credentials=INNER)
    c.create_topic("g5", 2)
    c.create_topic("g5-other", 2)

    async def setup() -> None:
        async with Admin(c.namesrv_addr, credentials=ROOT) as admin:
            await admin.create_user("alice", "alice-secret")
            await admin.create_acl("User:alice", [policy_entry("Topic:g5", "Pub,Sub"),
                                                  policy_entry("Group:g5-readers", "Sub")])
    asyncio.run(setup())
    audit = AuditLog()
    auth = GrpcAuth(Authenticator(broker.auth_metadata, audit), Authorizer(broker.auth_metadata, audit))
    server, service, port = c.loop.run(serve(c.namesrv_addr, "127.0.0.1", 0, auth=auth,
                                             credentials=(INNER.access_key, INNER.secret_key)))
    try:
        yield c, f"127.0.0.1:{port}"
    finally:
        c.loop.run(stop(server, service))


def run_client(python5: Path, tmp_path: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    env = {**os.environ, "HOME": str(tmp_path)}
    r = subprocess.run([str(python5), str(CLIENTS / "rocketmq5_client.py"), *args], capture_output=True, text=True,
                       timeout=120, env=env, stdin=subprocess.DEVNULL)
    logs = "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("logs/**/*")) if p.is_file())
    return r.returncode, [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")], \
        r.stdout + r.stderr + logs  # (the client logs the status its server answered)


async def _stored(ns: str, topic: str) -> int:
    async with Admin(ns, credentials=ROOT) as admin:
        return sum(q.max_offset for q in await admin.topic_status(topic))


def test_the_official_client_with_credentials_is_allowed_and_refused_as_its_rules_say(
        secured_front: tuple[Cluster, str], python5: Path, tmp_path: Path) -> None:
    cluster, endpoint = secured_front
    alice = ("--ak", "alice", "--sk", "alice-secret")
    code, sent, out = run_client(python5, tmp_path, endpoint, *alice, "produce", "g5", "5")
    assert code == 0 and [e["event"] for e in sent] == ["sent"] * 5, out[-3000:]
    code, got, out = run_client(python5, tmp_path, endpoint, *alice, "receive", "g5", "g5-readers", "5",
                                "--timeout", "60")
    assert code == 0 and sorted(e["body"] for e in got if e["event"] == "received") == [f"m-{i}" for i in range(5)]

    for args, topic, text in [
        (alice, "g5-other", "User:alice has no permission to access Topic:g5-other"),
        (("--ak", "alice", "--sk", "wrong"), "g5", "check signature failed."),
        ((), "g5", "username cannot be null."),
    ]:
        code, records, out = run_client(python5, tmp_path, endpoint, *args, "produce", topic, "1")
        assert not any(e["event"] == "sent" for e in records), out[-3000:]
        assert text in out, out[-3000:]
    assert asyncio.run(_stored(cluster.namesrv_addr, "g5")) == 5
    assert asyncio.run(_stored(cluster.namesrv_addr, "g5-other")) == 0


def test_a_bare_grpc_call_gets_unauthorized_with_rocketmqs_message_and_a_stale_signature_is_refused(
        secured_front: tuple[Cluster, str]) -> None:
    _, endpoint = secured_front

    async def query(metadata: tuple[tuple[str, str], ...]) -> Any:
        async with grpc.aio.insecure_channel(endpoint) as channel:
            call = channel.unary_unary(f"/{SERVICE}/QueryRoute",
                                       request_serializer=pb.QueryRouteRequest.SerializeToString,
                                       response_deserializer=pb.QueryRouteResponse.FromString)
            req = pb.QueryRouteRequest()
            req.topic.name = "g5"
            return await call(req, metadata=metadata, timeout=10)

    def signed(ak: str, sk: str, date: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", grpc_authorization(ak, sk, date)), ("x-mq-date-time", date))

    resp = asyncio.run(query(()))
    assert (resp.status.code, resp.status.message) == (40100, "username cannot be null.")
    resp = asyncio.run(query(signed("alice", "alice-secret", grpc_date_time())))
    assert resp.status.code == 20000 and len(resp.message_queues) == 2
    resp = asyncio.run(query(signed("alice", "alice-secret", "20200101T000000Z")))
    assert resp.status.code == 40100 and "x-mq-date-time" in resp.status.message
    resp = asyncio.run(query((("authorization", "MQv2-HMAC-SHA1"), ("x-mq-date-time", grpc_date_time()))))
    assert (resp.status.code, resp.status.message) == (40100, "authentication header is incorrect.")


async def _relay_from(source: str, target: tuple[str, int]) -> tuple[asyncio.AbstractServer, int]:
    """A TCP relay on a free loopback port whose connections reach ``target`` from the address ``source``."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*target, local_addr=(source, 0))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_behind_the_tls_front_a_rule_s_source_ips_see_the_client_s_own_address(
        empty_cluster: Cluster, tmp_path: Path) -> None:
    """grpcio sees the TLS front's loopback connections; the rules see the client's address (here 127.0.0.2, a
    loopback address of its own: allowed from there only)."""
    from sluice.proxy.messaging_service import serve, stop
    from sluice.remoting.tls import ServerTls, TlsMode
    from tests.tls_certs import CertificateAuthority

    c = empty_cluster
    c.credentials = ROOT
    broker = c.start_broker(authentication_enabled=True, authorization_enabled=True,
                            init_authentication_user=AuthUser(username=ROOT[0], password=ROOT[1]),
                            inner_client_authentication_credentials=INNER)
    c.create_topic("g5-ip", 2)

    async def setup() -> None:
        async with Admin(c.namesrv_addr, credentials=ROOT) as admin:
            await admin.create_user("alice", "alice-secret")
            await admin.create_acl("User:alice", [policy_entry("Topic:g5-ip", "Pub", source_ips=["127.0.0.2"])])
    asyncio.run(setup())
    ca = CertificateAuthority(tmp_path / "pki")
    cert, key = ca.issue("front")
    tls = ServerTls(TlsMode.ENFORCING, str(cert), str(key), name="gRPC front")
    audit = AuditLog()
    auth = GrpcAuth(Authenticator(broker.auth_metadata, audit), Authorizer(broker.auth_metadata, audit))
    server, service, port = c.loop.run(serve(c.namesrv_addr, "127.0.0.1", 0, auth=auth, tls=tls,
                                             credentials=(INNER.access_key, INNER.secret_key)))
    relay, relay_port = c.loop.run(_relay_from("127.0.0.2", ("127.0.0.1", port)))
    try:
        async def query(target: str) -> Any:
            creds = grpc.ssl_channel_credentials(root_certificates=ca.cert_path.read_bytes())
            date = grpc_date_time()
            async with grpc.aio.secure_channel(target, creds,
                                               options=[("grpc.ssl_target_name_override", "localhost")]) as ch:
                call = ch.unary_unary(f"/{SERVICE}/QueryRoute",
                                      request_serializer=pb.QueryRouteRequest.SerializeToString,
                                      response_deserializer=pb.QueryRouteResponse.FromString)
                req = pb.QueryRouteRequest()
                req.topic.name = "g5-ip"
                return await call(req, timeout=10, metadata=(
                    ("authorization", grpc_authorization("alice", "alice-secret", date)), ("x-mq-date-time", date)))

        direct = asyncio.run(query(f"127.0.0.1:{port}"))
        assert direct.status.code == 40100 and "no permission" in direct.status.message, direct.status
        relayed = asyncio.run(query(f"127.0.0.1:{relay_port}"))
        assert relayed.status.code == 20000 and len(relayed.message_queues) == 2, relayed.status
    finally:
        relay.close()
        c.loop.run(stop(server, service))


def test_a_lite_subscription_needs_sub_on_the_group_and_the_parent(secured_front: tuple[Cluster, str]) -> None:
    _, endpoint = secured_front

    async def sync(group: str, topic: str) -> Any:
        async with grpc.aio.insecure_channel(endpoint) as channel:
            call = channel.unary_unary(f"/{SERVICE}/SyncLiteSubscription",
                                       request_serializer=pb.SyncLiteSubscriptionRequest.SerializeToString,
                                       response_deserializer=pb.SyncLiteSubscriptionResponse.FromString)
            req = pb.SyncLiteSubscriptionRequest(action=0, topic=pb.Resource(name=topic),
                                                 group=pb.Resource(name=group), lite_topic_set=["chat-1"])
            date = grpc_date_time()
            metadata = (("authorization", grpc_authorization("alice", "alice-secret", date)),
                        ("x-mq-date-time", date), ("x-mq-client-id", "alice-client"))
            return await call(req, metadata=metadata, timeout=10)

    for group, topic in (("g5-others", "g5"), ("g5-readers", "g5-other")):
        resp = asyncio.run(sync(group, topic))
        assert resp.status.code == 40100 and "no permission" in resp.status.message, (group, topic, resp.status)
    # Allowed through: the broker then says what it thinks of the request (g5 is no lite topic's parent).
    resp = asyncio.run(sync("g5-readers", "g5"))
    assert resp.status.code != 40100, resp.status
