"""The dispatcher: what consumers are served, and when (RocketMQ's CommitLogDispatcher and ReputMessageService).

A record becomes visible to consumers (pulls, pops, queries by key or offset) when it is dispatched: its
consume-queue and index entries written. That waits until the record is as durable as the store promises
(``dispatch_bound``): flushed under SYNC_FLUSH, held by the in-sync replicas of a master in controller mode,
confirmed by the master on a slave (RocketMQ's confirm offset). Records not yet there wait in ``_held``, in log
order, and ``drain`` dispatches them once they are. Whoever dispatched new queue entries hands their arrivals
to the listeners (the long-polling pulls, the HA service) on the store's event loop.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import sqlite3
import struct
import threading
from collections import deque
from collections.abc import Callable, Collection
from typing import Protocol

import numpy as np

from sluice.common.config import MessageStoreConfig
from sluice.common.errors import MessageFormatError
from sluice.common.message_codec import POS_PHYSICAL_OFFSET, check_record
from sluice.common.naming import LMQ_QUEUE_ID, is_lmq
from sluice.common.sysflag import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE_V1
from sluice.store.commit_log import (
    BatchDispatch,
    CommitLog,
    DispatchRequest,
    dispatch_request_of,
    no_queue_offset,
    queue_advances,
    split_keys,
)
from sluice.store.consume_queue import CQ_ENTRY_DTYPE, ConsumeQueue
from sluice.store.index_file import IndexService
from sluice.store.light_queue_store import LightEntry, LightQueue, LightQueueStore
from sluice.store.put_service import Job, PutService

log = logging.getLogger(__name__)

_SIZE_AND_MAGIC = struct.Struct(">ii")
_I64 = struct.Struct(">q")

# What a write to the disk fails with when the disk (not the store) is at fault: the store turns read-only.
DISK_FAILED = frozenset({errno.EIO, errno.EROFS})

MessageArrivalListener = Callable[[str, int, int], None]
# Records stored but not dispatched yet, in log order: (their end in the log, their dispatch).
HeldGroup = tuple[int, list[DispatchRequest] | BatchDispatch]


class DiskFaults(Protocol):
    """Where a failed write to the disk is reported (the store, which then refuses writes)."""

    def note_no_space(self, what: str, exc: OSError) -> None:
        """The disk had no room for ``what``: writes are refused until there is room again."""

    def fail_writes(self, what: str, exc: BaseException) -> None:
        """The disk failed ``what``: writes are refused until a restart."""


class Dispatcher:
    """The consume queues and the index of a store's commit log, and what of the log they cover."""

    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog, index_service: IndexService,
                 faults: DiskFaults) -> None:
        self.config = config
        self.commit_log = commit_log
        self.index_service = index_service
        self.faults = faults
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        # Light queues in consume-queue files of their own (made before the shared store; read as before).
        self.file_lmq_count = 0
        # Every other light queue (with ``enable_lmq``): one store for all (opened by ``load_consume_queues``).
        self.light: LightQueueStore | None = None
        commit_log.lmq_next = self._lmq_next
        self._putting = 0  # the thread in ``dispatch`` (it holds the put lock), else 0
        self._cq_lock = threading.Lock()
        self.dispatched_offset = 0  # every record below is in the consume queues and index
        # Records below may be read by their commit-log offset (they are as durable as consumers may rely on): moved
        # up just before their entries are written, so that a reader who found an entry also finds its record.
        self.visible_offset = 0
        # SYNC_FLUSH: records are served once flushed (set at the store's start, with its group commit).
        self.sync_flush = False
        # How far the replicas vouch for the log (None: no bound now); records past it are not dispatched yet. A
        # master in controller mode: what its in-sync slaves hold; a slave: what its master says is confirmed.
        self.replica_bound: Callable[[], int | None] | None = None
        self.arrival_listeners: list[MessageArrivalListener] = []
        # Records stored but not yet to be seen, in log order; the log offset up to which records were handed to
        # dispatch (held or done); new queue arrivals for the listeners, taken by whoever dispatched them.
        self._held: deque[HeldGroup] = deque()
        self._held_bytes = 0
        self._reput_offset = 0
        self._arrivals: dict[tuple[str, int], int] = {}
        self._dispatch_lock = threading.Lock()
        self._drain_requested = False
        self._dispatch_error = ""  # the last failure to write entries, logged once until one succeeds
        # The store thread (``request_drain`` hands it a drain), and the loop the arrival listeners live on.
        self.put_service: PutService | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    def load_consume_queues(self) -> None:
        root = self.config.store_path_consume_queue
        if not os.path.isdir(root):
            return
        for topic in sorted(os.listdir(root)):
            tdir = os.path.join(root, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                if not qid.isdigit():
                    continue
                cq = ConsumeQueue(topic, int(qid), root, self._cq_file_size(topic))
                cq.load()
                self.consume_queues[(topic, int(qid))] = cq
                if is_lmq(topic):
                    self.file_lmq_count += 1

    def open_light_queues(self) -> None:
        """Open the shared store of light queues (with ``enable_lmq``, or where one was made before)."""
        store = LightQueueStore(self.config.store_path_root_dir)
        if self.light is None and (self.config.enable_lmq or os.path.exists(store.path)):
            self.light = store.open()

    @property
    def lmq_count(self) -> int:
        """How many light queues are kept (bounded by max_lmq_consume_queue_num)."""
        return self.file_lmq_count + (self.light.count if self.light is not None else 0)

    def _lmq_next(self, name: str) -> int:
        """The next offset of light queue ``name`` as dispatched (the commit log's table holds only those with
        records not dispatched yet)."""
        cq = self.consume_queues.get((name, LMQ_QUEUE_ID))
        if cq is not None:
            return cq.max_offset
        return self.light.next_offset(name) if self.light is not None else 0

    @property
    def _lmq_on(self) -> bool:
        return self.config.enable_lmq and self.config.enable_multi_dispatch

    def _cq_file_size(self, topic: str) -> int:
        c = self.config
        return c.lmq_mapped_file_size_consume_queue if is_lmq(topic) else c.mapped_file_size_consume_queue

    def reput(self) -> None:
        """Hold for dispatch the whole records between ``_reput_offset`` and the log's end (under the put lock)."""
        cl = self.commit_log
        file_size = cl.file_size
        at = max(self._reput_offset, cl.min_offset)  # (a fresh log that starts past 0)
        end = cl.max_offset
        reqs: list[DispatchRequest] = []
        try:
            while at < end:
                mf = cl.queue.find_by_offset(at)
                if mf is None:
                    raise MessageFormatError(f"no commit log segment holds offset {at}")
                pos = at - mf.file_from_offset
                written = mf.wrote_position
                if written - pos < 8:
                    break
                total, magic = _SIZE_AND_MAGIC.unpack_from(mf.buf, pos)
                if magic == BLANK_MAGIC_CODE:
                    if written < file_size:
                        break  # the filler's zeros are still coming
                    check_record(mf.buf, pos, file_size, False)
                    at = mf.file_from_offset + file_size
                    continue
                if magic == MESSAGE_MAGIC_CODE_V1 and 0 < total <= file_size - pos and pos + total > written:
                    break  # the rest of this record is still coming
                size = check_record(mf.buf, pos, written, True)
                if size <= 0:
                    raise MessageFormatError(f"no record at offset {at}")
                if _I64.unpack_from(mf.buf, pos + POS_PHYSICAL_OFFSET)[0] != at:
                    raise MessageFormatError(f"the record at {at} claims another physical offset")
                reqs.append(dispatch_request_of(at, mf.buf[pos:pos + size], self._lmq_on))
                at += size
        except MessageFormatError:
            log.error("replicated bytes at %d are not an intact record: the log is cut back there", at)
            self._note_reput(reqs, at)
            cl.set_end(at)
            raise
        self._note_reput(reqs, at)

    def _note_reput(self, reqs: list[DispatchRequest], at: int) -> None:
        """The replicated records ``reqs``, whole up to ``at``: their queue offsets taken, their dispatch held
        until confirmed (or done now)."""
        table = self.commit_log.topic_queue_table
        for r in reqs:
            table.update(queue_advances(r))
        self._reput_offset = at
        if reqs:
            self._hold_or_dispatch(reqs, reqs[-1].phys_offset + reqs[-1].size)

    def dispatch_bound(self) -> int:
        """How far the log is as durable as consumers may rely on."""
        cl = self.commit_log
        bound = cl.flushed_where if self.sync_flush else cl.max_offset
        rb = self.replica_bound
        if rb is not None:
            replicated = rb()
            if replicated is not None and replicated < bound:
                bound = replicated
        return bound

    def _hold_or_dispatch(self, item: list[DispatchRequest] | BatchDispatch, end: int) -> None:
        """Dispatch the records of ``item`` (ending at ``end``) now if they may be seen, with whatever is held
        before them, else hold them; under the put lock, in log order. A dispatch that fails keeps them held, to
        be tried again (``_dispatch_failed``): the records are stored all the same."""
        with self._dispatch_lock:
            held = self._held
            if not held and end <= self.dispatch_bound():  # the common case: nothing waits
                self.visible_offset = end
                try:
                    self._dispatch_item(item)
                except OSError as exc:
                    self.visible_offset = self.dispatched_offset
                    held.append((end, item))
                    self._held_bytes = end - self.dispatched_offset
                    self._dispatch_failed(exc)
                    return
                self.dispatched_offset = end
                self._dispatch_error = ""
                return
            held.append((end, item))
            self._held_bytes = end - self.dispatched_offset
            if held[0][0] <= self.dispatch_bound():
                self._drain_locked()

    def drain(self) -> int:
        """Dispatch the held records that may be seen now (any thread but an event loop's); returns how many
        groups went. Their arrivals reach the listeners on the store's loop."""
        with self._dispatch_lock:
            self._drain_requested = False
            n = self._drain_locked()
        if n:
            self.deliver_arrivals(self.take_arrivals())
        return n

    def _drain_locked(self) -> int:
        """``drain`` under the dispatch lock; a group leaves ``_held`` only once its entries are written."""
        held = self._held
        if not held:
            return 0
        bound = self.dispatch_bound()
        take: list[tuple[int, list[DispatchRequest] | BatchDispatch]] = []
        for group in held:
            if group[0] > bound:
                break
            take.append(group)
        if not take:
            return 0
        self.visible_offset = take[-1][0]
        try:
            reqs: list[DispatchRequest] = []
            for _end, item in take:
                if isinstance(item, BatchDispatch):
                    if reqs:
                        self._dispatch_item(reqs)
                        reqs = []
                    self._dispatch_item(item)
                else:
                    reqs.extend(item)
            if reqs:
                self._dispatch_item(reqs)
        except OSError as exc:
            self.visible_offset = self.dispatched_offset
            self._dispatch_failed(exc)
            return 0
        for _ in take:
            held.popleft()
        end = take[-1][0]
        self.dispatched_offset = end
        self._held_bytes = held[-1][0] - end if held else 0
        self._dispatch_error = ""
        return len(take)

    def _dispatch_failed(self, exc: OSError) -> None:
        """Writing consume-queue or index entries failed: the records stay held and are tried again at the next
        drain (the next put, the flush service's round). A full disk refuses writes until there is room, a failing
        one for good (a restart rebuilds the queues from the log); anything else (too many open files...) is
        logged once until a dispatch succeeds."""
        if exc.errno == errno.ENOSPC:
            self.faults.note_no_space("the consume queues and index", exc)
        elif exc.errno in DISK_FAILED:
            self.faults.fail_writes("writing the consume queues and index", exc)
        elif not self._dispatch_error:
            self._dispatch_error = str(exc)
            log.error("writing consume-queue or index entries failed (%s): the records stay stored, and are served "
                      "once a later attempt succeeds", exc)

    def request_drain(self) -> None:
        """Have the store thread ``drain`` soon (a replica confirmed more of the log); from any thread."""
        ps = self.put_service
        # (``_held`` is not looked at: a record being held right now, past the bound read before this confirm,
        # must not be left waiting for the next one)
        if ps is None or self._drain_requested:
            return
        self._drain_requested = True
        if not ps.submit(_DrainJob(self)):
            self._drain_requested = False

    @property
    def held_bytes(self) -> int:
        """Bytes of log stored but not yet dispatched (not yet as durable as consumers may rely on)."""
        return self._held_bytes

    def _dispatch_item(self, item: list[DispatchRequest] | BatchDispatch) -> None:
        if isinstance(item, BatchDispatch):
            self._dispatch_batch(item)
        else:
            self._dispatch_requests(item)

    def take_arrivals(self) -> dict[tuple[str, int], int]:
        with self._dispatch_lock:
            arrivals, self._arrivals = self._arrivals, {}
        return arrivals

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop that the arrival listeners live on (the broker's)."""
        if self.loop is not loop:
            self.loop = loop
            self._loop_thread = threading.get_ident()

    def deliver_arrivals(self, arrivals: dict[tuple[str, int], int]) -> None:
        """Tell the arrival listeners, on the store's loop (or here, when there is none)."""
        if not arrivals or not self.arrival_listeners:
            return
        loop = self.loop
        if loop is None or threading.get_ident() == self._loop_thread:
            self.notify_arrivals(arrivals)
            return
        try:
            loop.call_soon_threadsafe(self.notify_arrivals, arrivals)
        except RuntimeError:
            pass  # that loop is closed

    def notify_arrivals(self, arrivals: dict[tuple[str, int], int]) -> None:
        for (topic, queue_id), max_offset in arrivals.items():
            for listener in self.arrival_listeners:
                listener(topic, queue_id, max_offset)

    def recovered(self, end: int, held: list[DispatchRequest]) -> None:
        """Recovery's outcome: the log ends at ``end``; ``held``, its last records, wait to be confirmed."""
        self._reput_offset = end
        self._held.clear()
        if held:
            self.dispatched_offset = self.visible_offset = held[0].phys_offset
            for i in range(0, len(held), 256):  # in groups, so that a confirm part-way through dispatches some
                group = held[i:i + 256]
                self._held.append((group[-1].phys_offset + group[-1].size, group))
            self._held_bytes = end - self.dispatched_offset
            log.info("%d records (%d bytes) at the end of the log wait to be confirmed before they are served",
                     len(held), self._held_bytes)
        else:
            self.dispatched_offset = self.visible_offset = end
            self._held_bytes = 0

    def find_consume_queue(self, topic: str, queue_id: int,
                           create: bool = True) -> ConsumeQueue | LightQueue | None:
        key = (topic, queue_id)
        cq = self.consume_queues.get(key)
        light = self.light
        if cq is None and light is not None and self._in_light(topic, queue_id):
            return light.create(topic) if create else light.find(topic)
        if cq is None and create:
            with self._cq_lock:
                cq = self.consume_queues.get(key)
                if cq is None:
                    cq = ConsumeQueue(topic, queue_id, self.config.store_path_consume_queue,
                                      self._cq_file_size(topic))
                    self.consume_queues = {**self.consume_queues, key: cq}
                    if is_lmq(topic):
                        self.file_lmq_count += 1
        return cq

    def _in_light(self, name: str, queue_id: int = LMQ_QUEUE_ID) -> bool:
        return (self.light is not None and queue_id == LMQ_QUEUE_ID and is_lmq(name)
                and (name, LMQ_QUEUE_ID) not in self.consume_queues)

    def _put_light(self, rows: list[LightEntry]) -> None:
        """Light-queue entries, in one transaction; their arrivals noted, and their queues' next offsets left to
        the light store (the commit log's table keeps only what is not dispatched yet: bounded memory)."""
        assert self.light is not None
        try:
            grown = self.light.put(rows)
        except sqlite3.Error as exc:  # (held and tried again, as a failed consume-queue write)
            full = isinstance(exc, sqlite3.OperationalError) and "full" in str(exc)
            raise OSError(errno.ENOSPC if full else errno.EAGAIN, f"the light-queue store: {exc}") from exc
        for name, nxt in grown.items():
            self._arrivals[(name, LMQ_QUEUE_ID)] = nxt
        # A table entry may go only while no append can move it meanwhile: under the put lock.
        put_lock = self.commit_log.put_lock
        if self._putting == threading.get_ident():
            self._forget_dispatched(grown)
        elif put_lock.acquire(blocking=False):
            try:
                self._forget_dispatched(grown)
            finally:
                put_lock.release()

    def _forget_dispatched(self, grown: dict[str, int]) -> None:
        table = self.commit_log.topic_queue_table
        for name, nxt in grown.items():
            key = (name, LMQ_QUEUE_ID)
            if table.get(key) == nxt:
                del table[key]

    def dispatch(self, reqs: list[DispatchRequest]) -> None:
        """``CommitLog.append``'s dispatcher (under the put lock)."""
        last = reqs[-1]
        self._reput_offset = last.phys_offset + last.size
        self._putting = threading.get_ident()
        try:
            self._hold_or_dispatch(reqs, self._reput_offset)
        finally:
            self._putting = 0

    def dispatch_raw_batch(self, d: BatchDispatch) -> None:
        """``CommitLog.append_raw_batch``'s dispatcher (under the put lock)."""
        self._reput_offset = int(d.phys_offsets[-1] + d.sizes[-1])
        self._putting = threading.get_ident()
        try:
            self._hold_or_dispatch(d, self._reput_offset)
        finally:
            self._putting = 0

    def _dispatch_requests(self, reqs: list[DispatchRequest]) -> None:
        """The consume-queue and index entries of records (under the dispatch lock), in bulk: each queue's
        consecutive entries in one write, each group of records stored at one time indexed at once."""
        if not reqs:
            return
        by_queue: dict[tuple[str, int], list[DispatchRequest]] = {}
        light: list[LightEntry] = []
        for r in reqs:
            if not no_queue_offset(r.sys_flag):
                if self._in_light(r.topic, r.queue_id):
                    light.append((r.topic, r.queue_offset, r.phys_offset, r.size, r.tags_code, r.store_timestamp))
                else:
                    by_queue.setdefault((r.topic, r.queue_id), []).append(r)
            for name, offset in r.lmq:  # (its light queues: an entry in each, at its offset there)
                if self._in_light(name):
                    light.append((name, offset, r.phys_offset, r.size, r.tags_code, r.store_timestamp))
                else:
                    by_queue.setdefault((name, LMQ_QUEUE_ID), []).append(
                        r._replace(topic=name, queue_id=LMQ_QUEUE_ID, queue_offset=offset, lmq=()))
        if light:
            self._put_light(light)
        arrivals = self._arrivals
        for key, rs in by_queue.items():
            cq = self.find_consume_queue(*key)
            assert isinstance(cq, ConsumeQueue)
            if is_lmq(key[0]):  # (an entry a light queue has already is kept: never rewritten from there on)
                end = cq.max_offset
                rs = [r for r in rs if r.queue_offset >= end]
                if not rs:
                    continue
            first = rs[0].queue_offset
            if len(rs) > 1 and all(r.queue_offset == first + i for i, r in enumerate(rs)):
                entries = np.empty(len(rs), CQ_ENTRY_DTYPE)
                entries["offset"] = [r.phys_offset for r in rs]
                entries["size"] = [r.size for r in rs]
                entries["tag"] = [r.tags_code for r in rs]
                cq.put_entries(first, entries)
            else:
                for r in rs:
                    cq.put_entry(r.queue_offset, r.phys_offset, r.size, r.tags_code)
            arrivals[key] = rs[-1].queue_offset + 1
        if self.config.message_index_enable:
            group: list[tuple[str, list[str], str | None, int]] = []
            ts = reqs[0].store_timestamp
            for r in reqs:
                if r.store_timestamp != ts and group:
                    self.index_service.build_index_batch(group, ts)
                    group = []
                ts = r.store_timestamp
                if (r.uniq_key or r.keys) and (r.sys_flag & 0xC) != 0xC:
                    group.append((r.topic, split_keys(r.keys), r.uniq_key, r.phys_offset))
            if group:
                self.index_service.build_index_batch(group, ts)

    def _dispatch_batch(self, d: BatchDispatch) -> None:
        """ConsumeQueue entries and index entries of a raw batch, each in one call (under the dispatch lock)."""
        if self._in_light(d.topic, d.queue_id):
            self._put_light([(d.topic, d.first_queue_offset + i, int(off), int(size), int(tag), int(d.store_timestamp))
                             for i, (off, size, tag)
                             in enumerate(zip(d.phys_offsets, d.sizes, d.tags_codes, strict=True))])
            if len(d.index_hashes):
                self.index_service.put_hashes(d.index_hashes, d.phys_offsets[d.index_records], d.store_timestamp)
            return
        cq = self.find_consume_queue(d.topic, d.queue_id)
        assert isinstance(cq, ConsumeQueue)
        entries = np.empty(len(d.phys_offsets), CQ_ENTRY_DTYPE)
        entries["offset"] = d.phys_offsets
        entries["size"] = d.sizes
        entries["tag"] = d.tags_codes
        cq.put_entries(d.first_queue_offset, entries)
        if len(d.index_hashes):
            self.index_service.put_hashes(d.index_hashes, d.phys_offsets[d.index_records], d.store_timestamp)
        self._arrivals[(d.topic, d.queue_id)] = d.first_queue_offset + len(d.phys_offsets)

    def dispatch_one(self, r: DispatchRequest, index: bool = True) -> None:
        light: list[LightEntry] = []
        if not no_queue_offset(r.sys_flag):
            if self._in_light(r.topic, r.queue_id):
                light.append((r.topic, r.queue_offset, r.phys_offset, r.size, r.tags_code, r.store_timestamp))
            else:
                cq = self.find_consume_queue(r.topic, r.queue_id)
                assert isinstance(cq, ConsumeQueue)
                cq.put_entry(r.queue_offset, r.phys_offset, r.size, r.tags_code)
        for name, offset in r.lmq:  # (recovery: each light queue the record is in, from where it ends)
            if self._in_light(name):
                light.append((name, offset, r.phys_offset, r.size, r.tags_code, r.store_timestamp))
                continue
            lcq = self.find_consume_queue(name, LMQ_QUEUE_ID)
            assert isinstance(lcq, ConsumeQueue)
            if offset >= lcq.max_offset:
                lcq.put_entry(offset, r.phys_offset, r.size, r.tags_code)
        if light:
            self._put_light(light)
        if index and self.config.message_index_enable:
            self._build_index(r)

    def _build_index(self, r: DispatchRequest) -> None:
        if (r.sys_flag & 0xC) == 0xC:  # rolled-back transaction messages are not indexed
            return
        if r.uniq_key or r.keys:
            self.index_service.build_index(r.topic, split_keys(r.keys), r.uniq_key, r.phys_offset,
                                           r.store_timestamp)

    def drop_topics(self, topics: Collection[str]) -> int:
        """Drop the consume queues of ``topics`` and their records not dispatched yet; returns how many queues
        went."""
        gone = 0
        with self.commit_log.put_lock, self._dispatch_lock, self._cq_lock:
            # Records of theirs not yet dispatched never will be (each held group keeps its place in the log).
            self._held = deque((end, (item if item.topic not in topics else []) if isinstance(item, BatchDispatch)
                                else [r for r in item if r.topic not in topics]) for end, item in self._held)
            remaining = dict(self.consume_queues)
            for key in [k for k in remaining if k[0] in topics]:
                remaining.pop(key).destroy()
                self.file_lmq_count -= is_lmq(key[0])
                self.commit_log.topic_queue_table.pop(key, None)
                gone += 1
            self.consume_queues = remaining
            lmqs = [t for t in topics if is_lmq(t)]
            if lmqs and self.light is not None:
                gone += self.light.drop(lmqs)
                for name in lmqs:
                    self.commit_log.topic_queue_table.pop((name, LMQ_QUEUE_ID), None)
        return gone


class _DrainJob(Job):
    """Dispatch what the replicas confirmed (``Dispatcher.request_drain``)."""

    __slots__ = ("dispatcher",)

    def __init__(self, dispatcher: Dispatcher) -> None:
        super().__init__()
        self.dispatcher = dispatcher

    def run(self) -> None:
        self.dispatcher.drain()


__all__ = ["DISK_FAILED", "DiskFaults", "Dispatcher", "MessageArrivalListener"]
