"""Start-up recovery: find where the valid commit log ends and make the ConsumeQueues and index agree.

From the checkpoint's safe point (the lowest offset below which commit log, consume queues and index
were all flushed) every record's magic, sizes, physical offset and body CRC are checked; the log is
truncated at the first invalid record; consume-queue and index entries are rebuilt for the records
after the safe point; consume-queue entries pointing past the log's end are dropped. After a clean
shutdown the safe point is the log's end, so start-up is immediate.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Protocol

from sluice.common.config import MessageStoreConfig
from sluice.store.checkpoint import StoreCheckpoint
from sluice.store.commit_log import CommitLog, DispatchRequest, dispatch_request_of, queue_advances
from sluice.store.consume_queue import ConsumeQueue
from sluice.store.index_file import IndexService
from sluice.store.light_queue_store import LightQueueStore

log = logging.getLogger(__name__)


class RecoveringStore(Protocol):
    """What recovery uses of the store: its files, and where to dispatch the records it reads back."""

    @property
    def config(self) -> MessageStoreConfig: ...

    @property
    def checkpoint(self) -> StoreCheckpoint: ...

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def index_service(self) -> IndexService: ...

    @property
    def consume_queues(self) -> dict[tuple[str, int], ConsumeQueue]: ...

    @property
    def light_queues(self) -> LightQueueStore | None: ...

    def dispatch_one(self, r: DispatchRequest, index: bool = True) -> None: ...

    def recovered(self, end: int, held: list[DispatchRequest]) -> None: ...

# A restarted slave in controller mode holds at most this much of its log's end until its master confirms it.
HOLD_MAX_BYTES = 64 * 1024 * 1024


def recover(store: RecoveringStore, abnormal: bool, truncate_at: int | None = None,
            hold_from: int | None = None) -> None:
    """``truncate_at``: make the log end there at the latest (a slave whose log diverged from its master's keeps
    only the common part), whatever the checkpoint says; a record that would cross it goes too. ``hold_from``:
    records ending past it are not dispatched but held until confirmed (``MessageStore.drain``), and consume
    queue entries of records past it are dropped: a slave's tail that its master may not have acknowledged."""
    cp = store.checkpoint
    commit_log = store.commit_log
    cfg = store.config
    queue = commit_log.queue
    if not queue.files:
        start = 0
    else:
        start = cp.recover_from if cp.valid else queue.min_offset
        last_end = queue.files[-1].file_from_offset + commit_log.file_size
        if start < queue.min_offset or start > last_end:
            start = queue.min_offset
    if hold_from is not None:
        start = max(min(start, hold_from), queue.min_offset if queue.files else 0)
    if truncate_at is not None:  # (from the start of its segment: a cut inside a record drops that record)
        start = max(min(start, truncate_at - truncate_at % commit_log.file_size),
                    queue.min_offset if queue.files else 0)
        abnormal = True  # index entries past the cut are dropped below, as after a crash
    if abnormal:
        log.warning("the store was not shut down cleanly: checking the commit log from offset %d", start)
    # Index entries are trusted only for messages below both the last index flush and the last log flush: an
    # index entry may outlive, in a power loss, the unflushed message it points to.
    index_from = min(cp.index_safe_offset, cp.physic_safe_offset) if cp.valid else 0
    if truncate_at is not None:
        index_from = min(index_from, start)
    if abnormal:
        dropped = store.index_service.keep_below(index_from)
        if dropped:
            log.warning("index: dropped %d entries of messages from offset %d to index them again", dropped,
                        index_from)
    records = 0
    end = -1
    held: deque[DispatchRequest] = deque()
    for phys, record in commit_log.scan(start, cfg.check_crc_on_recover):
        if truncate_at is not None and phys + len(record) > truncate_at:
            end = phys
            del record
            break
        req = dispatch_request_of(phys, record, cfg.enable_lmq and cfg.enable_multi_dispatch)
        if hold_from is not None and phys + len(record) > hold_from:
            held.append(req)
            # Held: the log's last HOLD_MAX_BYTES at most (memory stays bounded whatever the checkpoint says).
            while held[-1].phys_offset + held[-1].size - held[0].phys_offset > HOLD_MAX_BYTES:
                old = held.popleft()
                store.dispatch_one(old, index=old.phys_offset >= index_from)
        else:
            store.dispatch_one(req, index=phys >= index_from)
        records += 1
        del record
    if held:
        hold_from = held[0].phys_offset
    if end < 0:
        end = commit_log.scan_end if truncate_at is None else min(commit_log.scan_end, truncate_at)
    if truncate_at is not None and queue.max_offset > end:
        log.warning("commit log: cut at %d to agree with the master (%d bytes dropped)", end, queue.max_offset - end)
    if commit_log.scan_error:
        log.warning("commit log: %s; truncating there (%d bytes dropped from the tail)", commit_log.scan_error,
                    max(0, queue.max_offset - end))
    commit_log.set_end(end)
    # What was read back is durable from here on (one fsync of the segment being written).
    last = queue.last()
    if last is not None:
        last.flushed_position = 0
        last.flush()
    queue.flushed_where = end
    if records:
        log.info("recovery dispatched %d records from offset %d; commit log ends at %d", records, start, end)
    visible_end = end if hold_from is None else min(end, hold_from)
    for cq in list(store.consume_queues.values()):
        dropped = cq.truncate_past(visible_end)
        if dropped and visible_end == end:
            log.warning("consume queue %s/%d: dropped %d entries past the commit log end", cq.topic, cq.queue_id,
                        dropped)
        cq.correct_min_offset(queue.min_offset)
    light = store.light_queues
    if light is not None:
        dropped = light.truncate_from(visible_end)
        if dropped and visible_end == end:
            log.warning("light queues: dropped %d entries past the commit log end", dropped)
    table = {(cq.topic, cq.queue_id): cq.max_offset for cq in store.consume_queues.values()}
    kept = [r for r in held if r.phys_offset < end]
    for r in kept:
        table.update(queue_advances(r))
    commit_log.topic_queue_table = table
    store.recovered(end, kept)
