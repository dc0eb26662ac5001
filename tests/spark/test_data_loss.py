"""failOnDataLoss: when retention expired messages below a checkpointed offset, fail (true) or skip (false)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.spark.helpers import produce

pytestmark = pytest.mark.spark


def expire_old_segments(cluster) -> None:
    """Run the broker's retention as if 73 hours had passed: every commit-log segment but the last goes."""
    store = cluster.brokers[0].store
    while store.clean_expired_files(now=time.time() + 73 * 3600):
        pass


def test_expired_checkpointed_offset_fails_the_query_unless_fail_on_data_loss_is_false(
        spark, small_segment_cluster, topic_name, tmp_path: Path):
    cluster = small_segment_cluster
    ns = cluster.namesrv_addr
    cluster.create_topic(topic_name, 1)
    body = lambda i: b"%06d" % i + b"." * 1000  # noqa: E731
    produce(ns, topic_name, 300, 1, body=body, batch=50)
    out, cp = str(tmp_path / "out"), str(tmp_path / "cp")

    def run(fail_on_data_loss: str):
        return (spark.readStream.format("sluice").option("namesrv", ns).option("topics", topic_name)
                .option("startingOffsets", "earliest").option("failOnDataLoss", fail_on_data_loss).load()
                .select("queue_offset", "value").writeStream.format("parquet").option("path", out)
                .option("checkpointLocation", cp).trigger(availableNow=True).start())

    first = run("true")
    assert first.awaitTermination(120) and first.exception() is None  # checkpoint now at offset 300

    produce(ns, topic_name, 600, 1, body=lambda i: body(300 + i), batch=50)
    expire_old_segments(cluster)
    min_offset = cluster.brokers[0].store.get_min_offset_in_queue(topic_name, 0)
    assert 300 < min_offset < 900, "retention moved the queue's min offset past the checkpoint"

    failing = run("true")
    with pytest.raises(Exception, match="failOnDataLoss") as err:
        failing.awaitTermination(120)
    assert "below the queue's min offset" in str(err.value)

    skipping = run("false")
    assert skipping.awaitTermination(120) and skipping.exception() is None
    offsets = sorted(r.queue_offset for r in spark.read.parquet(out).collect())
    assert offsets == list(range(300)) + list(range(min_offset, 900))
