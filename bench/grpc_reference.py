#!/usr/bin/env python3
"""Sluice's gRPC front and Apache RocketMQ's proxy side by side: RocketMQ 5.x clients' sends, receive + ack and
push consumption through each, one system at a time.

Each system is three processes on 127.0.0.1 with a fresh store: Sluice's ``sluice namesrv``, ``sluice broker`` and
``sluice proxy``; Apache RocketMQ 5.5's name server, broker and proxy in cluster mode (``tests/reference``'s node,
the release of ``tests/interop/java/pom.xml``). The clients are the official RocketMQ 5.x clients, TLS off: Java
(``tests/interop/java5``'s ``Bench5``, rocketmq-client-java of its pom) and Python (rocketmq-python-client, the
bench modes of ``tests/interop/clients/rocketmq5_client.py``, in the venv the interop tests make):

- Java: sync sends, 64 threads of ``Producer.send``; async sends, ``sendAsync`` with 1,000 in flight; receive + ack,
  4 threads of ``SimpleConsumer.receive(32)`` and an ``ackAsync`` per message, reading the async case's messages
  (a new group, from the first offset); push, a ``PushConsumer`` with 20 consumption threads reading the same
  messages in another group;
- Python: sync sends, 16 threads of ``Producer.send``; receive + ack, 4 threads of ``receive(32)`` and an ``ack``
  per message, reading them.

Each system first gets 8 s of unmeasured sends through its front. Per case: msgs/s, the latency p50 / p99 (a
send's; a receive's with its acks), and the CPU of the broker and the front together (cores over the measured part,
between the client's start and end lines: after its warm-up or its first message, before its shutdown). Then
Sluice ÷ RocketMQ per case. A Markdown table on stdout (and in ``--out``), the raw results as JSON lines with
``--json``.

    .venv/bin/python bench/grpc_reference.py --duration 8

Needs java and mvn (the first run downloads RocketMQ and its 5.x client from Maven Central into ~/.m2).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.interop.conftest import WheelUnavailable, ensure_rocketmq_venv  # noqa: E402
from tests.interop.java_clients import JavaBuild, ensure_java_build  # noqa: E402
from tests.interop.test_python5_client import REQUIREMENT as PYTHON5_REQUIREMENT  # noqa: E402
from tests.reference.rocketmq_node import free_port  # noqa: E402

from reference import (  # noqa: E402
    JAVA_CLIENT_JVM,
    RocketMQServers,
    SluiceServers,
    _ready,
    cpu_seconds,
    create_topic,
    fmt,
    report,
)

JAVA5_PROJECT = REPO / "tests" / "interop" / "java5"
PYTHON5_DRIVER = REPO / "tests" / "interop" / "clients" / "rocketmq5_client.py"
PYTHON5_VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice-interop" / \
    ("venv-" + PYTHON5_REQUIREMENT.replace("==", "-"))
WARM_UP = 8.0


class SluiceFront(SluiceServers):
    """Sluice's name server and broker, and ``sluice proxy`` in front of them."""

    def start(self) -> SluiceFront:
        super().start()
        port = free_port()
        proxy = self._spawn("proxy", ["proxy", "--namesrv", self.namesrv, "--port", str(port),
                                      "--log-level", "warning"])
        _ready(proxy, r"ready on (\S+)")
        self.endpoint = f"127.0.0.1:{port}"
        self.pids = [self.broker_pid, proxy.pid]
        return self


class RocketMQFront(RocketMQServers):
    """RocketMQ's name server and broker, and its proxy in cluster mode."""

    def start(self) -> RocketMQFront:
        super().start()
        self.endpoint = self.node.start_proxy({})
        assert self.node.proxy_proc is not None
        self.pids = [self.broker_pid, self.node.proxy_proc.pid]
        return self


@dataclass
class Row:
    system: str
    case: str
    msgs_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    cpu: float  # cores: broker + front
    raw: dict[str, Any] = field(default_factory=dict)


def bench5(build: JavaBuild, endpoint: str, home: Path, *args: str, pids: tuple[int, ...] = ()) -> dict[str, Any]:
    """Run the Java client's ``Bench5`` (see ``client_run``)."""
    return client_run(build.argv("sluice.interop5.Bench5", endpoint, *args, jvm=JAVA_CLIENT_JVM, home=home), home,
                      pids)


def python5(python: Path, endpoint: str, home: Path, *args: str, pids: tuple[int, ...] = ()) -> dict[str, Any]:
    """Run the official Python client's bench modes (``rocketmq5_client.py bench-*``, see ``client_run``)."""
    return client_run([str(python), str(PYTHON5_DRIVER), endpoint, *args], home, pids, {"HOME": str(home)})


def client_run(argv: list[str], home: Path, pids: tuple[int, ...], env: dict[str, str] | None = None,
               timeout: float = 300) -> dict[str, Any]:
    """Run a client and return its result line, with ``cpu``: the cores ``pids`` used between its start and end
    lines (the measured part only: not the client's start, its warm-up, a consumer's wait for its first message or
    its shutdown)."""
    err_path = home / "client.err"  # (a file, not a pipe: a client that logs a lot cannot stall on it)
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err_file, text=True,
                                env={**os.environ, **(env or {})})
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    started: tuple[float, float] | None = None
    cpu: float | None = None
    result: dict[str, Any] | None = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if event.get("event") == "start":
                started = (sum(cpu_seconds(p) for p in pids), time.monotonic())
            elif event.get("event") == "end" and started is not None:
                wall = time.monotonic() - started[1]
                cpu = (sum(cpu_seconds(p) for p in pids) - started[0]) / wall if wall > 0 else 0.0
            elif event.get("event") == "result":
                result = {**event, "cpu": cpu}
        proc.wait()
    finally:
        killer.cancel()
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0 or result is None:
        raise RuntimeError(f"{' '.join(argv[-5:])} failed ({proc.returncode}): {err_path.read_text()[-1500:]}")
    return result


