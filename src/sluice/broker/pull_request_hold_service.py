"""Long polling (RocketMQ PullRequestHoldService): pulls that found nothing wait for a message to land.

A held pull is a future keyed by (topic, queue id) with the offset it waits past. The store's arrival
listener wakes the futures of that queue as soon as a message is dispatched; a timer ends the wait at the
client's suspend timeout. Nothing polls: an idle broker with held pulls does no work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class TooManyHeldPulls(Exception):
    pass


class PullRequestHoldService:
    def __init__(self, max_held: int) -> None:
        self.max_held = max_held
        self._held: dict[tuple[str, int], list[tuple[int, asyncio.Future[None]]]] = {}
        self.count = 0

    async def wait(self, topic: str, queue_id: int, offset: int, timeout: float,
                   arrived: Callable[[], bool] | None = None) -> bool:
        """Wait until a message past ``offset`` arrives in the queue (True) or ``timeout`` seconds pass (False).

        ``arrived`` is asked right after the pull is registered, in the same step: a message that landed between
        the pull's look at the queue and this registration (the request's task starts a loop turn later, and a
        send may be served in between) would otherwise go unnoticed until the timeout.
        """
        if self.count >= self.max_held:
            raise TooManyHeldPulls(f"{self.count} pulls are already held")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = (topic, queue_id)
        entry = (offset, fut)
        self._held.setdefault(key, []).append(entry)
        self.count += 1
        if arrived is not None and arrived():
            fut.set_result(None)
        try:
            async with asyncio.timeout(timeout):  # not wait_for: see Connection.invoke
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            self.count -= 1
            waiters = self._held.get(key)
            if waiters is not None:
                try:
                    waiters.remove(entry)
                except ValueError:
                    pass
                if not waiters:
                    del self._held[key]

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener: wake every pull of this queue waiting below ``max_offset``."""
        waiters = self._held.get((topic, queue_id))
        if not waiters:
            return
        keep = []
        for offset, fut in waiters:
            if offset < max_offset:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((offset, fut))
        if keep:
            self._held[(topic, queue_id)] = keep
        else:
            del self._held[(topic, queue_id)]

    def held_queues(self, topic: str) -> dict[int, int]:
        """Queue id → number of pulls held on it, for one topic (tests wait on this to know consumers are in)."""
        return {qid: len(w) for (t, qid), w in self._held.items() if t == topic}

    def wake_all(self) -> None:
        """At shutdown: let every held pull answer now."""
        for waiters in self._held.values():
            for _, fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self._held.clear()
