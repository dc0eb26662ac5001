"""The trace dispatcher (RocketMQ's ``AsyncTraceDispatcher``): a client with ``enable_trace`` hands it a record
per send, listener call and transaction end; it sends them to the trace topic in the background.

Records wait in a bounded buffer (2,048, as Java's; when full, new records are dropped and counted, never the
client's own work held up). Up to 20 leave together as one trace message once 20 are waiting or
``trace_flush_interval_ms`` after the first, through a producer of its own (group
``_INNER_TRACE_PRODUCER-<group>-<PRODUCER|CONSUMER>-<n>``, a 128 KB body at most, 5 s timeout) with at most four
trace messages in flight. A record that cannot be sent is logged (once in a while, with the count) and dropped:
a trace is best effort and never retried at the cost of the messages it describes. ``shutdown`` sends what waits.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from sluice.client.message import Message
from sluice.client.trace import MAX_TRACE_MESSAGE_SIZE, TRACE_GROUP_PREFIX, TRACE_TOPIC, TraceContext, pack
from sluice.common.config import ClientConfig
from sluice.common.naming import GROUP_MAX_LENGTH

if TYPE_CHECKING:
    from sluice.auth.credentials import CredentialsLike
    from sluice.remoting.tls import TlsLike

log = logging.getLogger(__name__)

BUFFER_SIZE = 2_048
BATCH = 20
IN_FLIGHT = 4
SEND_TIMEOUT = 5.0
FAILURE_LOG_INTERVAL = 10.0
_counter = itertools.count(1)


class TraceProducer(Protocol):
    """What the dispatcher asks of the producer it sends with (``sluice.client.aio.producer.Producer``)."""

    async def start(self) -> Any: ...

    def send_async(self, msg: Message, *, timeout: float | None = None) -> asyncio.Future[Any]: ...

    async def shutdown(self) -> None: ...


# Makes the trace producer: ``factory(group, config=..., credentials=..., tls=..., **settings)``, the producer
# class itself (the host passes it: the producer module hosts a dispatcher too).
TraceProducerFactory = Callable[..., TraceProducer]


class TraceDispatcher:
    """Sends trace records of one client (a producer or a consumer) to its trace topic."""

    def __init__(self, group: str, kind: str, config: ClientConfig, producer_factory: TraceProducerFactory,
                 credentials: CredentialsLike | None = None, tls: TlsLike | None = None) -> None:
        self.topic = config.trace_topic or TRACE_TOPIC
        tail = f"-{kind}-{next(_counter)}"  # (the host's name cut so that the trace group's is a legal one)
        self.group = f"{TRACE_GROUP_PREFIX}-{group}"[:GROUP_MAX_LENGTH - len(tail)] + tail
        self.config = config
        self._credentials = credentials
        self._tls = tls
        self._producer_factory = producer_factory
        self._buffer: deque[TraceContext] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._producer: TraceProducer | None = None
        self._in_flight = asyncio.Semaphore(IN_FLIGHT)
        self._sends: set[asyncio.Future[object]] = set()
        self.discarded = 0  # records dropped because the buffer was full
        self.failed = 0  # records whose trace message could not be sent
        self._failures_unlogged = 0
        self._last_failure_log = 0.0

    async def start(self) -> bool:
        """Start the trace producer; False (logged) when it cannot start: its client then runs without trace."""
        if self._task is not None:
            return True
        try:
            await self._start()
        except Exception as exc:
            log.warning("%s runs without message trace: its trace producer did not start: %s", self.group, exc)
            return False
        return True

    async def _start(self) -> None:
        producer = self._producer_factory(self.group, config=self.config, credentials=self._credentials, tls=self._tls,
                            enable_trace=False, enable_otel=False, max_message_size=MAX_TRACE_MESSAGE_SIZE + 64 * 1024,
                            send_msg_timeout=int(SEND_TIMEOUT * 1000), auto_batch=False, namespace="",
                            instance_name=f"PID_CLIENT_INNER_TRACE_PRODUCER_{self.config.namesrv_addr}")
        await producer.start()
        self._producer = producer
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"trace {self.group}")

    def append(self, ctx: TraceContext) -> bool:
        """Hand over one record; False (and counted) when the buffer is full."""
        if len(self._buffer) >= BUFFER_SIZE:
            self.discarded += 1
            if self.discarded == 1 or self.discarded % 10_000 == 0:
                log.warning("trace buffer of %s full: %d trace record(s) dropped so far", self.group, self.discarded)
            return False
        self._buffer.append(ctx)
        if len(self._buffer) >= BATCH or len(self._buffer) == 1:
            self._wake.set()
        return True

    @property
    def pending(self) -> int:
        """Records waiting to leave, and trace messages not yet answered."""
        return len(self._buffer) + len(self._sends)

    async def _run(self) -> None:
        interval = self.config.trace_flush_interval_ms / 1000
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            if len(self._buffer) < BATCH and not self._stopping:
                try:  # a record waits for company at most ``interval``
                    await asyncio.wait_for(self._until_batch(), interval)
                except TimeoutError:
                    pass
            while self._buffer:
                await self._send_some()

    async def _until_batch(self) -> None:
        while len(self._buffer) < BATCH and not self._stopping:
            self._wake.clear()
            await self._wake.wait()

    async def _send_some(self) -> None:
        take = [self._buffer.popleft() for _ in range(min(BATCH, len(self._buffer)))]
        by_topic: dict[str, list[TraceContext]] = {}
        for ctx in take:
            if ctx.beans:
                by_topic.setdefault(ctx.beans[0].topic, []).append(ctx)
        unsent = len(take)
        try:
            for contexts in by_topic.values():
                for body, keys, n in pack(contexts):
                    await self._in_flight.acquire()
                    self._send(body, keys, n)
                    unsent -= n
        except asyncio.CancelledError:
            self.discarded += unsent  # (taken out of the buffer and never sent: counted, not lost silently)
            raise

    def _send(self, body: str, keys: set[str], records: int) -> None:
        assert self._producer is not None
        try:
            fut: asyncio.Future[object] = self._producer.send_async(
                Message(self.topic, body.encode("utf-8"), keys=sorted(keys)), timeout=SEND_TIMEOUT)
        except Exception as exc:
            self._in_flight.release()
            self._failure(records, exc)
            return
        self._sends.add(fut)

        def done(f: asyncio.Future[object]) -> None:
            self._sends.discard(f)
            self._in_flight.release()
            if f.cancelled():
                self._failure(records, asyncio.CancelledError())
            elif f.exception() is not None:
                self._failure(records, f.exception())
        fut.add_done_callback(done)

    def _failure(self, records: int, exc: BaseException | None) -> None:
        self.failed += records
        self._failures_unlogged += records
        now = time.monotonic()
        if now - self._last_failure_log >= FAILURE_LOG_INTERVAL:
            log.warning("cannot send %d trace record(s) of %s to %s: %s", self._failures_unlogged, self.group,
                        self.topic, exc)
            self._failures_unlogged = 0
            self._last_failure_log = now

    async def flush(self, timeout: float = SEND_TIMEOUT) -> None:
        """Wait (up to ``timeout``) until the records handed over so far have been sent and answered."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.pending and asyncio.get_running_loop().time() < deadline:
            self._wake.set()
            if self._sends:
                await asyncio.wait(list(self._sends), timeout=max(0.0, deadline - asyncio.get_running_loop().time()))
            else:
                await asyncio.sleep(0.01)

    async def shutdown(self) -> None:
        """Send what waits (for at most 5 s, as Java's), then stop."""
        if self._task is None:
            return
        task, self._task = self._task, None
        self._stopping = True
        self._wake.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SEND_TIMEOUT
        try:
            await asyncio.wait_for(asyncio.shield(task), SEND_TIMEOUT)
            if self._sends:
                await asyncio.wait(list(self._sends), timeout=max(0.0, deadline - loop.time()))
        except TimeoutError:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        finally:
            if self._buffer:
                self.discarded += len(self._buffer)
                log.warning("%d trace record(s) of %s not sent before shutdown", len(self._buffer), self.group)
                self._buffer.clear()
            producer, self._producer = self._producer, None
            if producer is not None:
                await producer.shutdown()
