"""Long polling (RocketMQ PullRequestHoldService): pulls that found nothing wait for a message to land.

A held pull is a callback keyed by (topic, queue id) with the offset it waits past. The store's arrival
listener wakes the pulls of that queue as soon as a message is dispatched; a timer ends the wait at the
client's suspend timeout. Nothing polls: an idle broker with held pulls does no work, and a held pull costs
no task of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class TooManyHeldPulls(Exception):
    pass


class HeldPull:
    """One pull waiting for a message past ``offset`` of its queue. It ends once: woken by an arrival
    (``wake(True)``), by its timer (``wake(False)``), or dropped when its connection closes (``drop``)."""

    __slots__ = ("service", "key", "offset", "wake", "loop", "timer", "done")

    def __init__(self, service: PullRequestHoldService, key: tuple[str, int], offset: int,
                 wake: Callable[[bool], None], loop: asyncio.AbstractEventLoop) -> None:
        self.service = service
        self.key = key
        self.offset = offset
        self.wake = wake
        self.loop = loop
        self.timer: asyncio.TimerHandle | None = None
        self.done = False

    def fire(self, arrived: bool) -> None:
        wake = self.wake
        if self._end():
            try:
                wake(arrived)
            except Exception:  # one pull's answer must not stop the timer's loop or the others' wake-ups
                log.exception("answering a held pull of %s failed", self.key)

    def drop(self) -> None:
        """Nobody waits any more (the connection closed): forget the pull without waking it."""
        self._end()

    def _end(self) -> bool:
        if self.done:
            return False
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.wake = _ended  # no reference cycles left behind (the timer and the answer refer back to this pull)
        self.service._forget(self)
        return True


def _ended(_arrived: bool) -> None:
    pass


class PullRequestHoldService:
    def __init__(self, max_held: int) -> None:
        self.max_held = max_held
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self.count = 0

    def hold(self, topic: str, queue_id: int, offset: int, timeout: float, wake: Callable[[bool], None],
             arrived: Callable[[], bool] | None = None) -> HeldPull:
        """From the event loop: call ``wake(True)`` a loop turn after a message past ``offset`` arrives in the
        queue, or ``wake(False)`` once ``timeout`` seconds pass. Raises ``TooManyHeldPulls`` at ``max_held``.

        ``arrived`` is asked right after the pull is registered: a message that landed between the pull's
        look at the queue and this registration would otherwise go unnoticed until the timeout.
        """
        if self.count >= self.max_held:
            raise TooManyHeldPulls(f"{self.count} pulls are already held")
        loop = asyncio.get_running_loop()
        key = (topic, queue_id)
        pull = HeldPull(self, key, offset, wake, loop)
        self._held.setdefault(key, []).append(pull)
        self.count += 1
        pull.timer = loop.call_later(timeout, pull.fire, False)
        if arrived is not None and arrived():
            loop.call_soon(pull.fire, True)
        return pull

    def _forget(self, pull: HeldPull) -> None:
        self.count -= 1
        waiters = self._held.get(pull.key)
        if waiters is not None:
            try:
                waiters.remove(pull)
            except ValueError:
                pass
            if not waiters:
                del self._held[pull.key]

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener: wake every pull of this queue waiting below ``max_offset``, a loop turn
        later (RocketMQ hands them to an executor): the other sends of the same read land first, so one
        answer carries them all."""
        waiters = self._held.get((topic, queue_id))
        if not waiters:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # a put from a thread of its own
            running = None
        for pull in waiters:
            if pull.offset < max_offset and pull.timer is not None:
                if pull.loop is running:
                    pull.timer.cancel()
                    pull.timer = None  # woken: the arrival answers it, not the timer
                    running.call_soon(pull.fire, True)
                else:
                    pull.loop.call_soon_threadsafe(pull.fire, True)

    def held_queues(self, topic: str) -> dict[int, int]:
        """Queue id → number of pulls held on it, for one topic (tests wait on this to know consumers are in)."""
        return {qid: len(w) for (t, qid), w in self._held.items() if t == topic}

    def wake_all(self) -> None:
        """At shutdown: let every held pull answer now."""
        for waiters in list(self._held.values()):
            for pull in list(waiters):
                pull.fire(False)
        self._held.clear()
