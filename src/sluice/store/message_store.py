"""MessageStore: the facade the broker uses (RocketMQ DefaultMessageStore).

Open it (``MessageStore(config).start()`` or ``with MessageStore(config) as store``), put messages,
get them back by queue offset, by commit-log offset, by key or by time, and shut it down.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import logging
import os
import shutil
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol, TypeVar

import numpy as np

from sluice.common.config import FlushDiskType, MessageStoreConfig
from sluice.common.config_loader import check
from sluice.common.errors import InvalidNameError, MessageFormatError, StoreConfigError, StoreLockedError
from sluice.common.files import fsync_dir
from sluice.common.message import MessageExt, MessageExtBrokerInner
from sluice.common.message_codec import POS_PHYSICAL_OFFSET, check_record, decode_record
from sluice.common.naming import validate_topic
from sluice.common.properties import PROPERTY_WAIT_STORE_MSG_OK
from sluice.common.sysflag import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE_V1
from sluice.store.allocate_mapped_file import AllocateMappedFileService
from sluice.store.checkpoint import StoreCheckpoint
from sluice.store.commit_log import (
    AppendResult,
    BatchDispatch,
    CommitLog,
    CommitLogClosed,
    DispatchRequest,
    PropertiesTooLarge,
    RawBatch,
    ReplicationGap,
    SegmentOverflow,
    dispatch_request_of,
    no_queue_offset,
    split_keys,
)
from sluice.store.consume_queue import BLANK_ENTRY_SIZE, CQ_ENTRY_DTYPE, ConsumeQueue
from sluice.store.consumer_offset_manager import ConsumerOffsetManager
from sluice.store.flush import (
    FlushConsumeQueueService,
    FlushRealTimeService,
    FlushStats,
    FlushWaiter,
    GroupCommitService,
)
from sluice.store.index_file import IndexService, index_file_size
from sluice.store.put_service import OVERLOAD, CallJob, Job, PutService
from sluice.store.recovery import recover
from sluice.store.results import GetMessageResult, GetMessageStatus, PutMessageResult, PutMessageStatus
from sluice.store.retention import CleanCommitLogService, disk_usage_ratio
from sluice.store.warm_mapped_file import WarmMappedFileService

log = logging.getLogger(__name__)
T = TypeVar("T")

_SIZE_AND_MAGIC = struct.Struct(">ii")
_I64 = struct.Struct(">q")

MessageArrivalListener = Callable[[str, int, int], None]
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


@lru_cache(maxsize=4096)
def _topic_problem(topic: str) -> str | None:
    try:
        validate_topic(topic)
    except InvalidNameError as exc:
        return str(exc)
    return None


def _merge_arrivals(into: dict[tuple[str, int], int], arrivals: dict[tuple[str, int], int]) -> None:
    for key, max_offset in arrivals.items():
        if into.get(key, -1) < max_offset:
            into[key] = max_offset


# A put: messages stored as consecutive records, or a SEND_BATCH_MESSAGE body stored as it came.
Put = list[MessageExtBrokerInner] | RawBatch
# How a put is answered: ``done(i, result)`` for the i-th put of a call.
PutDone = Callable[[int, PutMessageResult], None]


def _waits(put: Put) -> bool:
    """Whether a put's sender waits for its durability: unless every message says WAIT=false (a raw batch's
    WAIT comes with the request's properties)."""
    if isinstance(put, RawBatch):
        return put.extra_properties.get(PROPERTY_WAIT_STORE_MSG_OK) != "false"
    return any(m.wait_store_msg_ok for m in put)


# What a wait for the slaves ended with: None when one has the bytes, else the status and remark to answer.
ReplicaOutcome = tuple[PutMessageStatus, str] | None


class ReplicationWaiter(Protocol):
    """A SYNC_MASTER's wait for its slaves (``sluice.store.ha.ha_service``): one call per group of puts."""

    def wait_for_replicas(self, end_offset: int, callback: Callable[[ReplicaOutcome], None],
                          deadline: float | None = None) -> None:
        """On the event loop: ``callback`` once the in-sync slaves have the log up to ``end_offset``, or why not
        (FLUSH_SLAVE_TIMEOUT by ``deadline``, the loop's clock, at the latest)."""

    def wait_for_replicas_threadsafe(self, end_offset: int, callback: Callable[[ReplicaOutcome], None]) -> None:
        """The same from another thread; ``callback`` runs on the event loop."""


