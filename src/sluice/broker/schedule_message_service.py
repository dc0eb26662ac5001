"""Delayed delivery (RocketMQ ScheduleMessageService): messages with a DELAY level wait in SCHEDULE_TOPIC_XXXX.

A delayed message is stored in queue ``level - 1`` of SCHEDULE_TOPIC_XXXX with its real topic and queue in
REAL_TOPIC / REAL_QID. Each level's queue is first-in first-due (one delay per queue), so the service only
looks at the head of each queue: when its store time plus the level's delay has passed it stores the message
again under its real topic and moves on. Per-level progress is kept in ``config/delayOffset.json``; a message
is delivered at least once (a crash between the re-store and the offset persist delivers it again).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice.common.config_manager import ConfigManager
from sluice.common.decimal_text import parse_long
from sluice.common.message import MessageExtBrokerInner
from sluice.common.naming import SCHEDULE_TOPIC
from sluice.common.properties import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
)
from sluice.common.service import AsyncService
from sluice.common.sysflag import TRANSACTION_PREPARED_TYPE, TRANSACTION_TYPE_MASK
from sluice.store.consume_queue import BLANK_ENTRY_SIZE

if TYPE_CHECKING:
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

_TURN = 0.005  # the longest the delivery of a backlog holds the event loop at once (s)
STOP_WAIT = 10.0  # s a stop waits for deliveries under way
_DELIVER_AT_ONCE = 64  # due messages stored in one append


class ScheduleMessageService(ConfigManager, AsyncService):
    """The delivery task, and its progress per level (a ConfigManager, as RocketMQ's)."""

    malformed = "has a malformed offsetTable"

    def __init__(self, store: MessageStore, delay_levels: list[int], poll_interval_ms: int,
                 persist_interval_ms: int) -> None:
        AsyncService.__init__(self)
        ConfigManager.__init__(self, os.path.join(store.config.store_path_config, "delayOffset.json"))
        self.store = store
        self.delays = delay_levels
        self.poll_interval = poll_interval_ms / 1000
        self.persist_interval = persist_interval_ms / 1000
        self.offsets: dict[int, int] = {}  # level -> next queue offset to deliver
        self._wake = asyncio.Event()
        self._dirty = False
        # Deliveries under way: a stop that cancels the loop lets each finish and move its level's offset (else the
        # stored copies would be delivered again after a restart).
        self._delivering: set[asyncio.Future[bool]] = set()
        self.delivered = 0
        # Told of each delayed message delivered to its topic, with its size (the metrics count it as coming in).
        self.on_delivered: Callable[[str, int], None] | None = None

    @property
    def max_level(self) -> int:
        return len(self.delays)

    def decode(self, data: dict[str, Any]) -> None:
        self.offsets = {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}

    def encode(self) -> dict[str, Any]:
        return {"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}}

    def _persist_changes(self) -> None:
        """Have the delay offsets written if they moved, off the event loop (a full disk: retried, logged)."""
        if self._dirty:
            self._dirty = False
            self.persist()

    def redirect(self, msg: MessageExtBrokerInner) -> MessageExtBrokerInner:
        """A message with a delay level goes to SCHEDULE_TOPIC_XXXX (in place); others pass unchanged."""
        raw = msg.properties.get(PROPERTY_DELAY_TIME_LEVEL)
        if not raw or raw == "0" or msg.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE:
            return msg
        try:
            level = int(raw)
        except ValueError:
            return msg
        if level <= 0:
            return msg
        level = min(level, self.max_level)
        msg.properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        msg.properties[PROPERTY_REAL_TOPIC] = msg.topic
        msg.properties[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1
        self._wake.set()
        return msg

    def start(self) -> None:
        self._spawn(self._run())
        self.store.arrival_listeners.append(self._on_arrival)

    def _on_arrival(self, topic: str, _queue_id: int, _max_offset: int) -> None:
        """A delayed message is stored (``redirect`` wakes the service before the store thread has written it)."""
        if topic == SCHEDULE_TOPIC:
            self._wake.set()

    async def stop(self) -> None:
        if self._on_arrival in self.store.arrival_listeners:
            self.store.arrival_listeners.remove(self._on_arrival)
        await super().stop()
        if self._delivering:  # (bounded: a put the store never answers must not hold the broker's stop)
            await asyncio.wait(self._delivering, timeout=STOP_WAIT)
        self._persist_changes()
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    async def _run(self) -> None:
        last_persist = time.monotonic()
        while True:
            try:
                next_due = await self.deliver_due()
            except Exception:
                log.exception("delayed delivery failed; retrying")
                next_due = time.time() + 1
            if time.monotonic() - last_persist >= self.persist_interval:
                self._persist_changes()
                last_persist = time.monotonic()
            # Nothing pending: sleep until a delayed message is stored (``redirect`` wakes us).
            wait = self.persist_interval if next_due is None else min(
                max(next_due - time.time(), self.poll_interval / 10), self.persist_interval)
            self._wake.clear()
            try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancel of stop()
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def deliver_due(self) -> float | None:
        """Deliver every message whose time has come; returns when the next one is due (epoch s) or None."""
        store = self.store
        next_due: float | None = None
        loop = asyncio.get_running_loop()
        turn_ends = loop.time() + _TURN
        for level in range(1, self.max_level + 1):
            cq = store.find_consume_queue(SCHEDULE_TOPIC, level - 1, create=False)
            if cq is None:
                continue
            offset = max(self.offsets.get(level, 0), cq.min_offset)
            due_now: list[MessageExtBrokerInner] = []
            delivered = True
            while offset < cq.max_offset:
                if loop.time() >= turn_ends:  # a backlog is delivered a slice at a time: clients are served between
                    await asyncio.sleep(0)
                    turn_ends = loop.time() + _TURN
                entry = cq.get_entry(offset)
                if entry is None:
                    break
                phys, size, _ = entry
                if size == BLANK_ENTRY_SIZE:
                    offset += 1
                    continue
                msg = store.look_message_by_offset(phys, size)
                if msg is None:  # aged out of the commit log
                    offset += 1
                    continue
                due = (msg.store_timestamp + self.delays[level - 1]) / 1000
                if due > time.time():
                    next_due = due if next_due is None else min(next_due, due)
                    break
                # The delivered copy keeps every property, DELAY, REAL_TOPIC and REAL_QID too, as RocketMQ 5's does
                # (consumers see them)
                props = dict(msg.properties)
                real_topic = props.get(PROPERTY_REAL_TOPIC)
                real_qid = props.get(PROPERTY_REAL_QUEUE_ID, "0")
                if real_topic:
                    due_now.append(MessageExtBrokerInner(real_topic, msg.body, parse_long(real_qid, 0),
                                                         msg.flag, props, msg.sys_flag, msg.born_timestamp,
                                                         msg.born_host, msg.store_host, msg.reconsume_times,
                                                         msg.prepared_transaction_offset))
                offset += 1
                if len(due_now) >= _DELIVER_AT_ONCE:
                    delivered = await self._deliver(level, due_now, offset)
                    if not delivered:
                        break
            if delivered:
                delivered = await self._deliver(level, due_now, offset)
            if not delivered:  # (the level's offset stays before what was not delivered: tried again)
                next_due = time.time() + 1
        return next_due

    async def _deliver(self, level: int, msgs: list[MessageExtBrokerInner], offset: int) -> bool:
        """Store the due ``msgs`` of ``level`` (one append: a backlog goes out in a few writes, not one each) and
        move the level's offset to ``offset``; False when the store refused them (tried again later)."""
        batch = list(msgs)
        msgs.clear()
        # Shielded: a cancel (stop) does not part the stored copies from the offset that says they are delivered.
        delivery = asyncio.ensure_future(self._store_and_advance(level, batch, offset))
        self._delivering.add(delivery)
        delivery.add_done_callback(self._delivering.discard)
        return await asyncio.shield(delivery)

    async def _store_and_advance(self, level: int, batch: list[MessageExtBrokerInner], offset: int) -> bool:
        if batch:
            r = await self.store.put_async(batch)
            if not r.stored:  # (stored but not yet flushed is delivered: sent again, it would come twice)
                log.warning("cannot deliver %d delayed message(s): %s %s; trying again in a second", len(batch),
                            r.status.name, r.remark)
                return False
            self.delivered += len(batch)
            if self.on_delivered is not None:
                each = r.wrote_bytes // len(batch)
                for m in batch:
                    self.on_delivered(m.topic, each)
        if self.offsets.get(level, 0) != offset:
            self.offsets[level] = offset
            self._dirty = True
        return True
