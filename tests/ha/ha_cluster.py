"""A broker group in controller mode, as separate processes on 127.0.0.1: one etcd, one name server and N
``sluice broker --etcd`` processes sharing a broker name; with the loads that run against it while its masters
are killed or hung, and the check that every acknowledged message is still there. Used by tests/ha and by
bench/ha_failover.py."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sluice import Message, Producer, PullConsumer, SendStatus
from sluice.etcd.etcd_client import EtcdClient
from tests.broker_process import free_port
from tests.etcd_server import EtcdServer

GROUP = "broker-ha"


class HACluster:
    """``start()``, then kill / hang / restart brokers by id (1..n); ``close()`` ends every process by PID."""

    def __init__(self, root: Path, brokers: int = 3, role: str = "SYNC_MASTER", lease_ttl_ms: int = 3000,
                 settings: str = "") -> None:
        self.root = root
        self.ids = list(range(1, brokers + 1))
        self.role = role
        self.lease_ttl_ms = lease_ttl_ms
        self.settings = settings
        self.etcd = EtcdServer(root, "etcd")
        self.namesrv_proc: subprocess.Popen[str] | None = None
        self.namesrv = ""
        self.ports = {i: (free_port(), free_port()) for i in self.ids}
        self.procs: dict[int, subprocess.Popen[str]] = {}

    # == processes ===================================================================================
    def start(self, timeout: float = 60) -> None:
        self.etcd.start()
        port = free_port()
        self.namesrv = f"127.0.0.1:{port}"
        self.namesrv_proc = subprocess.Popen(
            [sys.executable, "-m", "sluice.cli.main", "namesrv", "--port", str(port)], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=open(self.root / "namesrv.log", "w"), text=True)
        assert self.namesrv_proc.stdout is not None
        assert "listening" in self.namesrv_proc.stdout.readline() or self.namesrv_proc.poll() is None
        for i in self.ids:
            self.start_broker(i)
        self.wait_in_sync(len(self.ids), timeout)

    def start_broker(self, i: int) -> None:
        port, ha_port = self.ports[i]
        config = self.root / f"broker-{i}.toml"
        # (no fast channel: its port, listen_port - 2, could be one this cluster handed another broker)
        config.write_text(f"[broker]\ncontroller_lease_ttl = {self.lease_ttl_ms}\nregister_name_server_period = 5000\n"
                          "fast_channel_enabled = false\n"
                          f"{self.settings}\n[store]\nmapped_file_size_commit_log = 8388608\n"
                          # (small index and queue files: three brokers per test, on whatever disk CI has)
                          "max_hash_slot_num = 100000\nmax_index_num = 400000\n"
                          "mapped_file_size_consume_queue = 2000000\n")
        with open(self.root / f"broker-{i}.log", "a") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sluice.cli.main", "broker", "--config", str(config), "--namesrv",
                 self.namesrv, "--port", str(port), "--ha-port", str(ha_port), "--store", str(self.root / f"b{i}"),
                 "--broker-name", GROUP, "--broker-id", str(i), "--role", self.role, "--etcd", self.etcd.endpoint],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "ready on" in line, f"broker {i} did not start: {line!r}\n{self.log_tail(i)}"
        self.procs[i] = proc

    def kill(self, i: int) -> None:
        p = self.procs[i]
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        self._close_pipe(p)

    def hang(self, i: int) -> None:
        self.procs[i].send_signal(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        self.procs[i].send_signal(signal.SIGCONT)

    def address(self, i: int) -> str:
        return f"127.0.0.1:{self.ports[i][0]}"

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
            self._close_pipe(p)
        if self.namesrv_proc is not None:
            self.namesrv_proc.terminate()
            self.namesrv_proc.wait(30)
            self._close_pipe(self.namesrv_proc)
        self.etcd.stop()

    @staticmethod
    def _close_pipe(p: subprocess.Popen[str]) -> None:
        if p.stdout is not None:
            p.stdout.close()

    def log_tail(self, i: int, chars: int = 4000) -> str:
        path = self.root / f"broker-{i}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    # == the controller's view =======================================================================
    def state(self) -> tuple[dict[str, Any] | None, list[int]]:
        """The group's master (as etcd has it) and its in-sync set."""

        async def read() -> tuple[dict[str, Any] | None, list[int]]:
            async with EtcdClient([self.etcd.endpoint]) as etcd:
                leader = await etcd.get(f"/sluice/DefaultCluster/{GROUP}/leader".encode())
                sss = await etcd.get(f"/sluice/DefaultCluster/{GROUP}/syncStateSet".encode())
            return (json.loads(leader.value) if leader else None,
                    json.loads(sss.value)["members"] if sss else [])

        return asyncio.run(read())

    def master(self) -> int:
        leader, _ = self.state()
        assert leader is not None, "the group has no master"
        return int(leader["brokerId"])

    def wait_new_master(self, old: int, timeout: float) -> tuple[int, float]:
        """The id of a master other than ``old`` and the seconds it took to appear."""
        t0 = time.monotonic()
        while True:
            leader, _ = self.state()
            if leader is not None and leader["brokerId"] != old:
                return int(leader["brokerId"]), time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"no master other than {old} after {timeout} s")
            time.sleep(0.05)

    def wait_in_sync(self, n: int, timeout: float) -> float:
        t0 = time.monotonic()
        while True:
            leader, members = self.state()
            if leader is not None and len(members) >= n:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"the in-sync set is {members}, not {n} brokers, after {timeout} s; "
                                     f"master {leader}")
            time.sleep(0.1)


class SluiceLoad:
    """A Sluice producer sending ``<prefix>-<i>`` in a loop (sync sends; a failed one is sent again with the same
    body); ``acked`` holds every i answered SEND_OK."""

    def __init__(self, namesrv: str, topic: str, prefix: str = "py") -> None:
        self.namesrv = namesrv
        self.topic = topic
        self.prefix = prefix
        self.acked: set[int] = set()
        self.outcomes: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sluice-load", daemon=True)

    def start(self) -> SluiceLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_acked(self, more_than: int, timeout: float) -> float:
        t0 = time.monotonic()
        while len(self.acked) <= more_than:
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"no send acknowledged for {timeout} s; outcomes {dict(self.outcomes)}")
            time.sleep(0.01)
        return time.monotonic() - t0

    def _run(self) -> None:
        i = 0
        with Producer(f"{self.prefix}-load", namesrv=self.namesrv, send_msg_timeout=3000) as producer:
            while not self._stop.is_set():
                try:
                    r = producer.send(Message(self.topic, f"{self.prefix}-{i}".encode(), keys=[f"{self.prefix}-{i}"]))
                except Exception as exc:  # the route is moving: send the same body again
                    self.outcomes[type(exc).__name__] += 1
                    self._stop.wait(0.05)
                    continue
                self.outcomes[r.status.name] += 1
                if r.status is SendStatus.SEND_OK:
                    self.acked.add(i)
                    i += 1


def consume_all(namesrv: str, topic: str, group: str = "ha-check") -> Counter[str]:
    """Every body stored in ``topic`` (read from the beginning of every queue), with how often each is there."""
    got: Counter[str] = Counter()
    with PullConsumer(group, namesrv=namesrv) as consumer:
        queues = consumer.fetch_queues(topic)
        consumer.assign(queues)
        for q in queues:
            consumer.seek_to_begin(q)
        empty = 0
        while empty < 3:
            msgs = consumer.poll(1.0)
            empty = 0 if msgs else empty + 1
            for m in msgs:
                got[m.body.decode()] += 1
    return got
