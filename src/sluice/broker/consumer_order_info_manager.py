"""Orderly (FIFO) POP (RocketMQ's ConsumerOrderInfoManager): a queue popped in order is blocked for its group
while any message of the last pop is neither acknowledged nor past its invisible time; the group's offset moves
only as messages are acknowledged (to the first one that is not), so an unacknowledged message comes back
first, before anything after it. How often each offset was popped is its ``reconsumeTimes``.

The table is kept in ``config/consumerOrderInfo.json`` (written off the loop as it changes): after a crash a
queue's in-flight messages come back, in order, at once or once their invisible time is up.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sluice.common.config_manager import ConfigManager

OrderKey = tuple[str, str, int]  # topic, group, queue id


@dataclass(slots=True)
class OrderInfo:
    """The last orderly pop of one queue by one group."""

    pop_time: int
    invisible_time: int
    offsets: list[int]
    attempt_id: str = ""
    acked: int = 0
    next_visible: dict[int, int] = field(default_factory=dict)  # offset → when it is visible again (changed)

    def visible_at(self, offset: int) -> int:
        return self.next_visible.get(offset, self.pop_time + self.invisible_time)

    def blocked_until(self, now: int, attempt_id: str = "") -> int:
        """0 when the queue may be popped now; else when it may (the latest its in-flight messages come back)."""
        if attempt_id and attempt_id == self.attempt_id:
            return 0  # the same attempt again (a retried request): served again
        until = 0
        for i, off in enumerate(self.offsets):
            if not self.acked >> i & 1:
                at = self.visible_at(off)
                if at > now:
                    until = max(until, at)
        return until

    def first_unacked(self) -> int | None:
        for i, off in enumerate(self.offsets):
            if not self.acked >> i & 1:
                return off
        return None

    def to_json(self) -> dict[str, Any]:
        return {"popTime": self.pop_time, "invisibleTime": self.invisible_time, "offsets": self.offsets,
                "attemptId": self.attempt_id, "acked": self.acked,
                "nextVisible": {str(k): v for k, v in self.next_visible.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OrderInfo:
        return cls(int(d["popTime"]), int(d["invisibleTime"]), [int(o) for o in d["offsets"]],
                   str(d.get("attemptId", "")), int(d.get("acked", 0)),
                   {int(k): int(v) for k, v in (d.get("nextVisible") or {}).items()})


class ConsumerOrderInfoManager(ConfigManager):
    malformed = "has a malformed table"

    def __init__(self, config_dir: str) -> None:
        self.table: dict[OrderKey, OrderInfo] = {}
        self.counts: dict[OrderKey, dict[int, int]] = {}  # offset → times popped
        super().__init__(os.path.join(config_dir, "consumerOrderInfo.json"))

    def decode(self, data: dict[str, Any]) -> None:
        for entry in data.get("table") or []:
            key = (str(entry["topic"]), str(entry["group"]), int(entry["queueId"]))
            self.table[key] = OrderInfo.from_json(entry["info"])
            self.counts[key] = {int(k): int(v) for k, v in (entry.get("counts") or {}).items()}

    def encode(self) -> dict[str, Any]:
        return {"table": [{"topic": t, "group": g, "queueId": q, "info": info.to_json(),
                           "counts": {str(k): v for k, v in self.counts.get((t, g, q), {}).items()}}
                          for (t, g, q), info in self.table.items()]}

    def blocked_until(self, key: OrderKey, now: int, attempt_id: str = "") -> int:
        info = self.table.get(key)
        return 0 if info is None else info.blocked_until(now, attempt_id)

    def popped(self, key: OrderKey, info: OrderInfo) -> list[int]:
        """A new pop of the queue: its info, and each offset's earlier pops (its ``reconsumeTimes``)."""
        with self._lock:
            counts = self.counts.setdefault(key, {})
            before = [counts.get(off, 0) for off in info.offsets]
            for off in info.offsets:
                counts[off] = counts.get(off, 0) + 1
            self.table[key] = info
        self.writer.request()
        return before

    def ack(self, key: OrderKey, pop_time: int, offset: int) -> tuple[bool, int | None]:
        """Mark ``offset`` of the pop at ``pop_time`` acknowledged: (whether it was in flight, the group's new
        offset: the first unacknowledged one, or past the pop when all are)."""
        info = self.table.get(key)
        if info is None or info.pop_time != pop_time or offset not in info.offsets:
            return False, None
        i = info.offsets.index(offset)
        if info.acked >> i & 1:
            return False, None
        with self._lock:
            info.acked |= 1 << i
            first = info.first_unacked()
            new_offset = info.offsets[-1] + 1 if first is None else first
            counts = self.counts.get(key)
            if counts:
                for off in [o for o in counts if o < new_offset]:
                    del counts[off]
            if first is None:
                del self.table[key]
        self.writer.request()
        return True, new_offset

    def change_invisible(self, key: OrderKey, pop_time: int, offset: int, visible_at: int) -> OrderInfo | None:
        info = self.table.get(key)
        if info is None or info.pop_time != pop_time or offset not in info.offsets:
            return None
        i = info.offsets.index(offset)
        if info.acked >> i & 1:
            return None
        with self._lock:
            info.next_visible[offset] = visible_at
        self.writer.request()
        return info

    def suspend(self, key: OrderKey, pop_time: int, offset: int, visible_at: int) -> OrderInfo | None:
        """(RocketMQ 5.5's suspendQueue) The whole pop comes back at ``visible_at``, and none of its deliveries
        counts: the queue is handed out again then, from its first unacknowledged message, reconsume times as
        before the pop."""
        info = self.table.get(key)
        if info is None or info.pop_time != pop_time or offset not in info.offsets:
            return None
        if info.acked >> info.offsets.index(offset) & 1:
            return None
        with self._lock:
            counts = self.counts.get(key)
            if counts:
                for off in info.offsets:
                    if counts.get(off, 0) > 0:
                        counts[off] -= 1
            info.next_visible.clear()
            info.invisible_time = visible_at - info.pop_time
        self.writer.request()
        return info

    def forget(self, key: OrderKey) -> None:
        with self._lock:
            self.table.pop(key, None)
        self.writer.request()

    def remove_topic(self, topic: str) -> None:
        self.remove_topics({topic})

    def remove_topics(self, topics: Collection[str]) -> None:
        """Forget every group's order state of ``topics`` (one pass, however many)."""
        gone = set(topics)
        with self._lock:
            for key in [k for k in self.table if k[0] in gone]:
                del self.table[key]
            for key in [k for k in self.counts if k[0] in gone]:
                del self.counts[key]
        self.writer.request()


__all__ = ["ConsumerOrderInfoManager", "OrderInfo", "OrderKey"]
