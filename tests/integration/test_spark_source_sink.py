"""The Spark source's planning and reading and the sink's writing, without Spark, against a real broker."""

from __future__ import annotations

import time

import pytest

pa = pytest.importorskip("pyarrow", reason="needs the sluice-mq[spark] extra")

from sluice import Message, Producer, PullConsumer  # noqa: E402
from sluice.common.structs import MessageQueue  # noqa: E402
from sluice.spark.arrow_codec import WRITE_KEY_PROPERTY  # noqa: E402
from sluice.spark.offsets import OffsetRange, QueueRef  # noqa: E402
from sluice.spark.options import OptionError, parse_sink_options, parse_source_options  # noqa: E402
from sluice.spark.queue_client import QueueClient  # noqa: E402
from sluice.spark.sink import write_batches  # noqa: E402
from sluice.spark.source import DataLossError, SourcePlanner, read_range  # noqa: E402
from tests.integration.helpers import wait_until  # noqa: E402


def produce(namesrv: str, topic: str, per_queue: dict[int, int], size: int = 20, batch: int = 200) -> None:
    with Producer("spark-plain-pg", namesrv=namesrv) as producer:
        for q, n in per_queue.items():
            for i in range(0, n, batch):
                msgs = [Message(topic, b"%d-%d-" % (q, j) + b"." * size) for j in range(i, min(n, i + batch))]
                producer.send_batch(msgs, queue=MessageQueue(topic, "broker-a", q))


def source(namesrv: str, topic: str, streaming: bool = True, **options: str):
    return parse_source_options({"namesrv": namesrv, "topics": topic, **options}, streaming=streaming)


def test_a_range_is_read_in_order_across_many_pulls_in_arrow_batches(cluster):
    cluster.create_topic("plain-read", 1)
    produce(cluster.namesrv_addr, "plain-read", {0: 3_000})
    opts = source(cluster.namesrv_addr, "plain-read", pullBatchSize="500", arrowBatchRows="700")
    batches = list(read_range(opts, OffsetRange("plain-read", "broker-a", 0, 100, 2_900)))
    assert len(batches) > 2
    offsets = [o for b in batches for o in b.column("queue_offset").to_pylist()]
    assert offsets == list(range(100, 2_900))
    values = [v for b in batches for v in b.column("value").to_pylist()]
    assert values[0].startswith(b"0-100-") and values[-1].startswith(b"0-2899-")


def test_planner_starts_caps_and_picks_up_new_queues(cluster):
    cluster.create_topic("plain-plan", 2)
    produce(cluster.namesrv_addr, "plain-plan", {0: 300, 1: 100})
    a0, a1 = QueueRef("plain-plan", "broker-a", 0), QueueRef("plain-plan", "broker-a", 1)
    planner = SourcePlanner(source(cluster.namesrv_addr, "plain-plan", startingOffsets="earliest"))
    try:
        start = planner.initial_offsets()
        assert start == {a0: 0, a1: 0}
        end = planner.latest_offsets(start, max_rows=200)
        assert end == {a0: 150, a1: 50}
        assert [(r.queue_id, r.start, r.end) for r in planner.plan(start, end)] == [(0, 0, 150), (1, 0, 50)]
        assert planner.latest_offsets(start, None) == {a0: 300, a1: 100}
        # a queue missing from a checkpointed start (topic grew) starts at its min offset
        assert planner.latest_offsets({a0: 300}, None) == {a0: 300, a1: 100}
        planner.prepare_available_now()
        produce(cluster.namesrv_addr, "plain-plan", {0: 50})
        assert planner.latest_offsets({a0: 300, a1: 100}, None) == {a0: 300, a1: 100}, "AvailableNow is frozen"
    finally:
        planner.close()


def test_topic_pattern_matches_data_topics_only(cluster):
    for t in ("pat-a", "pat-b", "other"):
        cluster.create_topic(t, 1)
    client = QueueClient(cluster.namesrv_addr)
    try:
        assert {r.topic for r in client.queues(pattern="pat-.*")} == {"pat-a", "pat-b"}
        assert {r.topic for r in client.queues(pattern=".*")} == {"pat-a", "pat-b", "other"}  # no TBW102, broker-a...
    finally:
        client.close()


