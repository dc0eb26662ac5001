#!/usr/bin/env python3
"""Replication and failover, measured (docs/ha.md, docs/benchmarks.md § Replication).

Each case on fresh ``sluice namesrv`` + ``sluice broker`` processes on 127.0.0.1 (async flush, 1 KiB bodies):

- **lone** / **sync**: ``sluice bench produce`` against a lone ASYNC_MASTER, then against a SYNC_MASTER with one
  slave: one sync sender (the send round trip) and 32 concurrent ones (throughput); the difference is what
  waiting for the slave costs.
- **catch-up**: ``--backlog`` MiB written to a master alone, then a slave started: how fast it copies the log
  (MB/s from its start until its log ends where the master's does).
- **async-loss**: three brokers in controller mode (etcd) with ASYNC_MASTER, under a steady load from 1, then 8
  sync senders; the master SIGKILLed ``--rounds`` times: messages acknowledged but not on the new master (never
  replicated) each time.

    .venv/bin/python bench/ha.py                       # every case (~3 minutes)
    .venv/bin/python bench/ha.py --cases lone,sync --duration 5

Prints one JSON line per measurement and a Markdown summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.reference import stop_processes  # noqa: E402
from tests.broker_process import free_port  # noqa: E402
from tests.ha.ha_cluster import HACluster, SluiceLoad, consume_all  # noqa: E402

from sluice.client.mq_client_api import MQClientAPI  # noqa: E402
from sluice.remoting.client import RemotingClient  # noqa: E402


class Group:
    """A name server and the brokers of one group, each a process (manual roles: no controller)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen[str]] = []
        self.namesrv = ""
        self.addrs: dict[str, str] = {}

    def _spawn(self, name: str, args: list[str]) -> str:
        with open(self.root / f"{name}.err", "w") as err:
            proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", *args, "--log-level", "warning"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.procs.append(proc)
        assert proc.stdout is not None
        m = re.search(r"(?:ready on|listening on) (\S+)", proc.stdout.readline())
        if not m:
            raise RuntimeError(f"{name} did not start: see {self.root / f'{name}.err'}")
        return m.group(1)

    def start_namesrv(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self._spawn("namesrv", ["namesrv", "--port", str(port)])
        self.namesrv = f"127.0.0.1:{port}"

    def start_broker(self, name: str, role: str, broker_id: int) -> str:
        addr = self._spawn(name, ["broker", "--namesrv", self.namesrv, "--port", str(free_port()), "--ha-port",
                                  str(free_port()), "--store", str(self.root / name), "--broker-name", "bench-ha",
                                  "--role", role, "--broker-id", str(broker_id)])
        self.addrs[name] = addr
        return addr

    def stop(self) -> None:
        stop_processes(self.procs)


def produce(namesrv: str, topic: str, concurrency: int, duration: float, count: int = 0) -> dict[str, Any]:
    argv = [sys.executable, "-m", "sluice.cli.main", "bench", "produce", "--namesrv", namesrv, "--topic", topic,
            "--size", "1024", "--concurrency", str(concurrency), "--mode", "sync", "--json"]
    argv += ["--count", str(count)] if count else ["--duration", str(duration)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def runtime_info(addr: str) -> dict[str, str]:
    async def get() -> dict[str, str]:
        remoting = RemotingClient()
        try:
            return await MQClientAPI(remoting, []).get_broker_runtime_info(addr)
        finally:
            await remoting.close()

    return asyncio.run(get())


def case_send(root: Path, with_slave: bool, duration: float) -> list[dict[str, Any]]:
    g = Group(root)
    try:
        g.start_namesrv()
        g.start_broker("master", "SYNC_MASTER" if with_slave else "ASYNC_MASTER", 0)
        if with_slave:
            g.start_broker("slave", "SLAVE", 1)
            deadline = time.monotonic() + 30
            while runtime_info(g.addrs["master"]).get("haInSyncSlaves", "") == "":
                if time.monotonic() > deadline:
                    raise RuntimeError("the slave did not join")
                time.sleep(0.1)
        produce(g.namesrv, "BenchHA", 4, 2)  # warm-up (topic creation, routes)
        rows = []
        for c in (1, 32):
            r = produce(g.namesrv, "BenchHA", c, duration)
            rows.append({"case": "sync master + slave" if with_slave else "lone master", "concurrency": c,
                         "tps": r["tps"], "rt_p50_ms": r["send_rt"]["p50_ms"], "rt_p99_ms": r["send_rt"]["p99_ms"],
                         "raw": r})
        return rows
    finally:
        g.stop()


def case_catch_up(root: Path, backlog_mib: int) -> dict[str, Any]:
    g = Group(root)
    try:
        g.start_namesrv()
        master = g.start_broker("master", "ASYNC_MASTER", 0)
        produce(g.namesrv, "BenchHA", 32, 0, count=backlog_mib * 1024)
        end = int(runtime_info(master)["commitLogMaxOffset"])
        t0 = time.monotonic()
        slave = g.start_broker("slave", "SLAVE", 1)
        while int(runtime_info(slave)["commitLogMaxOffset"]) < end:
            time.sleep(0.05)
        took = time.monotonic() - t0
        return {"case": "catch-up", "bytes": end, "seconds": round(took, 2), "mb_per_s": round(end / took / 1e6, 1)}
    finally:
        g.stop()


def case_async_loss(root: Path, rounds: int, senders: int) -> dict[str, Any]:
    c = HACluster(root, role="ASYNC_MASTER")
    kills: list[list[int]] = []  # each sender's next index when each kill happened
    try:
        c.start()
        loads = [SluiceLoad(c.namesrv, "BenchLoss", prefix=f"s{k}").start() for k in range(senders)]
        try:
            for load in loads:
                load.wait_acked(100, 60)
            for _ in range(rounds):
                master = c.master()
                loads[0].wait_acked(len(loads[0].acked) + 300, 60)
                kills.append([len(load.acked) for load in loads])
                c.kill(master)
                c.wait_new_master(master, 30)
                for load in loads:
                    load.wait_acked(len(load.acked), 60)
                c.start_broker(master)
                c.wait_in_sync(3, 60)
        finally:
            for load in loads:
                load.stop()
        stored = consume_all(c.namesrv, "BenchLoss")
        # A loss belongs to the kill it came before: acknowledged before it, not replicated when it came.
        per_round = [0] * len(kills)
        for k, load in enumerate(loads):
            for i in load.acked:
                if f"s{k}-{i}" not in stored:
                    r = next((r for r in range(len(kills)) if i < kills[r][k]), len(kills) - 1)
                    per_round[r] += 1
        return {"case": "async-loss", "senders": senders, "rounds": rounds, "lost_per_round": per_round,
                "lost": sum(per_round), "acked": sum(len(load.acked) for load in loads)}
    finally:
        c.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="lone,sync,catch-up,async-loss")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--backlog", type=int, default=256, help="MiB written before the slave starts (catch-up)")
    p.add_argument("--rounds", type=int, default=5, help="kills (async-loss)")
    a = p.parse_args()
    cases = a.cases.split(",")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sluice-ha-bench-") as tmp:
        root = Path(tmp)
        if "lone" in cases:
            results += case_send(root / "lone", False, a.duration)
        if "sync" in cases:
            results += case_send(root / "sync", True, a.duration)
        if "catch-up" in cases:
            results.append(case_catch_up(root / "catch-up", a.backlog))
        if "async-loss" in cases:
            for senders in (1, 8):
                results.append(case_async_loss(root / f"async-loss-{senders}", a.rounds, senders))
    for r in results:
        print(json.dumps({k: v for k, v in r.items() if k != "raw"}))
    print("\n| case | senders | msgs/s | send RT p50 / p99 (ms) |\n|---|---:|---:|---:|")
    for r in results:
        if "concurrency" in r:
            print(f"| {r['case']} | {r['concurrency']} | {r['tps']:,.0f} | {r['rt_p50_ms']} / {r['rt_p99_ms']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
