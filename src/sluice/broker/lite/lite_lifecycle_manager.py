"""Lite topics come and go (RocketMQ's LiteLifecycleManager): one is made by the first message sent to it, and
deleted once no message has come for its parent's ``lite.topic.expiration`` minutes (never sooner than
``min_lite_ttl``; -1 or 0: never) — its light queue, its groups' offsets and order state — and whoever read it is
told to unsubscribe. The same service runs the lite subscriptions' renewal check and the event dispatcher's
periodic full dispatch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from sluice.broker.lite.lite_event_dispatcher import LiteEventDispatcher
from sluice.broker.lite.lite_subscription_registry import LiteSubscriptionRegistry
from sluice.common.attributes import LITE_TOPIC_EXPIRATION
from sluice.common.config import BrokerConfig
from sluice.common.lite import LITE_TOPIC_PREFIX, lite_prefix, parent_and_lite
from sluice.common.service import AsyncService
from sluice.common.structs import TopicConfig

log = logging.getLogger(__name__)

DELETE_CHUNK = 1000  # lite topics looked at, or deleted, in one turn of the loop
MAX_ROUNDS = 10_000  # chunks of one parent's expired lite topics deleted in one check (a bound, not a goal)


class LiteStore:
    """What the lifecycle reads of the store, and how it deletes a light queue."""

    def __init__(self, names: Callable[[str], list[str]], max_offset: Callable[[str], int],
                 store_time: Callable[[str, int], int], delete: Callable[[list[str]], object],
                 idle: Callable[[str, int, int], list[tuple[str, int]]] = lambda p, b, n: [],
                 note_last: Callable[[list[tuple[str, int]]], None] = lambda times: None,
                 next_name: Callable[[str, str], str | None] = lambda q, p: None,
                 file_names: Callable[[str], list[str]] = lambda p: []) -> None:
        self.names = names  # prefix → the light queues the store keeps whose names start so, in order
        self.max_offset = max_offset  # lmq → its end
        self.store_time = store_time  # (lmq, offset) → when that message was stored (-1: unknown)
        self.delete = delete  # lmqs → (awaitable) deleted with their offsets
        self.idle = idle  # (parent, before ms, limit) → its lite topics last stored to before then (0: not known)
        self.note_last = note_last  # [(lmq, ms)]: their last store times, where the store did not know them
        self.next_name = next_name  # (name, prefix) → the first light queue after name with that prefix
        self.file_names = file_names  # prefix → the light queues kept in files (made by older stores)


class LiteLifecycleManager(AsyncService):
    def __init__(self, config: BrokerConfig, store: LiteStore, topic_config: Callable[[str], TopicConfig | None],
                 registry: LiteSubscriptionRegistry, events: LiteEventDispatcher,
                 forget_order: Callable[[list[str]], None],
                 lite_parents: Callable[[], list[str]] = lambda: []) -> None:
        super().__init__()
        self.config = config
        self.store = store
        self.topic_config = topic_config
        self.lite_parents = lite_parents  # the topics of message type LITE
        self.registry = registry
        self.events = events
        self.forget_order = forget_order  # lmqs → their order state goes (every group's)
        self.started = time.monotonic()
        self.expired = 0  # lite topics deleted

    def start(self) -> None:
        c = self.config
        self._spawn(self._every(c.lite_ttl_check_interval, self.clean_expired), "lite-ttl")
        self._spawn(self._every(c.lite_subscription_check_interval, self._expire_subscriptions), "lite-subs")
        self._spawn(self._every(c.lite_event_check_interval, self.events.scan), "lite-events")

    def lite_topics(self, parent: str | None = None) -> list[str]:
        """The light queues of lite topics this broker keeps (of ``parent`` only, when given)."""
        prefix = LITE_TOPIC_PREFIX if parent is None else lite_prefix(parent)
        return self.store.names(prefix)

    def is_expired(self, lmq: str, now_ms: int) -> bool:
        """Whether ``lmq`` goes: its parent is gone (deleted), or its last message was stored longer ago than the
        parent's expiration (or aged out of the log: as RocketMQ, a time it cannot read is long past)."""
        pair = parent_and_lite(lmq)
        if pair is None:
            return False
        tc = self.topic_config(pair[0])
        if tc is None:
            return True
        minutes = LITE_TOPIC_EXPIRATION.value_of(tc.attributes)
        if minutes <= 0:
            return False
        end = self.store.max_offset(lmq)
        if end <= 0:
            return False
        last = self.store.store_time(lmq, end - 1)
        idle = now_ms - max(last, 0)
        return idle >= self.config.min_lite_ttl and idle > minutes * 60_000

    async def clean_expired(self, now_ms: int | None = None) -> int:
        """Delete the lite topics idle past their expiration, and those of parents deleted; how many. The
        store's index of last store times finds the idle ones (the cost follows what expires, not how many lite
        topics there are); the parents are found a jump at a time."""
        if (time.monotonic() - self.started) * 1000 < self.config.min_lite_ttl:
            return 0  # (right after a start: nothing could have been sent to them meanwhile)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        n = 0
        for parent in self.lite_parents():
            tc = self.topic_config(parent)
            minutes = LITE_TOPIC_EXPIRATION.value_of(tc.attributes) if tc is not None else -1
            if minutes <= 0:
                continue
            before = now - max(self.config.min_lite_ttl, minutes * 60_000 + 1)
            for _ in range(MAX_ROUNDS):
                looked, gone = await asyncio.to_thread(self._idle_chunk, parent, before, now)
                if gone:
                    await self.delete(gone)
                    n += len(gone)
                if looked < DELETE_CHUNK:
                    break
        orphans = await asyncio.to_thread(self._orphans)
        for i in range(0, len(orphans), DELETE_CHUNK):  # (a bounded stall of the loop and the store at a time)
            await self.delete(orphans[i:i + DELETE_CHUNK])
        gone_already = set(orphans)
        files = await asyncio.to_thread(
            lambda: [q for q in self.store.file_names(LITE_TOPIC_PREFIX)
                     if q not in gone_already and self.is_expired(q, now)])
        if files:
            await self.delete(files)
        return n + len(orphans) + len(files)

    def _idle_chunk(self, parent: str, before_ms: int, now_ms: int) -> tuple[int, list[str]]:
        """(a worker thread) A chunk of ``parent``'s lite topics stored to last before ``before_ms``: how many
        were looked at, and those expired. One whose last store time the shared store did not know (made by an
        older store) is read from its last message and the time noted — now, when it has none and stays (an
        empty queue): every one looked at leaves the chunk, deleted or noted, so the rounds end."""
        found = self.store.idle(parent, before_ms, DELETE_CHUNK)
        gone, noted = [], []
        for lmq, last in found:
            if last <= 0:
                end = self.store.max_offset(lmq)
                known = self.store.store_time(lmq, end - 1) if end > 0 else -1
                if not self.is_expired(lmq, now_ms):
                    noted.append((lmq, known if known > 0 else now_ms))
                    continue
            gone.append(lmq)
        self.store.note_last(noted)
        return len(found), gone

    def _orphans(self) -> list[str]:
        """(a worker thread) The lite topics whose parent topic is gone."""
        out: list[str] = []
        name = LITE_TOPIC_PREFIX
        while (nxt := self.store.next_name(name, LITE_TOPIC_PREFIX)) is not None:
            pair = parent_and_lite(nxt)
            parent_prefix = lite_prefix(pair[0]) if pair else nxt
            if pair is not None and self.topic_config(pair[0]) is None:
                out += self.store.names(parent_prefix)
            # (past every lite topic of this parent: the next name is another parent's)
            name = parent_prefix[:-1] + chr(ord(parent_prefix[-1]) + 1) if pair else nxt
        return out

    async def delete(self, lmqs: list[str], notify: bool = False) -> None:
        """Delete lite topics: nobody reads them any more (their readers told when ``notify``: RocketMQ does not
        tell them of an expiry, and a client's next full sync subscribes again), their order state, offsets and
        light queues go."""
        for lmq in lmqs:
            self.registry.clean(lmq, notify=notify)
        self.forget_order(lmqs)
        result = self.store.delete(lmqs)
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            await result
        self.expired += len(lmqs)
        log.info("%d lite topic(s) deleted: %s", len(lmqs), ", ".join(lmqs[:5]) + (" ..." if len(lmqs) > 5 else ""))

    async def _expire_subscriptions(self) -> None:
        self.registry.expire(self.config.lite_subscription_check_timeout / 1000)

    async def _every(self, interval_ms: int, work: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = work()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("lite topics: %s failed; trying again", getattr(work, "__name__", work))


__all__ = ["LiteLifecycleManager", "LiteStore"]
