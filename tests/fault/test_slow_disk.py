"""A broker (``sluice dev --flush sync``) whose store is on a disk that crawls (every write and fsync takes 1 s:
``slowfs``, FUSE) or fails (EIO), under 64 concurrent senders, with an admin request and a pull of stored messages
every 0.1 s. The broker pushes back instead of stalling: every send is answered (SEND_OK, SYSTEM_BUSY or
FLUSH_DISK_TIMEOUT, never a client time-out), admin requests and pulls keep being answered promptly, the
back-pressure shows in the runtime info and in one log line per episode, and nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sluice.aio import Message, Producer
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.common.structs import MessageQueue
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import ResponseCode
from tests.broker_process import free_port
from tests.fault.load import read_all
from tests.fault.slow_disk import SlowDisk, require_fuse

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(600)]

SENDERS = 64
SLOW_S = 6.0  # one slow episode
ROUNDS = 2
REPLY_BOUND_MS = 250.0  # admin and pull p99 under this (the goal is 50 ms, measured in docs/store.md; CI is busy)

CONFIG = """[store]
mapped_file_size_commit_log = 8388608
max_hash_slot_num = 100000
max_index_num = 400000
mapped_file_size_consume_queue = 2000000
"""


class DevBroker:
    """``sluice dev`` on a store in ``store``: a name server and a broker in one child process."""

    def __init__(self, root: Path, store: Path, flush: str = "sync") -> None:
        self.namesrv_port, self.broker_port = free_port(), free_port()
        config = root / "dev.toml"
        config.write_text(CONFIG)
        self.log = root / "dev.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sluice.cli.main", "dev", "--no-grpc", "--no-metrics", "--no-dashboard",
                 "--config", str(config), "--store", str(store), "--flush", flush, "--namesrv-port",
                 str(self.namesrv_port), "--broker-port", str(self.broker_port)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        banner = self.proc.stdout.readline()
        assert "ready" in banner, f"sluice dev did not start: {banner!r}\n{self.log.read_text()[-3000:]}"

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def slow_disk(tmp_path: Path) -> Iterator[SlowDisk]:
    binary = require_fuse()
    disk = SlowDisk(tmp_path / "disk", binary)
    try:
        yield disk
    finally:
        disk.close()


def _outcome(exc: BaseException) -> str:
    cause = exc.__cause__ if isinstance(exc, ClientError) and exc.__cause__ is not None else exc
    if isinstance(cause, BrokerResponseError):
        return ResponseCode(cause.code).name if cause.code in ResponseCode._value2member_map_ else str(cause.code)
    return type(cause).__name__


class Load:
    """64 senders, and an admin request and a pull every 0.1 s, all timed."""

    def __init__(self, dev: DevBroker, topic: str) -> None:
        self.dev = dev
        self.topic = topic
        self.acked: set[str] = set()
        self.outcomes: Counter[str] = Counter()
        self.admin_s: list[float] = []
        self.pull_s: list[float] = []
        self.pressure: Counter[str] = Counter()
        self.stop = asyncio.Event()

    async def run(self, producer: Producer, api: MQClientAPI) -> None:
        await asyncio.gather(*(self._send(producer, n) for n in range(SENDERS)), self._probe(api))

    async def _send(self, producer: Producer, n: int) -> None:
        i = 0
        while not self.stop.is_set():
            body = f"{n}-{i}"
            i += 1
            try:
                r = await producer.send(Message(self.topic, body.encode()))
            except ClientError as exc:
                self.outcomes[_outcome(exc)] += 1
                await asyncio.sleep(0.05)
                continue
            self.outcomes[r.status.name] += 1
            if r.status.name == "SEND_OK":
                self.acked.add(body)

    async def _probe(self, api: MQClientAPI) -> None:
        mq = MessageQueue(self.topic, "broker-a", 0)
        while not self.stop.is_set():
            t0 = time.monotonic()
            info = await api.get_broker_runtime_info(self.dev.broker)
            self.admin_s.append(time.monotonic() - t0)
            self.pressure[info.get("backPressure", "?")] += 1
            t0 = time.monotonic()
            pulled = await api.pull_message(self.dev.broker, "probe", mq, 0, 32, timeout_ms=10_000)
            self.pull_s.append(time.monotonic() - t0)
            assert pulled.status.name == "FOUND"
            await asyncio.sleep(0.1)


async def _read_all(namesrv: str, topic: str) -> set[str]:
    return set(await read_all(namesrv, topic, f"{topic}-check"))


def test_a_crawling_disk_gets_back_pressure_not_a_stalled_broker(slow_disk: SlowDisk, tmp_path: Path) -> None:
    dev = DevBroker(tmp_path, slow_disk.mnt / "store")
    try:
        async def scenario() -> tuple[Load, float, float]:
            remoting = RemotingClient()
            api = MQClientAPI(remoting, [dev.namesrv])
            async with Producer("slow-pg", dev.namesrv, retry_times_when_send_failed=0) as producer:
                first = MessageQueue("slow", "broker-a", 0)
                for i in range(100):  # stored while the disk is fast: what the probe pulls
                    await producer.send(Message("slow", f"warm-{i}".encode()), queue=first)
                load = Load(dev, "slow")
                running = asyncio.create_task(load.run(producer, api))
                rss_before = dev.rss_mb()
                for _ in range(ROUNDS):
                    slow_disk.slow(1000, 1000)
                    await asyncio.sleep(SLOW_S)  # (the episode's length is the fault being made)
                    slow_disk.fast()
                    before = len(load.acked)
                    deadline = time.monotonic() + 60
                    while len(load.acked) < before + 500:  # the disk is well again: sends get through again
                        assert time.monotonic() < deadline, f"sends did not recover: {dict(load.outcomes)}"
                        await asyncio.sleep(0.1)
                rss_after = dev.rss_mb()
                load.stop.set()
                await running
            await remoting.close()
            return load, rss_before, rss_after

        load, rss_before, rss_after = asyncio.run(scenario())
        stored = asyncio.run(_read_all(dev.namesrv, "slow"))
    finally:
        dev.close()
    log = dev.log.read_text(errors="replace")
    episodes = len(re.findall(r"back-pressure: ", log))
    admin_p99 = float(np.percentile(load.admin_s, 99)) * 1000
    pull_p99 = float(np.percentile(load.pull_s, 99)) * 1000
    print(f"\nslow disk: sends {dict(load.outcomes)}; admin p50 {np.median(load.admin_s) * 1000:.1f} ms p99 "
          f"{admin_p99:.1f} ms max {max(load.admin_s) * 1000:.1f} ms; pull p50 {np.median(load.pull_s) * 1000:.1f} ms "
          f"p99 {pull_p99:.1f} ms max {max(load.pull_s) * 1000:.1f} ms; back-pressure seen {dict(load.pressure)}; "
          f"{episodes} episode(s) logged; RSS {rss_before:.0f} -> {rss_after:.0f} MB")
    lost = load.acked - stored
    assert not lost, f"acknowledged but not stored: {sorted(lost)[:20]}"
    answered = {"SEND_OK", "SYSTEM_BUSY", "FLUSH_DISK_TIMEOUT"}
    assert set(load.outcomes) <= answered, f"sends not answered by the broker: {dict(load.outcomes)}"
    assert load.outcomes["SYSTEM_BUSY"] > 0, "the broker never pushed back"
    # (stalled, they would take the disk's second or more: a 1 s write holding the broker)
    assert admin_p99 < REPLY_BOUND_MS and pull_p99 < REPLY_BOUND_MS, "admin requests or pulls stalled"
    assert set(load.pressure) - {"none"}, "the runtime info never showed the back-pressure"
    assert 1 <= episodes <= 4 * ROUNDS, f"{episodes} back-pressure lines logged for {ROUNDS} slow episodes"
    assert rss_after < rss_before + 200, f"the broker's memory grew from {rss_before:.0f} to {rss_after:.0f} MB"


def test_a_failing_disk_turns_the_broker_read_only_and_loses_nothing_acknowledged(slow_disk: SlowDisk,
                                                                                     tmp_path: Path) -> None:
    dev = DevBroker(tmp_path, slow_disk.mnt / "store")
    try:
        async def scenario() -> tuple[set[str], set[str], Counter[str]]:
            acked: set[str] = set()
            uncertain: set[str] = set()  # no answer, or stored without the flush: maybe in the log
            outcomes: Counter[str] = Counter()
            async with Producer("fail-pg", dev.namesrv, retry_times_when_send_failed=0) as producer:
                for i in range(100):  # the disk works: each is acknowledged, sent again if a busy CI pushed back
                    deadline = time.monotonic() + 60
                    while f"m-{i}" not in acked:
                        assert time.monotonic() < deadline, f"m-{i} not acknowledged by a working disk: {outcomes}"
                        try:
                            r = await producer.send(Message("failing", f"m-{i}".encode()))
                        except ClientError as exc:
                            outcomes[f"before: {_outcome(exc)}"] += 1
                            if _outcome(exc) != "SYSTEM_BUSY":
                                uncertain.add(f"m-{i}")
                            continue
                        if r.status.name == "SEND_OK":
                            acked.add(f"m-{i}")
                        else:
                            outcomes[f"before: {r.status.name}"] += 1
                            uncertain.add(f"m-{i}")
                slow_disk.fail()
                for i in range(100, 200):
                    try:
                        r = await producer.send(Message("failing", f"m-{i}".encode()))
                    except ClientError as exc:
                        outcomes[_outcome(exc)] += 1
                        if not isinstance(exc.__cause__, BrokerResponseError):  # refused: never served
                            uncertain.add(f"m-{i}")
                        continue
                    outcomes[r.status.name] += 1
                    if r.status.name == "SEND_OK":
                        acked.add(f"m-{i}")
            return acked, uncertain, outcomes

        acked, uncertain, outcomes = asyncio.run(scenario())
        slow_disk.fast()  # reads go on, from the page cache and the disk
        stored = asyncio.run(_read_all(dev.namesrv, "failing"))
    finally:
        dev.close()
    assert outcomes["SEND_OK"] < 100, f"the failing disk took every send: {outcomes}"
    assert not acked - stored, f"acknowledged but not stored: {sorted(acked - stored)[:20]}"
    served = stored - acked - uncertain
    assert not served, f"served but never acknowledged nor possibly sent: {sorted(served)[:20]}"
    assert "READ-ONLY" in dev.log.read_text(errors="replace")
    assert os.path.exists(slow_disk.mnt / "store" / "abort")  # the next start recovers from the log
    (tmp_path / "again").mkdir()
    again = DevBroker(tmp_path / "again", slow_disk.mnt / "store")  # the disk replaced: a restart recovers
    try:
        recovered = asyncio.run(_read_all(again.namesrv, "failing"))
    finally:
        again.close()
    assert acked <= recovered, f"acknowledged but lost by the restart: {sorted(acked - recovered)[:20]}"
