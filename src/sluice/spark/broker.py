"""What the Spark source and sink ask of Sluice, as blocking calls. Plain Python (no pyspark).

``QueueClient`` runs the asyncio client on a private event loop of its own (Spark calls the source's
methods from one thread of a long-lived driver process, and ``read`` / ``write`` from executor threads):
queues of topics, min / max offsets, offsets by timestamp, raw pulls, consumer-offset reports.
It holds sockets, so it is made lazily where it is used and never pickled.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any, TypeVar

from sluice.client.mq_client import MQClientInstance
from sluice.client.mq_client_api import RawPull
from sluice.common.config import ClientConfig
from sluice.common.naming import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
)
from sluice.common.structs import MessageQueue
from sluice.spark.offsets import QueueRef

log = logging.getLogger(__name__)

T = TypeVar("T")

# Topics a topic pattern never matches: RocketMQ's system, retry and dead-letter topics.
_SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC_KEY_TOPIC}
_SYSTEM_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, "RMQ_SYS_", "rmq_sys_")


def is_system_topic(topic: str) -> bool:
    return topic in _SYSTEM_TOPICS or topic.startswith(_SYSTEM_PREFIXES)


class TopicNotFoundError(LookupError):
    """A topic named by the ``topics`` option has no route."""


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()


class QueueClient:
    """Blocking access to name servers and brokers for one thread (see the module doc)."""

    def __init__(self, namesrv: str, timeout_ms: int = 10_000) -> None:
        self.timeout_ms = timeout_ms
        self.loop = new_loop()
        self.instance = MQClientInstance(ClientConfig(namesrv_addr=namesrv))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.run(self.instance.remoting.close())
        finally:
            self.loop.close()

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

    def queues(self, topics: Iterable[str] | None = None, pattern: str | None = None,
               require: bool = True) -> list[QueueRef]:
        """Readable queues of ``topics`` (each must exist when ``require``), or of every topic matching
        ``pattern`` (system topics excluded), sorted."""

        async def go() -> list[QueueRef]:
            if topics is not None:
                names = list(topics)
            else:
                assert pattern is not None
                regex = re.compile(pattern)
                names = [t for t in await self.instance.api.get_all_topic_list()
                         if regex.fullmatch(t) and not is_system_topic(t)]
            found = await asyncio.gather(*(self._queues_of(t) for t in names))
            out: list[QueueRef] = []
            for name, refs in zip(names, found, strict=True):
                if refs is None:
                    if require and topics is not None:
                        raise TopicNotFoundError(name)
                    continue
                out.extend(refs)
            return sorted(out)

        return self.run(go())

    async def addr_of(self, ref: QueueRef) -> str:
        return await self.instance.master_addr_of(MessageQueue(ref.topic, ref.broker, ref.queue_id))

    def _each(self, refs: Iterable[QueueRef],
              call: Callable[[str, MessageQueue], Awaitable[int]]) -> dict[QueueRef, int]:
        async def one(ref: QueueRef) -> int:
            return await call(await self.addr_of(ref), MessageQueue(ref.topic, ref.broker, ref.queue_id))

        async def go() -> dict[QueueRef, int]:
            refs_list = sorted(refs)
            values = await asyncio.gather(*(one(r) for r in refs_list))
            return dict(zip(refs_list, values, strict=True))

        return self.run(go())

    def bounds(self, refs: Iterable[QueueRef]) -> dict[QueueRef, tuple[int, int]]:
        """(min offset, max offset) of every queue, asked concurrently."""
        refs = list(refs)
        lo = self._each(refs, self.instance.api.get_min_offset)
        hi = self._each(refs, self.instance.api.get_max_offset)
        return {r: (lo[r], hi[r]) for r in sorted(refs)}

    def offsets_by_time(self, refs: Iterable[QueueRef], timestamp_ms: int) -> dict[QueueRef, int]:
        """Per queue, the first offset stored at or after ``timestamp_ms`` (the max offset if none is)."""
        api = self.instance.api

        async def search(addr: str, mq: MessageQueue) -> int:
            return await api.search_offset(addr, mq, timestamp_ms)

        return self._each(refs, search)

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
                   window: int = 4) -> Iterator[tuple[int, RawPull]]:
        """Pull ``[start, end)`` of one queue in order, ``window`` requests in flight at once.

        Yields (offset pulled from, result) for each pull; a pull that ends early (the broker caps messages
        and bytes per pull, or messages expired) is followed by one from where it stopped. The caller sees
        ``next_begin_offset`` and the status of each, and decides what a gap means.
        """
        addr = self.run(self.addr_of(ref))
        mq = MessageQueue(ref.topic, ref.broker, ref.queue_id)
        api = self.instance.api
        pending: list[tuple[int, int, asyncio.Task[RawPull]]] = []
        next_chunk = start

        def fill() -> None:
            nonlocal next_chunk
            while len(pending) < window and next_chunk < end:
                hi = min(end, next_chunk + pull_batch)
                task = self.loop.create_task(api.pull_message(addr, group, mq, next_chunk, hi - next_chunk,
                                                              self.timeout_ms))
                pending.append((next_chunk, hi, task))
                next_chunk = hi

        try:
            fill()
            while pending:
                lo, hi, task = pending.pop(0)
                while True:
                    result = self.run(task)
                    yield lo, result
                    nxt = result.next_begin_offset
                    if nxt >= hi or nxt <= lo or not result.body:
                        break  # chunk done, or no progress possible: the caller checks coverage
                    lo = nxt
                    task = self.loop.create_task(api.pull_message(addr, group, mq, lo, hi - lo, self.timeout_ms))
                fill()
        finally:
            for _, _, task in pending:
                task.cancel()
            if pending:
                self.run(asyncio.gather(*(t for _, _, t in pending), return_exceptions=True))
