"""CommitLog segments roll over without ever splitting a record; offsets and bytes are exact."""

from __future__ import annotations

import os
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.common.message_codec import check_record, decode_record, encode_record
from sluice.common.properties import encode_properties
from sluice.common.sysflag import BLANK_MAGIC_CODE
from sluice.store import MessageStore, PutMessageStatus
from sluice.store.commit_log import DispatchRequest, dispatch_request_of, tags_code_of

from .helpers import msg, read_queue


def test_records_never_straddle_segments(store: MessageStore):
    rng = random.Random(7)
    bodies = [rng.randbytes(rng.randint(0, 6000)) for _ in range(400)]
    results = [store.put_message(msg(body=b, queue_id=i % 3)) for i, b in enumerate(bodies)]
    assert all(r.ok for r in results)
    files = store.commit_log.queue.files
    assert len(files) > 5
    size = store.config.mapped_file_size_commit_log
    seen = 0
    for mf in files:
        assert os.path.basename(mf.path) == f"{mf.file_from_offset:020d}"
        pos = 0
        while True:
            n = check_record(mf.buf, pos, size)
            if n == 0:
                assert mf is files[-1]
                break
            if n < 0:
                total, magic = struct.unpack_from(">ii", mf.buf, pos)
                assert magic == BLANK_MAGIC_CODE and pos + total == size
                break
            assert pos + n <= size
            m = decode_record(mf.buf, pos)
            assert m.commit_log_offset == mf.file_from_offset + pos
            seen += 1
            pos += n
    assert seen == len(bodies)
    got = sorted((m for q in range(3) for m in read_queue(store, "T", q)), key=lambda m: m.commit_log_offset)
    assert [m.body for m in got] == bodies


def test_put_result_reports_offsets_and_size(store: MessageStore):
    r1 = store.put_message(msg(body=b"a" * 10))
    r2 = store.put_message(msg(body=b"b" * 20))
    assert r1.wrote_offset == 0 and r1.wrote_bytes == 91 + 10 + 1 + 0
    assert r2.wrote_offset == r1.wrote_bytes and r2.queue_offset == 1
    assert r2.store_timestamp >= r1.store_timestamp > 0
    m = store.look_message_by_offset(r2.wrote_offset)
    assert m is not None and m.body == b"b" * 20 and m.queue_offset == 1 and m.born_host == "10.0.0.1:5000"
    assert m.store_host == store.config.store_host


def test_batch_is_one_append_with_consecutive_queue_offsets(store: MessageStore):
    store.put_message(msg(queue_id=2))
    r = store.put([msg(body=f"m{i}".encode(), queue_id=2, tags="t") for i in range(32)])
    assert r.ok and r.msg_num == 32 and r.queue_offset == 1
    assert r.phys_offsets[0] == r.wrote_offset and len(r.phys_offsets) == 32
    got = read_queue(store, "T", 2)
    assert [m.queue_offset for m in got] == list(range(33))
    assert [m.body for m in got[1:]] == [f"m{i}".encode() for i in range(32)]


def test_batch_larger_than_a_segment_is_refused(store: MessageStore):
    r = store.put([msg(body=b"x" * 40_000), msg(body=b"y" * 40_000)])
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "segment" in r.remark
    assert store.get_max_phy_offset() == 0


def test_select_by_offset_rejects_non_record_offsets(store: MessageStore):
    r = store.put_message(msg(body=b"abc"))
    assert store.look_message_by_offset(r.wrote_offset + 3) is None
    assert store.look_message_by_offset(10**9) is None


def _stored_records(store: MessageStore) -> list[tuple]:
    """Every record in the commit log, CRC-checked, as (offset, queue, queue offset, body, properties)."""
    out = []
    for phys, view in store.commit_log.scan(store.commit_log.min_offset, check_crc=True):
        m = decode_record(view)
        out.append((phys, m.queue_id, m.queue_offset, m.body, m.properties))
    assert store.commit_log.scan_error is None
    return out


