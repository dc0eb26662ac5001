"""IndexFile: query by key and time range, across slot collisions and several index files."""

from __future__ import annotations

import os
import tempfile
import time
from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.common.hashing import index_key_hashes
from sluice.store import MessageStore, index_file
from sluice.store.index_file import INDEX_HEADER, IndexFile, index_file_size

from .helpers import msg


def test_query_by_key_finds_every_match_newest_first(store: MessageStore):
    # 64 slots, 400 entries per file, two keys per message: collisions and three index files.
    for i in range(500):
        store.put_message(msg(body=str(i).encode(), keys=f"order-{i % 50} extra-{i}", uniq=f"U{i:06d}"))
    assert len(store.index_service.files) >= 3
    found = store.query_message("T", "order-7", max_num=64)
    assert [m.body for m in found.messages] == [str(i).encode() for i in range(457, -1, -50)]
    assert store.query_message("T", "extra-123").messages[0].body == b"123"
    assert store.query_message("T", "U000321").messages[0].body == b"321"
    assert store.query_message("T", "absent").messages == []
    assert store.query_message("other", "order-7").messages == []


def test_query_limit_caps_results(store: MessageStore):
    for i in range(40):
        store.put_message(msg(body=str(i).encode(), keys="same"))
    assert len(store.query_message("T", "same", max_num=5).messages) == 5
    assert len(store.query_message("T", "same", max_num=1000).messages) == 40


def test_query_honours_time_range(store: MessageStore):
    first = [store.put_message(msg(body=b"old", keys="k")) for _ in range(3)]
    time.sleep(2.1)  # index entries keep seconds since the file began
    later = [store.put_message(msg(body=b"new", keys="k")) for _ in range(2)]
    t_split = later[0].store_timestamp
    assert [m.body for m in store.query_message("T", "k", begin=t_split).messages] == [b"new", b"new"]
    old = store.query_message("T", "k", begin=0, end=first[-1].store_timestamp)
    assert [m.body for m in old.messages] == [b"old"] * 3


def test_index_file_header_layout(tmp_path):
    f = IndexFile(str(tmp_path / "20260101000000000"), 8, 16)
    assert f.mf.file_size == index_file_size(8, 16) == 40 + 8 * 4 + 16 * 20
    for i in range(15):
        assert f.put_key(f"T#k{i}", 1000 + i, 5_000 + i * 1000)
    assert not f.put_key("T#full", 2000, 99_999)  # entry number 0 is never used: 15 fit in 16
    f.flush()  # the header is written at flush
    begin_ts, end_ts, begin_phy, end_phy, slots_used, count = INDEX_HEADER.unpack_from(f.mf.buf, 0)
    assert (begin_ts, end_ts, begin_phy, end_phy, count) == (5000, 19_000, 1000, 1014, 16)
    assert 1 <= slots_used <= 8
    out: list[int] = []
    f.select("T#k3", 0, 10**12, 10, out)
    assert out == [1003]
    f.close()


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=12), min_size=1, max_size=4),
       slots=st.integers(1, 6), compiled=st.booleans(), as_lists=st.booleans())
def test_putting_many_keys_at_once_writes_what_putting_them_one_by_one_writes(batches, slots, compiled, as_lists):
    # (compiled: _speedups.index_put_many where it is built; else IndexFile.bulk_put, its numpy twin. as_lists: the
    # columns as a single send's few keys come, lists, not arrays)
    with tempfile.TemporaryDirectory() as d, patch.object(index_file, "speedups", index_file.speedups
                                                         if compiled else None):
        bulk = IndexFile(os.path.join(d, "00000000000000001"), slots, 20)
        single = IndexFile(os.path.join(d, "00000000000000002"), slots, 20)
        ts = 1_700_000_000_000
        for n, hashes in enumerate(batches):
            phys = [1000 * n + i for i in range(len(hashes))]
            if as_lists:
                put = bulk.put_many(hashes, phys, ts + n * 1000)
            else:
                put = bulk.put_many(np.array(hashes, dtype=np.int64), np.array(phys, dtype=np.int64), ts + n * 1000)
            expected = sum(single.put_hashed(h, p, ts + n * 1000) for h, p in zip(hashes, phys, strict=True))
            assert put == expected
        for f in (bulk, single):
            f.write_header()
        assert bytes(bulk.mf.buf) == bytes(single.mf.buf)  # header, slots, entries and chains, byte for byte
        bulk.close()
        single.close()


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=12), min_size=1, max_size=4),
       slots=st.integers(1, 6))
