"""Which reader should look at which lite topic next (RocketMQ's LiteEventDispatcher, event mode): a message
arriving in a lite topic is an event handed to one subscriber of each group that reads it, and wakes that
subscriber's waiting pop; a pop takes its client's events, not its whole subscription, so its cost follows what
arrived, not how many lite topics the client reads.

Events are a set per client, bounded by the group's ``lite.sub.client.max.event.cnt``; one that does not fit is
not lost: every ``lite_event_check_interval`` the dispatcher offers each client again the lite topics it reads
that hold messages its group has not had (a full dispatch), as it does for a new subscription. A lite topic whose
messages are in flight (popped, not yet acknowledged) is offered again when they come back.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from sluice.broker.lite.lite_subscription_registry import LiteSubscriptionRegistry
from sluice.common.lite import parent_and_lite

log = logging.getLogger(__name__)

# A wildcard group's full dispatch lists its parent's lite topics: every this many scans (and when an event found
# no reader with room), not every scan.
WILDCARD_RESCAN = 30

# (client id, group, lmq) → whether the group has messages of lmq it has not consumed
Backlog = Callable[[str, str], bool]


class LiteEventDispatcher:
    def __init__(self, registry: LiteSubscriptionRegistry, max_events: Callable[[str], int], backlog: Backlog,
                 wake: Callable[[str], None], lite_topics_of: Callable[[str], list[str]] = lambda p: []) -> None:
        self.registry = registry
        self.lite_topics_of = lite_topics_of  # parent → the light queues of its lite topics (a store listing)
        self._wildcard_due: set[tuple[str, str]] = set()  # (parent, group): a wildcard group's full dispatch
        self._wildcard_running: set[tuple[str, str]] = set()
        self._scans = 0
        self._tasks: set[asyncio.Task[int]] = set()
        self.max_events = max_events  # group → its clients' event bound
        self.backlog = backlog  # (group, lmq) → messages the group has not had
        self.wake = wake  # client id → its waiting pop looks again
        self.events: dict[str, dict[str, None]] = {}  # client id → lmqs, oldest first
        self.last_access: dict[str, int] = {}  # client id → when its pop last took its events (ms; subscribers')
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}  # (group, lmq) → offered again then
        registry.on_register = self._registered
        registry.on_unregister = self._unregistered
        registry.on_remove_all = self._removed

    def dispatch(self, lmq: str, group: str | None = None, exclude: str | None = None) -> bool:
        """Messages arrived in (or came back to) ``lmq``: one reader of each group (of ``group`` only) is told;
        whether each group had a reader with room."""
        offered = True
        for g, clients in self.registry.subscribers(lmq, group).items():
            offered = self._offer_one(lmq, g, clients, exclude) and offered
        return offered

    def take(self, client_id: str) -> list[str]:
        """The lite topics ``client_id`` should look at, taken (a pop puts back what it did not get to)."""
        if client_id in self.registry.clients:
            self.last_access[client_id] = int(time.time() * 1000)
        events = self.events.pop(client_id, None)
        return list(events) if events else []

    def put_back(self, client_id: str, lmqs: list[str]) -> None:
        if not lmqs or client_id not in self.registry.clients:
            return
        events = self.events.setdefault(client_id, {})
        for lmq in lmqs:
            events[lmq] = None

    def offer_again_at(self, lmq: str, group: str, when_s: float) -> None:
        """``lmq``'s messages in flight for ``group`` come back at loop time ``when_s``: offer it then."""
        key = (group, lmq)
        timer = self._timers.get(key)
        if timer is not None:
            if timer.when() <= when_s:
                return
            timer.cancel()  # (sooner now: its messages' invisible time was changed)
        loop = asyncio.get_running_loop()

        def due() -> None:
            self._timers.pop(key, None)
            if self.backlog(group, lmq):
                self.dispatch(lmq, group)

        self._timers[key] = loop.call_at(when_s, due)

    def full_dispatch(self, client_id: str) -> int:
        """Offer ``client_id`` every lite topic it reads that holds messages its group has not had; how many."""
        sub = self.registry.clients.get(client_id)
        if sub is None:
            return 0
        n = 0
        for lmq in sub.lmqs:
            if self.backlog(sub.group, lmq) and self._offer(client_id, sub.group, lmq):
                n += 1
        if n:
            self.wake(client_id)
        return n

    async def scan(self, chunk: int = 1000) -> int:
        """A full dispatch to every client (a bounded turn at a time): whatever an event was missed for is
        offered again; how many offered. A wildcard group's (which lists its parent's lite topics) only when an
        event found none of its readers with room."""
        n = 0
        done = 0
        for client_id in list(self.registry.clients):
            sub = self.registry.clients.get(client_id)
            if self.registry.wildcard_of(client_id) is None:
                n += self.full_dispatch(client_id)
            done += len(sub.lmqs) if sub is not None else 0
            if done >= chunk:
                done = 0
                await asyncio.sleep(0)
        self._scans += 1
        if self._scans % WILDCARD_RESCAN == 0:  # (now and then, for events a pop dropped: as the others' scan)
            self._wildcard_due.update((p, g) for p, groups in self.registry.wildcard.items() for g in groups)
        due, self._wildcard_due = self._wildcard_due, set()
        for parent, group in sorted(due):
            n += await self.wildcard_dispatch(parent, group)
        return n

    async def wildcard_dispatch(self, parent: str, group: str, chunk: int = 1000) -> int:
        """Every lite topic of ``parent`` holding messages ``group`` has not had, offered to the group's readers
        (a wildcard group's full dispatch: the listing and the backlog reads off the loop); how many."""
        key = (parent, group)
        if key in self._wildcard_running:  # (one at a time per group: another asked meanwhile runs at the next scan)
            self._wildcard_due.add(key)
            return 0
        self._wildcard_running.add(key)
        try:
            backlog = self.backlog
            lmqs = await asyncio.to_thread(lambda: [q for q in self.lite_topics_of(parent) if backlog(group, q)])
            for i, lmq in enumerate(lmqs):
                if not self.dispatch(lmq, group):  # (every reader full: the rest at the next scan)
                    self._wildcard_due.add(key)
                    return i
                if i % chunk == chunk - 1:
                    await asyncio.sleep(0)
            return len(lmqs)
        finally:
            self._wildcard_running.discard(key)

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for t in self._tasks:
            t.cancel()

    # == inside ======================================================================================
    def _offer_one(self, lmq: str, group: str, clients: list[str], exclude: str | None) -> bool:
        start = random.randrange(len(clients))
        ordered = clients[start:] + clients[:start]
        if exclude is not None and len(ordered) > 1 and exclude in ordered:
            ordered.remove(exclude)
            ordered.append(exclude)
        for client_id in ordered:
            if self._offer(client_id, group, lmq):
                self.wake(client_id)
                return True
        log.debug("lite topic %s of group %s: every reader's event set is full; the next full dispatch offers it",
                  lmq, group)
        pair = parent_and_lite(lmq)
        if pair is not None and group in self.registry.wildcard.get(pair[0], ()):
            self._wildcard_due.add((pair[0], group))
        return False

    def _offer(self, client_id: str, group: str, lmq: str) -> bool:
        events = self.events.setdefault(client_id, {})
        if lmq in events:
            return True
        if len(events) >= self.max_events(group):
            return False
        events[lmq] = None
        return True

    def _registered(self, client_id: str, group: str, lmq: str) -> None:
        parent = self.registry.wildcard_of(client_id)
        if parent is not None:  # (a wildcard group's new reader: what waits in every lite topic is offered)
            t = asyncio.get_running_loop().create_task(self.wildcard_dispatch(parent, group))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
            return
        if self.backlog(group, lmq) and self._offer(client_id, group, lmq):
            self.wake(client_id)

    def _unregistered(self, client_id: str, group: str, lmq: str) -> None:
        events = self.events.get(client_id)
        if events is not None:
            events.pop(lmq, None)

    def _removed(self, client_id: str, group: str) -> None:
        """A client gone: what it was told of goes to the group's other readers."""
        self.last_access.pop(client_id, None)
        for lmq in self.events.pop(client_id, None) or ():
            self.dispatch(lmq, group, exclude=client_id)
