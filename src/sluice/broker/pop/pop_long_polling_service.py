"""Long polling for POP (RocketMQ's PopLongPollingService): a pop that found nothing waits until a message
arrives in one of the queues it reads, or its poll time passes, and is then served again in full."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class PollingFull(Exception):
    """Too many pops are waiting already (POLLING_FULL)."""


class HeldPop:
    __slots__ = ("service", "topics", "queue_id", "wake", "timer", "done")

    def __init__(self, service: PopLongPollingService, topics: tuple[str, ...], queue_id: int,
                 wake: Callable[[bool], None]) -> None:
        self.service = service
        self.topics = topics
        self.queue_id = queue_id
        self.wake = wake
        self.timer: asyncio.TimerHandle | None = None
        self.done = False

    def fire(self, arrived: bool) -> None:
        if self.done:
            return
        self.drop()
        self.wake(arrived)

    def drop(self) -> None:
        """Forget it (answered, or its connection closed)."""
        if self.done:
            return
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
        self.service._forget(self)


class PopLongPollingService:
    """Pops waiting for messages, by topic; bounded in total and per topic (RocketMQ's maxPopPollingSize and
    popPollingSize)."""

    def __init__(self, max_total: int, max_per_topic: int) -> None:
        self.max_total = max_total
        self.max_per_topic = max_per_topic
        self.held: dict[str, set[HeldPop]] = {}
        self.count = 0

    def hold(self, topics: tuple[str, ...], queue_id: int, timeout: float, wake: Callable[[bool], None]) -> HeldPop:
        """Wait for a message in ``topics`` (queue ``queue_id`` of the first, -1 for any; any queue of the others,
        its retry topics) for ``timeout`` seconds; ``wake(arrived)`` runs once."""
        if self.count >= self.max_total or any(len(self.held.get(t, ())) >= self.max_per_topic for t in topics):
            raise PollingFull(f"{self.count} pops are waiting already")
        pop = HeldPop(self, topics, queue_id, wake)
        for t in topics:
            self.held.setdefault(t, set()).add(pop)
        self.count += 1
        pop.timer = asyncio.get_running_loop().call_later(timeout, pop.fire, False)
        return pop

    def _forget(self, pop: HeldPop) -> None:
        for t in pop.topics:
            waiting = self.held.get(t)
            if waiting is not None:
                waiting.discard(pop)
                if not waiting:
                    del self.held[t]
        self.count -= 1

    def notify_message_arriving(self, topic: str, queue_id: int, _max_offset: int) -> None:
        waiting = self.held.get(topic)
        if not waiting:
            return
        for pop in list(waiting):
            if pop.queue_id < 0 or pop.topics[0] != topic or pop.queue_id == queue_id:
                pop.fire(True)

    def waiting(self, topic: str, queue_id: int) -> int:
        """Pops held on ``topic``'s queue ``queue_id`` (-1: on the whole topic)."""
        return sum(1 for pop in self.held.get(topic, ()) if pop.topics[0] == topic and pop.queue_id == queue_id)

    def wake_all(self) -> None:
        for waiting in list(self.held.values()):
            for pop in list(waiting):
                pop.fire(False)


__all__ = ["HeldPop", "PollingFull", "PopLongPollingService"]
