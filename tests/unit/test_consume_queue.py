"""ConsumeQueue reads: statuses, file boundaries, tag filters, offset by time, restart."""

from __future__ import annotations

import time

from sluice.common.config import MessageStoreConfig
from sluice.common.hashing import tag_hash_code
from sluice.common.message_codec import decode_records
from sluice.store import GetMessageStatus, MessageStore
from sluice.store.message_reader import BULK_READ_MIN_ENTRIES

from .helpers import msg, read_queue


def test_reads_cross_consume_queue_file_boundaries(store: MessageStore):
    # 100 entries per file: 350 messages make four files.
    for i in range(350):
        assert store.put_message(msg(body=f"{i}".encode())).ok
    cq = store.consume_queues[("T", 0)]
    assert len(cq.queue.files) == 4
    assert [m.body for m in read_queue(store, "T", 0)] == [f"{i}".encode() for i in range(350)]
    r = store.get_messages("g", "T", 0, 90, 32)
    assert r.status is GetMessageStatus.FOUND
    assert r.queue_offsets == list(range(90, 100)) and r.next_begin_offset == 100
    r = store.get_messages("g", "T", 0, 100, 32)
    assert r.queue_offsets[0] == 100 and r.message_count == 32
    assert store.get_commit_log_offset_in_queue("T", 0, 250) == store.consume_queues[("T", 0)].get_entry(250)[0]


def test_statuses_at_the_edges(store: MessageStore):
    assert store.get_messages("g", "none", 0, 0, 32).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    for _ in range(5):
        store.put_message(msg())
    r = store.get_messages("g", "T", 0, 5, 32)
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and r.next_begin_offset == 5
    r = store.get_messages("g", "T", 0, 9, 32)
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 0
    r = store.get_messages("g", "T", 0, 0, 3)
    assert r.status is GetMessageStatus.FOUND and r.next_begin_offset == 3 and (r.min_offset, r.max_offset) == (0, 5)


def test_tag_filter_skips_other_tags(store: MessageStore):
    tags = ["a", "b", "c"]
    for i in range(90):
        store.put_message(msg(body=str(i).encode(), tags=tags[i % 3]))
    r = store.get_messages("g", "T", 0, 0, 32, {tag_hash_code("b")})
    got = decode_records(b"".join(r.buffers))
    assert r.status is GetMessageStatus.FOUND
    assert [m.body for m in got] == [str(i).encode() for i in range(1, 90, 3)]
    assert r.queue_offsets == list(range(1, 90, 3))
    r = store.get_messages("g", "T", 0, 0, 5, {tag_hash_code("a"), tag_hash_code("c")})
    assert r.queue_offsets == [0, 2, 3, 5, 6] and r.next_begin_offset == 7
    r = store.get_messages("g", "T", 0, 0, 32, {tag_hash_code("zzz")})
    assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == 90
    r = store.get_messages("g", "T", 0, 0, 32, frozenset())  # an empty set selects nothing, None everything
    assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == 90
    assert store.get_messages("g", "T", 0, 0, 32, None).queue_offsets == list(range(32))


def test_transfer_limits_bound_a_pull(store_config: MessageStoreConfig):
    with MessageStore(store_config.replace(max_transfer_bytes_on_message_in_memory=1000)) as store:
        for _ in range(10):
            store.put_message(msg(body=b"x" * 300))
        r = store.get_messages("g", "T", 0, 0, 32)
        assert r.message_count == 2 and r.next_begin_offset == 2  # 392-byte records: two fit in 1000
        big = store.put_message(msg(queue_id=1, body=b"y" * 5000))
        assert big.ok
        assert store.get_messages("g", "T", 1, 0, 32).message_count == 1  # the first always goes


def test_offset_by_time_finds_first_message_at_or_after(store: MessageStore):
    stamps = []
    for i in range(40):
        stamps.append(store.put_message(msg(body=str(i).encode())).store_timestamp)
        if i % 10 == 9:
            time.sleep(0.02)
    for i in (0, 10, 20, 30):
        assert store.get_offset_in_queue_by_time("T", 0, stamps[i]) == stamps.index(stamps[i])
    assert store.get_offset_in_queue_by_time("T", 0, 0) == 0
    assert store.get_offset_in_queue_by_time("T", 0, stamps[-1] + 1) == 40
    assert store.get_earliest_message_time("T", 0) == stamps[0]
    assert store.get_message_store_timestamp("T", 0, 39) == stamps[39]


def test_clean_restart_keeps_queues_and_offsets(store_config: MessageStoreConfig):
    with MessageStore(store_config) as s:
        for i in range(150):
            s.put_message(msg(body=str(i).encode(), queue_id=i % 2))
        s.consumer_offsets.commit_offset("g1", "T", 0, 42)
    with MessageStore(store_config) as s:
        assert not s.abnormal_start
        assert s.get_max_offset_in_queue("T", 0) == 75 and s.get_max_offset_in_queue("T", 1) == 75
        assert s.consumer_offsets.query_offset("g1", "T", 0) == 42
        assert s.consumer_offsets.query_offset("g1", "T", 1) == -1
        r = s.put_message(msg(body=b"next", queue_id=1))
        assert r.queue_offset == 75
        assert [m.body for m in read_queue(s, "T", 1)][-2:] == [b"149", b"next"]


def test_deleted_topic_loses_its_queues(store: MessageStore):
    store.put_message(msg(topic="gone"))
    store.put_message(msg(topic="kept"))
    assert store.delete_topics({"gone"}) == 1
    assert store.get_messages("g", "gone", 0, 0, 32).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.get_max_offset_in_queue("kept", 0) == 1
    assert store.put_message(msg(topic="gone")).queue_offset == 0


def test_a_large_pull_serves_records_lying_end_to_end_as_one_view(tmp_path):
    with MessageStore(store_path_root_dir=str(tmp_path), max_transfer_count_on_message_in_memory=1000) as store:
        n = BULK_READ_MIN_ENTRIES
        assert store.put([msg(body=f"a{i}".encode()) for i in range(n)]).ok  # queue 0: 0..n-1
        assert store.put_message(msg(body=b"other", queue_id=1)).ok
        assert store.put([msg(body=f"a{i}".encode()) for i in range(n, 2 * n)]).ok  # queue 0: n..2n-1
        r = store.get_messages("g", "T", 0, 2, 1000)
        assert r.status is GetMessageStatus.FOUND and r.message_count == 2 * n - 2 and r.next_begin_offset == 2 * n
        assert len(r.buffers) == 2  # offsets 2..n-1, then n..2n-1 after queue 1's record
        got = decode_records(b"".join(r.buffers))
        assert [m.body for m in got] == [f"a{i}".encode() for i in range(2, 2 * n)]
        assert [m.queue_offset for m in got] == r.queue_offsets == list(range(2, 2 * n))
        assert r.buffer_total_size == sum(len(b) for b in r.buffers)
        small = store.get_messages("g", "T", 0, 2, 32)
        assert small.queue_offsets == list(range(2, 34)) and b"".join(small.buffers) == b"".join(r.buffers)[
            :small.buffer_total_size]
