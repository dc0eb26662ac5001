"""The producer's in-flight bookkeeping: how many async sends are in flight (at most ``max_inflight_async_sends``,
those held for a batch included), the line of sends waiting for room, and each topic's line to the wire (a
topic's async sends are written in the order they were made)."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass

from sluice.client.aio.record_accumulator import RecordAccumulator


@dataclass(slots=True)
class Place:
    """A send's place among the async sends: the slot it holds (``waiter`` None) or its place in line."""

    waiter: asyncio.Future[None] | None
    used: bool = False


class InFlight:
    def __init__(self, limit: int, accumulator: RecordAccumulator) -> None:
        self.limit = limit
        self._accumulator = accumulator  # the sends it holds count too
        self.count = 0  # async sends started and not yet answered
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.unsent: dict[str, OnWire] = {}  # per topic, the last send on the task path not written yet

    def reset(self) -> None:
        """A (re)started producer: nothing in flight, nobody waiting."""
        self.count = 0
        self.waiters.clear()

    def has_room(self) -> bool:
        """Whether another async send may go (or be held for a batch) now: fewer than the limit in flight or
        held, and nobody waiting for room."""
        return self.count + self._accumulator.pending < self.limit and not self._parked()

    def take_place(self, loop: asyncio.AbstractEventLoop) -> Place:
        """A slot if there is room and nobody waits for one, else a place at the end of the line."""
        if self.has_room():
            self.count += 1
            return Place(None)
        waiter: asyncio.Future[None] = loop.create_future()
        self.waiters.append(waiter)
        return Place(waiter)

    def give_back_unused(self, place: Place) -> None:
        """A send's task ended before it ran (cancelled at once): what ``take_place`` gave it goes back."""
        if place.used:
            return
        waiter = place.waiter
        if waiter is None or (waiter.done() and not waiter.cancelled()):
            self.release()
        else:
            waiter.cancel()

    def _parked(self) -> bool:
        """Whether some send is waiting for room."""
        waiters = self.waiters
        while waiters and waiters[0].done():
            waiters.popleft()
        return bool(waiters)

    def release(self) -> None:
        """A send's slot is free: hand it to the oldest send waiting for room, else give it back."""
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.count -= 1


class OnWire:
    """The place of an async send on the task path in its topic's line to the wire: its request is written once
    the earlier ones are (``turn``), and the next may go once it is, or never will be (called, once)."""

    __slots__ = ("in_flight", "topic", "before", "written")

    def __init__(self, in_flight: InFlight, topic: str, loop: asyncio.AbstractEventLoop) -> None:
        self.in_flight: InFlight | None = in_flight
        self.topic = topic
        prev = in_flight.unsent.get(topic)
        self.before = prev.written if prev is not None else None
        self.written: asyncio.Future[None] = loop.create_future()
        in_flight.unsent[topic] = self

    @property
    def done(self) -> bool:
        return self.in_flight is None

    async def turn(self) -> None:
        if self.before is not None and not self.before.done():
            await asyncio.shield(self.before)  # (shielded: a send given up on does not fail the next one's)

    def __call__(self) -> None:
        in_flight, self.in_flight = self.in_flight, None
        if in_flight is None:
            return
        self.written.set_result(None)
        if in_flight.unsent.get(self.topic) is self:
            del in_flight.unsent[self.topic]


__all__ = ["InFlight", "OnWire", "Place"]
