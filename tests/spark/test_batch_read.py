"""Batch reads (spark.read) between offsets or store timestamps return exactly the messages in range."""

from __future__ import annotations

import json
import time

import pytest

from tests.spark.helpers import produce, read_all

pytestmark = pytest.mark.spark


def read(spark, namesrv: str, topic: str, **options: str) -> list:
    reader = spark.read.format("sluice").option("namesrv", namesrv).option("topics", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().collect()


def test_batch_read_by_offsets_returns_exactly_the_messages_in_range(spark, spark_cluster, topic_name):
    ns, n = spark_cluster.namesrv_addr, 4_000
    spark_cluster.create_topic(topic_name, 4)
    produce(ns, topic_name, n, 4, body=lambda i: b"%d" % i, tags="paid", keys=["k-a", "k-b"],
            properties={"region": "eu"})
    starting = json.dumps({topic_name: {"broker-a:0": 100, "1": 200}})
    ending = json.dumps({topic_name: {"broker-a:0": 300, "broker-a:2": 50}})
    rows = read(spark, ns, topic_name, startingOffsets=starting, endingOffsets=ending, includeProperties="true",
                minPartitions="7")
    expected = {(0, o) for o in range(100, 300)} | {(1, o) for o in range(200, 1000)} | \
        {(2, o) for o in range(0, 50)} | {(3, o) for o in range(0, 1000)}
    assert len(rows) == len(expected)
    assert {(r.queue_id, r.queue_offset) for r in rows} == expected
    for r in rows:
        assert bytes(r.value) == b"%d" % (r.queue_offset * 4 + r.queue_id)
        assert (r.topic, r.broker, r.tags, r.keys, r.properties) == (topic_name, "broker-a", "paid", "k-a k-b",
                                                                      {"region": "eu"})
        assert len(r.msg_id) == 32 and r.store_timestamp >= r.born_timestamp

    everything = read(spark, ns, topic_name)  # earliest .. latest
    assert len(everything) == n and "properties" not in everything[0].asDict()


def test_batch_read_by_timestamps_returns_exactly_the_messages_stored_in_range(spark, spark_cluster, topic_name):
    ns = spark_cluster.namesrv_addr
    spark_cluster.create_topic(topic_name, 4)
    for wave in range(3):
        produce(ns, topic_name, 1_000, 4, body=lambda i, w=wave: b"%d-%d" % (w, i), batch=50)
        time.sleep(0.05)  # (the waves' store times apart: the timestamp range below splits them)
    msgs = read_all(ns, topic_name, 3_000)
    assert len(msgs) == 3_000
    stamps = sorted({m.store_timestamp for m in msgs})
    start_ts, end_ts = stamps[len(stamps) // 3], stamps[2 * len(stamps) // 3]
    expected = {(m.queue_id, m.queue_offset) for m in msgs if start_ts <= m.store_timestamp < end_ts}
    assert 0 < len(expected) < 3_000

    rows = read(spark, ns, topic_name, startingTimestamp=str(start_ts), endingTimestamp=str(end_ts))
    assert len(rows) == len(expected)
    assert {(r.queue_id, r.queue_offset) for r in rows} == expected
