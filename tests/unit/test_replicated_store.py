"""A slave's store: replicated bytes in any chunks make the master's log and queues; a fresh slave starts at the
master's oldest segment; torn and corrupt records are cut, never served; a restart cut at an offset drops what
lies past it (log, queues, index); a failed dispatch skips nothing."""

from __future__ import annotations

import random

import pytest

from sluice.common.config import MessageStoreConfig
from sluice.common.errors import MessageFormatError
from sluice.store import MessageStore

from .helpers import msg, read_queue

SEG = 64 * 1024


def _cfg(root) -> MessageStoreConfig:
    return MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEG,
                              mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=64, max_index_num=400)


def _master(tmp_path, n: int, seed: int = 1) -> MessageStore:
    m = MessageStore(_cfg(tmp_path / "master")).start()
    rng = random.Random(seed)
    for i in range(n):
        assert m.put_message(msg(body=rng.randbytes(rng.randint(10, 3000)), queue_id=i % 2, keys=f"k{i}")).ok
    return m


def _log_bytes(store: MessageStore, start: int, end: int) -> bytes:
    out = bytearray()
    at = start
    while at < end:
        mf = store.commit_log.queue.find_by_offset(at)
        pos = at - mf.file_from_offset
        take = min(mf.wrote_position - pos, end - at)
        out += mf.buf[pos:pos + take]
        at += take
    return bytes(out)


def _segments(store: MessageStore, start: int, end: int, rng: random.Random):
    """The master's bytes as _chunk cuts them: never across a segment's end, random sizes."""
    at = start
    while at < end:
        mf = store.commit_log.queue.find_by_offset(at)
        pos = at - mf.file_from_offset
        size = min(rng.randint(1, 5000), mf.wrote_position - pos, end - at)
        yield at, bytes(mf.buf[pos:pos + size])
        at += size


def test_random_chunks_across_segments_give_the_same_log_and_queues(tmp_path):
    m = _master(tmp_path, 200)
    s = MessageStore(_cfg(tmp_path / "slave")).start()
    try:
        for off, data in _segments(m, 0, m.commit_log.max_offset, random.Random(3)):
            s.append_replicated(off, data)
        assert s.commit_log.max_offset == m.commit_log.max_offset
        assert _log_bytes(s, 0, s.commit_log.max_offset) == _log_bytes(m, 0, m.commit_log.max_offset)
        for q in (0, 1):
            assert [x.body for x in read_queue(s, "T", q)] == [x.body for x in read_queue(m, "T", q)]
    finally:
        s.shutdown()
        m.shutdown()


def test_fresh_slave_can_start_at_a_master_whose_oldest_segment_is_not_at_zero(tmp_path):
    """HAService._welcome sends a fresh slave (max offset 0) from the master's min offset, and HAClient._welcome
    accepts it for an empty store; but CommitLog.append_replicated refuses any offset != max_offset (0 for an
    empty log): a fresh slave never copies a master whose first segment was deleted (ReplicationGap forever)."""
    m = _master(tmp_path, 200)
    assert len(m.commit_log.queue.files) >= 3
    start = m.commit_log.queue.files[1].file_from_offset  # as if segment 0 had been deleted by retention
    s = MessageStore(_cfg(tmp_path / "slave")).start()
    try:
        for off, data in _segments(m, start, m.commit_log.max_offset, random.Random(5)):
            s.append_replicated(off, data)
        assert s.commit_log.max_offset == m.commit_log.max_offset
    finally:
        s.shutdown()
        m.shutdown()


def test_a_partial_record_at_shutdown_is_gone_after_restart_and_copying_resumes(tmp_path):
    m = _master(tmp_path, 50)
    end = m.commit_log.max_offset
    s = MessageStore(_cfg(tmp_path / "slave")).start()
    chunks = list(_segments(m, 0, end, random.Random(9)))
    cut = len(chunks) // 2
    for off, data in chunks[:cut]:
        s.append_replicated(off, data)
    written = s.commit_log.max_offset
    dispatched = s.dispatched_offset
    s.shutdown()
    s = MessageStore(_cfg(tmp_path / "slave")).start()
    try:
        assert s.commit_log.max_offset == dispatched <= written
        for off, data in _segments(m, s.commit_log.max_offset, end, random.Random(11)):
            s.append_replicated(off, data)
        assert _log_bytes(s, 0, end) == _log_bytes(m, 0, end)
    finally:
        s.shutdown()
        m.shutdown()


