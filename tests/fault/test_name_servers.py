"""Several name servers, each its own process: a broker registers with all of them, clients know all of them.
One is SIGKILLed under load and the clients and the broker carry on through the others; restarted empty, it is
refilled by the broker's next registration; then another goes, and the load still goes on."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.aio import ConsumeStatus, Message, Producer, PushConsumer
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.message import MessageExt
from sluice.remoting.client import RemotingClient
from tests.broker_process import BrokerProcess, free_ports_below_ephemeral

pytestmark = pytest.mark.fault


class NameServer:
    def __init__(self, root: Path, i: int) -> None:
        self.root = root
        self.i = i
        # (below the ephemeral range: it is bound again after each kill, and a port from that range may be taken
        # meanwhile by any connection's local end)
        self.port = free_ports_below_ephemeral((0,))
        self.proc: subprocess.Popen[str] | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.root / f"namesrv-{self.i}.log", "a") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", "namesrv", "--port", str(self.port)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "ready" in line, f"name server {self.i} did not start: {line!r}"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def name_servers(tmp_path: Path) -> Iterator[list[NameServer]]:
    servers = [NameServer(tmp_path, i) for i in range(3)]
    try:
        for s in servers:
            s.start()
        yield servers
    finally:
        for s in servers:
            s.stop()


async def _route_known(addr: str, topic: str) -> bool:
    remoting = RemotingClient()
    try:
        route = await MQClientAPI(remoting, [addr]).get_topic_route(topic)
        return route is not None and bool(route.broker_datas)
    except Exception:
        return False
    finally:
        await remoting.close()


def test_clients_and_brokers_carry_on_when_name_servers_die_and_come_back_empty(name_servers: list[NameServer],
                                                                                 tmp_path: Path) -> None:
    namesrv = ";".join(s.addr for s in name_servers)
    (tmp_path / "broker").mkdir()
    broker = BrokerProcess(namesrv, tmp_path / "broker", "[broker]\nregister_name_server_period = 1000\n")
    broker.start()
    try:
        async def scenario() -> tuple[set[str], set[str]]:
            acked: set[str] = set()
            consumed: set[str] = set()
            progress = asyncio.Event()

            async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
                consumed.update(m.body.decode() for m in msgs)
                progress.set()
                return ConsumeStatus.CONSUME_SUCCESS

            consumer = PushConsumer("ns-cg", namesrv, consume_from="first", rebalance_interval=1000,
                                    poll_name_server_interval=1000)
            consumer.subscribe("TopicNs")
            consumer.register_listener(listener)
            async with Producer("ns-pg", namesrv, poll_name_server_interval=1000) as producer:
                await producer.send(Message("TopicNs", b"first"))
                acked.add("first")
                await consumer.start()
                n = 0

                async def send_some(count: int) -> None:
                    nonlocal n
                    for _ in range(count):
                        body = f"m-{n}"
                        await producer.send(Message("TopicNs", body.encode()))  # raises if it cannot be sent
                        acked.add(body)
                        n += 1

                await send_some(100)
                name_servers[0].kill()  # a name server dies under load: the others answer
                await send_some(100)
                name_servers[0].start()  # back, empty; refilled by the broker's next registration
                deadline = time.monotonic() + 30
                while not await _route_known(name_servers[0].addr, "TopicNs"):
                    assert time.monotonic() < deadline, "the restarted name server was not refilled"
                    await asyncio.sleep(0.1)
                name_servers[1].kill()
                name_servers[2].kill()  # only the restarted one is left
                await send_some(100)
                deadline = time.monotonic() + 60
                while acked - consumed:
                    assert time.monotonic() < deadline, f"not consumed: {sorted(acked - consumed)[:10]}"
                    await asyncio.sleep(0.1)
            await consumer.shutdown()
            return acked, consumed

        acked, consumed = asyncio.run(scenario())
    finally:
        broker.stop()
    assert len(acked) == 301 and acked <= consumed
