"""The Java remoting client (``rocketmq-client``) with ``useTLS`` against a Sluice whose name server and broker
enforce TLS with their self-signed certificates (RocketMQ's test mode on both sides): it sends and consumes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cluster, ServerLoop
from tests.integration.helpers import wait_until
from tests.interop.java_clients import JavaClients


@pytest.fixture
def tls_sluice(tmp_path: Path, server_loop: ServerLoop) -> Iterator[Cluster]:
    c = Cluster(tmp_path, server_loop, namesrv_settings={"tls_server_mode": "enforcing"})
    try:
        c.start_broker(tls_server_mode="enforcing", tls_enable=True)
        yield c
    finally:
        c.close()


def test_the_java_client_with_use_tls_sends_and_consumes_through_ports_that_enforce_tls(
        tls_sluice: Cluster, java_clients: JavaClients, tmp_path: Path) -> None:
    ns = tls_sluice.namesrv_addr
    # (a first TLS handshake of a cold JVM on a busy machine can take seconds: the calls get 15 s, not 3)
    sent = java_clients.run("produce", namesrv=ns, topic="java-tls", group="java-tls-pg", mode="sync", count=10,
                            use_tls="true", api_timeout_ms=15000)
    assert [r["status"] for r in sent if r["event"] == "sent"] == ["SEND_OK"] * 10, sent[-3:]
    stop = tmp_path / "stop"
    consumer = java_clients.start("push-consume", namesrv=ns, topic="java-tls", group="java-tls-readers",
                                  consume_from="CONSUME_FROM_FIRST_OFFSET", stop_file=stop, timeout=90, use_tls="true",
                                  api_timeout_ms=15000)
    wait_until(lambda: len(consumer.received()) >= 10, 45, "the Java consumer reading the ten messages over TLS")
    stop.touch()
    consumer.wait(30)
    assert sorted(r["body"] for r in consumer.received()) == sorted(r["body"] for r in sent if r["event"] == "sent")
    broker = tls_sluice.brokers[0]
    assert broker.server.acceptor is not None and broker.server.acceptor.tls_connections >= 2
    assert broker.server.acceptor.plain_connections == 0
