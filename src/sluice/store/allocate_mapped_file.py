"""Make the next commit-log segment ahead of need (RocketMQ AllocateMappedFileService).

Creating a segment — sizing it, reserving its blocks, syncing it and its directory — takes milliseconds; done by
the append that rolls over, it happened under the put lock, on the broker's event loop. This service makes the
next segment as soon as the writer starts a new one, under a temporary name, and the roll only renames it.

It is also the first to hear of a full disk: when the next segment's space cannot be reserved (ENOSPC) the store
refuses writes at once (``MessageStore.note_no_space``), while the current segment still has room, rather than
when a writer reaches its end.
"""

from __future__ import annotations

import errno
import logging
import shutil
from typing import Protocol

from sluice.store.commit_log import CommitLog
from sluice.store.service_thread import ServiceThread

log = logging.getLogger(__name__)


class AllocatingStore(Protocol):
    """What the service uses of the store: its log, and the disk's room."""

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def no_space(self) -> str: ...

    def room_needed(self) -> int: ...

    def note_no_space(self, what: str, exc: OSError) -> None: ...


class AllocateMappedFileService(ServiceThread):
    name = "allocate-mapped-file"

    def __init__(self, store: AllocatingStore, interval: float = 1.0) -> None:
        super().__init__(interval)
        self.store = store
        self.made = 0  # segments made ahead so far (for tests and stats)

    def run_once(self) -> None:
        store = self.store
        if store.no_space or store.commit_log.closed:
            return  # the clean service's disk check wakes this once there is room again
        queue = store.commit_log.queue
        if queue.last() is not None and not queue.has_ahead():
            free = shutil.disk_usage(queue.directory).free
            needed = store.room_needed()
            if free < needed:  # the next segment, and the index and queue files its messages need, would not fit
                store.note_no_space("the next commit-log segment", OSError(
                    errno.ENOSPC, f"{free} bytes free, {needed} needed for the next segment, an index file and "
                                  f"two consume-queue files"))
                return
        try:
            if self.store.commit_log.queue.prepare_next():
                self.made += 1
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                self.store.note_no_space("the next commit-log segment", exc)
            else:
                log.warning("making the next commit-log segment ahead failed (%s); the roll will make it", exc)
