#!/usr/bin/env python3
"""Light message queues (LMQ) on a broker of its own: what each one costs in memory and on disk, and how long the
broker takes to start with them.

A fresh ``sluice namesrv`` + ``sluice broker`` with ``enable_lmq`` and ``enable_multi_dispatch`` (and
``max_lmq_consume_queue_num`` = ``--queues``): messages each naming ``--per-message`` (256) new light queues are
sent until ``--queues`` (20,000) exist; the broker's resident memory (VmRSS, RssAnon, RssFile) is read before, at
every fifth, after, and after a restart, with the bytes the consume queues take on disk.

    .venv/bin/python bench/light_queues.py                      # 20,000 light queues (~1 minute)
    .venv/bin/python bench/light_queues.py --queues 50000
    .venv/bin/python bench/light_queues.py --lite --queues 5000   # lite topics (RocketMQ 5.5): one message each

With ``--lite`` each light queue is a lite topic of a ``message.type=LITE`` parent, made by one message sent to it
(``Message(lite_topic=...)``, one send at a time: what a lite topic's first message costs).

Prints one JSON line per measurement and a Markdown summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.reference import SluiceServers, _ready, free_port, stop_processes  # noqa: E402
from bench.timers import rss_mib  # noqa: E402

from sluice.aio import Message, Producer  # noqa: E402
from sluice.client.admin import Admin  # noqa: E402


class LmqServers(SluiceServers):
    def __init__(self, root: Path, queues: int) -> None:
        super().__init__(root, "async")
        self.config = root / "broker.toml"
        root.mkdir(parents=True, exist_ok=True)
        self.config.write_text(f"[store]\nenable_lmq = true\nenable_multi_dispatch = true\n"
                               f"max_lmq_consume_queue_num = {queues}\n")

    def restart_broker(self) -> None:
        broker = self._spawn("broker", ["broker", "--namesrv", self.namesrv, "--port", str(free_port()),
                                        "--store", str(self.root / "store"), "--flush", self.flush,
                                        "--config", str(self.config), "--log-level", "warning"])
        t0 = time.monotonic()
        _ready(broker, r"ready on (\S+)")
        self.started_in = time.monotonic() - t0
        self.broker_pid = broker.pid


def disk_mib(root: Path) -> float:
    """What the consume queues take on disk: the topics' files and the light queues' shared store."""
    total = 0
    for where in ("consumequeue", "lightqueue"):
        for dirpath, _, files in os.walk(root / "store" / where):
            for f in files:
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
    return round(total / (1 << 20), 1)


async def fill(namesrv: str, queues: int, per_message: int, report: Any, lite: bool = False) -> float:
    async with Admin(namesrv) as admin:
        await admin.create_topic("lmq-bench", queues=1, message_type="LITE" if lite else None)
    made, t0 = 0, time.monotonic()
    async with Producer("lmq-bench-pg", namesrv) as p:
        while lite and made < queues:
            await p.send(Message("lmq-bench", b"x" * 64, lite_topic=f"bench-{made}"))
            made += 1
            if made % max(1, queues // 5) == 0 or made == queues:
                report(made)
        while made < queues:
            n = min(per_message, queues - made)
            names = ",".join(f"%LMQ%bench-{made + i}" for i in range(n))
            await p.send(Message("lmq-bench", b"x" * 64, properties={"INNER_MULTI_DISPATCH": names}))
            made += n
            if made % max(1, queues // 5) < n or made == queues:
                report(made)
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queues", type=int, default=20_000)
    ap.add_argument("--per-message", type=int, default=256)
    ap.add_argument("--lite", action="store_true", help="lite topics, one message each")
    a = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sluice-lmq-bench-") as tmp:
        servers = LmqServers(Path(tmp), a.queues).start()
        try:
            def report(made: int) -> None:
                row = {"light_queues": made, **rss_mib(servers.broker_pid), "consume_queue_disk_mib": disk_mib(
                    servers.root)}
                rows.append(row)
                print(json.dumps(row), flush=True)

            report(0)
            took = asyncio.run(fill(servers.namesrv, a.queues, a.per_message, report, a.lite))
            procs = list(servers.procs)
            servers.procs = [procs[0]]
            stop_processes(procs[1:])
            servers.restart_broker()
            after = {"light_queues": a.queues, "after_restart": True, "start_s": round(servers.started_in, 2),
                     **rss_mib(servers.broker_pid)}
            rows.append(after)
            print(json.dumps(after), flush=True)
        finally:
            servers.stop()
            errors = [line for line in (Path(tmp) / "broker.err").read_text(errors="replace").splitlines()
                      if "ERROR" in line or "Error" in line]
            if errors:
                print(f"the broker logged {len(errors)} errors, the first: {errors[0][:300]}", flush=True)
    base, full = rows[0], rows[-2]
    per_queue_kib = (full["rss_mib"] - base["rss_mib"]) * 1024 / a.queues
    print("\n| light queues | VmRSS MiB | RssAnon MiB | RssFile MiB | consume-queue disk MiB |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['light_queues']:,}{' (restarted)' if r.get('after_restart') else ''} | {r['rss_mib']} | "
              f"{r['anon_mib']} | {r['file_mib']} | {r.get('consume_queue_disk_mib', '')} |")
    what = "lite topics" if a.lite else "light queues"
    print(f"\n{a.queues:,} {what} made in {took:.1f} s; {per_queue_kib:.1f} KiB of resident memory each; "
          f"restart with them: {after['start_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