class MessageStore:
    """CommitLog + ConsumeQueues + IndexFiles + checkpoint, with flush, recovery and retention services."""

    def __init__(self, config: MessageStoreConfig | None = None, **overrides: object) -> None:
        cfg = config or MessageStoreConfig()
        self.config = check(cfg.replace(**overrides) if overrides else cfg, "message store config")
        c = self.config
        self.root = c.store_path_root_dir
        self.commit_log = CommitLog(c)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.index_service = IndexService(c.store_path_index, c.max_hash_slot_num, c.max_index_num)
        self.checkpoint = StoreCheckpoint(os.path.join(self.root, "checkpoint"))
        self.consumer_offsets = ConsumerOffsetManager(c.store_path_config)
        self.dispatched_offset = 0  # every record below is in the consume queues and index
        # Records below may be read by their commit-log offset (they are as durable as consumers may rely on): moved
        # up just before their entries are written, so that a reader who found an entry also finds its record.
        self.visible_offset = 0
        self.flush_stats = FlushStats()
        self.arrival_listeners: list[MessageArrivalListener] = []
        self.append_listeners: list[Callable[[], None]] = []  # the log grew (called on the thread that appended)
        self.disk_full = False
        self.disk_full_remark = ""
        # Set when the disk had no room for what the next appends need (ENOSPC making the next segment ahead,
        # or writing); cleared by ``check_disk_space`` once there is room again.
        self.no_space = ""
        # Set, for good, by the first failed fsync (``fail_writes``): the store refuses writes with it until a
        # restart, which recovers from the log as after a crash.
        self.write_failure = ""
        self.write_failure_listeners: list[Callable[[], None]] = []  # called once, from the failing thread
        self._failure_lock = threading.Lock()
        # Replication (``sluice.store.ha``): a slave's store takes no put, only the master's bytes
        # (``append_replicated``); a SYNC_MASTER's puts wait for ``replication`` too; ``write_guard`` says why
        # a master may not take writes now (a fenced master whose lease ran out), checked at every put.
        self.slave_mode = False
        self.replication: ReplicationWaiter | None = None
        self.write_guard: Callable[[], str] | None = None
        # How far the replicas vouch for the log (None: no bound now); records past it are not dispatched yet. A
        # master in controller mode: what its in-sync slaves hold; a slave: what its master says is confirmed.
        self.replica_bound: Callable[[], int | None] | None = None
        # Dispatch (see ``dispatch_bound``): records stored but not yet to be seen, in log order, as (end, item);
        # the log offset up to which records were handed to dispatch (held or done); new queue arrivals for the
        # listeners, taken by whoever dispatched them.
        self._held: deque[tuple[int, list[DispatchRequest] | BatchDispatch]] = deque()
        self._held_bytes = 0
        self._reput_offset = 0
        self._arrivals: dict[tuple[str, int], int] = {}
        self._dispatch_lock = threading.Lock()
        self._drain_requested = False
        self._dispatch_error = ""  # the last failure to write entries, logged once until one succeeds
        # The writer thread event loops hand their writes to, and the loop the arrival listeners live on.
        self.put_service: PutService | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self.running = False
        self.abnormal_start = False
        self._lock_fd: int | None = None
        self._cq_lock = threading.Lock()
        self._services: list = []
        self._group_commit: GroupCommitService | None = None
        self._logics_flush_lock = threading.Lock()

    # == lifecycle ===================================================================================
    def start(self, truncate_at: int | None = None, hold_unconfirmed: bool = False) -> MessageStore:
        """Open and recover the store; ``truncate_at``: cut the log there (a slave agreeing with its master);
        ``hold_unconfirmed``: dispatch only the records the last checkpoint knew as dispatched, and hold the rest
        until ``replica_bound`` confirms them (a slave, whose tail its master may not have acknowledged)."""
        c = self.config
        os.makedirs(self.root, exist_ok=True)
        self._acquire_lock()
        try:
            self.consumer_offsets.load()
            self.commit_log.queue.load()
            self._load_consume_queues()
            self.index_service.load()
            cp_path = self.checkpoint.path
            self.checkpoint = StoreCheckpoint.load(cp_path)
            if os.path.exists(cp_path) and not self.checkpoint.valid and self.commit_log.queue.files:
                log.warning("checkpoint %s is damaged: recovering from the first commit log segment", cp_path)
            abort_path = os.path.join(self.root, "abort")
            self.abnormal_start = os.path.exists(abort_path) or (
                bool(self.commit_log.queue.files) and self.checkpoint.clean_shutdown_offset < 0)
            hold_from = None
            if hold_unconfirmed:  # (an invalid checkpoint: from the start, but recovery holds a bounded tail)
                hold_from = self.checkpoint.logics_safe_offset if self.checkpoint.valid else 0
            recover(self, self.abnormal_start, truncate_at, hold_from)
            self.checkpoint.clean_shutdown_offset = -1
            # What recovery rebuilt must be on disk before the checkpoint says it is.
            self.flush_logics_and_checkpoint(0)
            with open(abort_path, "wb") as f:
                os.fsync(f.fileno())
            fsync_dir(self.root)
        except BaseException:
            self._close_files()
            self._release_lock()
            raise
        self.check_disk_space()
        if c.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._group_commit = GroupCommitService(self)
            self._services.append(self._group_commit)
        else:
            self._services.append(FlushRealTimeService(self))
        self._services.append(FlushConsumeQueueService(self))
        self.clean_service = CleanCommitLogService(self)
        self._services.append(self.clean_service)
        self.allocate_service = AllocateMappedFileService(self)
        self._services.append(self.allocate_service)
        self.commit_log.on_roll = self.allocate_service.wakeup
        if c.warm_mapped_file_enable:
            warm = WarmMappedFileService(self.commit_log, c.warm_mapped_file_ahead, c.warm_mapped_file_chunk)
            warm.on_no_space = self.note_no_space
            self._services.append(warm)
        if hold_unconfirmed and self.replica_bound is None:
            self.replica_bound = _nothing_confirmed  # until the master says (a slave's HA client sets it)
        c = self.config
        self.put_service = PutService(c.send_thread_pool_queue_capacity, c.wait_time_ms_in_send_queue,
                                      c.os_page_cache_busy_timeout_ms, c.broker_fast_failure_enable,
                                      c.sync_flush_timeout)
        self.put_service.start()
        for s in self._services:
            s.start()
        self.running = True
        return self

    @property
    def sync_flush(self) -> bool:
        """True when puts are acknowledged only after their bytes are fsynced (SYNC_FLUSH)."""
        return self._group_commit is not None

    def __enter__(self) -> MessageStore:
        return self if self.running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def fail_writes(self, what: str, exc: BaseException) -> None:
        """A flush failed: refuse every write from now on (the waiting ones fail too), write the checkpoint no
        more, and leave the abort file at shutdown, so that the next start recovers from the log, checking every
        record's CRC, from the last checkpoint written before the failure. No later flush may count: once an
        fsync failed, the kernel may have dropped the dirty pages, and the next one succeed without them."""
        with self._failure_lock:
            if self.write_failure:
                return
            self.checkpoint.frozen = True
            self.commit_log.queue.flush_failed = self.commit_log.queue.flush_failed or OSError(str(exc))
            self.write_failure = (f"the broker's store could not be flushed ({what}: {exc}): it accepts no writes "
                                  f"until it is restarted")
        log.critical("%s failed: %s. The store is READ-ONLY from now on: no write is accepted or acknowledged "
                     "until the broker is restarted, and the restart recovers from the commit log, checking every "
                     "record since the last good checkpoint.", what, exc)
        for listener in self.write_failure_listeners:
            try:
                listener()
            except Exception:
                log.exception("a write-failure listener failed")

    def shutdown(self) -> None:
        """Flush everything, write a clean checkpoint and remove the abort file (not after a failed flush: then
        the next start recovers as after a crash)."""
        if not self.running:
            return
        self.running = False
        if self.put_service is not None:  # what is queued is answered (refused: the store is shut down)
            self.put_service.stop()
        with self.commit_log.put_lock:  # let an append in progress finish; later ones are refused
            self.commit_log.closed = True
        for s in reversed(self._services):
            s.stop()
        self._services.clear()
        if self.write_failure:
            self.consumer_offsets.persist(force=True)
            log.warning("store %s shut down after a failed flush: the abort file stays, the next start recovers "
                        "from the commit log", self.root)
            self._close_files()
            self._release_lock()
            return
        self.commit_log.queue.flush()
        self.flush_logics_and_checkpoint(0)
        self.consumer_offsets.persist(force=True)
        self.checkpoint.clean_shutdown_offset = self.commit_log.max_offset
        self.checkpoint.flush()
        try:
            os.unlink(os.path.join(self.root, "abort"))
            fsync_dir(self.root)
        except FileNotFoundError:
            pass
        self._close_files()
        self._release_lock()

    def _acquire_lock(self) -> None:
        fd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise StoreLockedError(f"store {self.root} is in use by another process") from exc
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _close_files(self) -> None:
        self.commit_log.close()
        for cq in self.consume_queues.values():
            cq.close()
        self.index_service.close()

    def _load_consume_queues(self) -> None:
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
                cq = ConsumeQueue(topic, int(qid), root, self.config.mapped_file_size_consume_queue)
                cq.load()
                self.consume_queues[(topic, int(qid))] = cq

    # == writing =====================================================================================
    # One put path (``_put``); ``put_then`` (a caller on an event loop: the broker), ``put_async`` (a task)
    # and ``put`` (a thread) only differ in how they wait for the group commit.
    def _refusal(self) -> PutMessageResult | None:
        """Why the store takes no put now, if it takes none."""
        if not self.running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, "the message store is shut down")
        if self.slave_mode:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                    "message store is slave mode, so putMessage is forbidden")
        if self.write_guard is not None:
            why = self.write_guard()
            if why:
                return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, why)
        if self.write_failure:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.write_failure)
        if self.no_space:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.no_space)
        if self.disk_full:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.disk_full_remark)
        return None

    def _check(self, put: Put) -> PutMessageResult | None:
        refused = self._refusal()
        if refused is not None:
            return refused
        if isinstance(put, RawBatch):
            return self._check_raw(put)
        c = self.config
        if not put:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, "no message to put")
        for m in put:
            problem = _topic_problem(m.topic)
            if problem:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, problem)
            if len(m.body) > c.max_message_size:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                        f"message body of {len(m.body)} bytes exceeds max_message_size "
                                        f"{c.max_message_size}")
            if m.queue_id < 0:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, f"queue id {m.queue_id} is negative")
        return None

    def _check_raw(self, batch: RawBatch) -> PutMessageResult | None:
        cols = batch.columns
        if not cols.count:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, "no message to put")
        problem = _topic_problem(batch.topic)
        if problem:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, problem)
        if batch.queue_id < 0:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, f"queue id {batch.queue_id} is negative")
        limit = self.config.max_message_size
        too_big = np.flatnonzero(cols.props_len_pos - cols.body_start > limit)
        if len(too_big):
            i = int(too_big[0])
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    f"message {i} of the batch has a body of "
                                    f"{int(cols.props_len_pos[i] - cols.body_start[i])} bytes, over max_message_size "
                                    f"{limit}")
        return None

    def _append_checked(self, put: Put) -> PutMessageResult | AppendResult:
        """Append a put ``_check`` passed, turning what the append raises into the sender's answer."""
        try:
            if isinstance(put, RawBatch):
                return self.commit_log.append_raw_batch(put, self._dispatch_raw_batch)
            return self.commit_log.append(put, self._dispatch)
        except SegmentOverflow as exc:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, str(exc))
        except CommitLogClosed as exc:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, str(exc))
        except PropertiesTooLarge as exc:
            return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, str(exc))
        except (MessageFormatError, UnicodeEncodeError, struct.error) as exc:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, str(exc))
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                self.note_no_space("writing the commit log", exc)
                return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.no_space)
            if exc.errno in _DISK_FAILED:  # the disk failed the write: as a failed fsync, for good
                self.fail_writes("writing the commit log", exc)
                return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.write_failure)
            log.exception("commit log append failed")
            return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, f"cannot write: {exc}")

    def waits_for_flush(self, put: Put) -> bool:
        """Whether a put answers only after a group commit: SYNC_FLUSH, unless every message says WAIT=false
        (a raw batch's WAIT comes with the request's properties)."""
        if self._group_commit is None:
            return False
        return _waits(put)

    def waits_for_replicas(self, put: Put) -> bool:
        """Whether a put answers only once a slave has its bytes (SYNC_MASTER), WAIT as for the flush."""
        return self.replication is not None and _waits(put)

    def _waits_any(self, put: Put) -> bool:
        return self.waits_for_flush(put) or self.waits_for_replicas(put)

    def _finish_put(self, r: AppendResult, n: int, flushed: bool,
                    replicated: ReplicaOutcome = None) -> PutMessageResult:
        """The answer to a stored put; never raises (the records are stored whatever happens here).
        ``replicated``: what the wait for the slaves ended with, when it did not end well."""
        try:
            result = PutMessageResult(PutMessageStatus.PUT_OK, "", r.wrote_offset, r.wrote_bytes, r.queue_offset, n,
                                      r.store_timestamp, r.phys_offsets)
            if flushed and replicated is not None:
                result.status, result.remark = replicated
            elif not flushed:
                if self.write_failure:  # not durable, and never to be: the send failed
                    result.status, result.remark = PutMessageStatus.SERVICE_NOT_AVAILABLE, self.write_failure
                else:
                    result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
                    result.remark = f"not flushed within {self.config.sync_flush_timeout} ms"
            return result
        except Exception as exc:
            log.exception("finishing a put failed")
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, f"{type(exc).__name__}: {exc}")

    def put_then(self, puts: Sequence[Put], done: PutDone) -> None:
        """Store ``puts`` (each a list of messages, stored as consecutive records, or a raw batch), their records
        in the log in the order given, for a client's request made on a running event loop that may not block.
        ``done(i, result)`` answers ``puts[i]`` on that loop once the store thread has appended it (and, when its
        sender waits for that, once it is flushed: FLUSH_DISK_TIMEOUT after ``sync_flush_timeout``). Consecutive
        message puts are one append and one flush wait; a put the store refuses does not touch the others. Under
        back-pressure (``PutService``) every put is answered SYSTEM_BUSY and nothing is stored."""
        loop = asyncio.get_running_loop()
        self.bind_loop(loop)
        ps = self.put_service
        if ps is None:
            refused = self._refusal() or PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, "not started")
            for i in range(len(puts)):
                done(i, refused)
            return
        why = ps.admit()
        if why:
            busy = PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY, why)
            for i in range(len(puts)):
                done(i, busy)
            return
        # Bad puts are answered at once; the store thread checks the others only against the store's state.
        ok: list[int] = []
        for i, put in enumerate(puts):
            problem = self._check(put)
            if problem is not None:
                done(i, problem)
            else:
                ok.append(i)
        if len(ok) < len(puts):
            if not ok:
                return
            puts = [puts[i] for i in ok]
            done = functools.partial(_renumbered, ok, done)
        job = _PutJob(self, puts, done, loop, expirable=True)
        if not ps.submit(job, loop):
            job.answer_all(self._refusal() or PutMessageResult(PutMessageStatus.SYSTEM_BUSY, OVERLOAD))

    async def put_async(self, put: Put,
                        on_done: Callable[[PutMessageResult], None] | None = None) -> PutMessageResult:
        """Store one put of the broker's own (never turned down by back-pressure) from a task; the answer comes
        once it is appended, or in SYNC_FLUSH once its records are durable. ``on_done(result)`` runs on the loop
        with the answer, whatever becomes of the awaiting task (bookkeeping that must follow the write even when
        the request that asked for it went away)."""
        loop = asyncio.get_running_loop()
        self.bind_loop(loop)
        fut: asyncio.Future[PutMessageResult] = loop.create_future()

        def done(_i: int, r: PutMessageResult) -> None:
            if on_done is not None:
                on_done(r)
            if not fut.done():  # (the awaiting task may be cancelled)
                fut.set_result(r)

        ps = self.put_service
        if ps is None or not ps.submit(_PutJob(self, [put], done, loop, expirable=False)):
            done(0, self._refusal() or PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                                        "the message store is shut down"))
        return await fut

    def put(self, put: Put) -> PutMessageResult:
        """Store one put from a thread (not an event loop's), on that thread; in SYNC_FLUSH this blocks until its
        records are durable."""
        answers: list[PutMessageResult] = []
        stored, refused = self._append_puts([put])
        for _i, r in refused:
            answers.append(r)
        self._deliver_arrivals(self._take_arrivals())
        if stored:
            self._await_durability([put], stored, lambda _i, r: answers.append(r), None)
        return answers[0]

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """``put([msg])``."""
        return self.put([msg])

    def _append_puts(self, puts: Sequence[Put], checked: bool = False) -> tuple[list[tuple[int, AppendResult, int]],
                                                                            list[tuple[int, PutMessageResult]]]:
        """Check and append ``puts`` (on the store thread, or a caller's own thread): the puts stored, each with
        its records and how many, and the answers of those refused. ``checked``: their contents were checked
        already, only the store's state is."""
        stored: list[tuple[int, AppendResult, int]] = []  # (put, its records, how many)
        refused: list[tuple[int, PutMessageResult]] = []
        done: PutDone = lambda i, r: refused.append((i, r))  # noqa: E731
        run: list[int] = []  # consecutive message puts: one append
        for i, put in enumerate(puts):
            problem = self._refusal() if checked else self._check(put)
            if problem is not None:
                done(i, problem)
            elif isinstance(put, RawBatch):
                self._append_run(puts, run, stored, done)
                run = []
                self._append_run(puts, [i], stored, done)
            else:
                run.append(i)
        self._append_run(puts, run, stored, done)
        if stored:
            if self._group_commit is not None:
                self._group_commit.wakeup()  # its records are dispatched once flushed, waited for or not
            for listener in self.append_listeners:
                listener()
        return stored, refused

    def _await_durability(self, puts: Sequence[Put], stored: list[tuple[int, AppendResult, int]], done: PutDone,
                          loop: asyncio.AbstractEventLoop | None, since: float | None = None) -> None:
        """Answer the stored ``puts``: at once those whose senders do not wait, the others once flushed (and
        replicated on a SYNC_MASTER), waiting on ``loop`` (None: blocking this thread). ``since``: when the
        request arrived (``time.monotonic()``): the timeouts count from then, so that a sender hears an answer
        within ``sync_flush_timeout`` of asking however long its turn took."""
        deadline = None
        if loop is not None and since is not None:
            deadline = loop.time() + since + self.config.sync_flush_timeout / 1000 - time.monotonic()
        waiting = [s for s in stored if self._waits_any(puts[s[0]])]
        waits = {s[0] for s in waiting}
        for i, r, n in stored:
            if i not in waits:
                done(i, self._finish_put(r, n, True))
        if not waiting:
            return

        end = max(r.wrote_offset + r.wrote_bytes for _, r, _ in waiting)

        def answer(ok: bool, replicated: ReplicaOutcome) -> None:
            for i, r, n in waiting:
                rep = replicated if self.waits_for_replicas(puts[i]) else None
                done(i, self._finish_put(r, n, ok or not self.waits_for_flush(puts[i]), rep))

        replication = self.replication
        needs_replicas = replication is not None and any(self.waits_for_replicas(puts[i]) for i, _, _ in waiting)

        def flushed(ok: bool) -> None:
            if not (ok and needs_replicas):
                answer(ok, None)
                return
            assert replication is not None
            if loop is not None:
                replication.wait_for_replicas(end, lambda rep: answer(True, rep), deadline)
                return
            got: list[ReplicaOutcome] = []
            event = threading.Event()

            def settle(rep: ReplicaOutcome) -> None:
                got.append(rep)
                event.set()

            replication.wait_for_replicas_threadsafe(end, settle)
            if not event.wait(self.config.sync_flush_timeout / 1000 + 1):
                got.append((PutMessageStatus.FLUSH_SLAVE_TIMEOUT, "no slave acknowledged in time"))
            answer(True, got[0])

        if self._group_commit is None or not any(self.waits_for_flush(puts[i]) for i, _, _ in waiting):
            flushed(True)
            return
        if loop is not None:
            self._group_commit.submit_callback(end, flushed, deadline)
            return
        waiter = FlushWaiter(end)
        self._group_commit.submit(waiter)
        flushed(waiter.wait(self.config.sync_flush_timeout / 1000))

    def _append_run(self, puts: Sequence[Put], run: list[int], stored: list[tuple[int, AppendResult, int]],
                    done: PutDone) -> None:
        """Append the checked puts ``run`` together (messages) or alone (a raw batch) and note each one's
        records in ``stored``; a put that fails is answered. If a joint append is refused before it writes,
        each put is made on its own, so that each hears its own answer; if it fails after writing (in
        dispatch), every put hears the failure: none is stored twice."""
        if not run:
            return
        if len(run) == 1:
            i = run[0]
            put = puts[i]
            try:
                r = self._append_checked(put)
            except Exception as exc:  # the sender must hear something
                log.exception("a put failed")
                r = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, f"{type(exc).__name__}: {exc}")
            if isinstance(r, PutMessageResult):
                done(i, r)
            else:
                stored.append((i, r, put.columns.count if isinstance(put, RawBatch) else len(put)))
            return
        msgs = [m for i in run for m in puts[i]]  # type: ignore[union-attr]
        log_end = self.commit_log.max_offset
        try:
            r = self._append_checked(msgs)
        except Exception as exc:
            log.exception("a put of %d messages failed", len(msgs))
            r = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, f"{type(exc).__name__}: {exc}")
        if isinstance(r, PutMessageResult):
            if self.commit_log.max_offset != log_end:
                for i in run:
                    done(i, r)
            else:
                for i in run:
                    self._append_run(puts, [i], stored, done)
            return
        assert r.queue_offsets is not None
        end = r.wrote_offset + r.wrote_bytes
        first = 0
        for i in run:
            last = first + len(puts[i])  # type: ignore[arg-type]
            start = r.phys_offsets[first]
            stop = r.phys_offsets[last] if last < len(msgs) else end
            arrivals = {(m.topic, m.queue_id): q + 1 for m, q in zip(msgs[first:last], r.queue_offsets[first:last],
                                                                   strict=True) if not no_queue_offset(m.sys_flag)}
            stored.append((i, AppendResult(start, stop - start, r.queue_offsets[first], r.store_timestamp,
                                           r.phys_offsets[first:last], arrivals), last - first))
            first = last

    # == replication (a slave's store) ===============================================================
    async def on_store_thread(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the store thread, after the writes asked before it, from an event loop that may not
        block (deleting a topic, a slave's append)."""
        loop = asyncio.get_running_loop()
        self.bind_loop(loop)
        ps = self.put_service
        fut: asyncio.Future[object] = loop.create_future()
        if ps is None or not ps.submit(CallJob(fn, loop, fut)):
            raise CommitLogClosed("the message store is shut down")
        return await fut  # type: ignore[return-value]

    async def append_replicated_async(self, offset: int, data: memoryview | bytes) -> int:
        """``append_replicated`` on the store thread, from an event loop (a slave's HA client)."""
        return await self.on_store_thread(lambda: self.append_replicated(offset, data))

    def append_replicated(self, offset: int, data: memoryview | bytes) -> int:
        """A slave's write: the master's log bytes from ``offset`` (this log's end), appended as they came;
        every record they complete is checked (CRC, offsets) and dispatched exactly as the master dispatched
        it, once the master says it is confirmed (``replica_bound``), so both stores hold the same log, queues
        and index. Returns the new end of the log. Bytes that do not continue the log raise ``ReplicationGap``;
        a record that is not intact raises ``MessageFormatError`` after the log is cut back to its last whole
        record: nothing is served from it."""
        if not self.running:
            raise CommitLogClosed("the message store is shut down")
        self.commit_log.append_replicated(offset, data, self._reput)
        self._deliver_arrivals(self._take_arrivals())
        return self.commit_log.max_offset

    def _reput(self) -> None:
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
                reqs.append(dispatch_request_of(at, mf.buf[pos:pos + size]))
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
            if not no_queue_offset(r.sys_flag):
                table[(r.topic, r.queue_id)] = r.queue_offset + 1
        self._reput_offset = at
        if reqs:
            self._hold_or_dispatch(reqs, reqs[-1].phys_offset + reqs[-1].size)

    # == dispatch (ConsumeQueue and index) ============================================================
    # A record becomes visible to consumers (pulls, pops, queries by key or offset) when it is dispatched: its
    # consume-queue and index entries written. That waits until the record is as durable as the store promises
    # (``dispatch_bound``): flushed under SYNC_FLUSH, held by the in-sync replicas of a master in controller mode,
    # confirmed by the master on a slave (RocketMQ's confirm offset). Records not yet there wait in ``_held``,
    # in log order, and ``drain`` dispatches them once they are.
    def dispatch_bound(self) -> int:
        """How far the log is as durable as consumers may rely on."""
        cl = self.commit_log
        bound = cl.flushed_where if self._group_commit is not None else cl.max_offset
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
            self._deliver_arrivals(self._take_arrivals())
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
            self.note_no_space("the consume queues and index", exc)
        elif exc.errno in _DISK_FAILED:
            self.fail_writes("writing the consume queues and index", exc)
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

    def back_pressure_info(self) -> dict[str, str]:
        """The store thread and its queue, for the broker's runtime info (RocketMQ's key names where it has
        them): what back-pressure is under way, how long the write running now has run, what is queued."""
        ps = self.put_service
        if ps is None:
            return {}
        running = ps.running_since
        return {"backPressure": ps.back_pressure.describe(),
                "backPressureRefused": str(ps.back_pressure.refused),
                "backPressureEpisodes": str(ps.back_pressure.episodes),
                "pageCacheLockTimeMills": str(int((time.monotonic() - running) * 1000) if running else 0),
                "sendThreadPoolQueueSize": str(ps.queued()),
                "sendThreadPoolQueueCapacity": str(ps.capacity),
                "sendThreadPoolQueueHeadWaitTimeMills": str(ps.head_wait_ms()),
                "confirmOffset": str(self.dispatched_offset),
                "heldBytes": str(self._held_bytes)}

    @property
    def held_bytes(self) -> int:
        """Bytes of log stored but not yet dispatched (not yet as durable as consumers may rely on)."""
        return self._held_bytes

    def _dispatch_item(self, item: list[DispatchRequest] | BatchDispatch) -> None:
        if isinstance(item, BatchDispatch):
            self._dispatch_batch(item)
        else:
            self._dispatch_requests(item)

    def _take_arrivals(self) -> dict[tuple[str, int], int]:
        with self._dispatch_lock:
            arrivals, self._arrivals = self._arrivals, {}
        return arrivals

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop that the arrival listeners live on (the broker's)."""
        if self.loop is not loop:
            self.loop = loop
            self._loop_thread = threading.get_ident()

    def _deliver_arrivals(self, arrivals: dict[tuple[str, int], int]) -> None:
        """Tell the arrival listeners, on the store's loop (or here, when there is none)."""
        if not arrivals or not self.arrival_listeners:
            return
        loop = self.loop
        if loop is None or threading.get_ident() == self._loop_thread:
            self._notify_arrivals(arrivals)
            return
        try:
            loop.call_soon_threadsafe(self._notify_arrivals, arrivals)
        except RuntimeError:
            pass  # that loop is closed

    def _notify_arrivals(self, arrivals: dict[tuple[str, int], int]) -> None:
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

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = True) -> ConsumeQueue | None:
        key = (topic, queue_id)
        cq = self.consume_queues.get(key)
        if cq is None and create:
            with self._cq_lock:
                cq = self.consume_queues.get(key)
                if cq is None:
                    cq = ConsumeQueue(topic, queue_id, self.config.store_path_consume_queue,
                                      self.config.mapped_file_size_consume_queue)
                    self.consume_queues = {**self.consume_queues, key: cq}
        return cq

    def _dispatch(self, reqs: list[DispatchRequest]) -> None:
        """``CommitLog.append``'s dispatcher (under the put lock)."""
        last = reqs[-1]
        self._reput_offset = last.phys_offset + last.size
        self._hold_or_dispatch(reqs, self._reput_offset)

    def _dispatch_raw_batch(self, d: BatchDispatch) -> None:
        """``CommitLog.append_raw_batch``'s dispatcher (under the put lock)."""
        self._reput_offset = int(d.phys_offsets[-1] + d.sizes[-1])
        self._hold_or_dispatch(d, self._reput_offset)

    def _dispatch_requests(self, reqs: list[DispatchRequest]) -> None:
        """The consume-queue and index entries of records (under the dispatch lock), in bulk: each queue's
        consecutive entries in one write, each group of records stored at one time indexed at once."""
        if not reqs:
            return
        by_queue: dict[tuple[str, int], list[DispatchRequest]] = {}
        for r in reqs:
            if not no_queue_offset(r.sys_flag):
                by_queue.setdefault((r.topic, r.queue_id), []).append(r)
        arrivals = self._arrivals
        for key, rs in by_queue.items():
            cq = self.find_consume_queue(*key)
            assert cq is not None
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
        cq = self.find_consume_queue(d.topic, d.queue_id)
        assert cq is not None
        entries = np.empty(len(d.phys_offsets), CQ_ENTRY_DTYPE)
        entries["offset"] = d.phys_offsets
        entries["size"] = d.sizes
        entries["tag"] = d.tags_codes
        cq.put_entries(d.first_queue_offset, entries)
        if len(d.index_hashes):
            self.index_service.put_hashes(d.index_hashes, d.phys_offsets[d.index_records], d.store_timestamp)
        self._arrivals[(d.topic, d.queue_id)] = d.first_queue_offset + len(d.phys_offsets)

    def dispatch_one(self, r: DispatchRequest, index: bool = True) -> None:
        if not no_queue_offset(r.sys_flag):
            cq = self.find_consume_queue(r.topic, r.queue_id)
            assert cq is not None
            cq.put_entry(r.queue_offset, r.phys_offset, r.size, r.tags_code)
        if index and self.config.message_index_enable:
            self._build_index(r)

    def _build_index(self, r: DispatchRequest) -> None:
        if (r.sys_flag & 0xC) == 0xC:  # rolled-back transaction messages are not indexed
            return
        if r.uniq_key or r.keys:
            self.index_service.build_index(r.topic, split_keys(r.keys), r.uniq_key, r.phys_offset,
                                           r.store_timestamp)

    def flush_logics_and_checkpoint(self, least_pages: int) -> None:
        """Flush consume queues (and, on a thorough round, index files), then advance the checkpoint.

        ``least_pages`` 0 is a thorough round (every ``flush_interval_index``): every consume queue and index
        file is flushed. Otherwise a consume queue is flushed only when that many pages are dirty, and index
        files not at all: their hash slots are written at random, so every flush writes back (and the next puts
        fault in again) thousands of pages. RocketMQ flushes index files only when one fills up; here they are
        also flushed on that interval so that recovery re-indexes at most that much of the log; a file that
        filled up is flushed at the next round. Each safe offset moves only past what was really flushed: the
        consume queues' when none was left with unflushed entries below it.
        """
        with self._logics_flush_lock:
            try:
                self._flush_logics_and_checkpoint(least_pages)
            except OSError as exc:
                self.fail_writes("flushing the consume queues, index or checkpoint", exc)
                raise

    def _flush_logics_and_checkpoint(self, least_pages: int) -> None:
        if self.write_failure:
            return  # the checkpoint is frozen; flushing derived files would vouch for nothing
        dispatched = self.dispatched_offset  # everything below is in the CQ / index files now
        complete = True
        for cq in list(self.consume_queues.values()):
            end = cq.queue.max_offset  # read after ``dispatched``: covers every entry below it
            if cq.flush(least_pages) < end:
                complete = False
        cp = self.checkpoint
        now = int(time.time() * 1000)
        if least_pages == 0:
            self.index_service.flush()
            cp.index_safe_offset = dispatched
            cp.index_msg_timestamp = now
        else:
            self.index_service.flush_full()
        if complete and (least_pages == 0 or dispatched > cp.logics_safe_offset):
            cp.logics_safe_offset = dispatched
            cp.logics_msg_timestamp = now
        cp.physic_safe_offset = self.commit_log.flushed_where
        cp.flush()

    # == reading =====================================================================================
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
        cq = self.find_consume_queue(topic, queue_id, create=False)
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
        seg = None
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
        cq = self.find_consume_queue(topic, queue_id, create=False)
        return cq.max_offset if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id, create=False)
        return cq.min_offset if cq else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, queue_offset: int) -> int:
        cq = self.find_consume_queue(topic, queue_id, create=False)
        entry = cq.get_entry(queue_offset) if cq else None
        return entry[0] if entry else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` ms (max offset if none)."""
        cq = self.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp, self.commit_log.store_timestamp_at)

    def get_message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        cq = self.find_consume_queue(topic, queue_id, create=False)
        entry = cq.get_entry(queue_offset) if cq else None
        if entry is None or entry[1] == BLANK_ENTRY_SIZE:
            return -1
        ts = self.commit_log.store_timestamp_at(entry[0], entry[1])
        return -1 if ts is None else ts

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the oldest message still in the queue; -1 when there is none."""
        cq = self.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return -1
        for off in range(cq.min_offset, cq.max_offset):
            ts = self.get_message_store_timestamp(topic, queue_id, off)
            if ts >= 0:
                return ts
        return -1

    def get_min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    def get_max_phy_offset(self) -> int:
        return self.commit_log.max_offset

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
        limit = self.visible_offset if visible_only else self.commit_log.max_offset
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

    # == topics, retention, disk ======================================================================
    def delete_topics(self, topics: Collection[str]) -> int:
        """Delete the consume queues of ``topics`` (their records age out of the commit log); on a thread that
        may block (``on_store_thread`` from an event loop)."""
        gone = 0
        with self.commit_log.put_lock, self._dispatch_lock, self._cq_lock:
            # Records of theirs not yet dispatched never will be (each held group keeps its place in the log).
            self._held = deque((end, (item if item.topic not in topics else []) if isinstance(item, BatchDispatch)
                                else [r for r in item if r.topic not in topics]) for end, item in self._held)
            remaining = dict(self.consume_queues)
            for key in [k for k in remaining if k[0] in topics]:
                remaining.pop(key).destroy()
                self.commit_log.topic_queue_table.pop(key, None)
                gone += 1
            self.consume_queues = remaining
        for t in topics:
            try:
                os.rmdir(os.path.join(self.config.store_path_consume_queue, t))
            except OSError:
                pass
            self.consumer_offsets.remove_topic(t)
        return gone

    def clean_logics(self, commit_log_min_offset: int) -> None:
        for cq in list(self.consume_queues.values()):
            cq.delete_expired(commit_log_min_offset)
        self.index_service.delete_expired(commit_log_min_offset)

    def clean_expired_files(self, now: float | None = None, manual: bool = True) -> int:
        """Run one retention round now (``manual``: as if at the delete hour). Returns segments deleted."""
        return self.clean_service.clean(time.time() if now is None else now, manual=manual)

    def note_no_space(self, what: str, exc: OSError) -> None:
        """The disk had no room for ``what`` (ENOSPC): refuse writes at once, until ``check_disk_space`` finds
        room for the next segment again. Reads go on; nothing is written through a mapping the disk cannot
        back (segments have their space reserved when they are made)."""
        if self.no_space:
            return
        self.no_space = (f"the broker's disk is full: no room for {what} ({exc.strerror or exc}); writes are "
                         f"refused until space is freed")
        log.error("%s: no space left on the disk (%s). Refusing writes until there is room for a commit-log "
                  "segment again; reads go on.", what, exc)

    def room_needed(self) -> int:
        """Free bytes the next appends need: a commit-log segment, an index file and two consume-queue files."""
        c = self.config
        return (c.mapped_file_size_commit_log + index_file_size(c.max_hash_slot_num, c.max_index_num)
                + 2 * c.mapped_file_size_consume_queue)

    def check_disk_space(self) -> float:
        """Update the disk-full flags from the commit log disk's usage and free space; returns the usage ratio."""
        path = self.config.store_path_commit_log
        where = path if os.path.isdir(path) else self.root
        if self.no_space:
            free = shutil.disk_usage(where).free
            if free >= self.room_needed():
                log.info("%d bytes are free on the disk again: accepting writes", free)
                self.no_space = ""
                self.allocate_service.wakeup()
        ratio = disk_usage_ratio(where)
        limit = self.config.disk_space_warning_level_ratio
        full = ratio > limit
        if full != self.disk_full:
            if full:
                log.error("disk usage %.1f%% is above %.0f%%: refusing writes", ratio * 100, limit * 100)
            else:
                log.info("disk usage %.1f%% is below the limit again: accepting writes", ratio * 100)
        self.disk_full = full
        self.disk_full_remark = (f"the broker's disk is full: usage {ratio * 100:.1f}% is above "
                                 f"disk_space_warning_level_ratio {limit * 100:.0f}%") if full else ""
        return ratio

    @property
    def topic_queues(self) -> list[tuple[str, int]]:
        return sorted(self.consume_queues)


# What a write to the disk fails with when the disk (not the store) is at fault: the store turns read-only.
_DISK_FAILED = frozenset({errno.EIO, errno.EROFS})


def _nothing_confirmed() -> int:
    return 0


def _renumbered(indexes: list[int], done: PutDone, i: int, result: PutMessageResult) -> None:
    done(indexes[i], result)


class _PutJob(Job):
    """An event loop's puts, appended on the store thread; the rest (answers, the wait for the flush) back on
    the loop."""

    __slots__ = ("store", "puts", "done", "loop", "expirable", "_answered")

    def __init__(self, store: MessageStore, puts: Sequence[Put], done: PutDone, loop: asyncio.AbstractEventLoop,
                 expirable: bool) -> None:
        super().__init__()
        self.store = store
        self.puts = puts
        self.done = done
        self.loop = loop
        self.expirable = expirable
        self._answered = [False] * len(puts)

    def answer(self, i: int, result: PutMessageResult) -> None:
        """On the loop: ``puts[i]``'s answer, once (a late one, after ``overdue``, is dropped)."""
        if self._answered[i]:
            return
        self._answered[i] = True
        self.done(i, result)

    def run(self) -> None:
        self.run_together([self])

    def merges_with(self, other: Job) -> bool:
        return (isinstance(other, _PutJob) and other.store is self.store and other.loop is self.loop
                and other.expirable == self.expirable)

    def run_together(self, jobs: list[Job]) -> None:
        """The puts of ``jobs`` in one call: consecutive message puts one append, and one post to the loop."""
        store = self.store
        puts: list[Put] = []
        for job in jobs:
            assert isinstance(job, _PutJob)
            puts.extend(job.puts)
        try:
            stored, refused = store._append_puts(puts, checked=self.expirable)
        except Exception as exc:  # the senders must hear something
            log.exception("a put failed")
            failed = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, f"{type(exc).__name__}: {exc}")
            for job in jobs:
                job.answer_all(failed)  # type: ignore[attr-defined]
            return
        # Each job's share of the answers (their puts were numbered in a row).
        stored.sort(key=lambda s: s[0])
        refused.sort(key=lambda r: r[0])
        shares: list[tuple[_PutJob, list[tuple[int, AppendResult, int]], list[tuple[int, PutMessageResult]]]] = []
        base = 0
        si = ri = 0
        for job in jobs:
            assert isinstance(job, _PutJob)
            end = base + len(job.puts)
            mine_s: list[tuple[int, AppendResult, int]] = []
            while si < len(stored) and stored[si][0] < end:
                i, r, n = stored[si]
                mine_s.append((i - base, r, n))
                si += 1
            mine_r: list[tuple[int, PutMessageResult]] = []
            while ri < len(refused) and refused[ri][0] < end:
                i, r = refused[ri]
                mine_r.append((i - base, r))
                ri += 1
            shares.append((job, mine_s, mine_r))
            base = end
        self._post(_appended_all, store, shares, store._take_arrivals())

    def _appended(self, stored: list[tuple[int, AppendResult, int]],
                  refused: list[tuple[int, PutMessageResult]]) -> None:
        """On the loop."""
        for i, r in refused:
            self.answer(i, r)
        if stored:
            self.store._await_durability(self.puts, stored, self.answer, self.loop, self.created)

    def refuse(self, remark: str) -> None:
        self.answer_all(PutMessageResult(PutMessageStatus.SYSTEM_BUSY, remark))

    def overdue(self, remark: str) -> None:
        result = PutMessageResult(PutMessageStatus.SYSTEM_BUSY, remark)
        for i in range(len(self.puts)):
            self.answer(i, result)

    def answer_all(self, result: PutMessageResult) -> None:
        """Answer every put with ``result`` (from any thread)."""
        def answer() -> None:
            for i in range(len(self.puts)):
                self.answer(i, result)

        self._post(answer)

    def _post(self, fn: Callable[..., None], *args: object) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closed: nobody waits for the answer any more


def _appended_all(store: MessageStore, shares: list[tuple[_PutJob, list[tuple[int, AppendResult, int]],
                                                        list[tuple[int, PutMessageResult]]]],
                  arrivals: dict[tuple[str, int], int]) -> None:
    """On the loop: what the store thread made of several jobs' puts."""
    if arrivals:
        store._notify_arrivals(arrivals)
    for job, stored, refused in shares:
        job._appended(stored, refused)


class _DrainJob(Job):
    """Dispatch what the replicas confirmed (``MessageStore.request_drain``)."""

    __slots__ = ("store",)

    def __init__(self, store: MessageStore) -> None:
        super().__init__()
        self.store = store

    def run(self) -> None:
        self.store.drain()


__all__ = ["MessageStore", "QueryMessageResult", "ReplicaOutcome", "ReplicationGap", "ReplicationWaiter",
           "StoreConfigError"]