@pytest.mark.parametrize("pwrite_min", [-1, 0, 4096])
def test_appends_through_pwrite_or_the_mapping_store_the_same_records(store_config, pwrite_min):
    """Commit-log appends go through pwrite() from ``commit_log_pwrite_min_bytes`` up: what a reader sees
    through the mapping at once, and what recovery finds after a restart, is the same either way."""
    rng = random.Random(11)
    bodies = [rng.randbytes(rng.choice([0, 10, 3000, 5000, 9000])) for _ in range(120)]
    cfg = store_config.replace(commit_log_pwrite_min_bytes=pwrite_min)
    with MessageStore(cfg) as s:
        for i, b in enumerate(bodies):
            r = s.put_message(msg(body=b, queue_id=i % 2, tags=f"t{i % 3}"))
            assert r.ok
            got = s.commit_log.get_data(r.wrote_offset, r.wrote_bytes)  # readable through the mapping now
            assert got is not None and decode_record(got).body == b
        before = _stored_records(s)
        assert [rec[3] for rec in before] == bodies
        assert all(mf.pwrite_min == pwrite_min for mf in s.commit_log.queue.files)
    with MessageStore(cfg) as again:
        assert _stored_records(again) == before
        assert [m.body for m in read_queue(again, "T", 0)] == bodies[0::2]


def test_pwrite_threshold_below_minus_one_is_refused(store_config):
    with pytest.raises(ValueError, match="commit_log_pwrite_min_bytes: an integer of at least -1 is allowed"):
        MessageStore(store_config.replace(commit_log_pwrite_min_bytes=-2))


@pytest.mark.parametrize("written", [0, 700])
def test_a_failed_pwrite_refuses_the_put_and_leaves_no_trace(store_config, monkeypatch, written):
    """A full or failing disk: the send is refused, the queue's next offset is not used up, and no part of
    the refused records comes back after a restart."""
    from sluice.store import mapped_file as mapped_file_module

    real_pwrite = os.pwrite
    segments: set[int] = set()

    def failing(fd, data, pos):
        if fd not in segments:  # only the commit log's appends fail (not the checkpoint's or the fills')
            return real_pwrite(fd, data, pos)
        if not written:
            raise OSError(28, "No space left on device")
        return real_pwrite(fd, bytes(data)[:written], pos)

    cfg = store_config.replace(commit_log_pwrite_min_bytes=1024)
    with MessageStore(cfg) as s:
        assert s.put_message(msg(body=b"before")).ok
        segments.update(mf._fd for mf in s.commit_log.queue.files)
        monkeypatch.setattr(mapped_file_module.os, "pwrite", failing)
        refused = s.put([msg(body=b"a" * 300), msg(body=b"b" * 300), msg(body=b"c" * 600)])
        monkeypatch.undo()
        if written:  # a short write: the disk is failing
            assert refused.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
        else:  # ENOSPC: refused as a full disk, and so are the next ones until there is room again
            assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk is full" in refused.remark
            assert s.put_message(msg(body=b"during")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            s.check_disk_space()  # the clean service's round: this disk has room
            assert not s.no_space
        after = s.put_message(msg(body=b"after"))
        assert after.ok and after.queue_offset == 1  # no gap
        assert [m.body for m in read_queue(s, "T", 0)] == [b"before", b"after"]
    with MessageStore(cfg) as again:
        assert [m.body for m in read_queue(again, "T", 0)] == [b"before", b"after"]
        assert [rec[3] for rec in _stored_records(again)] == [b"before", b"after"]


@settings(max_examples=150, deadline=None)
@given(topic=st.from_regex(r"[A-Za-z0-9_%|-]{1,40}", fullmatch=True),
       props=st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "TAGSX", "XKEYS", "WAIT"]),
                             st.text(st.characters(blacklist_characters="\x00\x01\x02",
                                                   blacklist_categories=("Cs",)), max_size=12), max_size=6),
       queue_id=st.integers(0, 255), queue_offset=st.integers(0, 2**40), sys_flag=st.sampled_from([0, 4, 8, 12]),
       store_ts=st.integers(0, 2**42), body=st.binary(max_size=64))
def test_recovery_dispatch_request_reads_what_decoding_the_record_reads(topic, props, queue_id, queue_offset,
                                                                         sys_flag, store_ts, body):
    raw = encode_record(topic=topic.encode(), body=body, properties=encode_properties(props), queue_id=queue_id,
                        queue_offset=queue_offset, sys_flag=sys_flag, store_timestamp=store_ts)
    m = decode_record(raw)
    d = dispatch_request_of(7_000, memoryview(raw))
    assert d == DispatchRequest(m.topic, m.queue_id, 7_000, m.store_size, tags_code_of(m.tags), m.store_timestamp,
                                m.queue_offset, m.properties.get("KEYS"), m.uniq_key, m.sys_flag)
