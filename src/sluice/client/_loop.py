"""The background event loop the threaded (sync) API runs its asyncio core on."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

if TYPE_CHECKING:
    from sluice.client.message_selector import MessageSelector

T = TypeVar("T")

log = logging.getLogger(__name__)

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()


def background_loop() -> asyncio.AbstractEventLoop:
    """The process-wide loop of the sync API, started on first use in a daemon thread."""
    global _loop
    loop = _loop
    if loop is not None and not loop.is_closed():
        return loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = _new_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=run, name="sluice-client-loop", daemon=True).start()
            ready.wait()
            _loop = loop
        return _loop


def submit(coro: Coroutine[Any, Any, T]) -> Future[T]:
    """Run ``coro`` on the background loop; returns a ``concurrent.futures.Future``."""
    loop = background_loop()
    if _running_on(loop):
        coro.close()
        raise RuntimeError("the sync Sluice API cannot be called from its own event loop thread (a listener "
                           "that is a coroutine function should use sluice.aio instead)")
    return asyncio.run_coroutine_threadsafe(coro, loop)


_calls: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
_calls_lock = threading.Lock()
_drain_on: asyncio.AbstractEventLoop | None = None  # the loop a ``_drain`` is scheduled on


def call_soon(callback: Callable[..., object], *args: Any) -> None:
    """Run ``callback(*args)`` on the background loop, from any thread, in the order of the calls.

    Calls made while earlier ones wait go in one hand-over: one wake-up of the loop for a burst, not one each
    (every wake-up is a system call and a GIL hand-off between the two threads)."""
    global _drain_on
    loop = background_loop()
    with _calls_lock:
        _calls.append((callback, args))
        if _drain_on is loop:
            return
        _drain_on = loop  # (a drain scheduled on a loop closed since would never run: schedule one here)
    try:
        loop.call_soon_threadsafe(_drain)
    except BaseException:
        with _calls_lock:
            _drain_on = None
        raise


def _drain() -> None:
    """On the loop: run every queued ``call_soon`` callback."""
    global _drain_on
    while True:
        with _calls_lock:
            if not _calls:
                _drain_on = None
                return
            batch = list(_calls)
            _calls.clear()
        for callback, args in batch:
            try:
                callback(*args)
            except Exception:  # one bad callback must not strand the ones after it
                log.exception("background-loop callback %r failed", callback)


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the background loop and wait for its result (``TimeoutError`` after ``timeout`` s, the
    coroutine cancelled)."""
    name = getattr(coro, "__qualname__", "the call")
    fut = submit(coro)
    try:
        return fut.result(timeout)
    except TimeoutError:
        if fut.done():
            raise  # the coroutine's own
        fut.cancel()
        raise TimeoutError(f"{name} did not finish within {timeout:g} s") from None


def _running_on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class AsyncClient(Protocol):
    """What a threaded facade drives: an asyncio producer or consumer of ``sluice.aio``."""

    group: str

    async def start(self) -> object: ...

    async def shutdown(self) -> None: ...


class AsyncConsumer(AsyncClient, Protocol):
    started: bool

    def subscribe(self, topic: str, expression: str | MessageSelector | None = "*", *,
                  filter: str | None = None) -> None: ...


A = TypeVar("A", bound=AsyncClient)
C = TypeVar("C", bound=AsyncConsumer)


class SyncFacade(Generic[A]):
    """Threaded face of an asyncio client object ``self.aio``: start / shutdown / context manager."""

    aio: A

    @property
    def group(self) -> str:
        return self.aio.group

    def start(self) -> Self:
        run(self.aio.start())
        return self

    def shutdown(self) -> None:
        run(self.aio.shutdown())

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class SyncConsumerFacade(SyncFacade[C]):
    def subscribe(self, topic: str, expression: str | MessageSelector | None = "*", *,
                  filter: str | None = None) -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` ("*" or "TagA || TagB"), or that a
        ``MessageSelector.by_sql(...)`` selects, or whose properties match ``filter="key=value"``."""
        if self.aio.started:
            run(self._on_loop(functools.partial(self.aio.subscribe, topic, expression, filter=filter)))
        else:
            self.aio.subscribe(topic, expression, filter=filter)

    @staticmethod
    async def _on_loop(fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)
