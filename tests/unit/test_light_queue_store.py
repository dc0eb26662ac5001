"""Light queues share one store: no consume-queue file or object per queue, offsets that go on across restarts,
recovery's cut at the log's end, retention, deletion."""

from __future__ import annotations

import os

from sluice.common.batch_codec import BatchItem, encode_batch, scan_batch_columns
from sluice.common.config import MessageStoreConfig
from sluice.common.message import MessageExtBrokerInner
from sluice.store import MessageStore, RawBatch
from sluice.store.light_queue_store import LightQueueStore
from tests.unit.helpers import read_queue


def _cfg(root) -> MessageStoreConfig:
    return MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=256 * 1024,
                              max_hash_slot_num=64, max_index_num=400, enable_lmq=True, enable_multi_dispatch=True,
                              max_lmq_consume_queue_num=100_000)


def _m(body: bytes, names: list[str]) -> MessageExtBrokerInner:
    return MessageExtBrokerInner("T", body, queue_id=0, properties={"INNER_MULTI_DISPATCH": ",".join(names)},
                                 born_host="10.0.0.1:5000")


def test_thousands_of_light_queues_keep_no_file_or_object_each_and_go_on_after_a_restart(tmp_path) -> None:
    names = [f"%LMQ%q{i}" for i in range(5_000)]
    s = MessageStore(_cfg(tmp_path)).start()
    try:
        for i in range(0, len(names), 250):
            assert s.put_message(_m(b"first", names[i:i + 250])).ok
        assert s.lmq_queue_count() == 5_000
        assert not [k for k in s.consume_queues if k[0].startswith("%LMQ%")]
        assert not os.path.exists(tmp_path / "consumequeue" / "%LMQ%q0")
        # the commit log's next-offset table keeps only what is not dispatched yet
        assert not [k for k in s.commit_log.topic_queue_table if k[0].startswith("%LMQ%")]
        assert s.put_message(_m(b"second", ["%LMQ%q7", "%LMQ%q4999"])).ok
    finally:
        s.shutdown()
    r = MessageStore(_cfg(tmp_path)).start()
    try:
        assert r.lmq_queue_count() == 5_000
        assert r.get_max_offset_in_queue("%LMQ%q7", 0) == 2 and r.get_max_offset_in_queue("%LMQ%q8", 0) == 1
        assert r.put_message(_m(b"third", ["%LMQ%q7"])).ok
        assert [m.body for m in read_queue(r, "%LMQ%q7", 0)] == [b"first", b"second", b"third"]
        assert [m.body for m in read_queue(r, "%LMQ%q4999", 0)] == [b"first", b"second"]
        assert r.light_queue_names("%LMQ%q499") == ["%LMQ%q499", *(f"%LMQ%q499{d}" for d in range(10))]
    finally:
        r.shutdown()


def test_entries_past_the_logs_end_are_cut_and_the_queue_goes_on_from_there(tmp_path) -> None:
    store = LightQueueStore(str(tmp_path)).open()
    try:
        store.put([("%LMQ%a", 0, 100, 50, 0, 1_000), ("%LMQ%a", 1, 150, 50, 0, 1_000),
                   ("%LMQ%b", 0, 150, 50, 0, 1_000), ("%LMQ%a", 2, 200, 50, 0, 1_000)])
        assert store.put([("%LMQ%a", 1, 999, 1, 0, 1_000)]) == {}  # an entry a queue has is kept as it is
        a = store.find("%LMQ%a")
        assert a is not None and a.get_entry(1) == (150, 50, 0)
        assert store.truncate_from(150) == 3
        b = store.find("%LMQ%b")
        assert b is not None
        assert (a.min_offset, a.max_offset, b.min_offset, b.max_offset) == (0, 1, 0, 0)
        assert store.put([("%LMQ%a", 1, 150, 60, 0, 1_000)]) == {"%LMQ%a": 2}
        assert a.get_entries(0, 10).tolist() == [(100, 50, 0), (150, 60, 0)]
        # retention: what is gone from the log leaves the queue; its end stays
        assert store.delete_below(150) == 1
        assert (a.min_offset, a.max_offset) == (1, 2)
        assert store.delete_below(1_000) == 1
        assert (a.min_offset, a.max_offset) == (2, 2)
        assert store.drop(["%LMQ%a", "%LMQ%nope"]) == 1
        assert store.find("%LMQ%a") is None and store.count == 1
    finally:
        store.close()


def test_a_batch_sent_to_a_light_queue_takes_the_offsets_after_its_last_message(tmp_path) -> None:
    s = MessageStore(_cfg(tmp_path)).start()
    try:
        for i in range(3):
            assert s.put_message(MessageExtBrokerInner("%LMQ%x", f"p{i}".encode(), queue_id=0,
                                                       born_host="10.0.0.1:5000")).ok
        data = encode_batch([BatchItem(b"b0", {}, 0), BatchItem(b"b1", {}, 0)])
        assert s.put(RawBatch("%LMQ%x", 0, data, scan_batch_columns(data), 0, 1_700_000_000_000, "10.0.0.1:5000",
                              None, 0, {})).ok
        assert s.put_message(MessageExtBrokerInner("%LMQ%x", b"after", queue_id=0, born_host="10.0.0.1:5000")).ok
        assert [m.body for m in read_queue(s, "%LMQ%x", 0)] == [b"p0", b"p1", b"p2", b"b0", b"b1", b"after"]
    finally:
        s.shutdown()


def test_idle_queues_are_found_by_their_last_store_time_and_an_older_stores_queues_as_not_known(tmp_path) -> None:
    import sqlite3

    root = tmp_path / "lightqueue"
    root.mkdir()
    old = sqlite3.connect(root / "lmq.db")  # (the schema before last store times were kept)
    old.executescript("CREATE TABLE queues (qid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, next INTEGER NOT NULL);"
                      "INSERT INTO queues (name, next) VALUES ('%LMQ%$p$old', 1);")
    old.commit()
    old.close()
    store = LightQueueStore(str(tmp_path)).open()
    try:
        store.put([("%LMQ%$p$a", 0, 100, 50, 0, 1_000), ("%LMQ%$p$a", 1, 150, 50, 0, 5_000),
                   ("%LMQ%$p$b", 0, 200, 50, 0, 2_000), ("%LMQ%$q$c", 0, 250, 50, 0, 10)])
        # (the older queue's parent read from its name)
        assert store.idle("p", 3_000, 10) == [("%LMQ%$p$old", 0), ("%LMQ%$p$b", 2_000)]
        assert store.idle("p", 6_000, 1) == [("%LMQ%$p$old", 0)]
        assert store.idle("q", 6_000, 10) == [("%LMQ%$q$c", 10)]
        store.set_last([("%LMQ%$p$old", 4_000)])
        assert store.idle("p", 6_000, 10) == [("%LMQ%$p$b", 2_000), ("%LMQ%$p$old", 4_000),
                                                     ("%LMQ%$p$a", 5_000)]
        assert store.first_after("%LMQ%$", "%LMQ%$") == "%LMQ%$p$a"
        assert store.first_after("%LMQ%$p%", "%LMQ%$") == "%LMQ%$q$c"
        assert store.first_after("%LMQ%$q%", "%LMQ%$") is None
    finally:
        store.close()
