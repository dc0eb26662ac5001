"""The timer log (RocketMQ 5's TimerLog): one fixed-size unit per message waiting in the timer wheel.

A unit names the message (its commit-log offset and size), when it is due, when it entered the wheel, and the
previous unit due at the same time (-1: none): each slot of the wheel is a chain through the log, newest first.
Units are appended to files of ``file_size`` bytes named by their first position, and read back with ``pread``;
nothing of them is kept in memory. ``flush`` makes what was appended durable; ``load`` cuts the log back to what
the last checkpoint vouches for.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Iterator
from typing import Final, NamedTuple

import numpy as np

from sluice.common.files import fsync_dir
from sluice.common.platform import fsync

log = logging.getLogger(__name__)

UNIT: Final = struct.Struct(">qqqqii")  # prev, deliver ms, commit-log offset, enqueue ms, size, magic
UNIT_SIZE: Final = UNIT.size
UNIT_MAGIC: Final = 0x54494D52  # "TIMR"
# A unit whose message deletes (recalls) another due at the same time (RocketMQ's MAGIC_DELETE).
DELETE_UNIT_MAGIC: Final = 0x54494D44  # "TIMD"
UNIT_DTYPE: Final = np.dtype([("prev", ">i8"), ("deliver", ">i8"), ("offset", ">i8"), ("enqueue", ">i8"),
                              ("size", ">i4"), ("magic", ">i4")])


class TimerUnit(NamedTuple):
    prev: int
    deliver_ms: int
    offset: int  # of the timer message in the commit log
    enqueue_ms: int
    size: int
    delete: bool = False  # its message recalls another of the same due time (TIMER_DEL_UNIQKEY)


class TimerLog:
    def __init__(self, directory: str, file_size: int) -> None:
        if file_size % UNIT_SIZE:
            raise ValueError(f"a timer log file holds whole units of {UNIT_SIZE} bytes; {file_size} is not a multiple")
        self.directory = directory
        self.file_size = file_size
        self.end = 0  # where the next unit goes
        self.flushed = 0
        self._fds: dict[int, int] = {}  # first position -> descriptor
        self._dirty: set[int] = set()
        self._lock = threading.Lock()  # flush runs in a thread of its own

    # == files =======================================================================================
    def load(self, end: int) -> None:
        """Open the files; everything past ``end`` (what the checkpoint vouches for) is cut off."""
        os.makedirs(self.directory, exist_ok=True)
        starts = sorted(int(n) for n in os.listdir(self.directory) if n.isdigit() and len(n) == 20)
        for start in starts:
            path = self._path(start)
            if start >= end:
                os.unlink(path)  # wholly past the checkpoint
                continue
            fd = os.open(path, os.O_RDWR)
            self._fds[start] = fd
            if start <= end < start + self.file_size:
                os.ftruncate(fd, end - start)
        if starts and end <= max(starts):
            fsync_dir(self.directory)
        self.end = self.flushed = end

    def _path(self, start: int) -> str:
        return os.path.join(self.directory, f"{start:020d}")

    def _fd_for(self, pos: int) -> tuple[int, int]:
        start = pos - pos % self.file_size
        fd = self._fds.get(start)
        if fd is None:
            fd = os.open(self._path(start), os.O_RDWR | os.O_CREAT, 0o644)
            self._fds[start] = fd
            fsync_dir(self.directory)
        return fd, pos - start

    # == units =======================================================================================
    def append(self, unit: TimerUnit) -> int:
        """Append ``unit``; its position. Raises ``OSError`` (ENOSPC...) with nothing appended."""
        pos = self.end
        fd, at = self._fd_for(pos)
        data = UNIT.pack(unit.prev, unit.deliver_ms, unit.offset, unit.enqueue_ms, unit.size,
                         DELETE_UNIT_MAGIC if unit.delete else UNIT_MAGIC)
        if os.pwrite(fd, data, at) != UNIT_SIZE:
            raise OSError(f"short write to the timer log at {pos}")
        with self._lock:  # (the flush thread swaps the set)
            self._dirty.add(pos - at)
        self.end = pos + UNIT_SIZE
        return pos

    def read(self, pos: int) -> TimerUnit | None:
        """The unit at ``pos``; None when it is not a unit (past the end, cut off, or not one at all)."""
        if pos < 0 or pos + UNIT_SIZE > self.end:
            return None
        start = pos - pos % self.file_size
        fd = self._fds.get(start)
        if fd is None:
            return None
        data = os.pread(fd, UNIT_SIZE, pos - start)
        if len(data) != UNIT_SIZE:
            return None
        prev, deliver, offset, enqueue, size, magic = UNIT.unpack(data)
        if magic != UNIT_MAGIC and magic != DELETE_UNIT_MAGIC:
            return None
        return TimerUnit(prev, deliver, offset, enqueue, size, magic == DELETE_UNIT_MAGIC)

    def segments(self) -> Iterator[tuple[int, np.ndarray]]:
        """Every file's units as a structured array (``UNIT_DTYPE``), with the position of its first unit."""
        for start in sorted(self._fds):
            length = min(self.file_size, self.end - start)
            if length <= 0:
                continue
            data = os.pread(self._fds[start], length, 0)
            count = len(data) // UNIT_SIZE
            yield start, np.frombuffer(data[:count * UNIT_SIZE], dtype=UNIT_DTYPE)

    # == durability and space ========================================================================
    def flush(self) -> int:
        """fsync what was appended; the end it vouches for (called off the event loop)."""
        end = self.end
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            for start in sorted(dirty):
                fd = self._fds.get(start)
                if fd is not None:
                    fsync(fd)
        self.flushed = max(self.flushed, end)
        return end

    def delete_files_before(self, pos: int) -> int:
        """Delete the files wholly before ``pos``; how many."""
        gone = 0
        for start in sorted(self._fds):
            if start + self.file_size > pos or start + self.file_size > self.end:
                break
            with self._lock:
                fd = self._fds.pop(start)
                self._dirty.discard(start)
            os.close(fd)
            os.unlink(self._path(start))
            gone += 1
        if gone:
            fsync_dir(self.directory)
        return gone

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
