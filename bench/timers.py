#!/usr/bin/env python3
"""Timer messages on a broker of its own: how late they arrive, and what a million waiting ones cost in memory.

Two cases, each on a fresh ``sluice namesrv`` + ``sluice broker`` (RocketMQ's timer defaults: 1 s precision,
3 days at most):

- **on time**: ``--count`` (10,000) messages, each due at a random time spread evenly over ``--spread`` (30 s)
  seconds after the last one is sent, are read by a pull consumer as they become visible; lateness is arrival
  minus the time asked for (a message is never delivered early, so it lies between 0 and the precision plus the
  delivery's own delay).
- **memory**: ``--pending`` (1,000,000) messages due in a day are sent (in ``--batch``-sized single sends in
  flight); the broker's resident memory (VmRSS) is read before, at every tenth, and after a restart that rebuilds
  the wheel from the timer log.

    .venv/bin/python bench/timers.py                           # both cases (~3 minutes)
    .venv/bin/python bench/timers.py --pending 200000 --count 2000 --spread 10

Prints one JSON line per measurement and a Markdown summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.reference import SluiceServers  # noqa: E402

from sluice.aio import Message, Producer, PullConsumer  # noqa: E402
from sluice.client.admin import Admin  # noqa: E402


def rss_mib(pid: int) -> dict[str, float]:
    """The process's resident memory: all of it, its own (anonymous: the heap, numpy arrays) and the pages of
    the files it maps (the commit log's, which the kernel may drop at will)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return {"rss_mib": fields["VmRSS"], "anon_mib": fields["RssAnon"], "file_mib": fields["RssFile"]}


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def send_all(producer: Producer, msgs: list[Message], in_flight: int) -> None:
    it = iter(msgs)

    async def worker() -> None:
        for m in it:
            await producer.send(m)

    await asyncio.gather(*(worker() for _ in range(in_flight)))


async def on_time(namesrv: str, count: int, spread: float, in_flight: int) -> dict[str, Any]:
    topic = "timed"
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 8)
    consumer = PullConsumer("timer-bench-reader", namesrv=namesrv, consume_from="first", pull_batch_size=64)
    consumer.subscribe(topic)
    await consumer.start()
    producer = await Producer("timer-bench", namesrv=namesrv).start()
    try:
        # Due times start once every message is sent: sending 10,000 takes about a second.
        start = time.time() + 3 + count / 5000
        due = [int((start + random.random() * spread) * 1000) for _ in range(count)]
        msgs = [Message(topic, str(d).encode(), deliver_at=d) for d in due]
        sent = time.monotonic()
        await send_all(producer, msgs, in_flight)
        send_s = time.monotonic() - sent
        lateness: list[float] = []
        deadline = time.time() + (start - time.time()) + spread + 60
        while len(lateness) < count and time.time() < deadline:
            for m in await consumer.poll(0.05):
                lateness.append(time.time() * 1000 - int(m.body))
    finally:
        await producer.shutdown()
        await consumer.shutdown()
    return {"case": "on time", "count": count, "received": len(lateness), "spread_s": spread,
            "send_s": round(send_s, 2), "early": sum(1 for x in lateness if x < -5),
            "lateness_ms_p50": round(percentile(lateness, 0.5)), "lateness_ms_p99": round(percentile(lateness, 0.99)),
            "lateness_ms_max": round(max(lateness)), "lateness_ms_min": round(min(lateness))}


async def pending_memory(servers: SluiceServers, pending: int, in_flight: int) -> list[dict[str, Any]]:
    topic = "later"
    out: list[dict[str, Any]] = []
    async with Admin(servers.namesrv) as admin:
        await admin.create_topic(topic, 8)
    producer = await Producer("timer-bench-pending", namesrv=servers.namesrv).start()
    try:
        await producer.send(Message(topic, b"warm", delay=timedelta(days=1)))
        out.append({"case": "memory", "pending": 0, **rss_mib(servers.broker_pid)})
        emit(**out[-1])
        step = max(1, pending // 10)
        due = int((time.time() + 86_400) * 1000)
        started = time.monotonic()
        for done in range(0, pending, step):
            n = min(step, pending - done)
            await send_all(producer, [Message(topic, b"x" * 128, deliver_at=due + i) for i in range(n)], in_flight)
            out.append({"case": "memory", "pending": done + n, **rss_mib(servers.broker_pid),
                        "send_msgs_per_s": round((done + n) / (time.monotonic() - started))})
            emit(**out[-1])
    finally:
        await producer.shutdown()
    return out


def restart_rss(servers: SluiceServers, pending: int) -> dict[str, Any]:
    broker = servers.procs[-1]
    broker.terminate()
    broker.wait(120)
    servers.procs.pop()
    if broker.stdout is not None:
        broker.stdout.close()
    started = time.monotonic()
    servers.restart_broker()
    ready = time.monotonic() - started
    return {"case": "memory after restart", "pending": pending, **rss_mib(servers.broker_pid),
            "restart_s": round(ready, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=10_000, help="timers of the on-time case")
    ap.add_argument("--spread", type=float, default=30.0, help="seconds over which they fall due")
    ap.add_argument("--pending", type=int, default=1_000_000, help="timers of the memory case (0: skip it)")
    ap.add_argument("--in-flight", type=int, default=256, help="sends in flight")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temporary directory)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-timers-", dir=args.dir) as tmp:
        results: list[dict[str, Any]] = []
        if args.count:
            servers = SluiceServers(Path(tmp) / "on-time", "async").start()
            try:
                results.append(asyncio.run(on_time(servers.namesrv, args.count, args.spread, args.in_flight)))
                emit(**results[-1])
            finally:
                servers.stop()
        if args.pending:
            servers = SluiceServers(Path(tmp) / "memory", "async").start()
            try:
                results += asyncio.run(pending_memory(servers, args.pending, args.in_flight))
                results.append(restart_rss(servers, args.pending))
                emit(**results[-1])
            finally:
                servers.stop()
    print()
    for r in results:
        if r["case"] == "on time":
            print(f"| {r['count']:,} timers over {r['spread_s']:.0f} s | received {r['received']:,}, early "
                  f"{r['early']} | lateness p50 {r['lateness_ms_p50']} ms, p99 {r['lateness_ms_p99']} ms, "
                  f"max {r['lateness_ms_max']} ms |")
        else:
            extra = f", restart {r['restart_s']} s" if "restart_s" in r else ""
            print(f"| {r['case']} | {r['pending']:,} pending | broker RSS {r['rss_mib']} MiB (anonymous "
                  f"{r['anon_mib']}, mapped files {r['file_mib']}){extra} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
