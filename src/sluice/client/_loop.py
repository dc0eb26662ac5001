"""The background event loop the threaded (sync) API runs its asyncio core on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

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


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the background loop and wait for its result."""
    return submit(coro).result(timeout)


def _running_on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class SyncFacade:
    """Threaded face of an asyncio client object ``self.aio``: start / shutdown / context manager."""

    aio: Any

    @property
    def group(self) -> str:
        return self.aio.group

    def start(self) -> Any:
        run(self.aio.start())
        return self

    def shutdown(self) -> None:
        run(self.aio.shutdown())

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class SyncConsumerFacade(SyncFacade):
    def subscribe(self, topic: str, expression: str | None = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` ("*" or "TagA || TagB")."""
        if self.aio.started:
            run(self._on_loop(self.aio.subscribe, topic, expression))
        else:
            self.aio.subscribe(topic, expression)

    @staticmethod
    async def _on_loop(fn: Any, *args: Any) -> Any:
        return fn(*args)
