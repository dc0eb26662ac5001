"""Flushing: group commit for SYNC_FLUSH, a periodic flusher for ASYNC_FLUSH, and the ConsumeQueue /
index flusher that advances the checkpoint (RocketMQ GroupCommitService, FlushRealTimeService,
FlushConsumeQueueService)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Protocol

from sluice.common.config import MessageStoreConfig
from sluice.store.checkpoint import StoreCheckpoint
from sluice.store.commit_log import CommitLog
from sluice.store.consumer_offset_manager import ConsumerOffsetManager
from sluice.store.service_thread import ServiceThread

log = logging.getLogger(__name__)


class FlushStats:
    """Commit-log flushes that wrote something: how many, how long in all, the slowest. Read and reset by
    the broker's once-a-minute stats line (``take``)."""

    __slots__ = ("count", "total_s", "max_s", "_lock")

    def __init__(self) -> None:
        self.count = 0
        self.total_s = 0.0
        self.max_s = 0.0
        self._lock = threading.Lock()

    def record(self, seconds: float) -> None:
        with self._lock:
            self.count += 1
            self.total_s += seconds
            if seconds > self.max_s:
                self.max_s = seconds

    def take(self) -> tuple[int, float, float]:
        """(flushes, mean seconds, max seconds) since the last ``take``."""
        with self._lock:
            n, total, mx = self.count, self.total_s, self.max_s
            self.count, self.total_s, self.max_s = 0, 0.0, 0.0
        return n, (total / n if n else 0.0), mx


class FlushedStore(Protocol):
    """What the commit-log flushers use of the store: the log, where its flushes are counted and timed, where a
    failed one is reported, and (SYNC_FLUSH) the dispatch of what a flush made durable."""

    @property
    def config(self) -> MessageStoreConfig: ...

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def checkpoint(self) -> StoreCheckpoint: ...

    @property
    def flush_stats(self) -> FlushStats: ...

    def fail_writes(self, what: str, exc: BaseException) -> None: ...

    def drain(self) -> int: ...


class LogicsFlushedStore(Protocol):
    """What the consume-queue flusher uses of the store."""

    @property
    def config(self) -> MessageStoreConfig: ...

    @property
    def held_bytes(self) -> int: ...

    @property
    def consumer_offsets(self) -> ConsumerOffsetManager: ...

    def drain(self) -> int: ...

    def flush_logics_and_checkpoint(self, least_pages: int) -> None: ...


class FlushWaiter:
    """A put waiting until the commit log is durable up to ``end_offset``: a thread blocked on an event, an
    asyncio future, or a callback run on its event loop (``GroupCommitService.submit_callback``)."""

    __slots__ = ("end_offset", "event", "ok", "loop", "future", "callback", "deadline", "settled")

    def __init__(self, end_offset: int, loop: asyncio.AbstractEventLoop | None = None,
                 callback: Callable[[bool], None] | None = None) -> None:
        self.end_offset = end_offset
        self.ok = False
        self.loop = loop
        self.callback = callback
        self.deadline = 0.0
        self.settled = False
        self.event: threading.Event | None = None
        self.future: asyncio.Future[bool] | None = None
        if loop is None:
            self.event = threading.Event()
        elif callback is None:
            self.future = loop.create_future()

    def wait(self, timeout: float) -> bool:
        """Block (threads) until flushed; False on timeout or flush failure."""
        assert self.event is not None
        return self.event.wait(timeout) and self.ok

    async def wait_async(self, timeout: float) -> bool:
        """Await the flush; False on timeout or failure. A timer, not ``wait_for``: far cheaper per put."""
        fut = self.future
        assert fut is not None and self.loop is not None
        timer = self.loop.call_later(timeout, _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()

    def settle(self, ok: bool) -> None:
        """On the waiter's loop: hand the outcome to its future or callback, once."""
        if self.settled:
            return
        self.settled = True
        if self.future is not None:
            if not self.future.done():
                self.future.set_result(ok)
            return
        callback, self.callback = self.callback, None  # the answer it holds can go before the waiter does
        assert callback is not None
        try:
            callback(ok)
        except Exception:  # one waiter's failure must not keep the others of its group waiting
            log.exception("flush waiter callback failed")


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


def _settle_all(items: list[tuple[FlushWaiter, bool]]) -> None:
    for w, ok in items:
        w.settle(ok)


class LoopFlushWaiters:
    """The callback waiters of one event loop in the order they came, with one timer for the oldest one's
    deadline instead of a timer each: all share one timeout, so deadlines only grow along the queue."""

    __slots__ = ("loop", "timeout", "pending", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.loop = loop
        self.timeout = timeout
        self.pending: deque[FlushWaiter] = deque()
        self.timer: asyncio.TimerHandle | None = None

    def add(self, w: FlushWaiter, deadline: float | None = None) -> None:
        """On the loop: track ``w`` until it settles or its deadline passes (``deadline``, the loop's clock, when
        earlier than the timeout from now: a put whose request arrived a while ago)."""
        pending = self.pending
        while pending and pending[0].settled:
            pending.popleft()
        w.deadline = self.loop.time() + self.timeout
        if deadline is not None and deadline < w.deadline:
            w.deadline = deadline
        pending.append(w)
        if self.timer is None:
            self.timer = self.loop.call_at(w.deadline, self._expire)

    def _expire(self) -> None:
        self.timer = None
        now = self.loop.time()
        pending = self.pending
        while pending and (pending[0].settled or pending[0].deadline <= now):
            pending.popleft().settle(False)
        if pending:
            self.timer = self.loop.call_at(pending[0].deadline, self._expire)


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH: puts queue a waiter; one fdatasync serves every waiter queued before it started."""

    name = "group-commit"

    def __init__(self, store: FlushedStore) -> None:
        super().__init__(store.config.group_commit_max_wait / 1000)
        self.store = store
        self._requests: list[FlushWaiter] = []
        self._lock = threading.Lock()
        self._loop_waiters: dict[asyncio.AbstractEventLoop, LoopFlushWaiters] = {}

    def submit(self, waiter: FlushWaiter) -> None:
        with self._lock:
            self._requests.append(waiter)
        if not self._wake.is_set():
            self._wake.set()

    def submit_callback(self, end_offset: int, callback: Callable[[bool], None],
                        deadline: float | None = None) -> None:
        """From a running event loop: call ``callback(flushed)`` on that loop once the commit log is durable up
        to ``end_offset`` (False on a failed flush, or when ``sync_flush_timeout`` passes first). No future, task
        or timer per put: a group's callbacks run in one loop callback."""
        loop = asyncio.get_running_loop()
        waiters = self._loop_waiters.get(loop)
        if waiters is None:
            waiters = self._loop_waiters[loop] = LoopFlushWaiters(loop, self.store.config.sync_flush_timeout / 1000)
        w = FlushWaiter(end_offset, loop, callback)
        waiters.add(w, deadline)
        self.submit(w)

    def run_once(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
        queue = self.store.commit_log.queue
        before = queue.flushed_where
        t0 = time.perf_counter()
        try:
            flushed = queue.flush()
            if requests and flushed < max(w.end_offset for w in requests):
                flushed = queue.flush()  # a put landed in a new segment meanwhile
            failed = False
            if flushed > before:
                self.store.flush_stats.record(time.perf_counter() - t0)
        except OSError as exc:
            self.store.fail_writes("fsync of the commit log", exc)
            flushed, failed = queue.flushed_where, True
        if flushed:
            self.store.checkpoint.physic_msg_timestamp = int(time.time() * 1000)
        if not failed:
            # What is flushed may be seen now; dispatched before the puts are answered, so that a consumer finds
            # a message whose send was acknowledged.
            try:
                self.store.drain()
            except Exception:
                log.exception("dispatching flushed records failed")
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[FlushWaiter, bool]]] = defaultdict(list)
        for w in requests:
            w.ok = not failed and flushed >= w.end_offset
            if w.event is not None:
                w.event.set()
            else:
                assert w.loop is not None
                by_loop[w.loop].append((w, w.ok))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, items)
            except RuntimeError:
                pass  # that loop is closed: nobody is waiting any more

    def on_stop(self) -> None:
        self.run_once()


