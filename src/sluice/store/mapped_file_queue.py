"""An ordered run of equal-sized MappedFiles forming one logical byte space (RocketMQ MappedFileQueue)."""

from __future__ import annotations

import logging
import os
import re
import threading

from sluice.common.errors import StoreError
from sluice.common.files import fsync_dir
from sluice.store.mapped_file import AHEAD_SUFFIX, CREATING_SUFFIX, MappedFile, offset_to_file_name

log = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"^\d{20}$")


class MappedFileQueue:
    """Segments of ``file_size`` bytes in ``directory``.

    ``files`` is replaced, never mutated, so readers can take a snapshot without a lock.
    """

    def __init__(self, directory: str, file_size: int, pwrite_min: int = -1) -> None:
        self.directory = directory
        self.file_size = file_size
        self.pwrite_min = pwrite_min  # passed to every segment (``MappedFile.pwrite_min``)
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.flush_failed: OSError | None = None
        self._lock = threading.Lock()
        self._ahead: MappedFile | None = None  # the next segment, made ahead of need
        self._ahead_lock = threading.Lock()

    def load(self) -> None:
        """Open the segments on disk; every one counts as full until recovery says where writing ends."""
        if not os.path.isdir(self.directory):
            return
        for n in os.listdir(self.directory):
            if n.endswith((CREATING_SUFFIX, AHEAD_SUFFIX)):  # being created, or made ahead: never held data
                os.unlink(os.path.join(self.directory, n))
        names = sorted(n for n in os.listdir(self.directory) if _SEGMENT_NAME.match(n))
        files: list[MappedFile] = []
        for name in names:
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            if size > self.file_size or (size < self.file_size and name != names[-1]):
                for f in files:
                    f.close()
                raise StoreError(f"{path} is {size} bytes but segments here are {self.file_size} bytes; "
                                 "was the store opened with another segment size?")
            mf = MappedFile(path, self.file_size, self.pwrite_min)
            mf.wrote_position = mf.flushed_position = self.file_size
            if files and mf.file_from_offset != files[-1].file_from_offset + self.file_size:
                log.warning("gap in %s before %s", self.directory, name)
            files.append(mf)
        self.files = files

    # -- lookup -------------------------------------------------------------------------------------
    def first(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    def last(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def find_by_offset(self, offset: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        idx = (offset - files[0].file_from_offset) // self.file_size
        if 0 <= idx < len(files):
            mf = files[idx]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        for mf in files:  # only after a gap
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return None

    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].file_from_offset if files else 0

    @property
    def max_offset(self) -> int:
        files = self.files
        return files[-1].file_from_offset + files[-1].wrote_position if files else 0

    # -- writing ------------------------------------------------------------------------------------
    def create_file(self, start_offset: int) -> MappedFile:
        """The segment starting at ``start_offset``: the one made ahead (``prepare_next``) when it is that one,
        else made now."""
        with self._ahead_lock:
            ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.file_from_offset == start_offset:
            try:
                ahead.publish()
                mf = ahead
            except OSError:
                ahead.destroy()
                raise
        else:
            if ahead is not None:
                ahead.destroy()
            os.makedirs(self.directory, exist_ok=True)
            mf = MappedFile(os.path.join(self.directory, offset_to_file_name(start_offset)), self.file_size,
                            self.pwrite_min)
        with self._lock:
            self.files = [*self.files, mf]
        return mf

    def prepare_next(self) -> bool:
        """Make the segment after the last one now, ahead of need (RocketMQ's AllocateMappedFileService), so the
        writer that rolls over finds it ready instead of creating, sizing and syncing it in its put. True when
        one was made; OSError (a full disk: ENOSPC) when it could not be."""
        last = self.last()
        if last is None:
            return False
        want = last.file_from_offset + self.file_size
        with self._ahead_lock:
            if self._ahead is not None and self._ahead.file_from_offset == want:
                return False
        os.makedirs(self.directory, exist_ok=True)
        mf = MappedFile(os.path.join(self.directory, offset_to_file_name(want)), self.file_size, self.pwrite_min,
                        ahead=True)
        with self._ahead_lock:
            stale, self._ahead = self._ahead, mf
        if stale is not None:
            stale.destroy()
        return True

    def has_ahead(self) -> bool:
        """Whether the segment after the last one is made already."""
        last, ahead = self.last(), self._ahead
        return last is not None and ahead is not None and \
            ahead.file_from_offset == last.file_from_offset + self.file_size

    def drop_ahead(self) -> None:
        with self._ahead_lock:
            ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.destroy()

    def last_or_create(self, start_offset: int = 0) -> MappedFile:
        """The segment to append to, creating the next one when the last is full (or there is none)."""
        files = self.files
        if not files:
            return self.create_file(start_offset - start_offset % self.file_size)
        last = files[-1]
        if last.is_full():
            return self.create_file(last.file_from_offset + self.file_size)
        return last

    def flush(self, least_pages: int = 0) -> int:
        """Flush from the segment holding ``flushed_where`` to the last; returns the new ``flushed_where``.

        Once a flush has failed (``flush_failed``), nothing is flushed or counted as flushed any more: after a
        failed fsync the kernel may have dropped the dirty pages and a later fsync succeed without them
        (PostgreSQL's "fsyncgate"), so no later success may vouch for bytes written before it.
        """
        if self.flush_failed is not None:
            return self.flushed_where
        try:
            return self._flush(least_pages)
        except OSError as exc:
            self.flush_failed = exc
            raise

    def _flush(self, least_pages: int) -> int:
        for mf in self.files:
            if mf.file_from_offset + self.file_size <= self.flushed_where:
                continue
            before = mf.flushed_position
            pos = mf.flush(least_pages)
            if pos == before and pos < mf.wrote_position:
                break  # not enough dirty pages yet
            self.flushed_where = mf.file_from_offset + pos
            if pos < self.file_size:
                break
        return self.flushed_where

    # -- shrinking ----------------------------------------------------------------------------------
    def truncate_dirty(self, offset: int) -> None:
        """Drop everything from ``offset`` on: zero the tail of its segment and delete later segments."""
        keep = [mf for mf in self.files if mf.file_from_offset <= offset]
        # Later segments go first, so a crash part-way leaves at most a short *last* segment.
        for mf in reversed(self.files[len(keep):]):
            log.warning("deleting %s: it lies past the valid end %d", mf.path, offset)
            mf.destroy()
        if keep and keep[-1].file_from_offset + self.file_size > offset:
            mf = keep[-1]
            mf.truncate_tail(offset - mf.file_from_offset)
            mf.wrote_position = mf.flushed_position = offset - mf.file_from_offset
        with self._lock:
            self.files = keep
        if os.path.isdir(self.directory):
            fsync_dir(self.directory)
        self.flushed_where = min(self.flushed_where, offset)

    def delete_first_files(self, count: int) -> list[MappedFile]:
        """Remove the ``count`` oldest segments (never the last one); returns what was removed."""
        with self._lock:
            files = self.files
            count = min(count, len(files) - 1)
            if count <= 0:
                return []
            gone, self.files = files[:count], files[count:]
        for mf in gone:
            mf.destroy()
        fsync_dir(self.directory)
        return gone

    def destroy(self) -> None:
        self.drop_ahead()
        with self._lock:
            files, self.files = self.files, []
        for mf in files:
            mf.destroy()

    def close(self) -> None:
        self.drop_ahead()  # made ahead and never used: it would only be deleted at the next start
        for mf in self.files:
            mf.close()
