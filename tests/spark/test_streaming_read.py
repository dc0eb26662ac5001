"""Streaming reads: resume from a checkpoint exactly once, per-trigger caps, AvailableNow, topic patterns."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.integration.helpers import wait_until
from tests.spark.helpers import produce

pytestmark = pytest.mark.spark


def stream(spark, namesrv: str, **options: str):
    reader = spark.readStream.format("sluice").option("namesrv", namesrv)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def batch_sizes(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_streaming_read_stopped_midway_and_restarted_from_its_checkpoint_yields_every_message_once(
        spark, spark_cluster, topic_name, tmp_path: Path):
    ns, n = spark_cluster.namesrv_addr, 50_000
    spark_cluster.create_topic(topic_name, 4)
    produce(ns, topic_name, n, 4, body=lambda i: b"%08d" % i)
    out, cp = str(tmp_path / "out"), str(tmp_path / "cp")

    def start(**trigger: object):
        df = stream(spark, ns, topics=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger="6000")
        writer = (df.select("queue_id", "queue_offset", "value").writeStream.format("parquet")
                  .option("path", out).option("checkpointLocation", cp))
        return (writer.trigger(**trigger) if trigger else writer).start()

    first = start()  # micro-batches back to back until stopped
    try:
        wait_until(lambda: len(batch_sizes(first)) >= 2, 120, "two micro-batches of the first run")
    finally:
        first.stop()  # most likely in the middle of the third batch
    done_first = sum(batch_sizes(first))
    assert 0 < done_first < n, "the first run stopped part-way"

    second = start(availableNow=True)
    assert second.awaitTermination(180), "AvailableNow ends by itself"
    assert second.exception() is None
    assert 0 < sum(batch_sizes(second)) < n, "the second run resumed rather than starting over"
    assert all(size <= 6000 for size in batch_sizes(first) + batch_sizes(second))

    rows = spark.read.parquet(out).collect()
    assert len(rows) == n
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == n
    for q in range(4):
        assert sorted(r.queue_offset for r in rows if r.queue_id == q) == list(range(n // 4))
    assert {bytes(r.value) for r in rows} == {b"%08d" % i for i in range(n)}
    # message i went to queue i % 4 at offset i // 4
    assert all(bytes(r.value) == b"%08d" % (r.queue_offset * 4 + r.queue_id) for r in rows)


def test_max_offsets_per_trigger_caps_each_micro_batch_and_available_now_drains_and_stops(
        spark, spark_cluster, topic_name, tmp_path: Path):
    ns = spark_cluster.namesrv_addr
    spark_cluster.create_topic(topic_name, 4)
    produce(ns, topic_name, 20_000, 4)
    cp = str(tmp_path / "cp")

    def run():
        q = (stream(spark, ns, topics=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger="6000")
             .writeStream.format("noop").option("checkpointLocation", cp).trigger(availableNow=True).start())
        assert q.awaitTermination(120), "AvailableNow ends by itself"
        assert q.exception() is None
        return batch_sizes(q)

    assert run() == [6000, 6000, 6000, 2000]
    produce(ns, topic_name, 7_000, 4)
    assert run() == [6000, 1000]  # the next run reads only what arrived since
    assert run() == []


def test_available_now_stops_at_what_was_there_when_it_started_while_messages_keep_arriving(
        spark, spark_cluster, topic_name, tmp_path: Path):
    ns = spark_cluster.namesrv_addr
    spark_cluster.create_topic(topic_name, 2)
    produce(ns, topic_name, 4_000, 2)
    stop, produced = threading.Event(), [4_000]

    def keep_producing() -> None:
        while not stop.is_set():
            produce(ns, topic_name, 100, 2)
            produced[0] += 100
            stop.wait(0.05)

    feeder = threading.Thread(target=keep_producing, daemon=True)
    feeder.start()
    try:
        q = (stream(spark, ns, topics=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger="1000")
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(120), "AvailableNow ends by itself although messages keep arriving"
    finally:
        stop.set()
        feeder.join(10)
    total = sum(batch_sizes(q))
    assert 4_000 <= total < produced[0]
    assert all(size <= 1000 for size in batch_sizes(q))


def test_topic_pattern_reads_every_matching_topic_and_offsets_name_each_queue(
        spark, spark_cluster, topic_name, tmp_path: Path):
    ns = spark_cluster.namesrv_addr
    a, b, other = f"{topic_name}_a", f"{topic_name}_b", f"x{topic_name}"
    for t, n in ((a, 300), (b, 500), (other, 100)):
        spark_cluster.create_topic(t, 2)
        produce(ns, t, n, 2, body=lambda i, t=t: f"{t}-{i}".encode())
    name = f"pattern_{int(time.time() * 1000) % 100000}"
    q = (stream(spark, ns, topicPattern=f"{topic_name}_.*", startingOffsets="earliest")
         .writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    rows = spark.table(name).collect()
    assert sorted((r.topic, bytes(r.value)) for r in rows) == \
        sorted([(a, f"{a}-{i}".encode()) for i in range(300)] + [(b, f"{b}-{i}".encode()) for i in range(500)])
    end = q.lastProgress["sources"][0]["endOffset"]  # the JSON text Spark keeps in the checkpoint
    assert json.loads(end) == {a: {"broker-a:0": 150, "broker-a:1": 150}, b: {"broker-a:0": 250, "broker-a:1": 250}}
    assert end.index(a) < end.index(b)
