"""A fixed-size, memory-mapped file named by the 20-digit offset of its first byte (RocketMQ MappedFile)."""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import threading

import numpy as np

from sluice.common.files import fsync_dir
from sluice.common.platform import MAPPED_WRITES_NEED_MSYNC, fdatasync, fsync
from sluice.common.speedups import speedups

log = logging.getLogger(__name__)


def py_store_spans(buf: memoryview, spans: list[tuple[int, bytes | memoryview]], positions: bytes = b"",
                   values: bytes = b"", width: int = 4) -> None:
    """Copy each (offset, bytes) of ``spans`` into ``buf``, and value i of ``values`` (``width`` bytes each) at
    ``positions[i]`` (native int64): the pure-Python twin of ``_speedups.store_spans``, which copies with the GIL
    released. Every span is checked before anything is written (ValueError)."""
    size = len(buf)
    for off, data in spans:
        if off < 0 or len(data) > size - off:
            raise ValueError(f"store_spans: {len(data)} bytes at {off} do not fit a buffer of {size}")
    pos = np.frombuffer(positions, dtype=np.int64) if positions else np.zeros(0, np.int64)
    if not 1 <= width <= 8 or len(positions) % 8 or len(values) != len(pos) * width:
        raise ValueError("store_spans: positions are int64 and values hold width bytes for each")
    if len(pos) and (int(pos.min()) < 0 or int(pos.max()) > size - width):
        raise ValueError(f"store_spans: a value at {int(pos.max()) if int(pos.min()) >= 0 else int(pos.min())} does "
                         f"not fit a buffer of {size}")
    for off, data in spans:
        buf[off:off + len(data)] = data
    for i, p in enumerate(pos.tolist()):
        buf[p:p + width] = values[i * width:(i + 1) * width]


store_spans = speedups.store_spans if speedups is not None else py_store_spans

PAGE_SIZE = mmap.PAGESIZE
NO_FENCE = 1 << 62  # ``MappedFile.zero_fence`` while no zeroing runs
_ZEROS = memoryview(bytes(1 << 20))


CREATING_SUFFIX = ".creating"  # a segment being sized; a crash leaves it, and the next start deletes it
AHEAD_SUFFIX = ".ahead"  # a segment made ahead of need, not yet in use; likewise deleted at start


def offset_to_file_name(offset: int) -> str:
    return f"{offset:020d}"


def _create_file(tmp: str, file_size: int, final: str | None) -> None:
    """Create ``tmp`` at ``file_size`` bytes with its blocks reserved (fallocate), durably; then rename it to
    ``final`` if given. Reserved blocks mean that writing through the mapping can never fault for want of disk
    space (SIGBUS): a full disk shows here, as ENOSPC, before anything is written. Nothing is left behind on
    failure."""
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, file_size)
        if hasattr(os, "posix_fallocate"):  # not on macOS: a segment stays sparse there (the warm service fills it)
            try:
                os.posix_fallocate(fd, 0, file_size)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system that cannot reserve: sparse
                    raise
        fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    os.close(fd)
    if final is not None:
        os.rename(tmp, final)
    fsync_dir(os.path.dirname(tmp) or ".")


