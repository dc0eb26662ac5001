"""The reader: a store's messages by queue offset, by commit-log offset, by key and by time (the reading half of
RocketMQ's DefaultMessageStore). Records come as views of the mapped commit log, never copies; what a client asks
for is served only once dispatched (see ``sluice.store.dispatcher``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from sluice.common.config import MessageStoreConfig
from sluice.common.errors import MessageFormatError
from sluice.common.message import MessageExt
from sluice.common.message_codec import decode_record
from sluice.store.commit_log import CommitLog
from sluice.store.consume_queue import BLANK_ENTRY_SIZE
from sluice.store.dispatcher import Dispatcher
from sluice.store.index_file import IndexService
from sluice.store.mapped_file import MappedFile
from sluice.store.results import GetMessageResult, GetMessageStatus

# Whether the stored record at a position of a commit-log segment's buffer is to be served (a property filter).
RecordFilter = Callable[[memoryview, int], bool]
# From this many entries a pull is cheaper read in bulk with numpy (~20 µs whatever the count) than record
# by record (~0.3 µs a record plus ~4 µs).
BULK_READ_MIN_ENTRIES = 64


@dataclass(slots=True)
class QueryMessageResult:
    """Messages found by key, newest first, as decoded messages and as their stored bytes."""

    messages: list[MessageExt] = field(default_factory=list)
    buffers: list[memoryview] = field(default_factory=list)


class MessageReader:
    """Reads of a store's commit log through its consume queues and index (``Dispatcher``)."""

    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog, index_service: IndexService,
                 dispatcher: Dispatcher) -> None:
        self.config = config
        self.commit_log = commit_log
        self.index_service = index_service
        self.dispatcher = dispatcher

    def get_messages(self, group: str, topic: str, queue_id: int, offset: int, max_count: int,
                     tag_codes: Collection[int] | None = None,
                     record_filter: RecordFilter | None = None) -> GetMessageResult:
        """Up to ``max_count`` stored records of a queue from ``offset``, filtered by tags codes.

        ``tag_codes`` None means every message; otherwise only messages whose ConsumeQueue tags code is in it
        (an empty set: none). ``record_filter(buf, pos)``, when given, is asked about each record (at ``pos`` of
        the segment's ``buf``) that passed the tags codes (RocketMQ's isMatchedByCommitLog). Records come as
        views of the mapped commit log, never copies.
        """
        c = self.config
        cq = self.dispatcher.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off, max_off = cq.min_offset, cq.max_offset
        if max_off == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, min_off if min_off == 0 else max_off,
                                    min_off, max_off)
        max_count = max(1, min(max_count, c.max_transfer_count_on_message_in_memory))
        filtered = tag_codes is not None or record_filter is not None
        entries = cq.get_entries(offset, max(c.max_filter_message_count // 20, max_count) if filtered else max_count)
        if len(entries) == 0:
            next_file = (offset // cq.entries_per_file + 1) * cq.entries_per_file
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_file, min_off, max_off)
        if not filtered and len(entries) >= BULK_READ_MIN_ENTRIES:
            fast = self._read_contiguous(entries, offset, max_count, min_off, max_off)
            if fast is not None:
                return fast
        rel: Sequence[int]
        if tag_codes is not None:
            picked = np.flatnonzero(np.isin(entries["tag"], np.fromiter(tag_codes or (), np.int64)))
            rel = picked.tolist()
            phys = entries["offset"][picked].tolist()
            sizes = entries["size"][picked].tolist()
        else:
            rel = range(len(entries))
            phys = entries["offset"].tolist()
            sizes = entries["size"].tolist()
        scanned = len(entries)
        del entries
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, 0, min_off, max_off)
        buffers, queue_offsets = result.buffers, result.queue_offsets
        max_bytes = c.max_transfer_bytes_on_message_in_memory
        min_phy = self.commit_log.min_offset
        total = 0
        removed = 0
        seg: MappedFile | None = None
        seg_start = seg_end = wrote = 0
        run_start = run_end = -1  # the run of records lying end to end that becomes one view
        for i, off, size in zip(rel, phys, sizes, strict=True):
            if size == BLANK_ENTRY_SIZE or off < min_phy:
                removed += 1
                continue
            if queue_offsets and (len(queue_offsets) >= max_count or total + size > max_bytes):
                scanned = queue_offsets[-1] - offset + 1
                break
            if not seg_start <= off < seg_end:
                if run_end >= 0:
                    buffers.append(seg.buf[run_start:run_end])  # type: ignore[union-attr]
                    run_start = run_end = -1
                seg = self.commit_log.queue.find_by_offset(off)
                if seg is None:
                    seg_start = seg_end = 0
                    removed += 1
                    continue
                seg_start = seg.file_from_offset
                seg_end = seg_start + seg.file_size
                wrote = seg.wrote_position
            pos = off - seg_start
            if pos + size > wrote:
                removed += 1
                continue
            if record_filter is not None and not record_filter(seg.buf, pos):  # type: ignore[union-attr]
                continue
            if pos != run_end:
                if run_end >= 0:
                    buffers.append(seg.buf[run_start:run_end])  # type: ignore[union-attr]
                run_start = pos
            run_end = pos + size
            queue_offsets.append(offset + i)
            total += size
        if run_end >= 0:
            buffers.append(seg.buf[run_start:run_end])  # type: ignore[union-attr]
        result.next_begin_offset = offset + scanned
        result.buffer_total_size = total
        if buffers:
            result.status = GetMessageStatus.FOUND
        elif removed and removed == len(sizes):
            result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
        return result

    def _read_contiguous(self, entries: np.ndarray, offset: int, max_count: int, min_off: int,
                         max_off: int) -> GetMessageResult | None:
        """``get_messages`` without a filter when every entry is a live record of one segment, in bulk: the
        caps applied with numpy, and each run of records that lie end to end served as one view. None when
        some entry needs ``get_messages``' record-by-record walk (removed records, a segment boundary)."""
        offs = entries["offset"].astype(np.int64)
        sizes = entries["size"].astype(np.int64)
        first = int(offs[0])
        seg = self.commit_log.queue.find_by_offset(first)
        if seg is None or first < self.commit_log.min_offset or (sizes == BLANK_ENTRY_SIZE).any():
            return None
        totals = np.cumsum(sizes)
        take = min(max_count, len(offs),
                   max(1, int(np.searchsorted(totals, self.config.max_transfer_bytes_on_message_in_memory, "right"))))
        offs, sizes = offs[:take], sizes[:take]
        seg_start = seg.file_from_offset
        ends = offs + sizes
        if int(offs.min()) < seg_start or int(ends.max()) > seg_start + seg.wrote_position:
            return None
        breaks = (np.flatnonzero(offs[1:] != ends[:-1]) + 1).tolist()
        buf = seg.buf
        starts_at = offs[[0, *breaks]].tolist()
        ends_at = ends[[b - 1 for b in breaks] + [take - 1]].tolist()
        return GetMessageResult(GetMessageStatus.FOUND, offset + take, min_off, max_off,
                                [buf[a - seg_start:b - seg_start] for a, b in zip(starts_at, ends_at, strict=True)],
                                list(range(offset, offset + take)), int(totals[take - 1]))

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.dispatcher.find_consume_queue(topic, queue_id, create=False)
        return cq.max_offset if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.dispatcher.find_consume_queue(topic, queue_id, create=False)
        return cq.min_offset if cq else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, queue_offset: int) -> int:
        cq = self.dispatcher.find_consume_queue(topic, queue_id, create=False)
        entry = cq.get_entry(queue_offset) if cq else None
        return entry[0] if entry else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` ms (max offset if none)."""
        cq = self.dispatcher.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp, self.commit_log.store_timestamp_at)

    def get_message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        cq = self.dispatcher.find_consume_queue(topic, queue_id, create=False)
        entry = cq.get_entry(queue_offset) if cq else None
        if entry is None or entry[1] == BLANK_ENTRY_SIZE:
            return -1
        ts = self.commit_log.store_timestamp_at(entry[0], entry[1])
        return -1 if ts is None else ts

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the oldest message still in the queue; -1 when there is none."""
        cq = self.dispatcher.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return -1
        for off in range(cq.min_offset, cq.max_offset):
            ts = self.get_message_store_timestamp(topic, queue_id, off)
            if ts >= 0:
                return ts
        return -1

    def select_one_message_by_offset(self, phys_offset: int, size: int | None = None,
                                     visible_only: bool = False) -> memoryview | None:
        """The stored record at ``phys_offset`` (a view), or None when there is no intact record there.
        ``visible_only`` (what a client asks for: a message by its id): None too for a record consumers may not
        see yet (not as durable as the broker's mode promises: ``dispatch_bound``); the broker's own services
        read their records as soon as they are stored."""
        if size is None:
            size = self.commit_log.record_size_at(phys_offset)
            if size is None:
                return None
        limit = self.dispatcher.visible_offset if visible_only else self.commit_log.max_offset
        if phys_offset < self.commit_log.min_offset or phys_offset + size > limit:
            return None
        return self.commit_log.get_data(phys_offset, size)

    def look_message_by_offset(self, phys_offset: int, size: int | None = None,
                               visible_only: bool = False) -> MessageExt | None:
        view = self.select_one_message_by_offset(phys_offset, size, visible_only)
        if view is None:
            return None
        try:
            return decode_record(view)
        except MessageFormatError:
            return None

    def query_message(self, topic: str, key: str, max_num: int | None = None, begin: int = 0,
                      end: int | None = None) -> QueryMessageResult:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY is ``key``, stored in [begin, end] ms, newest first."""
        limit = min(max_num or self.config.max_msgs_num_batch, self.config.max_msgs_num_batch)
        end = int(time.time() * 1000) + 1000 if end is None else end
        out = QueryMessageResult()
        seen: set[int] = set()
        # Ask for more than the limit: stale or colliding index entries are dropped below.
        for phys in self.index_service.query(topic, key, limit * 4, begin, end):
            if phys in seen:
                continue
            seen.add(phys)
            view = self.select_one_message_by_offset(phys, visible_only=True)
            if view is None:
                continue
            try:
                msg = decode_record(view)
            except MessageFormatError:
                continue
            if msg.topic != topic or (msg.uniq_key != key and key not in msg.keys):
                continue
            out.messages.append(msg)
            out.buffers.append(view)
            if len(out.messages) >= limit:
                break
        return out


__all__ = ["BULK_READ_MIN_ENTRIES", "MessageReader", "QueryMessageResult", "RecordFilter"]
