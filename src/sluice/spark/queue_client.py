"""What the Spark source and sink ask of Sluice, as blocking calls. Plain Python (no pyspark).

``QueueClient`` runs the asyncio client on a private event loop in a thread of its own (Spark calls the
source's methods from a long-lived driver process, and ``read`` / ``write`` in executor workers), so pulls
run ahead while the calling thread decodes:
queues of topics, min / max offsets, offsets by timestamp, raw pulls, consumer-offset reports.
It holds sockets, so it is made lazily where it is used and never pickled.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import queue
import re
import ssl
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any, TypeVar

from sluice.client.mq_client import MQClientInstance
from sluice.client.mq_client_api import RawPull
from sluice.common.config import ClientConfig
from sluice.common.naming import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    REPLY_TOPIC_POSTFIX,
    RETRY_GROUP_TOPIC_PREFIX,
)
from sluice.common.structs import ClusterInfo, MessageQueue
from sluice.spark.offsets import QueueRef

log = logging.getLogger(__name__)

T = TypeVar("T")

# Topics a topic pattern never matches: RocketMQ's system, retry and dead-letter topics, a cluster's reply topic.
_SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC_KEY_TOPIC}
_SYSTEM_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, "RMQ_SYS_", "rmq_sys_")


def is_system_topic(topic: str) -> bool:
    return topic in _SYSTEM_TOPICS or topic.startswith(_SYSTEM_PREFIXES) or topic.endswith("_" + REPLY_TOPIC_POSTFIX)


class TopicNotFoundError(LookupError):
    """A topic named by the ``topics`` option has no route."""


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()


class LoopThread:
    """An event loop of one's own in a daemon thread, so network I/O goes on while the caller's thread
    decodes or encodes; ``run(coro)`` blocks until the coroutine is done."""

    def __init__(self, name: str) -> None:
        self.loop = new_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        name = getattr(coro, "__qualname__", "call")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError as exc:
            if fut.done() and not fut.cancelled() and fut.exception() is exc:  # the coroutine's own
                raise
            fut.cancel()
            # concurrent.futures' TimeoutError has no message: say what did not finish.
            raise TimeoutError(f"{name} did not finish within {timeout:g} s") from None

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, fn: Callable[[], object]) -> None:
        self.loop.call_soon_threadsafe(fn)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class QueueClient:
    """Blocking access to name servers and brokers (see the module doc)."""

    def __init__(self, namesrv: str, timeout_ms: int = 10_000, credentials: tuple[str, str] | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.timeout_ms = timeout_ms
        self.thread = LoopThread("sluice-spark-client")
        self.instance = MQClientInstance(ClientConfig(namesrv_addr=namesrv), credentials, tls)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.thread.run(coro)

    def close(self) -> None:
        if self.thread.loop.is_closed():
            return
        try:
            self.run(self.instance.remoting.close())
        finally:
            self.thread.close()

    def __enter__(self) -> QueueClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # == topics and queues ==========================================================================
    async def _queues_of(self, topic: str) -> list[QueueRef] | None:
        route = await self.instance.update_route(topic)
        if route is None:
            return None
        return [QueueRef(topic, mq.broker_name, mq.queue_id) for mq in route.subscribe_queues(topic)]

    def queues(self, topics: Iterable[str] | None = None, pattern: str | None = None) -> list[QueueRef]:
        """Readable queues of ``topics`` (each must exist: ``TopicNotFoundError``), or of every topic matching
        ``pattern`` (system topics excluded), sorted."""

        async def go() -> list[QueueRef]:
            if topics is not None:
                names = list(topics)
            else:
                assert pattern is not None
                regex = re.compile(pattern)
                cluster = ClusterInfo.from_json(await self.instance.api.get_cluster_info())
                # RocketMQ lists each cluster and broker name as a topic too: never data to read.
                names_of_servers = set(cluster.broker_addr_table) | set(cluster.cluster_addr_table)
                names = [t for t in await self.instance.api.get_all_topic_list()
                         if regex.fullmatch(t) and not is_system_topic(t) and t not in names_of_servers]
            found = await asyncio.gather(*(self._queues_of(t) for t in names))
            out: list[QueueRef] = []
            for name, refs in zip(names, found, strict=True):
                if refs is None:
                    if topics is not None:
                        raise TopicNotFoundError(name)
                    continue  # deleted since it was listed
                out.extend(refs)
            return sorted(out)

        return self.run(go())

    async def addr_of(self, ref: QueueRef) -> str:
        return await self.instance.master_addr_of(MessageQueue(ref.topic, ref.broker, ref.queue_id))

    def _each(self, refs: Iterable[QueueRef],
              *calls: Callable[[str, MessageQueue], Awaitable[int]]) -> list[dict[QueueRef, int]]:
        """For each of ``calls``, its answer for every queue of ``refs``; all asked concurrently."""
        refs_list = sorted(refs)

        async def one(ref: QueueRef, call: Callable[[str, MessageQueue], Awaitable[int]]) -> int:
            return await call(await self.addr_of(ref), MessageQueue(ref.topic, ref.broker, ref.queue_id))

        async def go() -> list[dict[QueueRef, int]]:
            values = await asyncio.gather(*(one(r, c) for c in calls for r in refs_list))
            n = len(refs_list)
            return [dict(zip(refs_list, values[i * n:(i + 1) * n], strict=True)) for i in range(len(calls))]

        return self.run(go())

    def bounds(self, refs: Iterable[QueueRef]) -> dict[QueueRef, tuple[int, int]]:
        """(min offset, max offset) of every queue, asked concurrently."""
        api = self.instance.api
        lo, hi = self._each(refs, api.get_min_offset, api.get_max_offset)
        return {r: (lo[r], hi[r]) for r in sorted(lo)}

    def offsets_by_time(self, refs: Iterable[QueueRef], timestamp_ms: int) -> dict[QueueRef, int]:
        """Per queue, the first offset stored at or after ``timestamp_ms`` (the max offset if none is)."""
        api = self.instance.api

        async def search(addr: str, mq: MessageQueue) -> int:
            return await api.search_offset(addr, mq, timestamp_ms)

        return self._each(refs, search)[0]

    def report_offsets(self, group: str, offsets: dict[QueueRef, int]) -> None:
        """Write ``offsets`` as ``group``'s consumer offsets (for lag monitoring only)."""
        api = self.instance.api

        async def go() -> None:
            async def one(ref: QueueRef, off: int) -> None:
                await api.update_consumer_offset(await self.addr_of(ref), group,
                                                 MessageQueue(ref.topic, ref.broker, ref.queue_id), off, oneway=True)

            await asyncio.gather(*(one(r, o) for r, o in offsets.items()))

        self.run(go())

    # == pulls ======================================================================================
    def pull_range(self, ref: QueueRef, start: int, end: int, group: str, pull_batch: int,
                   window: int = 16, buffered: int = 4) -> Iterator[tuple[int, RawPull]]:
        """Pull ``[start, end)`` of one queue in order, ``window`` requests in flight at once.

        Yields (offset pulled from, result) for each pull; a pull that ends early (the broker caps messages
        and bytes per pull, or messages expired) is followed by one from where it stopped. The caller sees
        ``next_begin_offset`` and the status of each, and decides what a gap means. Pulls run ahead on the
        client's loop thread while the caller works, up to ``buffered`` hand-overs (each up to ``window``
        chunks) not yet taken.
        """
        out: queue.SimpleQueue[list[tuple[int, RawPull]] | BaseException | None] = queue.SimpleQueue()
        slots: asyncio.Semaphore | None = None

        async def produce() -> None:
            nonlocal slots
            slots = asyncio.Semaphore(buffered)
            try:
                async for items in self._pulls(ref, start, end, group, pull_batch, window):
                    await slots.acquire()
                    out.put(items)
                out.put(None)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                out.put(exc)

        def release(n: int) -> None:
            if slots is not None:
                for _ in range(n):
                    slots.release()

        # Slots go back to the loop thread in groups (each hand-over wakes that thread), and always before
        # this thread would wait for the next result.
        give_back_every = max(1, buffered // 4)
        taken = 0
        future = self.thread.submit(produce())
        try:
            while True:
                try:
                    item = out.get_nowait()
                except queue.Empty:
                    if taken:
                        self.thread.call(functools.partial(release, taken))
                        taken = 0
                    item = out.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                taken += 1
                if taken >= give_back_every:
                    self.thread.call(functools.partial(release, taken))
                    taken = 0
                yield from item
        finally:
            future.cancel()

    async def _pulls(self, ref: QueueRef, start: int, end: int, group: str, pull_batch: int,
                     window: int) -> AsyncIterator[list[tuple[int, RawPull]]]:
        """The pulls covering ``[start, end)``, in order, in lists: each one the next chunk's pulls and those
        of the chunks after it that have already come back (one hand-over to the reading thread for all)."""
        addr = await self.addr_of(ref)
        mq = MessageQueue(ref.topic, ref.broker, ref.queue_id)
        api = self.instance.api
        chunk_size = pull_batch  # shrinks to what the broker hands out per pull, so chunks go one pull each

        async def fetch(lo: int, hi: int) -> list[tuple[int, RawPull]]:
            """Every pull needed to cover ``[lo, hi)`` (or until no progress is possible)."""
            nonlocal chunk_size
            results = []
            while True:
                result = await api.pull_message(addr, group, mq, lo, hi - lo, self.timeout_ms)
                results.append((lo, result))
                nxt = result.next_begin_offset
                if result.body and lo < nxt < hi:
                    chunk_size = min(chunk_size, nxt - lo)  # the broker caps messages / bytes per pull
                if nxt >= hi or nxt <= lo:
                    return results  # done, or no progress possible (the caller checks coverage)
                lo = nxt

        pending: deque[asyncio.Task[list[tuple[int, RawPull]]]] = deque()
        next_chunk = start
        try:
            while True:
                while len(pending) < window and next_chunk < end:
                    hi = min(end, next_chunk + chunk_size)
                    pending.append(asyncio.ensure_future(fetch(next_chunk, hi)))
                    next_chunk = hi
                if not pending:
                    return
                items = await pending.popleft()
                while pending and pending[0].done():
                    items += pending.popleft().result()
                yield items
        finally:
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
