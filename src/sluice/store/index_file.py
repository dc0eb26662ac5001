"""IndexFile: an on-disk hash index from message keys to commit-log offsets, in RocketMQ's layout.

Layout: a 40-byte header (begin / end timestamp, begin / end physical offset, used slot count, index
count), ``hash_slot_num`` int32 slots holding the newest entry number of their chain, then
``index_num`` 20-byte entries (key hash, commit-log offset, seconds since the file's begin timestamp,
previous entry number in the slot's chain).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import struct
import threading
from typing import Final, TypeAlias

import numpy as np

from sluice.common.hashing import index_key_hash, index_key_hashes
from sluice.common.speedups import speedups
from sluice.store.mapped_file import MappedFile, store_spans

log = logging.getLogger(__name__)

INDEX_HEADER: Final = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE: Final = INDEX_HEADER.size  # 40
HASH_SLOT_SIZE: Final = 4
INDEX_ENTRY: Final = struct.Struct(">iqii")
INDEX_ENTRY_SIZE: Final = INDEX_ENTRY.size  # 20
INDEX_ENTRY_DTYPE: Final = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")])
_SLOT: Final = struct.Struct(">i")
_INDEX_NAME = re.compile(r"^\d{17}$")
_INT_MAX = 0x7FFFFFFF
# Keys indexed at once up to which they are hashed and written from lists (a send's one or two: numpy's fixed
# cost per call is more than the work); above it, as arrays.
FEW_KEYS: Final = 4
IntColumn: TypeAlias = "list[int] | np.ndarray"


def _int64s(values: list[int]) -> bytes:
    """``values`` as native int64s (what the compiled index writer reads)."""
    return struct.pack(f"{len(values)}q", *values)


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


class IndexFile:
    """One index file; ``put_key`` appends an entry and links it into its slot's chain."""

    def __init__(self, path: str, hash_slot_num: int, index_num: int) -> None:
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.mf = MappedFile(path, index_file_size(hash_slot_num, index_num))
        self.path = path
        (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
         self.hash_slot_count, self.index_count) = INDEX_HEADER.unpack_from(self.mf.buf, 0)
        if self.index_count <= 0:
            self.index_count = 1  # entry number 0 means "empty"
        self._entries_base = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self.mf.wrote_position = self.mf.flushed_position = self.mf.file_size
        self.dirty = False

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Index ``key``; False when the file is full."""
        return self.put_hashed(index_key_hash(key), phy_offset, store_timestamp)

    def put_hashed(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        if self.index_count >= self.index_num:
            return False
        buf = self.mf.buf
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        slot_value = _SLOT.unpack_from(buf, slot_pos)[0]
        if slot_value >= self.index_count:
            slot_value = self._repair_chain(slot_value)
        if slot_value <= 0:
            slot_value = 0
            self.hash_slot_count += 1
        if self.index_count == 1:
            self.begin_timestamp = store_timestamp
            self.begin_phy_offset = phy_offset
        time_diff = (store_timestamp - self.begin_timestamp) // 1000
        time_diff = 0 if time_diff < 0 else min(time_diff, _INT_MAX)
        n = self.index_count
        self.index_count = n + 1
        if phy_offset > self.end_phy_offset:
            self.end_phy_offset = phy_offset
        if store_timestamp > self.end_timestamp:
            self.end_timestamp = store_timestamp
        store_spans(self.mf.buf, [(self._entries_base + n * INDEX_ENTRY_SIZE,
                                   INDEX_ENTRY.pack(key_hash, phy_offset, time_diff, slot_value)),
                                  (slot_pos, _SLOT.pack(n)), (0, self._header())])
        self.dirty = True
        return True

    def put_many(self, key_hashes: IntColumn, phy_offsets: IntColumn, store_timestamp: int) -> int:
        """``put_hashed`` for many keys stored at one timestamp, in order, in bulk; returns how many fit. In one
        compiled call, else (or where a slot needs repair after a crash) ``bulk_put``. Lists for a few keys (a
        single send's: no numpy on its path), int64 arrays for many."""
        k = min(len(key_hashes), self.index_num - self.index_count)
        if k <= 0:
            return 0
        hashes, phys = key_hashes[:k], phy_offsets[:k]
        if self.index_count == 1:
            self.begin_timestamp = store_timestamp
            self.begin_phy_offset = int(phys[0])
        time_diff = max(0, min((store_timestamp - self.begin_timestamp) // 1000, _INT_MAX))
        n0 = self.index_count
        if speedups is None:
            used = -1
        elif isinstance(hashes, list) and isinstance(phys, list):
            used = speedups.index_put_many(self.mf.buf, self.hash_slot_num, self._entries_base, n0,
                                           _int64s(hashes), _int64s(phys), time_diff)
        else:
            used = speedups.index_put_many(self.mf.buf, self.hash_slot_num, self._entries_base, n0,
                                           np.ascontiguousarray(hashes, np.int64),
                                           np.ascontiguousarray(phys, np.int64), time_diff)
        if used < 0:
            return self.bulk_put(np.asarray(hashes, np.int64), np.asarray(phys, np.int64), store_timestamp, time_diff)
        self.hash_slot_count += used
        self._entries_added(k, max(phys) if isinstance(phys, list) else int(phys.max()), store_timestamp)
        store_spans(self.mf.buf, [(0, self._header())])
        self.dirty = True  # (after the writes: a flush meanwhile must not take them as flushed)
        return k

    def bulk_put(self, hashes: np.ndarray, phys: np.ndarray, store_timestamp: int, time_diff: int) -> int:
        """``put_many``'s entries (each number in ``hashes`` / ``phys``, all fitting) with numpy."""
        k = len(hashes)
        n0 = self.index_count
        buf = self.mf.buf
        slots = np.frombuffer(buf, dtype=">i4", count=self.hash_slot_num, offset=INDEX_HEADER_SIZE)
        slot_no = hashes % self.hash_slot_num
        current = slots[slot_no].astype(np.int64)
        for i in np.flatnonzero(current >= n0).tolist():
            current[i] = self._repair_chain(int(current[i]))
        np.maximum(current, 0, out=current)
        numbers = np.arange(n0, n0 + k, dtype=np.int64)
        # Keys sharing a slot chain to each other in order; the first one to what the slot held.
        order = np.argsort(slot_no, kind="stable")
        sorted_slots = slot_no[order]
        sorted_numbers = numbers[order]
        first = np.empty(k, dtype=bool)
        first[0] = True
        np.not_equal(sorted_slots[1:], sorted_slots[:-1], out=first[1:])
        prev = np.empty(k, dtype=np.int64)
        prev[order] = np.where(first, current[order], np.roll(sorted_numbers, 1))
        self.hash_slot_count += int((first & (current[order] == 0)).sum())
        entries = np.empty(k, dtype=INDEX_ENTRY_DTYPE)
        entries["hash"] = hashes
        entries["phy"] = phys
        entries["time_diff"] = time_diff
        entries["prev"] = prev
        last = np.append(first[1:], True)
        slot_at = INDEX_HEADER_SIZE + sorted_slots[last].astype(np.int64) * HASH_SLOT_SIZE
        self._entries_added(k, int(phys.max()), store_timestamp)
        # Entries, slots and header in one copy with the GIL released (see store_spans).
        store_spans(self.mf.buf, [(self._entries_base + n0 * INDEX_ENTRY_SIZE, entries.tobytes()), (0, self._header())],
                    slot_at.tobytes(), sorted_numbers[last].astype(">i4").tobytes(), HASH_SLOT_SIZE)
        self.dirty = True
        return k

    def _entries_added(self, k: int, max_phy: int, store_timestamp: int) -> None:
        self.index_count += k
        self.end_phy_offset = max(self.end_phy_offset, max_phy)
        self.end_timestamp = max(self.end_timestamp, store_timestamp)

    def _repair_chain(self, n: int) -> int:
        """A slot pointing at or past the entry count (a header older than the slots, after a crash):
        follow the chain down to the first entry the header still counts, so older entries stay found."""
        for _ in range(self.index_num):
            if n < self.index_count or n <= 0 or n >= self.index_num:
                break
            prev = INDEX_ENTRY.unpack_from(self.mf.buf, self._entries_base + n * INDEX_ENTRY_SIZE)[3]
            if prev == n:
                return 0
            n = prev
        return n if 0 < n < self.index_count else 0

    def keep_below(self, phy_offset: int) -> int:
        """After an abnormal stop: keep only the leading entries of messages below ``phy_offset`` (what the last
        complete flush made durable), rebuild every slot from them and rewrite the header; returns the entries
        dropped. Pages written back on their own after that flush may have left the header, the slots and the
        entries from different moments (a power loss): a slot may point past the entries the header counts, or
        past entries that hold other keys. None of it is trusted past that point: recovery indexes the later
        messages again."""
        buf = self.mf.buf
        count = min(max(self.index_count, 1), self.index_num)
        entries = np.frombuffer(buf, dtype=INDEX_ENTRY_DTYPE, count=count, offset=self._entries_base)
        body = entries[1:]
        phys = body["phy"].astype(np.int64)
        # Kept: the entries up to the first of a message at or past the offset, or one never written (zeros, or
        # before the file's first message). Not "in log order": a recovery before this one may have indexed
        # again, after later entries, messages lower in the log.
        unwritten = (body["hash"] == 0) & (phys == 0) & (body["prev"] == 0) & (body["time_diff"] == 0)
        bad = (phys >= phy_offset) | (phys < self.begin_phy_offset) | unwritten
        keep = 1 + (int(np.argmax(bad)) if bad.any() else len(phys))
        dropped = self.index_count - keep
        slots = np.frombuffer(buf, dtype=">i4", count=self.hash_slot_num, offset=INDEX_HEADER_SIZE)
        if dropped <= 0 and not (slots >= keep).any():
            return 0
        slots[:] = 0
        kept = entries[1:keep]
        if len(kept):
            slot_no = kept["hash"].astype(np.int64) % self.hash_slot_num
            # The newest entry of each slot heads its chain: the last occurrence of each slot number.
            rev_slots, rev_first = np.unique(slot_no[::-1], return_index=True)
            slots[rev_slots] = len(kept) - rev_first  # entry numbers start at 1
            self.hash_slot_count = len(rev_slots)
            self.end_phy_offset = int(kept["phy"][-1])
            self.end_timestamp = self.begin_timestamp + int(kept["time_diff"].max()) * 1000 + 999
        else:
            self.hash_slot_count = 0
            self.begin_timestamp = self.end_timestamp = self.begin_phy_offset = self.end_phy_offset = 0
        self.index_count = keep
        self.write_header()
        self.dirty = True
        return dropped

    def _header(self) -> bytes:
        return INDEX_HEADER.pack(self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
                                 self.hash_slot_count, self.index_count)

    def write_header(self) -> None:
        """Write the header (also done by every put, so that it never lags the slots)."""
        store_spans(self.mf.buf, [(0, self._header())])

    def overlaps(self, begin: int, end: int) -> bool:
        return self.index_count > 1 and self.begin_timestamp <= end and self.end_timestamp >= begin

    def select(self, key: str, begin: int, end: int, max_num: int, out: list[int]) -> None:
        """Append to ``out`` the commit-log offsets of entries for ``key`` stored in [begin, end] ms."""
        key_hash = index_key_hash(key)
        buf = self.mf.buf
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        n = _SLOT.unpack_from(buf, slot_pos)[0]
        if n >= self.index_count:
            n = self._repair_chain(n)
        if n <= 0:
            return
        seen = 0
        while len(out) < max_num and 0 < n < self.index_count and seen < self.index_num:
            seen += 1
            h, phy, time_diff, prev = INDEX_ENTRY.unpack_from(buf, self._entries_base + n * INDEX_ENTRY_SIZE)
            time_read = self.begin_timestamp + time_diff * 1000
            if time_read < begin - 999:  # chains run newest first; entry times are truncated to seconds
                break
            if h == key_hash and time_read <= end:
                out.append(phy)
            if prev == n:
                break
            n = prev

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            self.write_header()
            self.mf.wrote_position = self.mf.file_size
            self.mf.flushed_position = 0
            self.mf.flush()

    def close(self) -> None:
        if self.dirty and not self.mf._closed:
            self.write_header()
        self.mf.close()

    def destroy(self) -> None:
        self.mf.destroy()


class IndexService:
    """The index files of a store; keys are ``topic#key`` for every KEYS value and the UNIQ_KEY."""

    def __init__(self, directory: str, hash_slot_num: int, index_num: int) -> None:
        self.directory = directory
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        self._lock = threading.Lock()

    def load(self) -> None:
        if not os.path.isdir(self.directory):
            return
        expected = index_file_size(self.hash_slot_num, self.index_num)
        for name in sorted(os.listdir(self.directory)):
            if not _INDEX_NAME.match(name):
                continue
            path = os.path.join(self.directory, name)
            if os.path.getsize(path) != expected:
                log.warning("ignoring index file %s: its size does not match the configured geometry", path)
                continue
            self.files.append(IndexFile(path, self.hash_slot_num, self.index_num))

    def _new_file(self) -> IndexFile:
        os.makedirs(self.directory, exist_ok=True)
        now = dt.datetime.now()
        while True:
            name = now.strftime("%Y%m%d%H%M%S") + f"{now.microsecond // 1000:03d}"
            path = os.path.join(self.directory, name)
            if not os.path.exists(path) and (not self.files or name > os.path.basename(self.files[-1].path)):
                break
            now += dt.timedelta(milliseconds=1)
        f = IndexFile(path, self.hash_slot_num, self.index_num)
        with self._lock:
            self.files = [*self.files, f]
        return f

    def last_update_timestamp(self) -> int:
        """Store time of the newest indexed message (0 before any)."""
        files = self.files
        return files[-1].end_timestamp if files else 0

    def last_update_phy_offset(self) -> int:
        files = self.files
        return files[-1].end_phy_offset if files else 0

    def build_index(self, topic: str, keys: list[str], uniq_key: str | None, phy_offset: int,
                    store_timestamp: int) -> None:
        prefix = topic + "#"
        if uniq_key:
            self._put(prefix + uniq_key, phy_offset, store_timestamp)
        for k in keys:
            self._put(prefix + k, phy_offset, store_timestamp)

    def build_index_batch(self, items: list[tuple[str, list[str], str | None, int]], store_timestamp: int) -> None:
        """Index many messages stored at one timestamp: (topic, keys, uniq key, commit-log offset) each."""
        keys: list[str] = []
        phys: list[int] = []
        for topic, msg_keys, uniq_key, phy in items:
            prefix = topic + "#"
            if uniq_key:
                keys.append(prefix + uniq_key)
                phys.append(phy)
            for k in msg_keys:
                keys.append(prefix + k)
                phys.append(phy)
        if len(keys) > FEW_KEYS:
            self.put_hashes(index_key_hashes(keys), np.array(phys, dtype=np.int64), store_timestamp)
        elif keys:
            self.put_hashes([index_key_hash(k) for k in keys], phys, store_timestamp)

    def put_hashes(self, key_hashes: IntColumn, phy_offsets: IntColumn, store_timestamp: int) -> None:
        """Index entries for keys already hashed (``index_key_hash``), starting new files as they fill."""
        done = 0
        f = self.files[-1] if self.files else self._new_file()
        while done < len(key_hashes):
            put = f.put_many(key_hashes[done:], phy_offsets[done:], store_timestamp)
            done += put
            if done < len(key_hashes):
                if put == 0 and f.index_count <= 1:
                    raise ValueError(f"an index file of {self.index_num} entries cannot hold any key")
                f = self._new_file()  # the full one is flushed by the flush service, off the put path

    def _put(self, key: str, phy_offset: int, store_timestamp: int) -> None:
        f = self.files[-1] if self.files else self._new_file()
        if not f.put_key(key, phy_offset, store_timestamp):
            self._new_file().put_key(key, phy_offset, store_timestamp)  # the full file: see ``flush_full``

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets of messages indexed under ``topic#key`` stored in [begin, end], newest first."""
        out: list[int] = []
        full_key = f"{topic}#{key}"
        for f in reversed(self.files):
            if len(out) >= max_num:
                break
            if f.overlaps(begin - 1000, end):
                f.select(full_key, begin, end, max_num, out)
        return out

    def delete_expired(self, min_phy_offset: int) -> int:
        """Delete files (never the newest) whose every entry points below the commit log's min offset."""
        with self._lock:
            files = self.files
            gone = [f for f in files[:-1] if f.end_phy_offset < min_phy_offset]
            self.files = [f for f in files if f not in gone]
        for f in gone:
            f.destroy()
        return len(gone)

    def flush(self) -> None:
        for f in self.files:
            f.flush()

    def keep_below(self, phy_offset: int) -> int:
        """``IndexFile.keep_below`` on every file that may hold entries of messages at or past ``phy_offset``
        (from the newest back to the one that was being written at the last complete flush); returns the
        entries dropped."""
        dropped = 0
        for f in reversed(self.files):
            # Files older than the one that was being written at the last complete flush were full then, and
            # flushed: that one is the newest whose (then flushed) header says it began below the offset.
            began_before = f.index_count > 1 and f.begin_phy_offset < phy_offset
            dropped += f.keep_below(phy_offset)
            if began_before:
                break
        return dropped

    def flush_full(self) -> None:
        """Flush the files that filled up (every one but the newest): the put that fills a file starts the next
        one and leaves this to the flush service's thread, as RocketMQ flushes a full index file in a thread of
        its own (a whole file's dirty pages can take seconds to write)."""
        for f in self.files[:-1]:
            if f.dirty:
                f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
