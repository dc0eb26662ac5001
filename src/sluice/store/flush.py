"""Flushing: group commit for SYNC_FLUSH, a periodic flusher for ASYNC_FLUSH, and the ConsumeQueue /
index flusher that advances the checkpoint (RocketMQ GroupCommitService, FlushRealTimeService,
FlushConsumeQueueService)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from sluice.store.service_thread import ServiceThread

if TYPE_CHECKING:
    from sluice.store.message_store import MessageStore

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


class FlushWaiter:
    """A put waiting until the commit log is durable up to ``end_offset``."""

    __slots__ = ("end_offset", "event", "ok", "loop", "future")

    def __init__(self, end_offset: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.end_offset = end_offset
        self.ok = False
        self.loop = loop
        if loop is None:
            self.event: threading.Event | None = threading.Event()
            self.future: asyncio.Future[bool] | None = None
        else:
            self.event = None
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


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


def _resolve_futures(items: list[tuple[asyncio.Future[bool], bool]]) -> None:
    for fut, ok in items:
        if not fut.done():
            fut.set_result(ok)


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH: puts queue a waiter; one fdatasync serves every waiter queued before it started."""

    name = "group-commit"

    def __init__(self, store: MessageStore) -> None:
        super().__init__(store.config.group_commit_max_wait / 1000)
        self.store = store
        self._requests: list[FlushWaiter] = []
        self._lock = threading.Lock()

    def submit(self, waiter: FlushWaiter) -> None:
        with self._lock:
            self._requests.append(waiter)
        if not self._wake.is_set():
            self._wake.set()

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
        except OSError:
            log.exception("commit log flush failed")
            flushed, failed = queue.flushed_where, True
        if flushed:
            self.store.checkpoint.physic_msg_timestamp = int(time.time() * 1000)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[bool], bool]]] = defaultdict(list)
        for w in requests:
            w.ok = not failed and flushed >= w.end_offset
            if w.event is not None:
                w.event.set()
            else:
                assert w.loop is not None and w.future is not None
                by_loop[w.loop].append((w.future, w.ok))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve_futures, items)
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

    def __init__(self, store: MessageStore) -> None:
        super().__init__(store.config.flush_interval_commit_log / 1000)
        self.store = store
        self._thorough = ThoroughInterval()

    def run_once(self) -> None:
        cfg = self.store.config
        least = self._thorough.least_pages(cfg.flush_commit_log_least_pages, cfg.flush_commit_log_thorough_interval)
        before = self.store.commit_log.flushed_where
        t0 = time.perf_counter()
        if self.store.commit_log.queue.flush(least) > before:
            self.store.flush_stats.record(time.perf_counter() - t0)
            self.store.checkpoint.physic_msg_timestamp = int(time.time() * 1000)

    def on_stop(self) -> None:
        self.store.commit_log.queue.flush(0)


class FlushConsumeQueueService(ServiceThread):
    """Flush consume queues and index files, then record the new safe offsets in the checkpoint."""

    name = "flush-consume-queue"

    def __init__(self, store: MessageStore) -> None:
        super().__init__(store.config.flush_interval_consume_queue / 1000)
        self.store = store
        self._thorough = ThoroughInterval()
        self._last_offsets_persist = time.monotonic()

    def run_once(self) -> None:
        cfg = self.store.config
        least = self._thorough.least_pages(cfg.flush_consume_queue_least_pages,
                                           cfg.flush_consume_queue_thorough_interval)
        now = time.monotonic()
        self.store.flush_logics_and_checkpoint(least)
        if (now - self._last_offsets_persist) * 1000 >= cfg.flush_consumer_offset_interval:
            self._last_offsets_persist = now
            self.store.consumer_offsets.persist()
