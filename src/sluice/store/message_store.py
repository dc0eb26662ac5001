"""MessageStore: the facade the broker uses (RocketMQ DefaultMessageStore).

Open it (``MessageStore(config).start()`` or ``with MessageStore(config) as store``), put messages,
get them back by queue offset, by commit-log offset, by key or by time, and shut it down.

The facade owns the files, the lifecycle and the disk's state, and wires its parts: the put path
(``sluice.store.put_path``: checks, appends on the store thread, durability waits), the dispatcher
(``sluice.store.dispatcher``: what consumers are served and when) and the reader
(``sluice.store.message_reader``). The services it starts see it through the narrow interface each declares.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import TypeVar

from sluice.common.config import FlushDiskType, MessageStoreConfig
from sluice.common.config_loader import check
from sluice.common.errors import StoreConfigError, StoreLockedError
from sluice.common.files import fsync_dir
from sluice.common.message import MessageExt, MessageExtBrokerInner
from sluice.common.naming import LMQ_PREFIX, is_lmq
from sluice.store.allocate_mapped_file import AllocateMappedFileService
from sluice.store.checkpoint import StoreCheckpoint
from sluice.store.commit_log import CommitLog, CommitLogClosed, DispatchRequest, ReplicationGap
from sluice.store.consume_queue import ConsumeQueue
from sluice.store.consumer_offset_manager import ConsumerOffsetManager
from sluice.store.dispatcher import Dispatcher, MessageArrivalListener
from sluice.store.flush import FlushConsumeQueueService, FlushRealTimeService, FlushStats, GroupCommitService
from sluice.store.index_file import IndexService, index_file_size
from sluice.store.light_queue_store import LightQueue, LightQueueStore
from sluice.store.message_reader import MessageReader, QueryMessageResult, RecordFilter
from sluice.store.put_path import Put, PutDone, PutPath, ReplicaOutcome, ReplicationWaiter
from sluice.store.put_service import CallJob, PutService
from sluice.store.recovery import recover
from sluice.store.results import GetMessageResult, PutMessageResult
from sluice.store.retention import CleanCommitLogService, disk_usage_ratio
from sluice.store.service_thread import ServiceThread
from sluice.store.warm_mapped_file import WarmMappedFileService

log = logging.getLogger(__name__)
T = TypeVar("T")


class MessageStore:
    """CommitLog + ConsumeQueues + IndexFiles + checkpoint, with flush, recovery and retention services."""

    def __init__(self, config: MessageStoreConfig | None = None, **overrides: object) -> None:
        cfg = config or MessageStoreConfig()
        self.config = check(cfg.replace(**overrides) if overrides else cfg, "message store config")
        c = self.config
        self.root = c.store_path_root_dir
        self.commit_log = CommitLog(c)
        self.index_service = IndexService(c.store_path_index, c.max_hash_slot_num, c.max_index_num)
        self.checkpoint = StoreCheckpoint(os.path.join(self.root, "checkpoint"))
        self.consumer_offsets = ConsumerOffsetManager(c.store_path_config)
        self.flush_stats = FlushStats()
        self.disk_full = False
        self.commit_log_disk_ratio = 0.0  # the commit log disk's usage at the last check
        self.disk_full_remark = ""
        # Set when the disk had no room for what the next appends need (ENOSPC making the next segment ahead,
        # or writing); cleared by ``check_disk_space`` once there is room again.
        self.no_space = ""
        # Set, for good, by the first failed fsync (``fail_writes``): the store refuses writes with it until a
        # restart, which recovers from the log as after a crash.
        self.write_failure = ""
        self.write_failure_listeners: list[Callable[[], None]] = []  # called once, from the failing thread
        self._failure_lock = threading.Lock()
        self.dispatcher = Dispatcher(c, self.commit_log, self.index_service, self)
        self.reader = MessageReader(c, self.commit_log, self.index_service, self.dispatcher)
        self.put_path = PutPath(c, self.commit_log, self.dispatcher, self)
        # The writer thread event loops hand their writes to (made at the start).
        self.put_service: PutService | None = None
        self.running = False
        self.abnormal_start = False
        self._lock_fd: int | None = None
        self._services: list[ServiceThread] = []
        self._logics_flush_lock = threading.Lock()

    # == what the parts hold, as the broker and the services see it ==================================
    @property
    def consume_queues(self) -> dict[tuple[str, int], ConsumeQueue]:
        return self.dispatcher.consume_queues

    @property
    def light_queues(self) -> LightQueueStore | None:
        """The shared store of light queues (None without ``enable_lmq``)."""
        return self.dispatcher.light

    @property
    def dispatched_offset(self) -> int:
        """Every record below is in the consume queues and index."""
        return self.dispatcher.dispatched_offset

    @property
    def visible_offset(self) -> int:
        """Records below may be read by their commit-log offset."""
        return self.dispatcher.visible_offset

    @property
    def held_bytes(self) -> int:
        """Bytes of log stored but not yet dispatched (not yet as durable as consumers may rely on)."""
        return self.dispatcher.held_bytes

    @property
    def arrival_listeners(self) -> list[MessageArrivalListener]:
        """Called on the store's loop with (topic, queue id, new max offset) when records are dispatched."""
        return self.dispatcher.arrival_listeners

    @property
    def append_listeners(self) -> list[Callable[[], None]]:
        """Called when the log grew, on the thread that appended."""
        return self.put_path.append_listeners

    @property
    def replica_bound(self) -> Callable[[], int | None] | None:
        """How far the replicas vouch for the log (None: no bound); records past it are not dispatched yet."""
        return self.dispatcher.replica_bound

    @replica_bound.setter
    def replica_bound(self, bound: Callable[[], int | None] | None) -> None:
        self.dispatcher.replica_bound = bound

    @property
    def slave_mode(self) -> bool:
        """A slave's store takes no put, only the master's bytes (``append_replicated``)."""
        return self.put_path.slave_mode

    @slave_mode.setter
    def slave_mode(self, on: bool) -> None:
        self.put_path.slave_mode = on

    @property
    def replication(self) -> ReplicationWaiter | None:
        """What a SYNC_MASTER's puts wait for besides the flush: their slaves."""
        return self.put_path.replication

    @replication.setter
    def replication(self, waiter: ReplicationWaiter | None) -> None:
        self.put_path.replication = waiter

    @property
    def write_guard(self) -> Callable[[], str] | None:
        """Why a master may not take writes now ("": it may), asked at every put."""
        return self.put_path.write_guard

    @write_guard.setter
    def write_guard(self, guard: Callable[[], str] | None) -> None:
        self.put_path.write_guard = guard

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the arrival listeners live on."""
        return self.dispatcher.loop

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop that the arrival listeners live on (the broker's)."""
        self.dispatcher.bind_loop(loop)

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
            self.dispatcher.load_consume_queues()
            self.dispatcher.open_light_queues()
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
            group_commit = GroupCommitService(self)
            self.put_path.group_commit = group_commit
            self.dispatcher.sync_flush = True
            self._services.append(group_commit)
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
        self.put_service = PutService(c.send_thread_pool_queue_capacity, c.wait_time_ms_in_send_queue,
                                      c.os_page_cache_busy_timeout_ms, c.broker_fast_failure_enable,
                                      c.sync_flush_timeout)
        self.put_path.put_service = self.dispatcher.put_service = self.put_service
        self.put_service.start()
        for s in self._services:
            s.start()
        self.running = True
        return self

    @property
    def sync_flush(self) -> bool:
        """True when puts are acknowledged only after their bytes are fsynced (SYNC_FLUSH)."""
        return self.put_path.group_commit is not None

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
        for cq in self.dispatcher.consume_queues.values():
            cq.close()
        if self.dispatcher.light is not None:
            self.dispatcher.light.close()
        self.index_service.close()

    # == writing (``PutPath``) ========================================================================
    def put_then(self, puts: Sequence[Put], done: PutDone) -> None:
        """Store ``puts`` for a client's request made on a running event loop; ``done(i, result)`` answers
        ``puts[i]`` on that loop (``PutPath.put_then``)."""
        self.put_path.put_then(puts, done)

    async def put_async(self, put: Put,
                        on_done: Callable[[PutMessageResult], None] | None = None) -> PutMessageResult:
        """Store one put of the broker's own from a task (``PutPath.put_async``)."""
        return await self.put_path.put_async(put, on_done)

    def put(self, put: Put) -> PutMessageResult:
        """Store one put from a thread (not an event loop's), on that thread (``PutPath.put``)."""
        return self.put_path.put(put)

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """``put([msg])``."""
        return self.put_path.put([msg])

    async def on_store_thread(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the store thread, after the writes asked before it, from an event loop that may not
        block (deleting a topic, a slave's append)."""
        loop = asyncio.get_running_loop()
        self.dispatcher.bind_loop(loop)
        ps = self.put_service
        fut: asyncio.Future[object] = loop.create_future()
        if ps is None or not ps.submit(CallJob(fn, loop, fut)):
            raise CommitLogClosed("the message store is shut down")
        return await fut  # type: ignore[return-value]

    # == replication (a slave's store) ===============================================================
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
        d = self.dispatcher
        self.commit_log.append_replicated(offset, data, d.reput)
        d.deliver_arrivals(d.take_arrivals())
        return self.commit_log.max_offset

    # == dispatch (``Dispatcher``) ====================================================================
    def dispatch_bound(self) -> int:
        """How far the log is as durable as consumers may rely on."""
        return self.dispatcher.dispatch_bound()

    def drain(self) -> int:
        """Dispatch the held records that may be seen now (any thread but an event loop's)."""
        return self.dispatcher.drain()

    def request_drain(self) -> None:
        """Have the store thread ``drain`` soon (a replica confirmed more of the log); from any thread."""
        self.dispatcher.request_drain()

    def recovered(self, end: int, held: list[DispatchRequest]) -> None:
        """Recovery's outcome: the log ends at ``end``; ``held``, its last records, wait to be confirmed."""
        self.dispatcher.recovered(end, held)

    def dispatch_one(self, r: DispatchRequest, index: bool = True) -> None:
        self.dispatcher.dispatch_one(r, index)

    def find_consume_queue(self, topic: str, queue_id: int,
                           create: bool = True) -> ConsumeQueue | LightQueue | None:
        return self.dispatcher.find_consume_queue(topic, queue_id, create)

    def light_queue_names(self, prefix: str = LMQ_PREFIX) -> list[str]:
        """The light queues kept whose names start with ``prefix``, in order."""
        names = {t for t, _ in self.dispatcher.consume_queues if is_lmq(t) and t.startswith(prefix)}
        light = self.dispatcher.light
        if light is not None:
            names.update(light.names(prefix))
        return sorted(names)

    def file_light_queue_names(self, prefix: str) -> list[str]:
        """The light queues of ``prefix`` kept in consume-queue files (made by a store before the shared one)."""
        return sorted({t for t, _ in self.dispatcher.consume_queues if is_lmq(t) and t.startswith(prefix)})

    def idle_light_queues(self, parent: str, before_ms: int, limit: int) -> list[tuple[str, int]]:
        """Up to ``limit`` light queues of ``parent``'s lite topics in the shared store whose last message was
        stored before ``before_ms`` (each with that time; 0: not known)."""
        light = self.dispatcher.light
        return [] if light is None else light.idle(parent, before_ms, limit)

    def note_light_queue_last(self, times: list[tuple[str, int]]) -> None:
        light = self.dispatcher.light
        if light is not None:
            light.set_last(times)

    def next_light_queue_name(self, name: str, prefix: str) -> str | None:
        """The first light queue name after ``name`` starting with ``prefix`` (files' and the shared store's)."""
        files = [t for t in self.file_light_queue_names(prefix) if t > name]
        light = self.dispatcher.light
        found = [*files[:1], *([n] if light is not None and (n := light.first_after(name, prefix)) else [])]
        return min(found) if found else None

    def light_queue_count(self, prefix: str) -> int:
        """How many light queues kept have names starting with ``prefix`` (a long prefix: not listed)."""
        n = sum(1 for t, _ in self.dispatcher.consume_queues if is_lmq(t) and t.startswith(prefix))
        light = self.dispatcher.light
        return n + (light.count_names(prefix) if light is not None else 0)

    def consume_queue_topic_count(self) -> int:
        """How many topics have consume queues, light queues included (RocketMQ's consumeQueueTable size)."""
        topics = {t for t, _ in self.dispatcher.consume_queues}
        light = self.dispatcher.light
        return len(topics) + (light.count if light is not None else 0)

    def lmq_queue_count(self) -> int:
        """How many light queues (``%LMQ%...``) have a consume queue."""
        return self.dispatcher.lmq_count

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
                "confirmOffset": str(self.dispatcher.dispatched_offset),
                "heldBytes": str(self.dispatcher.held_bytes)}

    # == the checkpoint ==============================================================================
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
        dispatched = self.dispatcher.dispatched_offset  # everything below is in the CQ / index files now
        complete = True
        for cq in list(self.dispatcher.consume_queues.values()):
            end = cq.queue.max_offset  # read after ``dispatched``: covers every entry below it
            if cq.flush(least_pages) < end:
                complete = False
        if self.dispatcher.light is not None:
            self.dispatcher.light.flush()
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

    # == reading (``MessageReader``) ==================================================================
    def get_messages(self, group: str, topic: str, queue_id: int, offset: int, max_count: int,
                     tag_codes: Collection[int] | None = None,
                     record_filter: RecordFilter | None = None) -> GetMessageResult:
        """Up to ``max_count`` stored records of a queue from ``offset``, filtered by tags codes and
        ``record_filter`` (``MessageReader.get_messages``)."""
        return self.reader.get_messages(group, topic, queue_id, offset, max_count, tag_codes, record_filter)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_max_offset_in_queue(topic, queue_id)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_min_offset_in_queue(topic, queue_id)

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, queue_offset: int) -> int:
        return self.reader.get_commit_log_offset_in_queue(topic, queue_id, queue_offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` ms (max offset if none)."""
        return self.reader.get_offset_in_queue_by_time(topic, queue_id, timestamp)

    def get_message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        return self.reader.get_message_store_timestamp(topic, queue_id, queue_offset)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the oldest message still in the queue; -1 when there is none."""
        return self.reader.get_earliest_message_time(topic, queue_id)

    def get_min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    def get_max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    def select_one_message_by_offset(self, phys_offset: int, size: int | None = None,
                                     visible_only: bool = False) -> memoryview | None:
        """The stored record at ``phys_offset`` (a view), or None (``MessageReader.select_one_message_by_offset``)."""
        return self.reader.select_one_message_by_offset(phys_offset, size, visible_only)

    def look_message_by_offset(self, phys_offset: int, size: int | None = None,
                               visible_only: bool = False) -> MessageExt | None:
        return self.reader.look_message_by_offset(phys_offset, size, visible_only)

    def query_message(self, topic: str, key: str, max_num: int | None = None, begin: int = 0,
                      end: int | None = None) -> QueryMessageResult:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY is ``key``, stored in [begin, end] ms, newest first."""
        return self.reader.query_message(topic, key, max_num, begin, end)

    # == topics, retention, disk ======================================================================
    def delete_topics(self, topics: Collection[str]) -> int:
        """Delete the consume queues of ``topics`` (their records age out of the commit log); on a thread that
        may block (``on_store_thread`` from an event loop)."""
        topics = set(topics)
        gone = self.dispatcher.drop_topics(topics)
        for t in topics:
            try:
                os.rmdir(os.path.join(self.config.store_path_consume_queue, t))
            except OSError:
                pass
        self.consumer_offsets.remove_topics(topics)
        return gone

    def clean_logics(self, commit_log_min_offset: int) -> None:
        for cq in list(self.dispatcher.consume_queues.values()):
            cq.delete_expired(commit_log_min_offset)
        if self.dispatcher.light is not None:
            self.dispatcher.light.delete_below(commit_log_min_offset)
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
        self.commit_log_disk_ratio = ratio
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
        return sorted(self.dispatcher.consume_queues)


# What a write to the disk fails with when the disk (not the store) is at fault: the store turns read-only.


def _nothing_confirmed() -> int:
    return 0


__all__ = ["MessageStore", "Put", "PutDone", "QueryMessageResult", "RecordFilter", "ReplicaOutcome", "ReplicationGap",
           "ReplicationWaiter", "StoreConfigError"]
