"""TLS on the remoting ports (name server, broker, HA) from Sluice's own clients' side: permissive mode serves TLS and
plaintext on one port, enforcing refuses plaintext, mutual TLS refuses a client without a trusted certificate, a
certificate replaced on disk is served to new connections while open ones go on, and a slave copies its master
over TLS."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest

from sluice.aio import Producer, PullConsumer
from sluice.broker.broker_runner import BrokerRunner
from sluice.client.message import Message
from sluice.common.config import BrokerRole
from sluice.common.errors import ClientError
from sluice.remoting.client import RemotingClient, split_addr
from sluice.remoting.codes import RequestCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import RemotingError
from sluice.remoting.tls import client_context
from tests.conftest import Cluster, ServerLoop
from tests.integration.helpers import wait_until
from tests.tls_certs import CertificateAuthority, common_name


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "pki")


def _server_settings(ca: CertificateAuthority, name: str, **extra: Any) -> dict[str, Any]:
    cert, key = ca.issue(name)
    return {"tls_server_cert_path": str(cert), "tls_server_key_path": str(key), **extra}


def _cluster(tmp_path: Path, loop: ServerLoop, namesrv: dict[str, Any]) -> Cluster:
    return Cluster(tmp_path, loop, namesrv_settings=namesrv)


async def _send(namesrv: str, topic: str, body: str, tls: Any) -> None:
    async with Producer("tls-pg", namesrv, tls=tls, retry_times_when_send_failed=0) as p:
        r = await p.send(Message(topic, body.encode()), timeout=10)
        assert r.status.name == "SEND_OK"


async def _bodies(namesrv: str, topic: str, tls: Any, count: int) -> set[str]:
    got: set[str] = set()
    async with PullConsumer("tls-cg", namesrv, tls=tls) as reader:
        queues = await reader.fetch_queues(topic)
        await reader.assign(queues)
        for q in queues:
            await reader.seek_to_begin(q)
        async with asyncio.timeout(30):
            while len(got) < count:
                got.update(m.body.decode() for m in await reader.poll(1.0))
    return got


def _peer_certificate(addr: str, ctx: ssl.SSLContext | None = None) -> bytes:
    """The certificate a new TLS connection to ``addr`` is shown (DER)."""
    host, port = split_addr(addr)
    ctx = ctx or client_context(verify=False)
    with socket.create_connection((host, port), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=host) as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_permissive_mode_serves_tls_and_plaintext_on_one_port_with_a_self_signed_certificate(
        cluster: Cluster, tmp_path: Path) -> None:
    """The default: no certificate configured, so each server makes one (RocketMQ's test mode) at its first TLS
    client; a client that trusts any certificate (RocketMQ's default) and a plaintext one share the ports."""
    cluster.create_topic("TopicTls", 4)
    asyncio.run(_send(cluster.namesrv_addr, "TopicTls", "over-tls", client_context(verify=False)))
    asyncio.run(_send(cluster.namesrv_addr, "TopicTls", "in-plaintext", None))
    broker = cluster.brokers[0]
    assert broker.server.acceptor is not None
    assert broker.server.acceptor.tls_connections >= 1 and broker.server.acceptor.plain_connections >= 1
    made = tmp_path / "broker-a" / "tls" / "self-signed.pem"
    assert made.exists() and (tmp_path / "broker-a" / "tls" / "self-signed.key").stat().st_mode & 0o077 == 0
    assert _peer_certificate(broker.broker_addr) == ssl.PEM_cert_to_DER_cert(made.read_text())
    # Pinned, the made certificate is checked, names and all (it names 127.0.0.1).
    pinned = client_context(cafile=str(made))
    pinned.load_verify_locations(str(tmp_path / "namesrv" / "tls" / "self-signed.pem"))
    assert asyncio.run(_bodies(cluster.namesrv_addr, "TopicTls", pinned, 2)) == {"over-tls", "in-plaintext"}


def test_enforcing_mode_refuses_plaintext_and_a_broker_registers_over_tls(
        tmp_path: Path, server_loop: ServerLoop, ca: CertificateAuthority) -> None:
    c = _cluster(tmp_path, server_loop, _server_settings(ca, "namesrv", tls_server_mode="enforcing"))
    try:
        broker = c.start_broker(**_server_settings(ca, "broker", tls_server_mode="enforcing"), tls_enable=True,
                                tls_client_trust_cert_path=str(ca.cert_path), tls_client_auth_server=True)
        trusted = client_context(cafile=str(ca.cert_path))
        asyncio.run(_send(c.namesrv_addr, "TopicEnforced", "secret", trusted))
        with pytest.raises(ClientError):
            asyncio.run(_send(c.namesrv_addr, "TopicEnforced", "leak", None))
        with pytest.raises(ssl.SSLCertVerificationError):  # a server whose certificate the client does not trust
            _peer_certificate(broker.broker_addr, client_context(cafile=str(CertificateAuthority(
                tmp_path / "other").cert_path)))
        assert asyncio.run(_bodies(c.namesrv_addr, "TopicEnforced", trusted, 1)) == {"secret"}
        assert c.namesrv.server.acceptor is not None and c.namesrv.server.acceptor.refused_plaintext >= 1

        async def plaintext_to_the_broker() -> None:
            remoting = RemotingClient()
            try:
                await remoting.invoke(broker.broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
            finally:
                await remoting.close()

        with pytest.raises(RemotingError):
            asyncio.run(plaintext_to_the_broker())
        assert broker.server.acceptor is not None and broker.server.acceptor.refused_plaintext >= 1
    finally:
        c.close()


@pytest.mark.parametrize("need", ["require", "optional"])
def test_mutual_tls_refuses_a_client_certificate_it_does_not_trust_and_require_refuses_none(
        need: str, tmp_path: Path, server_loop: ServerLoop, ca: CertificateAuthority) -> None:
    mutual = {"tls_server_mode": "enforcing", "tls_server_need_client_auth": need,
              "tls_server_trust_cert_path": str(ca.cert_path)}
    c = _cluster(tmp_path, server_loop, _server_settings(ca, "namesrv", **mutual))
    try:
        client_cert, client_key = ca.issue("broker-client", server=False)
        c.start_broker(**_server_settings(ca, "broker", **mutual), tls_enable=True,
                       tls_client_cert_path=str(client_cert), tls_client_key_path=str(client_key))
        app_cert, app_key = ca.issue("app", server=False)
        with_cert = client_context(cafile=str(ca.cert_path), certfile=str(app_cert), keyfile=str(app_key))
        asyncio.run(_send(c.namesrv_addr, "TopicMutual", "with-cert", with_cert))

        stranger = CertificateAuthority(tmp_path / "stranger", "Stranger CA")
        s_cert, s_key = stranger.issue("intruder", server=False)
        untrusted = client_context(cafile=str(ca.cert_path), certfile=str(s_cert), keyfile=str(s_key))
        with pytest.raises(ClientError):
            asyncio.run(_send(c.namesrv_addr, "TopicMutual", "intruder", untrusted))
        without = client_context(cafile=str(ca.cert_path))
        if need == "require":
            with pytest.raises(ClientError):
                asyncio.run(_send(c.namesrv_addr, "TopicMutual", "anonymous", without))
            expected = {"with-cert"}
        else:
            asyncio.run(_send(c.namesrv_addr, "TopicMutual", "anonymous", without))
            expected = {"with-cert", "anonymous"}
        assert asyncio.run(_bodies(c.namesrv_addr, "TopicMutual", with_cert, len(expected))) == expected
    finally:
        c.close()


def test_a_certificate_replaced_on_disk_is_served_to_new_connections_while_open_ones_go_on(
        tmp_path: Path, server_loop: ServerLoop, ca: CertificateAuthority) -> None:
    live = tmp_path / "live"
    first_cert, first_key = ca.issue("broker-one", directory=tmp_path / "one")
    live.mkdir()
    cert, key = live / "broker.pem", live / "broker.key"
    cert.write_bytes(first_cert.read_bytes())
    key.write_bytes(first_key.read_bytes())
    c = _cluster(tmp_path, server_loop, _server_settings(ca, "namesrv"))
    try:
        broker = c.start_broker(tls_server_cert_path=str(cert), tls_server_key_path=str(key))
        trusted = client_context(cafile=str(ca.cert_path))
        assert common_name(_peer_certificate(broker.broker_addr, trusted)) == "broker-one"

        async def scenario() -> None:
            async with Producer("tls-reload-pg", c.namesrv_addr, tls=trusted) as p:
                await p.send(Message("TopicReload", b"before"), timeout=10)
                conn = p.client.remoting._conns[broker.broker_addr]
                second_cert, second_key = ca.issue("broker-two", directory=tmp_path / "two")
                for src, dst in ((second_key, key), (second_cert, cert)):  # as a certificate manager renews
                    tmp = dst.with_suffix(".new")
                    tmp.write_bytes(src.read_bytes())
                    os.replace(tmp, dst)
                deadline = asyncio.get_running_loop().time() + 30
                while common_name(await asyncio.to_thread(_peer_certificate, broker.broker_addr,
                                                          trusted)) != "broker-two":
                    assert asyncio.get_running_loop().time() < deadline, "the new certificate was never served"
                    await asyncio.sleep(0.2)
                await p.send(Message("TopicReload", b"after"), timeout=10)
                assert p.client.remoting._conns[broker.broker_addr] is conn and not conn.closed

        asyncio.run(scenario())
        assert broker.tls is not None and broker.tls.reloads >= 1
    finally:
        c.close()


def test_a_slave_copies_its_master_over_tls_and_a_plaintext_slave_is_refused(
        tmp_path: Path, server_loop: ServerLoop, ca: CertificateAuthority) -> None:
    empty_cluster = _cluster(tmp_path, server_loop, _server_settings(ca, "namesrv"))
    enforcing = {**_server_settings(ca, "master", tls_server_mode="enforcing"), "tls_enable": True,
                 "tls_client_trust_cert_path": str(ca.cert_path), "tls_client_auth_server": True}

    def start(name: str, **settings: Any) -> BrokerRunner:
        cfg = empty_cluster.broker_config(name, **settings)
        cfg.broker_name = "broker-tls-ha"
        runner = BrokerRunner(cfg)
        empty_cluster.loop.run(runner.start())
        return runner

    # The master registers in plaintext (the name server is permissive), the slave over TLS; its HA port is TLS only.
    master = start("m", **{**enforcing, "tls_enable": False})
    slave = start("s", broker_role=BrokerRole.SLAVE, broker_id=1, **{**enforcing, "tls_server_mode": "permissive"})
    plain = start("p", broker_role=BrokerRole.SLAVE, broker_id=2)
    try:
        async def produce() -> None:
            async with Producer("tls-ha-pg", empty_cluster.namesrv_addr,
                                tls=client_context(cafile=str(ca.cert_path))) as p:
                for i in range(50):
                    await p.send(Message("TopicTlsHa", f"m-{i}".encode()), timeout=10)

        empty_cluster.loop.run(produce(), 60)

        def copied() -> bool:
            m, s = master.broker, slave.broker
            return (m is not None and s is not None
                    and s.store.commit_log.max_offset == m.store.commit_log.max_offset > 0)

        wait_until(copied, 30, "the slave to copy the master over TLS")
        assert master.broker is not None and master.broker.ha_service is not None
        acceptor = master.broker.ha_service._acceptor
        wait_until(lambda: acceptor is not None and acceptor.refused_plaintext >= 1, 30,
                   "the master's HA port to refuse the plaintext slave")
        assert plain.broker is not None and plain.broker.store.commit_log.max_offset == 0
    finally:
        for r in (plain, slave, master):
            empty_cluster.loop.run(r.stop())
        empty_cluster.close()



def test_a_broker_in_controller_mode_is_elected_through_an_etcd_that_requires_client_certificates(
        tmp_path: Path, cluster: Cluster, ca: CertificateAuthority) -> None:
    import json

    from sluice.etcd.etcd_client import EtcdClient
    from tests.broker_process import free_port
    from tests.etcd_server import EtcdServer, require_etcd

    cert, key = ca.issue("etcd", client_too=True)
    etcd = EtcdServer(tmp_path / "etcd", binary=require_etcd(), tls=(str(cert), str(key), str(ca.cert_path)))
    endpoint = etcd.start()
    broker_cert, broker_key = ca.issue("broker-etcd-client", server=False)
    try:
        port = free_port()
        cfg = cluster.broker_config("controlled", broker_id=1, listen_port=port, ha_listen_port=free_port(),
                                    controller_etcd_endpoints=endpoint, controller_etcd_tls_ca_path=str(ca.cert_path),
                                    controller_etcd_tls_cert_path=str(broker_cert),
                                    controller_etcd_tls_key_path=str(broker_key))
        cfg.broker_name = "broker-etcd-tls"
        runner = BrokerRunner(cfg)
        cluster.loop.run(runner.start())
        try:
            def leader() -> dict[str, Any] | None:
                async def read() -> dict[str, Any] | None:
                    mutual = client_context(cafile=str(ca.cert_path), certfile=str(broker_cert),
                                            keyfile=str(broker_key))
                    async with EtcdClient([endpoint], tls=mutual) as client:
                        kv = await client.get(b"/sluice/DefaultCluster/broker-etcd-tls/leader")
                    return None if kv is None else dict(json.loads(kv.value))
                return asyncio.run(read())

            wait_until(lambda: (leader() or {}).get("brokerId") == 1, 30, "the broker elected through TLS etcd")
            wait_until(lambda: runner.broker is not None and runner.broker.role.is_master, 30,
                       "the broker to become master")
        finally:
            cluster.loop.run(runner.stop())
    finally:
        etcd.stop()


def test_failed_handshakes_leave_no_connection_behind(cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    host, port = split_addr(broker.broker_addr)
    before = len(broker.server.connections)
    for _ in range(30):  # a TLS record header, then garbage: the handshake fails
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(b"\x16\x03\x01\x00\x05hello" + os.urandom(64))
            try:
                s.recv(1024)
            except OSError:
                pass
    wait_until(lambda: len(broker.server.connections) <= before, 30, "the failed connections to be forgotten")
    asyncio.run(_send(cluster.namesrv_addr, "TopicAfterGarbage", "still-served", client_context(verify=False)))


def test_the_grpc_front_enforcing_tls_refuses_plaintext_and_calls_straight_to_grpcio(
        tmp_path: Path, cluster: Cluster, ca: CertificateAuthority) -> None:
    import grpc

    from sluice.proxy.messaging_service import serve, stop
    from sluice.proxy.protocol import SERVICE, pb
    from sluice.remoting.tls import ServerTls, TlsMode

    cluster.create_topic("TopicFront", 2)
    cert, key = ca.issue("front")
    server, service, port = cluster.loop.run(serve(cluster.namesrv_addr, "127.0.0.1", 0, tls=ServerTls(
        TlsMode.ENFORCING, str(cert), str(key), name="gRPC front")))
    assert service.front is not None
    backend = service.front.backend_port

    async def route(target: str, creds: Any) -> Any:
        channel = (grpc.aio.secure_channel(target, creds, options=[("grpc.ssl_target_name_override", "localhost")])
                   if creds is not None else grpc.aio.insecure_channel(target))
        async with channel:
            call = channel.unary_unary(f"/{SERVICE}/QueryRoute",
                                       request_serializer=pb.QueryRouteRequest.SerializeToString,
                                       response_deserializer=pb.QueryRouteResponse.FromString)
            return await call(pb.QueryRouteRequest(topic=pb.Resource(name="TopicFront")), timeout=5)

    try:
        creds = grpc.ssl_channel_credentials(root_certificates=ca.cert_path.read_bytes())
        assert asyncio.run(route(f"127.0.0.1:{port}", creds)).status.code == 20000
        with pytest.raises(grpc.aio.AioRpcError) as plain:
            asyncio.run(route(f"127.0.0.1:{port}", None))
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as straight:
            asyncio.run(route(f"127.0.0.1:{backend}", None))  # grpcio's own loopback port: not a way around
        assert straight.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        cluster.loop.run(stop(server, service))
