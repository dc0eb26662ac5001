"""The timer wheel (RocketMQ 5's TimerWheel): for each due time, a multiple of the precision, the newest timer-log
unit due then and how many are. Slots are reused round the wheel, which spans twice the longest delay, so a
slot never holds two due times at once while delivery keeps up.

The wheel lives in memory, three arrays whatever the number of waiting messages (with RocketMQ's defaults, 1 s
and 3 days: 518,400 slots, 10 MB); ``rebuild`` makes it again from the timer log at start.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class WheelOverflowError(Exception):
    """A due time's slot still holds an earlier due time: delivery is more than a whole wheel behind."""


class TimerWheel:
    def __init__(self, precision_ms: int, max_delay_ms: int) -> None:
        self.precision = precision_ms
        self.slots = 2 * (max_delay_ms // precision_ms + 2)
        self.last = np.full(self.slots, -1, np.int64)  # newest unit's timer-log position
        self.time = np.zeros(self.slots, np.int64)  # the due time the slot holds now
        self.count = np.zeros(self.slots, np.int64)
        self.pending = 0

    def due_time(self, deliver_ms: int) -> int:
        """The slot time a message due at ``deliver_ms`` waits for: the first multiple of the precision at or
        after it (never early)."""
        p = self.precision
        return -(-deliver_ms // p) * p

    def _index(self, due: int) -> int:
        return (due // self.precision) % self.slots

    def newest(self, due: int) -> int:
        """The newest unit due at ``due`` (-1: none): what a new one chains to."""
        i = self._index(due)
        if self.count[i] and self.time[i] != due:
            raise WheelOverflowError(f"the wheel slot for {due} still holds messages due at {int(self.time[i])}")
        return int(self.last[i]) if self.count[i] else -1

    def add(self, due: int, pos: int) -> None:
        """Unit ``pos`` (chained to ``newest(due)``) is now the newest due at ``due``."""
        i = self._index(due)
        self.time[i] = due
        self.last[i] = pos
        self.count[i] += 1
        self.pending += 1

    def waiting(self, edges: list[int]) -> list[int]:
        """How many messages are due in each [``edges[i]``, ``edges[i + 1]``) (the metrics: one pass over the
        wheel for all of them)."""
        if not self.pending or len(edges) < 2:
            return [0] * max(0, len(edges) - 1)
        held = np.nonzero(self.count)[0]
        times, counts = self.time[held], self.count[held]
        order = np.argsort(times)
        cumulative = np.concatenate(([0], np.cumsum(counts[order])))
        at = np.searchsorted(times[order], np.asarray(edges, dtype=np.int64), side="left")
        return [int(cumulative[at[i + 1]] - cumulative[at[i]]) for i in range(len(edges) - 1)]

    def take(self, due: int) -> tuple[int, int]:
        """The newest unit due at ``due`` and how many are, and the slot emptied."""
        i = self._index(due)
        if not self.count[i] or self.time[i] != due:
            return -1, 0
        last, n = int(self.last[i]), int(self.count[i])
        self.last[i], self.count[i] = -1, 0
        self.pending -= n
        return last, n

    def next_due(self, after: int, until: int) -> int | None:
        """The earliest due time holding messages in [``after``, ``until``]; None when there is none. Looks at
        the slots of that span only, a window at a time."""
        if not self.pending or until < after:
            return None
        p = self.precision
        first = self.due_time(after)
        n = (until - first) // p + 1
        if n > self.slots:  # (a span longer than the wheel: after a long stop) every slot in one look
            times = self.time[self.count > 0]
            times = times[(times >= first) & (times <= until)]
            return int(times.min()) if len(times) else None
        window = 4096
        for k in range(0, max(0, n), window):
            dues = first + (k + np.arange(min(window, n - k), dtype=np.int64)) * p
            idx = (dues // p) % self.slots
            hit = np.flatnonzero((self.count[idx] > 0) & (self.time[idx] == dues))
            if len(hit):
                return int(dues[hit[0]])
        return None

    def rebuild(self, units: Iterable[tuple[int, np.ndarray]], from_ms: int) -> int:
        """Fill the wheel from the timer log's files (``TimerLog.segments``): every unit due at or after
        ``from_ms``, the newest of each due time last. Returns how many are waiting."""
        self.last.fill(-1)
        self.count.fill(0)
        self.pending = 0
        for start, arr in units:
            live = np.flatnonzero(arr["deliver"] >= from_ms)
            if not len(live):
                continue
            due = arr["deliver"][live].astype(np.int64)  # units hold their slot's due time
            idx = (due // self.precision) % self.slots
            pos = start + live.astype(np.int64) * arr.dtype.itemsize
            np.maximum.at(self.last, idx, pos)  # the newest unit of a slot is the one furthest in the log
            self.time[idx] = due
            np.add.at(self.count, idx, 1)
            self.pending += len(live)
        return self.pending
