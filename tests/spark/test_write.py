"""Writes: batch and streaming sinks produce every row as a message with a deterministic write key."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from sluice.spark.arrow_codec import WRITE_KEY_PROPERTY
from tests.spark.helpers import produce, read_all

pytestmark = pytest.mark.spark


def test_writing_50000_rows_and_reading_them_back_with_the_sluice_client_gives_the_same_rows(
        spark, spark_cluster, topic_name):
    ns, n = spark_cluster.namesrv_addr, 50_000
    spark_cluster.create_topic(topic_name, 4)
    df = spark.range(n, numPartitions=3).selectExpr(
        "concat('row-', cast(id as string)) as value", "concat('k', cast(id as string), ' all') as keys",
        "if(id % 2 = 0, 'even', 'odd') as tags", "map('n', cast(id as string)) as properties")
    df.write.format("sluice").option("namesrv", ns).option("topic", topic_name).option("sinkId", "roundtrip") \
        .option("sendBatchSize", "700").mode("append").save()

    msgs = read_all(ns, topic_name, n)
    assert len(msgs) == n
    got = sorted((m.body, " ".join(m.keys), m.tags, m.properties["n"]) for m in msgs)
    want = sorted((f"row-{i}".encode(), f"k{i} all", "even" if i % 2 == 0 else "odd", str(i)) for i in range(n))
    assert got == want
    assert {m.queue_id for m in msgs} == {0, 1, 2, 3}
    keys = [m.properties[WRITE_KEY_PROPERTY] for m in msgs]
    assert len(set(keys)) == n
    assert all(re.fullmatch(r"roundtrip:0:[0-2]:\d+", k) for k in keys)
    by_partition = Counter(k.split(":")[2] for k in keys)
    for part, count in by_partition.items():
        seqs = sorted(int(k.split(":")[3]) for k in keys if k.split(":")[2] == part)
        assert seqs == list(range(count)), "sequence numbers count each task's rows from 0"


def test_streaming_write_keys_messages_by_query_batch_partition_and_sequence(
        spark, spark_cluster, topic_name, tmp_path: Path):
    ns = spark_cluster.namesrv_addr
    source, target = f"{topic_name}_in", f"{topic_name}_out"
    spark_cluster.create_topic(source, 2)
    spark_cluster.create_topic(target, 2)
    produce(ns, source, 3_000, 2, body=lambda i: b"e-%d" % i, tags="t")
    q = (spark.readStream.format("sluice").option("namesrv", ns).option("topics", source)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000").load()
         .selectExpr("value", "tags", "topic as keys")
         .writeStream.format("sluice").option("namesrv", ns).option("topic", target)
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert q.awaitTermination(120) and q.exception() is None

    msgs = read_all(ns, target, 3_000)
    assert sorted(m.body for m in msgs) == sorted(b"e-%d" % i for i in range(3_000))
    assert all(m.tags == "t" and m.keys == [source] for m in msgs)
    keys = [m.properties[WRITE_KEY_PROPERTY].split(":") for m in msgs]
    assert len({tuple(k) for k in keys}) == 3_000
    assert {k[0] for k in keys} == {q.id}
    assert {k[1] for k in keys} == {"0", "1", "2"}
