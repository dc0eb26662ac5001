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
from typing import TYPE_CHECKING

from sluice.common.decimal_text import parse_long
from sluice.common.errors import StoreConfigError
from sluice.common.files import ConfigWriter, load_json
from sluice.common.message import MessageExtBrokerInner
from sluice.common.naming import SCHEDULE_TOPIC
from sluice.common.properties import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
)
from sluice.common.sysflag import TRANSACTION_PREPARED_TYPE, TRANSACTION_TYPE_MASK
from sluice.store.consume_queue import BLANK_ENTRY_SIZE

if TYPE_CHECKING:
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

_TURN = 0.005  # the longest the delivery of a backlog holds the event loop at once (s)
_DELIVER_AT_ONCE = 64  # due messages stored in one append


class ScheduleMessageService:
    def __init__(self, store: MessageStore, delay_levels: list[int], poll_interval_ms: int,
                 persist_interval_ms: int) -> None:
        self.store = store
        self.delays = delay_levels
        self.poll_interval = poll_interval_ms / 1000
        self.persist_interval = persist_interval_ms / 1000
        self.path = os.path.join(store.config.store_path_config, "delayOffset.json")
        self.offsets: dict[int, int] = {}  # level -> next queue offset to deliver
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._dirty = False
        self.delivered = 0
        self.writer = ConfigWriter(self.path, lambda: {"offsetTable": {str(k): v for k, v in
                                                                       sorted(self.offsets.items())}})

    @property
    def max_level(self) -> int:
        return len(self.delays)

    def load(self) -> None:
        data = load_json(self.path)
        if data is None:
            return
        try:
            self.offsets = {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}
        except (AttributeError, TypeError, ValueError) as exc:
            raise StoreConfigError(f"store config file {self.path} has a malformed offsetTable: {exc}") from exc

    def persist(self) -> None:
        """Have the delay offsets written, off the event loop (a full disk: retried, logged)."""
        if self._dirty:
            self._dirty = False
            self.writer.request()

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
        self._task = asyncio.get_running_loop().create_task(self._run())
        self.store.arrival_listeners.append(self._on_arrival)

    def _on_arrival(self, topic: str, _queue_id: int, _max_offset: int) -> None:
        """A delayed message is stored (``redirect`` wakes the service before the store thread has written it)."""
        if topic == SCHEDULE_TOPIC:
            self._wake.set()

    async def stop(self) -> None:
        if self._on_arrival in self.store.arrival_listeners:
            self.store.arrival_listeners.remove(self._on_arrival)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self.persist()
        await asyncio.get_running_loop().run_in_executor(None, self.writer.close)

    async def _run(self) -> None:
        last_persist = time.monotonic()
        while True:
            try:
                next_due = await self.deliver_due()
            except Exception:
                log.exception("delayed delivery failed; retrying")
                next_due = time.time() + 1
            if time.monotonic() - last_persist >= self.persist_interval:
                self.persist()
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
        if msgs:
            n = len(msgs)
            r = await self.store.put_async(list(msgs))
            msgs.clear()
            if not r.stored:  # (stored but not yet flushed is delivered: sent again, it would come twice)
                log.warning("cannot deliver %d delayed message(s): %s %s; trying again in a second", n,
                            r.status.name, r.remark)
                return False
            self.delivered += n
        if self.offsets.get(level, 0) != offset:
            self.offsets[level] = offset
            self._dirty = True
        return True
