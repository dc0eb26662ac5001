#!/usr/bin/env python3
"""Sluice and Apache RocketMQ side by side on this machine: the same cases, one system at a time.

Each system (Sluice's ``sluice namesrv`` + ``sluice broker``; Apache RocketMQ's name server and broker from Maven
Central, the release of ``tests/interop/java/pom.xml``) is started on 127.0.0.1 with a fresh store, in async and
then sync flush, and the same cases run against it with two clients:

- Sluice's client: ``sluice bench produce`` (sync, 64 in flight; async; batches of 64), ``sluice bench consume``
  (the backlog the batch case left) and ``sluice bench e2e`` (send → listener at a fixed rate);
- a Java load generator on RocketMQ's own client (``sluice.interop.Main bench``: 64 threads of sync sends, async
  sends with 1,000 in flight, 64-message batches, a push consumer), and RocketMQ's own benchmark producer
  (``org.apache.rocketmq.example.benchmark.Producer``, 64 threads, msgs/s and average latency only).

Each system first gets 16 s of unmeasured sends (its JIT warm, its first commit-log pages touched); then every
case gets a topic of its own with 8 queues. For each it writes msgs/s, send (or delivery) latency p50 / p99,
the broker process's CPU (share of one core over the case) and resident memory at its end; then the ratio
Sluice ÷ RocketMQ of msgs/s per case. Output: a Markdown table on stdout and, with ``--out``, in a file; the raw
results as JSON lines with ``--json``.

    .venv/bin/python bench/reference.py                       # both flush modes, 10 s a case (~10 minutes)
    .venv/bin/python bench/reference.py --flush async --duration 5

Needs java and mvn (the first run downloads RocketMQ from Maven Central into ~/.m2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.interop.java_clients import JavaBuild, ensure_java_build  # noqa: E402
from tests.reference.rocketmq_node import RocketMQNode, free_port  # noqa: E402

from sluice.client.admin import Admin  # noqa: E402

SIZE = 128
QUEUES = 8
WARM_UP = 8.0  # seconds of unmeasured sends before the first case
JAVA_CLIENT_JVM = ("-Xms512m", "-Xmx512m", "-XX:+UseG1GC")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# == the systems ====================================================================================
class SluiceServers:
    """``sluice namesrv`` and ``sluice broker`` as processes of their own (the broker is what is measured)."""

    name = "Sluice"

    def __init__(self, root: Path, flush: str) -> None:
        self.root, self.flush = root, flush
        self.procs: list[subprocess.Popen[str]] = []
        self.namesrv = ""

    def start(self) -> SluiceServers:
        self.root.mkdir(parents=True, exist_ok=True)
        ns_port = free_port()
        ns = self._spawn("namesrv", ["namesrv", "--port", str(ns_port), "--log-level", "warning"])
        self.namesrv = _ready(ns, r"ready on (\S+)")
        self.restart_broker()
        return self

    def restart_broker(self) -> None:
        """Start the broker (again, once the last one has exited) on the same store."""
        broker = self._spawn("broker", ["broker", "--namesrv", self.namesrv, "--port", str(free_port()),
                                        "--store", str(self.root / "store"), "--flush", self.flush,
                                        "--log-level", "warning"])
        _ready(broker, r"ready on (\S+)")
        self.broker_pid = broker.pid

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[str]:
        err = open(self.root / f"{name}.err", "w")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", *args], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        err.close()
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        stop_processes(self.procs)


def stop_processes(procs: list[subprocess.Popen[str]]) -> None:
    """SIGTERM each (the last started first), SIGKILL after 60 s; their pipes closed."""
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        if p.stdout is not None:
            p.stdout.close()


def _ready(proc: subprocess.Popen[str], pattern: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(pattern, line)
    if not m:
        raise RuntimeError(f"server did not start: {line!r}")
    return m.group(1)


class RocketMQServers:
    name = "RocketMQ"

    def __init__(self, build: JavaBuild, root: Path, flush: str) -> None:
        # RocketMQ's own defaults but the heap (the issue's -Xmx1g): 1 GiB commit-log files, async or sync flush.
        self.node = RocketMQNode(build, root, flush="SYNC_FLUSH" if flush == "sync" else "ASYNC_FLUSH")

    def start(self) -> RocketMQServers:
        self.node.start()
        self.namesrv = self.node.namesrv
        assert self.node.broker_proc is not None
        self.broker_pid = self.node.broker_proc.pid
        return self

    def stop(self) -> None:
        self.node.stop()


# == measuring a process ============================================================================
def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Row:
    system: str
    flush: str
    client: str
    case: str
    msgs_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    broker_cpu: float  # cores
    broker_rss_mib: float
    note: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


# == the cases ======================================================================================
def run_json(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(argv[:6])}... failed ({r.returncode}): {r.stderr[-1500:]}")
    return json.loads(lines[-1])


def sluice_bench(ns: str, case: str, topic: str, duration: float, *extra: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "sluice.cli.main", "bench", case, "--namesrv", ns, "--topic", topic,
            "--size", str(SIZE), "--duration", str(duration), "--json", *extra]
    out = run_json(argv, duration + 120)
    lat = out.get("send_rt") or out.get("latency") or {}  # (a backlog's delivery latency says nothing)
    tps = out.get("tps") or (out.get("received", 0) / out["seconds"] if out.get("seconds") else 0)
    return {"msgs_per_s": tps, "p50_ms": lat.get("p50_ms"), "p99_ms": lat.get("p99_ms"), "raw": out}


def java_bench(build: JavaBuild, ns: str, mode: str, topic: str, duration: float, home: Path,
               *extra: str) -> dict[str, Any]:
    out_file = home / f"java-{mode}-{topic}.jsonl"
    argv = build.argv("sluice.interop.Main", "bench", "--namesrv", ns, "--topic", topic, "--mode", mode,
                      "--size", str(SIZE), "--out", str(out_file), *extra, jvm=JAVA_CLIENT_JVM, home=home)
    if mode != "consume":
        argv += ["--duration", str(duration)]
    subprocess.run(argv, capture_output=True, text=True, timeout=duration + 180, stdin=subprocess.DEVNULL,
                   check=True)
    out = json.loads(out_file.read_text().splitlines()[-1])
    return {"msgs_per_s": out["msgs_per_s"], "p50_ms": out.get("p50_ms") if mode != "consume" else None,
            "p99_ms": out.get("p99_ms") if mode != "consume" else None, "raw": out}


def rocketmq_example_producer(build: JavaBuild, ns: str, topic: str, duration: float, home: Path,
                              rate_hint: float) -> dict[str, Any]:
    """RocketMQ's own benchmark producer (64 threads of sync sends) for about ``duration`` seconds."""
    count = max(20_000, int(rate_hint * duration))
    argv = build.argv("org.apache.rocketmq.example.benchmark.Producer", "-n", ns, "-t", topic, "-w", "64",
                      "-s", str(SIZE), "-q", str(count), jvm=JAVA_CLIENT_JVM, home=home)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=duration * 10 + 180, stdin=subprocess.DEVNULL)
    m = re.search(r"\[Complete\] Send Total: (\d+) \| Send TPS: (\d+) \| Max RT\(ms\): (\d+) \| "
                  r"Average RT\(ms\):\s*([\d.]+)", r.stdout)
    if not m:
        raise RuntimeError(f"RocketMQ's benchmark producer printed no result: {r.stdout[-1500:]} {r.stderr[-800:]}")
    return {"msgs_per_s": float(m.group(2)), "p50_ms": None, "p99_ms": None,
            "note": f"average {float(m.group(4)):.2f} ms", "raw": {"total": int(m.group(1))}}