def cases(build: JavaBuild, python: Path | None, home: Path, duration: float,
          pids: tuple[int, ...]) -> list[tuple[str, Callable[[str, str, int], dict]]]:
    """(case, run(endpoint, topic, messages the send case before stored)); a consumer reads the send case's topic
    before it. Without ``python`` (its wheel unavailable), no Python client case."""
    def java(*args: str) -> Callable[[str, str, int], dict]:
        return lambda e, t, n: bench5(build, e, home, *(a.format(topic=t, count=n) for a in args), pids=pids)

    out = [
        ("Java: sync sends, 64 threads", java("sync", "{topic}", "64", str(duration))),
        ("Java: async sends, 1,000 in flight", java("async", "{topic}", "1000", str(duration))),
        ("Java: receive 32 + ack, 4 threads", java("simple", "{topic}", "{topic}-simple", "4", "{count}")),
        ("Java: push consumer, 20 threads", java("push", "{topic}", "{topic}-push", "20", "{count}")),
    ]
    if python is not None:
        def py(*args: str) -> Callable[[str, str, int], dict]:
            return lambda e, t, n: python5(python, e, home, *(a.format(topic=t, count=n) for a in args), pids=pids)

        out += [
            ("Python: sync sends, 16 threads", py("bench-send", "{topic}", "16", str(duration))),
            ("Python: receive 32 + ack, 4 threads", py("bench-receive", "{topic}", "{topic}-simple", "4", "{count}")),
        ]
    return out


def measure(servers: Any, build: JavaBuild, python: Path | None, duration: float, home: Path) -> list[Row]:
    rows: list[Row] = []
    home.mkdir(parents=True, exist_ok=True)
    create_topic(servers.namesrv, "grpc-warm-up")
    bench5(build, servers.endpoint, home, "async", "grpc-warm-up", "1000", str(WARM_UP))
    topic, stored = "", 0
    for i, (case, run) in enumerate(cases(build, python, home, duration, tuple(servers.pids))):
        sends = "sends" in case
        if sends:
            topic, stored = f"grpc-bench-{i}", 0
            create_topic(servers.namesrv, topic)
        elif not stored:
            print(f"  {servers.name} {case}: skipped (the send case before it failed)", file=sys.stderr)
            continue
        try:
            r = run(servers.endpoint, topic, stored)
        except (RuntimeError, subprocess.SubprocessError) as exc:
            print(f"  {servers.name} {case}: FAILED {exc}", file=sys.stderr)
            continue
        if sends:
            stored = r["messages"] + r.get("warmup", 0)  # (what the topic holds: the consumers read it all)
        row = Row(servers.name, case, r["msgs_per_s"], r.get("p50_ms"), r.get("p99_ms"), r.get("cpu") or 0.0, r)
        print(f"  {row.system:8} {case:32} {row.msgs_per_s:>10,.0f} msgs/s ({r['messages']:,} messages, "
              f"{r['errors']} errors)", file=sys.stderr)
        rows.append(row)
    return rows


def table(rows: list[Row]) -> str:
    out = ["| case | system | msgs/s | p50 ms | p99 ms | broker + front CPU (cores) |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r.case} | {r.system} | {r.msgs_per_s:,.0f} | {fmt(r.p50_ms)} | {fmt(r.p99_ms)} | "
                   f"{r.cpu:.2f} |")
    out += ["", "| case | Sluice ÷ RocketMQ |", "|---|---:|"]
    by_key = {(r.case, r.system): r for r in rows}
    for r in rows:
        other = by_key.get((r.case, "RocketMQ"))
        if r.system == "Sluice" and other is not None and other.msgs_per_s:
            out.append(f"| {r.case} | {r.msgs_per_s / other.msgs_per_s:.2f} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=8.0, help="seconds per send case (default 8)")
    p.add_argument("--systems", default="sluice,rocketmq", help="systems to run (default both)")
    p.add_argument("--out", help="also write the Markdown table to this file")
    p.add_argument("--json", help="write every result as a JSON line to this file")
    a = p.parse_args()
    build = ensure_java_build()  # RocketMQ's servers and the proxy's launcher
    build5 = ensure_java_build(project=JAVA5_PROJECT, jar="sluice-interop5.jar")
    python: Path | None = None
    try:
        python = ensure_rocketmq_venv(PYTHON5_VENV, PYTHON5_REQUIREMENT, "import rocketmq.v5.producer")
    except WheelUnavailable as exc:
        print(f"no Python client cases: {exc}", file=sys.stderr)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="sluice-bench-grpc-") as tmp:
        root = Path(tmp)
        for system in [s.strip() for s in a.systems.split(",") if s.strip()]:
            where = root / system
            servers: Any = SluiceFront(where, "async") if system == "sluice" else RocketMQFront(build, where, "async")
            print(f"{servers.name}:", file=sys.stderr)
            try:
                servers.start()
                rows += measure(servers, build5, python, a.duration, where / "clients")
            finally:
                servers.stop()
    report(table(rows), rows, a.out, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
