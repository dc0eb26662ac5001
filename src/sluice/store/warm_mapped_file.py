"""Zero-fill the commit log ahead of its writer (RocketMQ ``warmMappedFileEnable``, done progressively).

A segment is created sparse. The first write into a hole makes the file system allocate its block, and the
flush that then covers it must commit that allocation to the journal too: on ext4 an fdatasync of 32 KiB of
records takes ~0.46 ms over holes against ~0.29 ms over blocks written before (docs/benchmarks.md), and a
writer faulting holes in through the mapping makes the kernel read ahead in bursts (a ~20 ms stall every
8 MiB). RocketMQ writes zeros over a whole new segment before using it; this service keeps a window of
``warm_mapped_file_ahead`` bytes past the write position zero-filled and durable, one
``warm_mapped_file_chunk`` at a time (written through an O_DSYNC descriptor, so only that range is flushed),
so it costs no start-up time and only what is about to be written.

Safety: a chunk is chosen under the commit log's put lock, at least one chunk past the write position, and
fenced there (``MappedFile.zero_fence``); an append that would reach the fence waits for the chunk to end
(``CommitLog._segment_for``), so zeros never land on a record.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sluice.store.mapped_file import NO_FENCE
from sluice.store.service_thread import ServiceThread

if TYPE_CHECKING:
    from sluice.store.commit_log import CommitLog

log = logging.getLogger(__name__)

_RETRY_AFTER_ERROR = 10.0  # seconds without warming after a failed fill (a full disk, say)


class WarmMappedFileService(ServiceThread):
    """Keeps the last commit-log segment zero-filled ``ahead`` bytes past its write position."""

    name = "warm-mapped-file"

    def __init__(self, commit_log: CommitLog, ahead: int, chunk: int, interval: float = 0.05) -> None:
        super().__init__(interval)
        self.commit_log = commit_log
        # A chunk at most an eighth of a segment (small segments get filled too), the window at least two.
        self.chunk = min(chunk, max(4096, commit_log.file_size // 8 // 4096 * 4096))
        self.ahead = max(ahead, 2 * self.chunk)
        self._paused_until = 0.0
        self.filled_bytes = 0  # zeros written so far (for tests and stats)
        self.on_no_space: Callable[[str, OSError], None] | None = None  # told of ENOSPC (the store refuses writes)

    def run_once(self) -> None:
        if time.monotonic() < self._paused_until:
            return
        try:
            while not self.stopped and self.warm_next_chunk():
                pass
        except OSError as exc:
            if exc.errno == errno.ENOSPC and self.on_no_space is not None:
                self.on_no_space("zero-filling the commit log ahead", exc)
            log.warning("zero-filling the commit log ahead failed (%s); retrying in %.0f s", exc,
                        _RETRY_AFTER_ERROR)
            self._paused_until = time.monotonic() + _RETRY_AFTER_ERROR

    def warm_next_chunk(self) -> bool:
        """Zero-fill the next chunk of the window; False when the window is full (or there is no segment)."""
        cl = self.commit_log
        with cl.put_lock:
            if cl.closed:
                return False
            mf = cl.queue.last()
            if mf is None:
                return False
            wrote = mf.wrote_position
            chunk = self.chunk
            # At least a whole chunk between the writer and the fence, so appends rarely wait for it; half the
            # window once one had to (a writer faster than the fills: it waits once per half window at most).
            gap = chunk
            if mf.zero_overrun:
                mf.zero_overrun = False
                gap = max(chunk, self.ahead // 2)
            start = max(mf.warmed_position, -(-(wrote + gap) // chunk) * chunk)
            end = min(start + chunk, mf.file_size)
            if start >= end or start >= wrote + self.ahead:
                return False
            mf.zero_fence = start
        ok = False
        try:
            ok = mf.zero_fill(start, end)
        finally:
            with cl.zero_fill_done:
                if ok:
                    mf.warmed_position = end
                    self.filled_bytes += end - start
                mf.zero_fence = NO_FENCE
                cl.zero_fill_done.notify_all()
        return ok
