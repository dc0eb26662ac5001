"""ConsumeQueue: per topic / queue id, fixed 20-byte entries (commit-log offset, size, tags code).

Logical offset N lives at byte N*20 of the queue's byte space, split into files of
``mapped_file_size_consume_queue`` bytes named by the byte offset of their first entry, as RocketMQ names them.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from typing import Final, Protocol

import numpy as np

from sluice.common.message_codec import RECORD_FIXED_SIZE
from sluice.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

CQ_STORE_UNIT_SIZE: Final = 20
CQ_ENTRY_DTYPE: Final = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tag", ">i8")])
# A placeholder entry for a logical offset whose message is unknown (RocketMQ's fillPreBlank).
BLANK_ENTRY_SIZE: Final = 0x7FFFFFFF
MIN_RECORD_SIZE: Final = RECORD_FIXED_SIZE + 1  # a stored record with a one-byte topic, no body or properties
_ENTRY: Final = struct.Struct(">qiq")


class LogicQueue(Protocol):
    """What readers use of a queue's entries: a topic's consume queue, or a light queue (light_queue_store)."""

    topic: str
    queue_id: int
    entries_per_file: int

    @property
    def max_offset(self) -> int: ...

    @property
    def min_offset(self) -> int: ...

    def get_entry(self, queue_offset: int) -> tuple[int, int, int] | None: ...

    def get_entries(self, queue_offset: int, max_entries: int) -> np.ndarray: ...

    def offset_by_time(self, timestamp: int, store_time_of: Callable[[int, int], int | None]) -> int: ...


def offset_by_time(get_entry: Callable[[int], tuple[int, int, int] | None], lo: int, hi: int, timestamp: int,
                   store_time_of: Callable[[int, int], int | None]) -> int:
    """The first offset in ``lo..hi`` whose message was stored at or after ``timestamp`` (ms), by bisection over
    ``get_entry``; ``hi`` when every message is older."""
    while lo < hi:
        mid = (lo + hi) // 2
        entry = get_entry(mid)
        ts = None
        if entry is not None and entry[1] != BLANK_ENTRY_SIZE:
            ts = store_time_of(entry[0], entry[1])
        if ts is None or ts < timestamp:
            lo = mid + 1
        else:
            hi = mid
    return lo


class ConsumeQueue:
    """The logical queue of one topic / queue id."""

    def __init__(self, topic: str, queue_id: int, root_dir: str, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = os.path.join(root_dir, topic, str(queue_id))
        # Entries are written with pwrite (0: every append), never stored through the mapping from a thread that
        # holds the GIL: see MappedFile.write_at.
        self.queue = MappedFileQueue(self.directory, file_size, 0)
        self.file_size = file_size
        self.entries_per_file = file_size // CQ_STORE_UNIT_SIZE
        self.min_logic_offset = 0  # in entries
        self.max_physic_offset = 0  # end (offset + size) of the last entry in the commit log

    # -- state --------------------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        """Number of entries written: the next logical offset."""
        return self.queue.max_offset // CQ_STORE_UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return max(self.min_logic_offset, self.queue.min_offset // CQ_STORE_UNIT_SIZE)

    def load(self) -> None:
        """Open the files and find where the entries end (the first all-zero entry of the last file)."""
        self.queue.load()
        files = self.queue.files
        if not files:
            return
        last = files[-1]
        entries = np.frombuffer(last.buf, CQ_ENTRY_DTYPE)
        zero = np.flatnonzero(entries["size"] == 0)
        count = int(zero[0]) if zero.size else len(entries)
        last.wrote_position = last.flushed_position = count * CQ_STORE_UNIT_SIZE
        del entries
        self.min_logic_offset = files[0].file_from_offset // CQ_STORE_UNIT_SIZE
        self._refresh_max_physic_offset()

    def _refresh_max_physic_offset(self) -> None:
        n = self.max_offset
        self.max_physic_offset = 0
        for i in range(n - 1, max(self.min_offset, n - 64) - 1, -1):
            off, size, _ = self.get_entry(i) or (0, 0, 0)
            if size and size != BLANK_ENTRY_SIZE:
                self.max_physic_offset = off + size
                return

    # -- writing (the dispatcher) ------------------------------------------------------------------
    def put_entry(self, queue_offset: int, phys_offset: int, size: int, tags_code: int) -> None:
        """Write the entry for ``queue_offset``; idempotent when recovery dispatches a record again."""
        expected = self.max_offset
        if queue_offset != expected and not self._prepare_offset(queue_offset, expected, phys_offset):
            return
        mf = self.queue.last_or_create(queue_offset * CQ_STORE_UNIT_SIZE)
        mf.append(_ENTRY.pack(phys_offset, size, tags_code))
        self.max_physic_offset = phys_offset + size

    def put_entries(self, first_queue_offset: int, entries: np.ndarray) -> None:
        """Write consecutive entries (a CQ_ENTRY_DTYPE array) starting at ``first_queue_offset``."""
        n = len(entries)
        if n == 0:
            return
        expected = self.max_offset
        if first_queue_offset != expected:
            for i in range(n):
                e = entries[i]
                self.put_entry(first_queue_offset + i, int(e["offset"]), int(e["size"]), int(e["tag"]))
            return
        data = entries.tobytes()
        pos = 0
        while pos < len(data):
            mf = self.queue.last_or_create((first_queue_offset * CQ_STORE_UNIT_SIZE) + pos)
            take = min(mf.remaining(), len(data) - pos)
            mf.append(data[pos : pos + take])
            pos += take
        last = entries[-1]
        self.max_physic_offset = int(last["offset"]) + int(last["size"])

    def _prepare_offset(self, queue_offset: int, expected: int, phys_offset: int) -> bool:
        """Make ``queue_offset`` the next offset to write. False when the entry is already there, or cannot be
        the message's (a damaged record header, met by recovery: the message stays out of the queue)."""
        if queue_offset < 0:
            log.error("%s/%d: the message at %d claims queue offset %d: not put in the queue", self.topic,
                      self.queue_id, phys_offset, queue_offset)
            return False
        if queue_offset < expected:
            existing = self.get_entry(queue_offset)
            if existing is not None and existing[0] == phys_offset:
                return False
            log.warning("%s/%d: rewriting entries from %d (was %d)", self.topic, self.queue_id, queue_offset,
                        expected)
            self.queue.truncate_dirty(queue_offset * CQ_STORE_UNIT_SIZE)
            if self.queue.files:
                return True
            expected = 0  # every file began past the offset and is gone: the queue starts again, as a new one
        elif self.queue.files and queue_offset - expected > (phys_offset - self.max_physic_offset) // MIN_RECORD_SIZE:
            # Each missing entry is a message between the queue's last one and this one in the commit log: more
            # than fit there means a damaged offset, and filling the gap would write without bound.
            log.error("%s/%d: the message at %d claims queue offset %d, %d past the queue's end: more messages "
                      "than the commit log holds in between; not put in the queue", self.topic, self.queue_id,
                      phys_offset, queue_offset, queue_offset - expected)
            return False
        log.warning("%s/%d: filling blank entries %d..%d", self.topic, self.queue_id, expected, queue_offset)
        blank_from = expected
        if not self.queue.files:
            # Nothing on disk: start the queue's first file where the commit log says the queue is.
            start = queue_offset * CQ_STORE_UNIT_SIZE
            blank_from = (start - start % self.file_size) // CQ_STORE_UNIT_SIZE
            self.queue.create_file(blank_from * CQ_STORE_UNIT_SIZE)
            self.min_logic_offset = queue_offset
        blank = _ENTRY.pack(0, BLANK_ENTRY_SIZE, 0)
        for i in range(blank_from, queue_offset):
            self.queue.last_or_create(i * CQ_STORE_UNIT_SIZE).append(blank)
        return True

    def flush(self, least_pages: int = 0) -> int:
        return self.queue.flush(least_pages)

    # -- reading ------------------------------------------------------------------------------------
    def get_entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        byte_pos = queue_offset * CQ_STORE_UNIT_SIZE
        mf = self.queue.find_by_offset(byte_pos)
        if mf is None:
            return None
        pos = byte_pos - mf.file_from_offset
        if pos + CQ_STORE_UNIT_SIZE > mf.wrote_position:
            return None
        return _ENTRY.unpack_from(mf.buf, pos)

    def get_entries(self, queue_offset: int, max_entries: int) -> np.ndarray:
        """Up to ``max_entries`` entries from ``queue_offset``, within one file, as a zero-copy array."""
        byte_pos = queue_offset * CQ_STORE_UNIT_SIZE
        mf = self.queue.find_by_offset(byte_pos)
        if mf is None:
            return np.empty(0, CQ_ENTRY_DTYPE)
        pos = byte_pos - mf.file_from_offset
        count = min(max_entries, (mf.wrote_position - pos) // CQ_STORE_UNIT_SIZE)
        if count <= 0:
            return np.empty(0, CQ_ENTRY_DTYPE)
        return np.frombuffer(mf.buf, CQ_ENTRY_DTYPE, count=count, offset=pos)

    def offset_by_time(self, timestamp: int, store_time_of: Callable[[int, int], int | None]) -> int:
        """The first logical offset whose message was stored at or after ``timestamp`` (ms).

        ``store_time_of(phys_offset, size)`` reads a store timestamp from the commit log (None: removed).
        Returns ``max_offset`` when every message is older.
        """
        return offset_by_time(self.get_entry, self.min_offset, self.max_offset, timestamp, store_time_of)

    # -- recovery and retention ---------------------------------------------------------------------
    def truncate_past(self, max_phys_offset: int) -> int:
        """Drop trailing entries whose message does not end within the commit log; returns how many went."""
        before = self.max_offset
        for mf in reversed(self.queue.files):
            count = mf.wrote_position // CQ_STORE_UNIT_SIZE
            if count == 0:
                continue
            entries = np.frombuffer(mf.buf, CQ_ENTRY_DTYPE, count=count)
            real = entries["size"] != BLANK_ENTRY_SIZE
            bad = real & (entries["offset"] + entries["size"] > max_phys_offset)
            if not bad.any():
                break
            first_bad = int(np.argmax(bad))
            del entries, real, bad
            self.queue.truncate_dirty(mf.file_from_offset + first_bad * CQ_STORE_UNIT_SIZE)
            if first_bad > 0:
                break
        self._refresh_max_physic_offset()
        return before - self.max_offset

    def delete_expired(self, commit_log_min_offset: int) -> int:
        """Delete files whose every message is gone from the commit log; move the min offset on."""
        deleted = 0
        while len(self.queue.files) > 1:
            first = self.queue.files[0]
            entries = np.frombuffer(first.buf, CQ_ENTRY_DTYPE, count=first.wrote_position // CQ_STORE_UNIT_SIZE)
            real = entries["offset"][entries["size"] != BLANK_ENTRY_SIZE]
            expired = real.size == 0 or int(real[-1]) < commit_log_min_offset
            del entries, real
            if not expired:
                break
            self.queue.delete_first_files(1)
            deleted += 1
        self.correct_min_offset(commit_log_min_offset)
        return deleted

    def correct_min_offset(self, commit_log_min_offset: int) -> None:
        """min offset = the first entry whose message is still in the commit log."""
        files = self.queue.files
        if not files:
            return
        first = files[0]
        count = first.wrote_position // CQ_STORE_UNIT_SIZE
        entries = np.frombuffer(first.buf, CQ_ENTRY_DTYPE, count=count)
        live = np.flatnonzero((entries["offset"] >= commit_log_min_offset) & (entries["size"] != BLANK_ENTRY_SIZE))
        base = first.file_from_offset // CQ_STORE_UNIT_SIZE
        self.min_logic_offset = base + (int(live[0]) if live.size else count)
        del entries

    def destroy(self) -> None:
        self.queue.destroy()
        try:
            os.rmdir(self.directory)
        except OSError:
            pass

    def close(self) -> None:
        self.queue.close()