def test_the_compiled_batch_put_writes_what_the_numpy_one_writes_for_any_hash(batches, slots):
    # (hashes over the whole int64 range: the slot is their floor modulo, the entry keeps their low 32 bits)
    with tempfile.TemporaryDirectory() as d:
        files = [IndexFile(os.path.join(d, f"0000000000000000{i}"), slots, 20) for i in (1, 2)]
        for n, hashes in enumerate(batches):
            phys = np.array([1000 * n + i for i in range(len(hashes))], dtype=np.int64)
            puts = []
            for f, compiled in zip(files, (True, False), strict=True):
                with patch.object(index_file, "speedups", index_file.speedups if compiled else None):
                    puts.append(f.put_many(np.array(hashes, dtype=np.int64), phys, 1_700_000_000_000 + n * 1000))
            assert puts[0] == puts[1]
        for f in files:
            f.write_header()
        assert bytes(files[0].mf.buf) == bytes(files[1].mf.buf)
        for f in files:
            f.close()


def test_recovery_keeps_every_flushed_key_when_the_header_is_older_than_the_slots(tmp_path):
    # A power loss after the kernel wrote some pages back on its own: the header on disk counts fewer entries
    # than the slots and entries that reached the disk point at. Entries of messages before the last complete
    # flush (phy < 6,000 here) must all stay found once recovery has indexed the later messages again.
    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, 8, 400)
    keys = [f"T#k{i}" for i in range(120)]
    older_header = b""
    for i, key in enumerate(keys):
        assert f.put_key(key, i * 100, 1_000_000 + i)
        if i == 80:
            older_header = bytes(f.mf.buf[:INDEX_HEADER.size])
    f.close()
    with open(path, "r+b") as raw:  # the header page on disk is the one written back after the 81st key
        raw.write(older_header)
    again = IndexFile(path, 8, 400)
    assert again.keep_below(6_000) == 81 - 60  # the header's 81 entries, less the 60 flushed ones
    for i in range(60, 120):  # recovery indexes the messages from the safe offset again
        assert again.put_key(keys[i], i * 100, 1_000_000 + i)
    for i, key in enumerate(keys):
        out: list[int] = []
        again.select(key, 0, 10**12, 10, out)
        assert out == [i * 100], f"{key}: {out}"
    again.close()


def test_a_batch_put_over_slots_newer_than_the_header_repairs_them_compiled_or_not(tmp_path):
    # A header older than its slots (pages written back on their own before a crash): a put must first follow such
    # a slot's chain down to an entry the header counts. The compiled put leaves those batches to the numpy one:
    # the file ends byte for byte the same either way, and every key the header counted is still found.
    keys = [f"T#k{i}" for i in range(120)]
    hashes = index_key_hashes(keys)
    files = []
    for name in ("00000000000000001", "00000000000000002"):
        path = str(tmp_path / name)
        f = IndexFile(path, 4, 400)
        for i in range(0, 100, 10):
            assert f.put_many(hashes[i:i + 10], np.arange(i, i + 10, dtype=np.int64) * 100, 1_000_000) == 10
            if i == 60:
                older_header = bytes(f.mf.buf[:INDEX_HEADER.size])
        f.close()
        with open(path, "r+b") as raw:
            raw.write(older_header)
        files.append(IndexFile(path, 4, 400))
    phys = np.arange(100, 120, dtype=np.int64) * 100
    for f, compiled in zip(files, (True, False), strict=True):
        with patch.object(index_file, "speedups", index_file.speedups if compiled else None):
            assert f.put_many(hashes[100:], phys, 1_000_000) == 20
        f.write_header()
    assert bytes(files[0].mf.buf) == bytes(files[1].mf.buf)
    for i, key in enumerate(keys):
        if i < 70 or i >= 100:  # what the header counted, and the new ones
            out: list[int] = []
            files[0].select(key, 0, 10**12, 10, out)
            assert out == [i * 100], f"{key}: {out}"
    for f in files:
        f.close()


def test_recovery_keeps_entries_indexed_again_out_of_log_order(tmp_path):
    # A recovery before this one indexed again, after later entries, messages lower in the log: every entry is
    # still below the safe offset and all of them stay.
    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, 8, 64)
    phys = [100, 200, 300, 400, 150, 250, 350]
    for i, phy in enumerate(phys):
        assert f.put_key(f"T#k{i}", phy, 1_000_000 + i)
    assert f.keep_below(1_000) == 0
    for i, phy in enumerate(phys):
        out: list[int] = []
        f.select(f"T#k{i}", 0, 10**12, 10, out)
        assert out == [phy]
    f.close()


def test_recovery_drops_entries_the_header_counts_but_that_never_reached_the_disk(tmp_path):
    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, 8, 64)
    for i in range(10):
        assert f.put_key(f"T#k{i}", 100 + i, 1_000_000 + i)
    f.index_count = 15  # a header written back after five more entries whose pages were lost: zeros
    f.close()
    again = IndexFile(path, 8, 64)
    assert again.keep_below(10**9) == 4  # entries 11 to 14 of the header's 15 (entry 0 is never used)
    assert again.index_count == 11
    assert again.put_key("T#next", 500, 1_000_100)
    out: list[int] = []
    again.select("T#next", 0, 10**12, 10, out)
    assert out == [500]
    again.close()
