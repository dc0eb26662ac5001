"""Clients under failure: reconnects back off with jitter, and a client that has lost every name server goes on
with the routes it knows, saying so once."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sluice import Message, Producer
from sluice.common.config import NamesrvConfig, RemotingConfig
from sluice.namesrv import NamesrvController
from sluice.remoting.client import RemotingClient
from sluice.remoting.errors import RemotingConnectError
from tests.conftest import Cluster
from tests.integration.helpers import wait_until


class Doorman:
    """A listener that takes each connection and closes it at once: a name server that never answers."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_server(("127.0.0.1", port))
        self.accepted = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self._thread.join(5)


@contextmanager
def doorman(port: int) -> Iterator[Doorman]:
    d = Doorman(port)
    try:
        yield d
    finally:
        d.close()


def test_a_failed_connect_is_not_retried_before_its_jittered_backoff_and_is_once_the_server_is_up():
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens on ``port`` now
    addr = f"127.0.0.1:{port}"

    async def go() -> tuple[str, list[str], int]:
        client = RemotingClient(RemotingConfig(reconnect_backoff_millis=2_000, reconnect_backoff_max_millis=4_000))
        try:
            with pytest.raises(RemotingConnectError) as first:
                await client.connection(addr)
            again = []
            for _ in range(5):  # at once: the backoff refuses them without a connect (bar a jitter draw near 0)
                with pytest.raises(RemotingConnectError) as exc:
                    await client.connection(addr)
                again.append(str(exc.value))
            with doorman(port) as d:
                while True:  # the attempt after the backoff reaches the server
                    try:
                        conn = await client.connection(addr)
                        conn.close()
                        break
                    except RemotingConnectError:
                        await asyncio.sleep(0.05)
                while not d.accepted:  # (the doorman's thread takes the connection a moment later)
                    await asyncio.sleep(0.01)
                return str(first.value), again, d.accepted
        finally:
            await client.close()

    first, again, accepted = asyncio.run(asyncio.wait_for(go(), 30))
    assert "cannot connect" in first and "in a row" not in first
    assert any("attempts in a row failed; the next in" in e for e in again), again
    assert accepted >= 1


def test_a_client_that_lost_every_name_server_sends_with_its_cached_routes_and_says_so_once(
        cluster: Cluster, caplog: pytest.LogCaptureFixture, tmp_path: Path):
    caplog.set_level(logging.WARNING, logger="sluice")
    cluster.create_topic("cached", 4)
    port = int(cluster.namesrv_addr.rpartition(":")[2])
    with Producer("cached-pg", namesrv=cluster.namesrv_addr, poll_name_server_interval=200) as producer:
        producer.send(Message("cached", b"before"))
        cluster.loop.run(cluster.namesrv.stop())
        with doorman(port) as d:
            sent = 0
            # Refresh rounds keep failing meanwhile (each one a connection the doorman takes and drops).
            while d.accepted < 4:
                assert producer.send(Message("cached", b"during %d" % sent)).status.name == "SEND_OK"
                sent += 1
            accepted = d.accepted
        lost = [r for r in caplog.records if "no name server answered" in r.getMessage()]
        assert len(lost) == 1, [r.getMessage() for r in lost]
        assert "working from the cached routes" in lost[0].getMessage()
        assert sent > 0 and accepted >= 4

        again = cluster.loop.run(NamesrvController(NamesrvConfig(port=port, kv_config_path=str(tmp_path / "kv2.json"))
                                                   ).start())
        try:
            wait_until(lambda: any("name server answers again" in r.getMessage() for r in caplog.records), 30,
                       "the client to say a name server answers again")
        finally:
            cluster.loop.run(again.stop())
    assert len([r for r in caplog.records if "no name server answered" in r.getMessage()]) == 1

    total = sum(cluster.brokers[0].store.get_max_offset_in_queue("cached", q) for q in range(4))
    assert total == sent + 1  # every send was stored
