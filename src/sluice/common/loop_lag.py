"""How long the event loop keeps everyone waiting: a timer that notes how late it fires.

Every callback that runs long (a blocking syscall, a big loop without a yield) delays every other client by as
much; the timer sees it as lateness. Lateness has two parts: the loop's own work (measured as the loop thread's
CPU time beyond the tick interval) and the rest — a blocking system call, or the thread waiting for a CPU on a
busy machine. The garbage collector's pauses on the loop's thread are counted apart (``max_gc_pause``): they
are lateness, not the loop's own work, and no code of ours can cut a full collection into slices. A server
reports the worst of each since start (``eventLoopLagMaxMs``, ``eventLoopBusyMaxMs``, ``gcPauseMaxMs`` in the
broker's runtime info).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any


class LoopLagProbe:
    """Fires every ``interval`` seconds; keeps the worst lateness (``max_lag``) and the worst part of it the loop
    spent working (``max_busy``), in seconds."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.max_lag = 0.0
        self.max_busy = 0.0
        self.max_gc_pause = 0.0
        self.ticks = 0
        self._thread = 0
        self._gc_cpu = 0.0  # the collector's CPU time on the loop's thread, in all
        self._gc_mark = 0.0  # ... at the last tick
        self._gc_start = 0.0
        self._due = 0.0
        self._cpu = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> LoopLagProbe:
        self._loop = loop or asyncio.get_running_loop()
        self._thread = threading.get_ident()
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        self._cpu = time.thread_time()
        self._schedule(time.monotonic())
        return self

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        if threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._gc_start = time.thread_time()
            return
        pause = time.thread_time() - self._gc_start
        self._gc_cpu += pause
        if pause > self.max_gc_pause:
            self.max_gc_pause = pause

    def reset(self) -> tuple[float, float]:
        """The worst lateness and busy time so far, which start again from zero."""
        worst = self.max_lag, self.max_busy
        self.max_lag = self.max_busy = 0.0
        return worst

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + self.interval
        self._handle = self._loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        # time.monotonic, not loop.time: uvloop's clock has a millisecond grain and is read once per iteration.
        now = time.monotonic()
        cpu = time.thread_time()  # the loop's thread: this runs on it
        lag = now - self._due
        gc_cpu = self._gc_cpu - self._gc_mark
        self._gc_mark = self._gc_cpu
        busy = min(lag, cpu - self._cpu - gc_cpu - self.interval)
        if lag > self.max_lag:
            self.max_lag = lag
        if busy > self.max_busy:
            self.max_busy = busy
        self.ticks += 1
        self._cpu = cpu
        self._schedule(now)