def test_unknown_topic_or_unreachable_name_server_is_refused_naming_the_option(cluster):
    planner = SourcePlanner(source(cluster.namesrv_addr, "plain-no-such-topic"))
    try:
        with pytest.raises(OptionError, match="option 'topics': topic 'plain-no-such-topic' does not exist"):
            planner.initial_offsets()
    finally:
        planner.close()
    planner = SourcePlanner(source("127.0.0.1:1", "plain-topic", requestTimeoutMs="1000"))
    try:
        with pytest.raises(OptionError, match="option 'namesrv': cannot reach the name server at 127.0.0.1:1"):
            planner.initial_offsets()
    finally:
        planner.close()


def test_expired_offsets_fail_the_read_or_are_skipped(empty_cluster):
    empty_cluster.start_broker(store_mapped_file_size_commit_log=64 * 1024,
                               store_mapped_file_size_consume_queue=20 * 100)
    ns = empty_cluster.namesrv_addr
    empty_cluster.create_topic("plain-loss", 1)
    produce(ns, "plain-loss", {0: 600}, size=1000, batch=40)
    store = empty_cluster.brokers[0].store
    while store.clean_expired_files(now=time.time() + 73 * 3600):
        pass
    low = store.get_min_offset_in_queue("plain-loss", 0)
    assert 0 < low < 600
    r = OffsetRange("plain-loss", "broker-a", 0, 0, 600)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        list(read_range(source(ns, "plain-loss"), r))
    batches = list(read_range(source(ns, "plain-loss", failOnDataLoss="false"), r))
    assert [o for b in batches for o in b.column("queue_offset").to_pylist()] == list(range(low, 600))
    planner = SourcePlanner(source(ns, "plain-loss"))
    try:
        with pytest.raises(DataLossError, match=f"offset 0 is below the queue's min offset {low}"):
            planner.plan({QueueRef("plain-loss", "broker-a", 0): 0}, {QueueRef("plain-loss", "broker-a", 0): 600})
    finally:
        planner.close()


def test_written_rows_are_acknowledged_messages_with_their_write_keys(cluster):
    cluster.create_topic("plain-write", 4)
    opts = parse_sink_options({"namesrv": cluster.namesrv_addr, "topic": "plain-write", "sendBatchSize": "300"},
                              streaming=False)
    batches = [pa.RecordBatch.from_pydict({"value": [b"w-%d" % (i + 1000 * k) for i in range(1000)],
                                           "tags": ["t"] * 1000}) for k in range(3)]
    summary = write_batches(opts, batches, "sink-1:5:2")
    assert (summary.rows, summary.sends) == (3000, 12)
    consumer = PullConsumer("plain-write-reader", namesrv=cluster.namesrv_addr, auto_commit=False)
    consumer.start()
    try:
        consumer.assign(consumer.fetch_queues("plain-write"))
        for mq in consumer.assignment():
            consumer.seek(mq, 0)
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 3000 and time.monotonic() < deadline:
            got.extend(consumer.poll(0.5))
    finally:
        consumer.shutdown()
    assert sorted(m.body for m in got) == sorted(b"w-%d" % i for i in range(3000))
    keys = {m.body: m.properties[WRITE_KEY_PROPERTY] for m in got}
    assert keys[b"w-0"] == "sink-1:5:2:0" and keys[b"w-2999"] == "sink-1:5:2:2999"
    assert all(m.tags == "t" for m in got)


def test_committed_offsets_are_reported_as_the_consumer_groups_progress_when_asked(cluster):
    cluster.create_topic("plain-progress", 2)
    produce(cluster.namesrv_addr, "plain-progress", {0: 30, 1: 20})
    a0, a1 = QueueRef("plain-progress", "broker-a", 0), QueueRef("plain-progress", "broker-a", 1)
    silent = SourcePlanner(source(cluster.namesrv_addr, "plain-progress"))
    planner = SourcePlanner(source(cluster.namesrv_addr, "plain-progress", consumerGroup="spark-progress"))
    try:
        silent.commit({a0: 30, a1: 20})  # no consumerGroup option: nothing is written
        planner.commit({a0: 30, a1: 20})
        api = planner.client.instance.api
        addr = cluster.brokers[0].broker_addr

        def committed(group: str, q: int) -> int:
            mq = MessageQueue("plain-progress", "broker-a", q)
            return planner.client.run(api.query_consumer_offset(addr, group, mq, zero_if_not_found=False))

        wait_until(lambda: committed("spark-progress", 0) == 30 and committed("spark-progress", 1) == 20, 10,
                   "the reported offsets")
        assert committed("SLUICE_SPARK", 0) == -1
    finally:
        planner.close()
        silent.close()