def test_a_corrupt_record_cuts_the_log_back_to_its_start(tmp_path):
    m = _master(tmp_path, 30)
    end = m.commit_log.max_offset
    data = bytearray(_log_bytes(m, 0, min(end, SEG - 1)))
    r2 = m.look_message_by_offset(0)
    second = r2.store_size
    data[second + 200] ^= 0xFF  # inside the 2nd record's body: CRC mismatch
    s = MessageStore(_cfg(tmp_path / "slave")).start()
    try:
        with pytest.raises(MessageFormatError):
            s.append_replicated(0, bytes(data))
        assert s.commit_log.max_offset == second
        assert s.dispatched_offset == second
    finally:
        s.shutdown()
        m.shutdown()


def _truncate_case(tmp_path, extra: int) -> None:
    m = _master(tmp_path, 120)
    mf = m.commit_log.queue.files[1]
    rec = m.look_message_by_offset(mf.file_from_offset)
    keep = mf.file_from_offset + rec.store_size
    cut = keep + extra
    before = {q: read_queue(m, "T", q) for q in (0, 1)}
    late = [x for q in (0, 1) for x in before[q] if x.commit_log_offset >= keep]
    m.shutdown()
    m = MessageStore(_cfg(tmp_path / "master")).start(truncate_at=cut)
    try:
        assert m.commit_log.max_offset == keep, "the log must end at a record boundary at or below the cut"
        for q in (0, 1):
            got = read_queue(m, "T", q)
            assert [x.commit_log_offset for x in got] == [x.commit_log_offset for x in before[q]
                                                          if x.commit_log_offset < keep]
        assert late
        for x in late[:10]:
            offs = list(m.index_service.query("T", x.properties["KEYS"], 32, 0, 2**62))
            assert all(o < keep for o in offs), (x.properties["KEYS"], offs)
    finally:
        m.shutdown()


def test_restart_with_truncate_at_a_record_boundary_cuts_log_queues_and_index(tmp_path):
    _truncate_case(tmp_path, 0)


def test_restart_with_truncate_at_mid_record_drops_the_crossing_record(tmp_path):
    """recover(truncate_at) starts its scan at truncate_at when the checkpoint is past it; a cut inside a
    record then leaves the log ending with that record's first bytes (a torn record) instead of dropping it, as
    the docstring promises ("a record that would cross it goes too")."""
    _truncate_case(tmp_path, 10)


def test_a_failed_bulk_dispatch_does_not_skip_records(tmp_path, monkeypatch):
    """(a173302) _reput sets dispatched_offset in its ``finally`` before the bulk dispatch writes the consume
    queue entries: if that write fails (OSError: disk full, a CQ file that cannot be created) the records are
    counted as dispatched and never get queue entries (the HA client reconnects and goes on past them); the
    flush thread also reads dispatched_offset as 'everything below is in the CQ files'."""
    m = _master(tmp_path, 40)
    end = m.commit_log.max_offset
    s = MessageStore(_cfg(tmp_path / "slave")).start()
    chunks = list(_segments(m, 0, end, random.Random(2)))
    real = s.dispatcher._dispatch_requests
    calls = {"n": 0}

    def flaky(reqs):
        if reqs:
            calls["n"] += 1
            if calls["n"] == 3:
                raise OSError("no space left on device")
        return real(reqs)

    monkeypatch.setattr(s.dispatcher, "_dispatch_requests", flaky)
    try:
        for off, data in chunks:
            try:
                s.append_replicated(off, data)
            except OSError:
                pass  # HAClient: logged, reconnect, the master goes on from this log's end
        got = sorted(x.commit_log_offset for q in (0, 1) for x in read_queue(s, "T", q))
        want = sorted(x.commit_log_offset for q in (0, 1) for x in read_queue(m, "T", q))
        assert got == want, f"{len(want) - len(got)} replicated messages have no consume queue entry"
    finally:
        s.shutdown()
        m.shutdown()
