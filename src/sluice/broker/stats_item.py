"""Per-topic and per-group counters over the last minute, hour and day (RocketMQ's ``StatsItem`` / ``StatsItemSet``,
what VIEW_BROKER_STATS_DATA and ``mqadmin statsAll`` read).

Each item counts a sum and how many times it grew; snapshots taken every 10 s (7 kept), 10 min (7 kept) and
hour (25 kept) give each window's sum, its rate a second and the mean per increment, as RocketMQ computes them.
The set of items is bounded: group and topic names come from clients, so past ``max_items`` the item updated least
recently makes room.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, NamedTuple

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
STATS_NAMES = frozenset({TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS, GROUP_GET_SIZE, BROKER_PUT_NUMS,
                         BROKER_GET_NUMS})
MAX_ITEMS = 20_000

# (window, seconds between snapshots, snapshots kept): a minute, an hour, a day, as RocketMQ samples them.
_WINDOWS = (("statsMinute", 10, 7), ("statsHour", 600, 7), ("statsDay", 3600, 25))


class _Snapshot(NamedTuple):
    t_ms: int
    value: int
    times: int


class StatsItem:
    __slots__ = ("value", "times", "last_update", "_lists")

    def __init__(self, now_ms: int) -> None:
        self.value = 0
        self.times = 0
        self.last_update = now_ms
        first = _Snapshot(now_ms, 0, 0)
        self._lists = tuple(deque([first], maxlen=kept) for _, _, kept in _WINDOWS)

    def add(self, value: int, times: int, now_ms: int) -> None:
        self.value += value
        self.times += times
        self.last_update = now_ms

    def sample(self, window: int, now_ms: int) -> None:
        self._lists[window].append(_Snapshot(now_ms, self.value, self.times))

    def view(self, now_ms: int) -> dict[str, dict[str, Any]]:
        """RocketMQ's BrokerStatsData: per window its sum, TPS and mean per increment (``avgpt``), from the window's
        oldest snapshot to now (RocketMQ's stops at its newest snapshot, up to 10 s behind)."""
        out = {}
        for (name, _, _), snaps in zip(_WINDOWS, self._lists, strict=True):
            first = snaps[0]
            total, times = self.value - first.value, self.times - first.times
            span = now_ms - first.t_ms
            out[name] = {"sum": total, "tps": total * 1000.0 / span if span > 0 else 0.0,
                         "avgpt": total / times if times else 0.0}
        return out


class StatsTable:
    """The items of every stats name, keyed ``(name, key)``: a topic, ``topic@group``, or the cluster's name."""

    def __init__(self, max_items: int = MAX_ITEMS) -> None:
        self.max_items = max_items
        self.items: dict[tuple[str, str], StatsItem] = {}
        self._next = [0] * len(_WINDOWS)  # (the first call samples every window)

    def add(self, name: str, key: str, value: int, times: int = 1, now_ms: int | None = None) -> None:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        item = self.items.get((name, key))
        if item is None:
            if len(self.items) >= self.max_items:
                del self.items[min(self.items, key=lambda k: self.items[k].last_update)]
            item = self.items[(name, key)] = StatsItem(now)
        item.add(value, times, now)

    def sample(self, now_ms: int | None = None) -> None:
        """Called every second or so: each window's snapshot is taken when it is due."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for i, (_, every, _) in enumerate(_WINDOWS):
            if now >= self._next[i]:
                self._next[i] = now + every * 1000
                for item in self.items.values():
                    item.sample(i, now)

    def view(self, name: str, key: str, now_ms: int | None = None) -> dict[str, dict[str, Any]] | None:
        item = self.items.get((name, key))
        return None if item is None else item.view(int(time.time() * 1000) if now_ms is None else now_ms)
