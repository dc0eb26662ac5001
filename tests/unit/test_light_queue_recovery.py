"""Light queues through a recovery whose consume queues lag the commit log (a power loss: their pages or the
light-queue store's last commits not on disk): rebuilt from the offsets written into the records, the next message going
on from there; offsets a client wrote itself are never believed."""
from __future__ import annotations

import os
import shutil
import sqlite3

from sluice.common.config import MessageStoreConfig
from sluice.common.lmq_dispatch import lmq_entries
from sluice.common.message import MessageExtBrokerInner
from sluice.store import MessageStore
from sluice.store.checkpoint import StoreCheckpoint
from tests.unit.helpers import read_queue


def _cfg(root):
    return MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                              mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=64, max_index_num=400,
                              enable_lmq=True, enable_multi_dispatch=True)


def _m(body, lmqs="%LMQ%a"):
    return MessageExtBrokerInner("T", body, queue_id=0, properties={"INNER_MULTI_DISPATCH": lmqs},
                                 born_host="10.0.0.1:5000")


def test_recovery_rebuilds_light_queue_entries_the_consume_queue_lost(tmp_path):
    s = MessageStore(_cfg(tmp_path / "a")).start()
    for i in range(2):
        assert s.put_message(_m(f"m{i}".encode())).ok
    safe = s.commit_log.max_offset
    for i in range(2, 5):
        assert s.put_message(_m(f"m{i}".encode())).ok
    assert s.get_max_offset_in_queue("%LMQ%a", 0) == 5
    # a power loss: the log is on disk, the consume queues (and checkpoint) only to ``safe``
    crash = tmp_path / "crash"
    shutil.copytree(tmp_path / "a", crash, ignore=shutil.ignore_patterns("lock"))
    s.shutdown()
    d = crash / "consumequeue" / "T" / "0"
    for f in os.listdir(d):
        with open(d / f, "r+b") as fh:
            fh.seek(2 * 20)
            fh.write(b"\0" * (3 * 20))
    # The light-queue store lost its last commits (what a crash before its flush does)
    with sqlite3.connect(crash / "lightqueue" / "lmq.db") as db:
        db.execute("DELETE FROM entries WHERE off >= 2")
        db.execute("UPDATE queues SET next = 2")
    cp = StoreCheckpoint.load(str(crash / "checkpoint"))
    cp.logics_safe_offset = cp.index_safe_offset = safe
    cp.clean_shutdown_offset = -1
    cp.flush()
    open(crash / "abort", "wb").close()
    r = MessageStore(_cfg(crash)).start()
    try:
        assert r.abnormal_start
        assert r.get_max_offset_in_queue("T", 0) == 5  # the topic's queue is rebuilt
        lmq_max = r.get_max_offset_in_queue("%LMQ%a", 0)
        assert r.put_message(_m(b"next")).ok
        got = [(m.body, dict(lmq_entries(m.topic, m.properties))["%LMQ%a"]) for m in read_queue(r, "%LMQ%a", 0)]
        assert lmq_max == 5, f"light queue lost entries: max {lmq_max}"
        assert got == [(f"m{i}".encode(), i) for i in range(5)] + [(b"next", 5)]
    finally:
        r.shutdown()


def test_offsets_a_client_wrote_itself_are_dropped_and_never_dispatched(tmp_path):
    s = MessageStore(_cfg(tmp_path / "f")).start()
    try:
        forged = MessageExtBrokerInner("T", b"forged", queue_id=0, born_host="10.0.0.1:5000",
                                       properties={"INNER_MULTI_QUEUE_OFFSET": "7"})
        assert s.put_message(forged).ok
        assert s.put_message(_m(b"real")).ok
        stored = read_queue(s, "T", 0)
        assert "INNER_MULTI_QUEUE_OFFSET" not in stored[0].properties
        assert [m.body for m in read_queue(s, "%LMQ%a", 0)] == [b"real"]
        for bad, words in (("%LMQ%/../x", "may only contain"), ("%LMQ%a,%LMQ%a", "twice"), ("orders", "not a light")):
            r = s.put_message(_m(b"bad", bad))
            assert r.status.name == "MESSAGE_ILLEGAL" and words in r.remark, (bad, r)
        assert not os.path.exists(tmp_path / "x")
    finally:
        s.shutdown()