class ThoroughInterval:
    """Flushes wait for ``least_pages`` dirty pages, except once every ``interval_ms``: then all goes."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def least_pages(self, least_pages: int, interval_ms: int) -> int:
        now = time.monotonic()
        if (now - self._last) * 1000 >= interval_ms:
            self._last = now
            return 0
        return least_pages


class FlushRealTimeService(ServiceThread):
    """ASYNC_FLUSH: flush the commit log every ``flush_interval_commit_log`` ms when enough is dirty."""

    name = "flush-commit-log"

    def __init__(self, store: FlushedStore) -> None:
        super().__init__(store.config.flush_interval_commit_log / 1000)
        self.store = store
        self._thorough = ThoroughInterval()

    def run_once(self) -> None:
        cfg = self.store.config
        least = self._thorough.least_pages(cfg.flush_commit_log_least_pages, cfg.flush_commit_log_thorough_interval)
        before = self.store.commit_log.flushed_where
        t0 = time.perf_counter()
        try:
            flushed = self.store.commit_log.queue.flush(least)
        except OSError as exc:
            self.store.fail_writes("fsync of the commit log", exc)
            return
        if flushed > before:
            self.store.flush_stats.record(time.perf_counter() - t0)
            self.store.checkpoint.physic_msg_timestamp = int(time.time() * 1000)

    def on_stop(self) -> None:
        try:
            self.store.commit_log.queue.flush(0)
        except OSError as exc:
            self.store.fail_writes("fsync of the commit log", exc)


class FlushConsumeQueueService(ServiceThread):
    """Flush consume queues and index files, then record the new safe offsets in the checkpoint."""

    name = "flush-consume-queue"

    def __init__(self, store: LogicsFlushedStore) -> None:
        super().__init__(store.config.flush_interval_consume_queue / 1000)
        self.store = store
        self._thorough = ThoroughInterval()
        self._last_offsets_persist = time.monotonic()
        self._last_index_flush = time.monotonic()

    def run_once(self) -> None:
        cfg = self.store.config
        least = self._thorough.least_pages(cfg.flush_consume_queue_least_pages,
                                           cfg.flush_consume_queue_thorough_interval)
        if self.store.held_bytes:  # (held records are also tried here, whatever else drains them)
            self.store.drain()
        now = time.monotonic()
        if least == 0 or (now - self._last_index_flush) * 1000 >= cfg.flush_interval_index:
            # The index's round flushes every consume queue too: the checkpoint's safe offsets, where recovery
            # starts, then trail the log by at most this interval.
            self._last_index_flush = now
            least = 0
        self.store.flush_logics_and_checkpoint(least)
        if (now - self._last_offsets_persist) * 1000 >= cfg.flush_consumer_offset_interval:
            self._last_offsets_persist = now
            self.store.consumer_offsets.persist()