class MappedFile:
    """One segment. Writers append at ``wrote_position``; flushes make ``[0, flushed_position)`` durable.

    The file is created at its full size (sparse), so unwritten space reads as zeros: a reader or the
    recovery scan sees a clean end there. ``zero_fill`` (the warm service) writes real zeros ahead of the
    writer: blocks allocated once, in the background, instead of by the flush that first covers them.
    """

    __slots__ = ("path", "file_size", "file_from_offset", "wrote_position", "flushed_position", "_fd", "_mm",
                 "buf", "_closed", "pwrite_min", "warmed_position", "zero_fence", "zero_overrun", "_fd_lock",
                 "final_path", "_dir_unsynced")

    def __init__(self, path: str, file_size: int, pwrite_min: int = -1, ahead: bool = False) -> None:
        """Open the segment at ``path``, creating it (its space reserved) when it does not exist. ``ahead``:
        created under a temporary name (``path`` + ``.ahead``), to be put in place by ``publish`` when needed."""
        self.pwrite_min = pwrite_min  # appends of at least this many bytes use pwrite(); -1: none
        self._dir_unsynced = False  # renamed into place, the directory not yet synced (see publish)
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(os.path.basename(path))
        self.final_path = path
        if ahead:
            self.path = path + AHEAD_SUFFIX
            _create_file(self.path, file_size, None)
        elif not os.path.exists(path):
            # Size it under a temporary name, then rename: a crash never leaves a short segment behind.
            _create_file(path + CREATING_SUFFIX, file_size, path)
        self._fd = os.open(self.path, os.O_RDWR, 0o644)
        try:
            size = os.fstat(self._fd).st_size
            if size < file_size:
                # Only a crash inside ``truncate_tail`` leaves this: the missing tail is zeros anyway.
                log.warning("%s is %d bytes, short of %d: extending it with zeros", path, size, file_size)
                os.ftruncate(self._fd, file_size)
                fsync(self._fd)
            elif size > file_size:
                raise ValueError(f"{path} is {size} bytes, larger than the configured {file_size}")
            self._mm = mmap.mmap(self._fd, file_size)
        except BaseException:
            os.close(self._fd)
            raise
        self.buf = memoryview(self._mm)
        self.wrote_position = 0
        self.flushed_position = 0
        self._closed = False
        # Zero-filled and durable up to here (meaningful past ``wrote_position`` only).
        self.warmed_position = 0
        # Start of the range ``zero_fill`` is writing (``NO_FENCE``: none). Set under the commit log's put lock,
        # so an append that reaches it must wait for the fill to end (``CommitLog._segment_for``).
        self.zero_fence = NO_FENCE
        self.zero_overrun = False  # an append had to wait for a fill: the next fill starts further ahead
        self._fd_lock = threading.Lock()  # ``zero_fill`` against ``close``: the fd is never used once closed

    # -- writing ------------------------------------------------------------------------------------
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Copy ``data`` at the write position; returns the position it was written at. At ``pwrite_min``
        bytes or more through ``pwrite`` (the same page cache the mapping shows), else through the mapping."""
        pos = self.wrote_position
        n = len(data)
        end = pos + n
        if 0 <= self.pwrite_min <= n:
            if end > self.file_size or self._closed:  # the mapping would refuse it; pwrite would grow the file
                raise OSError(f"{self.path} is closed" if self._closed else
                              f"append of {n} bytes at {pos} does not fit {self.path} ({self.file_size} bytes)")
            written = os.pwrite(self._fd, data, pos)
            if written != n:  # a short write to a regular file: the disk is full or failing
                self.buf[pos : pos + written] = bytes(written)  # no half-written record for recovery to find
                raise OSError(f"short write to {self.path}: {written} of {n} bytes at {pos}")
        else:
            self.buf[pos:end] = data
        self.wrote_position = end
        return pos

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``pos`` with ``pwrite``: the page cache the mapping shows, without faulting the page
        in through the mapping while holding the GIL (a page the disk is writing back would keep every thread
        of the process waiting until the disk is done)."""
        if self._closed or pos + len(data) > self.file_size:
            raise OSError(f"{self.path} is closed" if self._closed else
                          f"write of {len(data)} bytes at {pos} does not fit {self.path} ({self.file_size} bytes)")
        written = os.pwrite(self._fd, data, pos)
        if written != len(data):
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes at {pos}")

    def zero_fill(self, start: int, end: int) -> bool:
        """Write zeros over ``[start, end)``, durably; False if the file was closed meanwhile.

        Only for bytes past everything written: the caller fences the range first (``zero_fence``). The zeros
        go through a descriptor opened with O_DSYNC: each write returns once its range (and the blocks it
        allocated) is on disk, without flushing the rest of the file. An fdatasync would also write back the
        records' dirty pages, and the writer would then fault on every one of them again (1.2 KiB appends
        through the mapping: 1.8 µs each against 0.5 µs)."""
        with self._fd_lock:
            if self._closed:
                return False
            fd = os.open(self.path, os.O_WRONLY | os.O_DSYNC)
            try:
                pos = start
                while pos < end:
                    pos += os.pwrite(fd, _ZEROS[: min(len(_ZEROS), end - pos)], pos)
            finally:
                os.close(fd)
        return True

    def dirty_pages(self) -> int:
        return (self.wrote_position // PAGE_SIZE) - (self.flushed_position // PAGE_SIZE)

    def flush(self, least_pages: int = 0) -> int:
        """fdatasync if at least ``least_pages`` pages are dirty (or the file is full); returns flushed position.

        fdatasync on Linux writes back the pages dirtied through the shared mapping (msync(MS_SYNC) is the
        same call in the kernel), and unlike ``mmap.flush`` it releases the GIL while the disk works.
        """
        target = self.wrote_position
        if target <= self.flushed_position:
            return self.flushed_position
        if least_pages > 0 and target < self.file_size and self.dirty_pages() < least_pages:
            return self.flushed_position
        if not self._closed:
            if self._dir_unsynced:
                fsync_dir(os.path.dirname(self.path) or ".")
                self._dir_unsynced = False
            if MAPPED_WRITES_NEED_MSYNC:
                self._mm.flush()
            fdatasync(self._fd)
        self.flushed_position = target
        return target

    # -- reading ------------------------------------------------------------------------------------
    def view(self, pos: int, size: int) -> memoryview:
        """A zero-copy view of ``size`` bytes at ``pos``."""
        return self.buf[pos : pos + size]

    def last_modified(self) -> float:
        return os.stat(self.path).st_mtime

    # -- lifecycle ----------------------------------------------------------------------------------
    def truncate_tail(self, pos: int) -> None:
        """Zero every byte from ``pos`` to the end of the file, quickly (shrink then regrow: sparse zeros)."""
        self._release_map()
        os.ftruncate(self._fd, pos)
        os.ftruncate(self._fd, self.file_size)
        fsync(self._fd)
        self._mm = mmap.mmap(self._fd, self.file_size)
        self.buf = memoryview(self._mm)
        self.wrote_position = min(self.wrote_position, pos)
        self.flushed_position = min(self.flushed_position, pos)
        self.warmed_position = min(self.warmed_position, pos)  # the tail is sparse again

    def _release_map(self) -> None:
        try:
            self.buf.release()
        except BufferError:
            pass
        try:
            self._mm.close()
        except BufferError:
            # Readers still hold views of it; the mapping goes away when the last view does.
            log.debug("mapping of %s still has readers; leaving it to the garbage collector", self.path)

    def close(self) -> None:
        if self._closed:
            return
        with self._fd_lock:
            if self._closed:  # closed by another thread meanwhile
                return
            self._closed = True
            self._release_map()
            os.close(self._fd)

    def publish(self) -> None:
        """Put a segment made ahead (``ahead=True``) in place under its own name."""
        if self.path != self.final_path:
            os.rename(self.path, self.final_path)
            self.path = self.final_path
            # The rename is made durable by the first flush (in the flush thread), before any byte of this
            # segment is reported flushed: an fsync of the directory here would block the writer.
            self._dir_unsynced = True

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