def create_topic(ns: str, topic: str) -> None:
    async def go() -> None:
        async with Admin(ns) as admin:
            await admin.create_topic(topic, queues=QUEUES, wait=30)

    asyncio.run(go())


def cases(build: JavaBuild, duration: float, home: Path) -> list[tuple[str, str, Callable[[str, str], dict]]]:
    """(client, case, run(namesrv, topic)) in the order they run; consume cases read the topic of the case before."""
    return [
        ("Sluice client", "sync sends, 64 in flight",
         lambda ns, t: sluice_bench(ns, "produce", t, duration, "--concurrency", "64")),
        ("Sluice client", "async sends",
         lambda ns, t: sluice_bench(ns, "produce", t, duration, "--mode", "async", "--concurrency", "1000")),
        ("Sluice client", "batches of 64",
         lambda ns, t: sluice_bench(ns, "produce", t, duration, "--batch", "64", "--concurrency", "16")),
        ("Sluice client", "consume the backlog",
         lambda ns, t: sluice_bench(ns, "consume", t, duration, "--group", f"{t}-sluice-reader")),
        ("Sluice client", "send → listener at 5,000/s",
         lambda ns, t: sluice_bench(ns, "e2e", t, duration, "--rate", "5000", "--group", f"{t}-e2e")),
        ("Java client", "sync sends, 64 threads",
         lambda ns, t: java_bench(build, ns, "sync", t, duration, home, "--threads", "64")),
        ("Java client", "async sends",
         lambda ns, t: java_bench(build, ns, "async", t, duration, home, "--window", "1000")),
        ("Java client", "batches of 64",
         lambda ns, t: java_bench(build, ns, "batch", t, duration, home, "--threads", "16", "--batch", "64")),
        ("Java client", "consume the backlog",
         lambda ns, t: java_bench(build, ns, "consume", t, duration, home, "--group", f"{t}-java-reader")),
        ("RocketMQ benchmark", "sync sends, 64 threads",
         lambda ns, t: rocketmq_example_producer(build, ns, t, duration, home, 15_000)),
    ]


