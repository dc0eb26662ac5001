"""Example pipeline: order events → Spark → revenue per region per minute, to parquet and to a topic.

    sluice dev                       # in one terminal: a name server and broker on 127.0.0.1
    sluice pipeline demo             # in another: generate orders and run the Spark job (Ctrl-C stops)

or ``python examples/revenue_pipeline.py --help``. A stop (Ctrl-C or ``--duration``) ends the generator first
and lets the job process every order sent before it stops the queries, between two micro-batches. Start it
again: the job resumes from its checkpoints (in ``--dir``), so every order is counted once and no minute is
written twice to parquet.

The pieces:

* ``generate_orders`` produces JSON order events (``order_id``, ``region``, ``amount``, ``ts``) into the
  ``orders`` topic with the Sluice client: tag = region, key = order id.
* ``revenue_per_minute`` is the Spark job: read ``orders`` with the ``sluice`` source, parse the JSON, and
  sum the amounts per region per one-minute event-time window (10 s watermark: a minute is written
  once, when it can no longer change).
* ``start_pipeline`` runs it as two streaming queries with their own checkpoints: one appends to parquet
  (exactly once), one writes each finished minute as a JSON message to ``revenue`` (at least once; every
  message carries a ``SPARK_WRITE_KEY`` property to drop duplicates with).
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sluice import Message, Producer
from sluice.common.structs import MessageQueue

REGIONS = ("apac", "eu", "latam", "us")
ORDER_SCHEMA = "order_id STRING, region STRING, amount DOUBLE, ts BIGINT"
REVENUE_SCHEMA = "minute TIMESTAMP, region STRING, revenue DOUBLE, orders BIGINT"
WATERMARK = "10 seconds"


# == the order-event generator ====================================================================
def order_events(count: int, start_ms: int, step_ms: float, seed: int = 7) -> Iterator[dict[str, Any]]:
    """``count`` orders, one every ``step_ms`` of event time from ``start_ms`` (amounts in cents, as floats)."""
    rng = random.Random(seed)
    for i in range(count):
        yield {"order_id": f"o-{start_ms}-{i}", "region": rng.choice(REGIONS),
               "amount": rng.randrange(100, 50_000) / 100, "ts": int(start_ms + i * step_ms)}


def send_orders(producer: Producer, topic: str, orders: list[dict[str, Any]],
                queue: MessageQueue | None = None) -> None:
    """One batch send: the JSON order as the body, the region as the tag, the order id as the key."""
    if orders:
        producer.send_batch([Message(topic, json.dumps(o).encode(), tags=o["region"], keys=[o["order_id"]])
                             for o in orders], queue=queue)


def generate_orders(namesrv: str, topic: str, rate: float, stop: threading.Event) -> int:
    """Produce ``rate`` orders a second, stamped with the current time, until ``stop`` is set."""
    sent = 0
    with Producer("revenue-demo-orders", namesrv=namesrv) as producer:
        t0 = time.time()
        while not stop.is_set():
            due = int((time.time() - t0) * rate) - sent
            if due > 0:
                now = int(time.time() * 1000)
                send_orders(producer, topic, list(order_events(due, now, 0, seed=sent)))
                sent += due
            stop.wait(0.1)
    return sent


# == the Spark job ================================================================================
def revenue_per_minute(spark: Any, namesrv: str, orders_topic: str) -> Any:
    """The streaming DataFrame of (minute, region, revenue, orders) for finished one-minute windows."""
    from pyspark.sql import functions as F

    orders = (spark.readStream.format("sluice")
              .option("namesrv", namesrv)
              .option("topics", orders_topic)
              .option("startingOffsets", "earliest")
              .load())
    parsed = (orders.select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
              .select("o.*")
              .withColumn("event_time", F.timestamp_millis("ts")))
    return (parsed.withWatermark("event_time", WATERMARK)
            .groupBy(F.window("event_time", "1 minute"), "region")
            .agg(F.round(F.sum("amount"), 2).alias("revenue"), F.count("*").alias("orders"))
            .select(F.col("window.start").alias("minute"), "region", "revenue", "orders"))


def start_pipeline(spark: Any, namesrv: str, out_dir: Path, orders_topic: str = "orders",
                   revenue_topic: str = "revenue", trigger: dict[str, Any] | None = None) -> list[Any]:
    """Start the two queries (parquet, topic); ``trigger`` as for ``DataStreamWriter.trigger``."""
    from pyspark.sql import functions as F

    trigger = trigger or {"processingTime": "5 seconds"}
    revenue = revenue_per_minute(spark, namesrv, orders_topic)
    to_parquet = (revenue.writeStream.format("parquet").outputMode("append")
                  .option("path", str(out_dir / "revenue"))
                  .option("checkpointLocation", str(out_dir / "checkpoints" / "parquet"))
                  .trigger(**trigger).start())
    as_messages = revenue.select(
        F.to_json(F.struct(F.date_format("minute", "yyyy-MM-dd'T'HH:mm:ssXXX").alias("minute"), "region",
                           "revenue", "orders")).alias("value"),
        F.col("region").alias("tags"),
        F.concat_ws("/", F.date_format("minute", "yyyyMMddHHmm"), "region").alias("keys"))
    to_topic = (as_messages.writeStream.format("sluice").outputMode("append")
                .option("namesrv", namesrv).option("topic", revenue_topic)
                .option("checkpointLocation", str(out_dir / "checkpoints" / "topic"))
                .trigger(**trigger).start())
    return [to_parquet, to_topic]


def stop_between_batches(query: Any, timeout: float) -> None:
    """Stop ``query`` once it has processed what its source holds, not in the middle of a micro-batch: a stop
    interrupts the batch in flight (Spark then aborts its write and logs the stack traces). Call it once nothing
    more arrives (the order generator stopped), so that what there is to process is bounded; after ``timeout``
    seconds the query is stopped wherever it is."""
    if query.isActive and query.exception() is None:
        # (processAllAvailable has no timeout of its own; a thread bounds it, and the stop ends it.)
        drained = threading.Thread(target=query.processAllAvailable, name="drain", daemon=True)
        drained.start()
        drained.join(timeout)
        # Idle now, until its next trigger finds nothing new: stop between two triggers, not during one.
        deadline = time.monotonic() + timeout
        while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.01)
    query.stop()


# == one command ==================================================================================
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sluice pipeline demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--namesrv", default="127.0.0.1:9876", help="name server (default: sluice dev's)")
    p.add_argument("--dir", default="pipeline-demo", help="parquet output and checkpoints (default ./pipeline-demo)")
    p.add_argument("--rate", type=float, default=200, help="orders per second (default 200)")
    p.add_argument("--duration", type=float, default=0, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--trigger", type=float, default=5, help="seconds between micro-batches (default 5)")
    args = p.parse_args(argv)

    from sluice.spark.session import local_spark

    out = Path(args.dir).resolve()
    print(f"orders → {args.namesrv} topic 'orders' at {args.rate:g}/s; revenue → {out / 'revenue'} (parquet) and "
          f"topic 'revenue'; checkpoints in {out / 'checkpoints'}", flush=True)
    stop = threading.Event()
    generator = threading.Thread(target=generate_orders, args=(args.namesrv, "orders", args.rate, stop),
                                 name="orders", daemon=True)
    generator.start()
    spark = local_spark("sluice-revenue-demo", work_dir=out / "spark")
    queries = start_pipeline(spark, args.namesrv, out, trigger={"processingTime": f"{args.trigger:g} seconds"})
    t0 = time.time()
    shown = -1
    try:
        while not args.duration or time.time() - t0 < args.duration:
            time.sleep(1)
            progress = queries[0].lastProgress
            if progress and progress["batchId"] > shown:
                shown = progress["batchId"]
                watermark = progress.get("eventTime", {}).get("watermark", "-")
                print(f"batch {shown}: {progress['numInputRows']} orders, watermark {watermark}", flush=True)
            for q in queries:
                if q.exception() is not None:
                    raise RuntimeError(f"query {q.name or q.id} failed: {q.exception()}")
    except KeyboardInterrupt:
        pass
    finally:
        # The generator first, then each query once it has processed every order stored, then the session.
        stop.set()
        generator.join(10)
        for q in queries:
            stop_between_batches(q, timeout=max(60.0, 6 * args.trigger))
        # (with its schema: before the first finished minute, the directory holds no parquet file to infer from)
        rows = spark.read.schema(REVENUE_SCHEMA).parquet(str(out / "revenue")).count() \
            if (out / "revenue").exists() else 0
        print(f"stopped; {rows} (minute, region) rows in {out / 'revenue'}; run again to resume", flush=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
