"""How long the event loop keeps everyone waiting: a timer that notes how late it fires.

Every callback that runs long (a blocking syscall, a big loop without a yield) delays every other client by as
much; the timer sees it as lateness. The worst lateness since start is what a server reports
(``eventLoopLagMaxMs`` in the broker's runtime info) and what the loop-lag test bounds.
"""

from __future__ import annotations

import asyncio
import time


class LoopLagProbe:
    """Fires every ``interval`` seconds and keeps the worst lateness seen (``max_lag``, in seconds)."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.max_lag = 0.0
        self.ticks = 0
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> LoopLagProbe:
        self._loop = loop or asyncio.get_running_loop()
        self._schedule(time.monotonic())
        return self

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def reset(self) -> float:
        """The worst lateness so far, which starts again from zero."""
        worst, self.max_lag = self.max_lag, 0.0
        return worst

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + self.interval
        self._handle = self._loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        # time.monotonic, not loop.time: uvloop's clock has a millisecond grain and is read once per iteration.
        now = time.monotonic()
        lag = now - self._due
        if lag > self.max_lag:
            self.max_lag = lag
        self.ticks += 1
        self._schedule(now)
