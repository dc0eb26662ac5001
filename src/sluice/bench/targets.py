"""``sluice bench targets``: the five performance-target cases (batched and sync produce, sync flush, backlog
consume, end-to-end latency), each on a fresh embedded broker, ``--runs`` times; prints every run's JSON line,
then the medians against the targets as a Markdown table (what docs/benchmarks.md records)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sluice.bench.client_bench import BENCHES, BenchOptions, embedded_cluster
from sluice.common.runtime import tune_gc_for_throughput


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    bench: str
    flush: str
    opts: BenchOptions
    target: str
    figure: Callable[[dict[str, Any]], str]
    met: Callable[[dict[str, Any]], bool]
    backlog: int = 0  # messages produced (batches of 64) before a consume case starts


def _tps(r: dict[str, Any]) -> str:
    return f"{r['tps']:,.0f} msgs/s"


def cases(scale: float) -> list[Case]:
    d = max(1.0, 10 * scale)
    backlog = max(1_000, int(1_000_000 * scale))
    return [
        Case("produce 128 B, batches of 64, async", "produce", "async",
             BenchOptions(size=128, batch=64, mode="async", concurrency=16, duration=d), "≥ 500,000 msgs/s",
             _tps, lambda r: r["tps"] >= 500_000),
        Case("produce 1 KiB, sync sends, 64 concurrent", "produce", "async",
             BenchOptions(size=1024, mode="sync", concurrency=64, duration=d), "≥ 50,000 msgs/s, p99 < 5 ms",
             lambda r: f"{r['tps']:,.0f} msgs/s, p99 {r['send_rt']['p99_ms']} ms",
             lambda r: r["tps"] >= 50_000 and r["send_rt"]["p99_ms"] < 5),
        Case("sync flush, 30 sync senders of 4 KiB", "produce", "sync",
             BenchOptions(size=4096, mode="sync", concurrency=30, duration=d), "≥ 15,000 msgs/s",
             lambda r: f"{r['tps']:,.0f} msgs/s, p99 {r['send_rt']['p99_ms']} ms", lambda r: r["tps"] >= 15_000),
        Case(f"consume a {backlog:,}-message 128 B backlog", "consume", "async",
             BenchOptions(topic="Backlog", count=backlog), "≥ 300,000 msgs/s", _tps,
             lambda r: r["tps"] >= 300_000, backlog=backlog),
        Case("e2e at 5,000 msgs/s", "e2e", "async", BenchOptions(rate=5_000, duration=d),
             "p50 < 0.5 ms, p99 < 2 ms", lambda r: f"p50 {r['latency']['p50_ms']} ms, p99 {r['latency']['p99_ms']} ms",
             lambda r: r["latency"]["p50_ms"] < 0.5 and r["latency"]["p99_ms"] < 2),
    ]


def _median_key(case: Case) -> Callable[[dict[str, Any]], float]:
    if case.bench == "e2e":
        return lambda r: r["latency"]["p99_ms"]
    return lambda r: r["tps"]


async def _run_case(case: Case, namesrv: str) -> dict[str, Any]:
    tune_gc_for_throughput()
    opts = replace(case.opts, namesrv=namesrv, progress_every=0)
    if case.backlog:
        await BENCHES["produce"](replace(opts, count=case.backlog, batch=64, mode="async", concurrency=8,
                                         duration=None, size=128))
    return await BENCHES[case.bench](opts)


def run_targets(runs: int = 3, scale: float = 1.0, only: list[int] | None = None) -> list[dict[str, Any]]:
    import uvloop

    table: list[dict[str, Any]] = []
    for i, case in enumerate(cases(scale), 1):
        if only and i not in only:
            continue
        results = []
        for n in range(runs):
            with embedded_cluster(case.flush) as addr, asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                r = runner.run(_run_case(case, addr))
            r.update(case=i, run=n + 1, flush=case.flush)
            print(json.dumps(r), flush=True)
            results.append(r)
        mid = sorted(results, key=_median_key(case))[len(results) // 2]
        table.append({"case": case.name, "median": case.figure(mid), "target": case.target, "met": case.met(mid),
                      "runs": [case.figure(r) for r in results]})
    print("\n| case | median of runs | target | met | all runs |\n|---|---|---|---|---|")
    for row in table:
        print(f"| {row['case']} | {row['median']} | {row['target']} | {'yes' if row['met'] else 'no'} | "
              f"{'; '.join(row['runs'])} |")
    sys.stdout.flush()
    return table


__all__ = ["cases", "run_targets"]
