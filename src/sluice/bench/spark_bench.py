"""``sluice bench spark-read | spark-write``: rows/s of the ``sluice`` Spark data source on a local[2] Spark.

spark-read: produce ``--count`` messages of ``--size`` bytes over ``--queues`` queues (kept if the topic already
holds them), then per run one streaming query from the earliest offsets, ``Trigger.AvailableNow``, into the
``noop`` sink. Reported: rows / (sum of the micro-batches' trigger times) and rows / wall time including the
query start (~1 s). spark-write: a cached DataFrame of ``--count`` rows with a ``--size``-byte ``value``,
written with ``df.write.format("sluice")``; rows / wall time of ``save()``.
Warm-up first: the first query of a Spark session costs ~6 s more, and the JVM compiles its hot paths over
the first full-size queries (each 1M-row read was ~10 % faster than the one before, three times running). So
spark-read reads the whole topic ``--warmup`` times (default 1; 0: a 5 % read, only to start the session)
and spark-write writes 5 % of the rows; then the median of ``--runs``. The warm-up runs are reported too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from sluice.bench.client_bench import embedded_cluster
from sluice.client.admin import Admin, QueueStatus
from sluice.client.aio import Producer
from sluice.client.message import Message
from sluice.common.structs import MessageQueue


@dataclass(slots=True)
class SparkBenchOptions:
    namesrv: str = "127.0.0.1:9876"
    topic: str = "SparkBench"
    count: int = 1_000_000
    size: int = 128
    queues: int = 4
    runs: int = 3
    json: bool = False
    warmup: int = 1


async def _prepare_topic(opts: SparkBenchOptions, produce: bool) -> list[QueueStatus]:
    """Create the topic; with ``produce``, fill it up to ``count`` messages (batches of 500 per queue).
    Returns the status of its queues."""
    async with Admin(opts.namesrv) as admin:
        await admin.create_topic(opts.topic, opts.queues)
        have = sum(q.max_offset for q in await admin.topic_status(opts.topic))
        if produce and have < opts.count:
            await _produce(opts, opts.count - have)
        return list(await admin.topic_status(opts.topic))


async def _produce(opts: SparkBenchOptions, missing: int) -> None:
    body = os.urandom(opts.size // 2 + 1).hex()[: opts.size].encode()
    async with Producer("spark_bench_producer", namesrv=opts.namesrv) as producer:
        route = await producer.client.update_route(opts.topic)
        assert route is not None
        queues = route.publish_queues(opts.topic)
        gate = asyncio.Semaphore(16)

        async def send(mq: MessageQueue, n: int) -> None:
            async with gate:
                await producer.send_batch([Message(opts.topic, body) for _ in range(n)], queue=mq)

        sends = []
        for i in range(0, missing, 500):
            sends.append(send(queues[(i // 500) % len(queues)], min(500, missing - i)))
        await asyncio.gather(*sends)


def _read_once(spark: Any, opts: SparkBenchOptions, starting: str = "earliest") -> dict[str, Any]:
    checkpoint = tempfile.mkdtemp(prefix="sluice-spark-bench-")
    t0 = time.perf_counter()
    query = (spark.readStream.format("sluice").option("namesrv", opts.namesrv).option("topics", opts.topic)
             .option("startingOffsets", starting).load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    wall = time.perf_counter() - t0
    if query.exception() is not None:
        raise RuntimeError(f"the read query failed: {query.exception()}")
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in batches)
    batch_s = sum(p["durationMs"].get("triggerExecution", 0) for p in batches) / 1000
    return {"rows": rows, "batches": len(batches), "batch_seconds": round(batch_s, 3), "wall_seconds": round(wall, 3),
            "rows_per_s": round(rows / batch_s) if batch_s else 0, "rows_per_s_wall": round(rows / wall)}


def _write_once(df: Any, opts: SparkBenchOptions, rows: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    df.write.format("sluice").option("namesrv", opts.namesrv).option("topic", opts.topic).mode("append").save()
    wall = time.perf_counter() - t0
    return {"rows": rows, "wall_seconds": round(wall, 3), "rows_per_s": round(rows / wall)}


def bench_spark_read(spark: Any, opts: SparkBenchOptions) -> dict[str, Any]:
    status = asyncio.run(_prepare_topic(opts, produce=True))
    per_queue = max(opts.count // opts.queues // 20, 1)
    warm = json.dumps({opts.topic: {f"{q.broker_name}:{q.queue_id}": max(q.max_offset - per_queue, 0)
                                    for q in status}})
    if opts.warmup <= 0:
        _read_once(spark, opts, starting=warm)  # only the session's first-query cost: ~5% of the topic
    warmups = [_read_once(spark, opts) for _ in range(opts.warmup)]
    runs = [_read_once(spark, opts) for _ in range(opts.runs)]
    return _summary("spark-read", opts, runs, {"sink": "noop", "trigger": "AvailableNow", "warmup_runs": warmups})


def bench_spark_write(spark: Any, opts: SparkBenchOptions) -> dict[str, Any]:
    asyncio.run(_prepare_topic(opts, produce=False))
    pad = max(opts.size - 16, 0)

    def frame(n: int) -> Any:
        df = spark.range(n, numPartitions=2).selectExpr(
            f"concat(lpad(cast(id as string), 16, '0'), repeat('x', {pad})) as value").cache()
        df.count()
        return df

    warm = frame(max(opts.count // 20, 1))
    _write_once(warm, opts, opts.count // 20)
    warm.unpersist()
    df = frame(opts.count)
    try:
        runs = [_write_once(df, opts, opts.count) for _ in range(opts.runs)]
    finally:
        df.unpersist()
    return _summary("spark-write", opts, runs, {"partitions": 2})


def _summary(name: str, opts: SparkBenchOptions, runs: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"bench": name, "count": opts.count, "size": opts.size, "queues": opts.queues,
                           "spark": "local[2]", **extra, "runs": runs,
                           "median_rows_per_s": round(statistics.median(r["rows_per_s"] for r in runs))}
    if "rows_per_s_wall" in runs[0]:
        out["median_rows_per_s_wall"] = round(statistics.median(r["rows_per_s_wall"] for r in runs))
    return out


BENCHES = {"spark-read": bench_spark_read, "spark-write": bench_spark_write}


def run_spark_bench(name: str, opts: SparkBenchOptions, embedded: bool = False,
                    broker_max_pull: int | None = None) -> dict[str, Any]:
    """Run one Spark bench (against ``opts.namesrv``, or an embedded ``sluice dev`` child) and print it."""
    from sluice.spark.session import local_spark

    with contextlib.ExitStack() as stack:
        if embedded:
            config = None
            if broker_max_pull:
                config = stack.enter_context(tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)).name
                with open(config, "w") as f:
                    f.write(f"[store]\nmax_transfer_count_on_message_in_memory = {broker_max_pull}\n"
                            f"max_transfer_bytes_on_message_in_memory = {max(broker_max_pull * 512, 262_144)}\n")
            opts.namesrv = stack.enter_context(embedded_cluster("async", config=config))
        spark = local_spark("sluice-bench")
        try:
            result = BENCHES[name](spark, opts)
        finally:
            spark.stop()
    if embedded:
        result["broker"] = "embedded sluice dev"
        if name == "spark-read":
            result["broker"] += (f", max_transfer_count_on_message_in_memory={broker_max_pull}" if broker_max_pull
                                 else ", default pull cap (32 messages)")
    print(json.dumps(result) if opts.json else _format(result), flush=True)
    return result


def _format(r: dict[str, Any]) -> str:
    lines = [f"{r['bench']}: {r['count']:,} rows of {r['size']} B, median {r['median_rows_per_s']:,} rows/s"]
    if "median_rows_per_s_wall" in r:
        lines[0] += f" in micro-batches ({r['median_rows_per_s_wall']:,} rows/s including query start)"
    for i, run in enumerate(r.get("warmup_runs", []), 1):
        lines.append(f"  warm-up {i}: " + ", ".join(f"{k} {v}" for k, v in run.items()))
    for i, run in enumerate(r["runs"], 1):
        lines.append(f"  run {i}: " + ", ".join(f"{k} {v}" for k, v in run.items()))
    if "broker" in r:
        lines.append(f"  broker: {r['broker']}")
    return "\n".join(lines)