def measure(servers: Any, flush: str, build: JavaBuild, duration: float, home: Path,
            only: set[str] | None) -> list[Row]:
    rows = []
    topic = ""
    home.mkdir(parents=True, exist_ok=True)
    # Unmeasured: a JVM broker needs its JIT warm, and either broker its first commit-log pages touched.
    create_topic(servers.namesrv, "bench-warm-up")
    sluice_bench(servers.namesrv, "produce", "bench-warm-up", WARM_UP, "--concurrency", "64")
    java_bench(build, servers.namesrv, "batch", "bench-warm-up", WARM_UP, home, "--threads", "8")
    for i, (client, case, run) in enumerate(cases(build, duration, home)):
        if not case.startswith("consume"):  # a consume case reads what the case before it sent
            topic = f"bench-{flush}-{i}"
            create_topic(servers.namesrv, topic)
        if only and not any(o in f"{client} {case}" for o in only):
            continue
        cpu0, t0 = cpu_seconds(servers.broker_pid), time.monotonic()
        try:
            r = run(servers.namesrv, topic)
        except (RuntimeError, subprocess.SubprocessError) as exc:
            print(f"  {servers.name} {flush} {client} {case}: FAILED {exc}", file=sys.stderr)
            continue
        wall = time.monotonic() - t0
        row = Row(servers.name, flush, client, case, r["msgs_per_s"], r.get("p50_ms"), r.get("p99_ms"),
                  (cpu_seconds(servers.broker_pid) - cpu0) / wall, rss_mib(servers.broker_pid), r.get("note", ""),
                  r.get("raw", {}))
        print(f"  {row.system:8} {flush:5} {client:18} {case:28} {row.msgs_per_s:>10,.0f} msgs/s", file=sys.stderr)
        rows.append(row)
    return rows


# == the table ======================================================================================
def fmt(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def table(rows: list[Row]) -> str:
    out = ["| flush | client | case | system | msgs/s | p50 ms | p99 ms | broker CPU (cores) | broker RSS MiB |",
           "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        extra = f" ({r.note})" if r.note else ""
        out.append(f"| {r.flush} | {r.client} | {r.case}{extra} | {r.system} | {r.msgs_per_s:,.0f} | "
                   f"{fmt(r.p50_ms)} | {fmt(r.p99_ms)} | {r.broker_cpu:.2f} | {r.broker_rss_mib:,.0f} |")
    out += ["", "| flush | client | case | Sluice ÷ RocketMQ |", "|---|---|---|---:|"]
    by_key = {(r.flush, r.client, r.case, r.system): r for r in rows}
    for r in rows:
        other = by_key.get((r.flush, r.client, r.case, "RocketMQ"))
        if r.system != "Sluice" or other is None:
            continue
        if r.case.startswith("send →"):  # paced: the rate is given, the latency is the figure (lower is better)
            if r.p50_ms and other.p50_ms:
                out.append(f"| {r.flush} | {r.client} | {r.case} | {r.p50_ms / other.p50_ms:.2f} "
                           f"(p50 latency, lower is better) |")
        elif other.msgs_per_s:
            out.append(f"| {r.flush} | {r.client} | {r.case} | {r.msgs_per_s / other.msgs_per_s:.2f} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=10.0, help="seconds per case (default 10)")
    p.add_argument("--flush", default="async,sync", help="flush modes to run, comma-separated (default both)")
    p.add_argument("--systems", default="sluice,rocketmq", help="systems to run (default both)")
    p.add_argument("--only", default="", help="run only cases whose 'client case' contains one of these, comma-"
                                              "separated")
    p.add_argument("--out", help="also write the Markdown table to this file")
    p.add_argument("--json", help="write every result as a JSON line to this file")
    p.add_argument("--table-from", metavar="JSONL", help="print the table of an earlier run's --json file; run nothing")
    a = p.parse_args()
    if a.table_from:
        print(table([Row(**json.loads(line)) for line in Path(a.table_from).read_text().splitlines()]))
        return 0
    build = ensure_java_build()
    only = {o.strip() for o in a.only.split(",") if o.strip()} or None
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="sluice-bench-reference-") as tmp:
        root = Path(tmp)
        for flush in [f.strip() for f in a.flush.split(",") if f.strip()]:
            for system in [s.strip() for s in a.systems.split(",") if s.strip()]:
                where = root / f"{system}-{flush}"
                servers: Any = SluiceServers(where, flush) if system == "sluice" else \
                    RocketMQServers(build, where, flush)
                print(f"{servers.name}, {flush} flush:", file=sys.stderr)
                try:
                    servers.start()
                    rows += measure(servers, flush, build, a.duration, where / "clients", only)
                finally:
                    servers.stop()
    report(table(rows), rows, a.out, a.json)
    return 0


def report(text: str, rows: list[Any], out: str | None, json_path: str | None) -> None:
    """The table on stdout and in ``out``; every row (a dataclass) as a JSON line in ``json_path``."""
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    if json_path:
        with open(json_path, "w") as f:
            for r in rows:
                f.write(json.dumps(r.__dict__) + "\n")


if __name__ == "__main__":
    sys.exit(main())
