"""``ProcessQueue``: the messages pulled from one queue and not yet consumed (RocketMQ's ProcessQueue).

Messages are cached by queue offset. A concurrent consumer removes them as listeners finish, in any order;
the offset it may commit is the smallest offset still cached (everything below it is done), or one past
the largest offset ever cached when nothing is left. An orderly consumer instead *takes* the smallest
messages into a "consuming" set, then commits them or puts them back.

The cache is a dict plus a sorted list of its offsets: pulls deliver increasing offsets, so inserts are
appends, and a consumed batch is removed with one slice deletion per run of neighbouring offsets. All
methods are thread-safe (listeners may run in a thread pool). Times are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterable

from sluice.common.decimal_text import is_long
from sluice.common.message import MessageExt

REBALANCE_LOCK_MAX_LIVE_TIME = 30.0
"""Seconds after the last successful broker lock when the client considers its queue lock expired."""

REBALANCE_LOCK_INTERVAL = 20.0
"""Seconds between lock renewals of an orderly consumer."""

PULL_MAX_IDLE_TIME = 120.0
"""Seconds without a pull after which a queue counts as stuck."""

_PROPERTY_MAX_OFFSET = "MAX_OFFSET"


def _delete_sorted(offsets: list[int], gone: list[int]) -> None:
    """Remove the values ``gone`` (all present in the sorted list ``offsets``) with one slice deletion per run
    of neighbours: a consumed batch is usually one run, so one memmove."""
    gone.sort()
    k, n = 0, len(gone)
    lo = 0
    while k < n:
        i = bisect.bisect_left(offsets, gone[k], lo)
        j = i + 1
        k += 1
        while k < n and j < len(offsets) and offsets[j] == gone[k]:
            j += 1
            k += 1
        del offsets[i:j]
        lo = i


class ProcessQueue:
    """The cache of pulled, unconsumed messages of one queue, plus its consumption state."""

    def __init__(self, now: float | None = None) -> None:
        t = time.monotonic() if now is None else now
        self._lock = threading.Lock()
        self._msgs: dict[int, MessageExt] = {}
        self._offsets: list[int] = []  # sorted keys of _msgs
        self._consuming: dict[int, MessageExt] = {}  # orderly: taken, not yet committed
        self._count = 0  # messages in _msgs and _consuming
        self._size = 0  # their body bytes
        self._max_offset = -1  # largest offset ever put (-1: none yet)
        self._consuming_flag = False
        self.consume_lock = threading.Lock()
        """Held by an orderly consumer while a listener runs, so that unlocking waits for it."""
        self.dropped = False
        self.locked = False
        self.last_pull_timestamp = t
        self.last_consume_timestamp = t
        self.last_lock_timestamp = t
        self.try_unlock_times = 0
        self.msg_acc_cnt = 0
        """Messages left in the broker queue after the last pulled one (from the MAX_OFFSET property)."""

    # -- counters -----------------------------------------------------------------------------------------
    @property
    def msg_count(self) -> int:
        """Messages cached (including, for orderly consumers, those being consumed)."""
        return self._count

    @property
    def msg_size(self) -> int:
        """Body bytes of the cached messages."""
        return self._size

    @property
    def max_span(self) -> int:
        """Largest minus smallest cached offset (0 when at most one message is cached)."""
        with self._lock:
            offs = self._offsets
            return offs[-1] - offs[0] if offs else 0

    def span_with(self, end_offset: int) -> int:
        """``max_span`` as it will be once messages below ``end_offset`` (an answer not yet added) are in."""
        with self._lock:
            offs = self._offsets
            return max(offs[-1], end_offset - 1) - offs[0] if offs else 0

    @property
    def max_offset_put(self) -> int:
        """The largest offset ever put, -1 before the first put."""
        return self._max_offset

    def has_temp_message(self) -> bool:
        """Whether any message waits to be consumed."""
        return bool(self._offsets)

    def contains_message(self, msg: MessageExt) -> bool:
        """Whether ``msg``'s offset is cached (not yet consumed or taken)."""
        with self._lock:
            return msg.queue_offset in self._msgs

    def min_offset(self) -> int | None:
        """The smallest cached offset, None when empty."""
        with self._lock:
            return self._offsets[0] if self._offsets else None

    # -- concurrent consumption ---------------------------------------------------------------------------
    def put_messages(self, msgs: Iterable[MessageExt]) -> bool:
        """Cache pulled messages (ones already cached are replaced, not counted twice).

        Returns True when a consume task should be dispatched: messages are waiting and none is running
        (meaningful for orderly consumers; concurrent ones dispatch every batch anyway).
        """
        with self._lock:
            cache, offsets = self._msgs, self._offsets
            added = size = 0
            last: MessageExt | None = None
            for msg in msgs:
                last = msg
                off = msg.queue_offset
                old = cache.get(off)
                if old is not None:  # pulled again (e.g. after a seek): keep the newer copy
                    cache[off] = msg
                    size += len(msg.body) - len(old.body)
                    continue
                if off in self._consuming:  # being consumed right now: the copy in hand wins
                    continue
                cache[off] = msg
                if not offsets or off > offsets[-1]:
                    offsets.append(off)
                else:
                    bisect.insort(offsets, off)
                added += 1
                size += len(msg.body)
                if off > self._max_offset:
                    self._max_offset = off
            self._count += added
            self._size += size
            if last is not None:
                max_offset = last.get_property(_PROPERTY_MAX_OFFSET)
                if max_offset is not None and is_long(max_offset):
                    acc = int(max_offset) - last.queue_offset
                    if acc > 0:
                        self.msg_acc_cnt = acc
            if offsets and not self._consuming_flag:
                self._consuming_flag = True
                return True
            return False

    def remove_messages(self, msgs: Iterable[MessageExt], now: float | None = None) -> int:
        """Forget consumed messages; returns the offset that may now be committed.

        That is the smallest offset still cached, or one past the largest offset ever put when the cache
        is empty, or -1 when nothing was ever put. Removing an offset twice is harmless.
        """
        with self._lock:
            self.last_consume_timestamp = time.monotonic() if now is None else now
            cache, offsets = self._msgs, self._offsets
            gone_offsets: list[int] = []
            size = 0
            for msg in msgs:
                off = msg.queue_offset
                gone = cache.pop(off, None)
                if gone is not None:
                    gone_offsets.append(off)
                    size += len(gone.body)
            if gone_offsets:
                _delete_sorted(offsets, gone_offsets)
            self._count -= len(gone_offsets)
            self._size = 0 if self._count == 0 else self._size - size
            return self._commit_offset_locked()

    def _commit_offset_locked(self) -> int:
        if self._offsets:
            return self._offsets[0]
        return self._max_offset + 1 if self._max_offset >= 0 else -1

    def commit_offset(self) -> int:
        """The offset a concurrent consumer may commit now (as ``remove_messages`` would return)."""
        with self._lock:
            return self._commit_offset_locked()

    # -- orderly consumption ------------------------------------------------------------------------------
    def take_messages(self, batch_size: int, now: float | None = None) -> list[MessageExt]:
        """Move up to ``batch_size`` of the smallest cached messages into the consuming set and return them.

        An empty result also marks the queue idle, so the next ``put_messages`` asks for a dispatch.
        """
        with self._lock:
            self.last_consume_timestamp = time.monotonic() if now is None else now
            taken_offsets = self._offsets[:batch_size]
            del self._offsets[:batch_size]
            out: list[MessageExt] = []
            for off in taken_offsets:
                msg = self._msgs.pop(off)
                self._consuming[off] = msg
                out.append(msg)
            if not out:
                self._consuming_flag = False
            return out

    def commit(self) -> int:
        """Mark every taken message consumed; returns one past the largest of them (the offset to commit),
        or -1 when nothing was taken."""
        with self._lock:
            if not self._consuming:
                return -1
            taken = self._consuming
            self._consuming = {}
            self._count -= len(taken)
            self._size = 0 if self._count == 0 else self._size - sum(len(m.body) for m in taken.values())
            return max(taken) + 1

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put taken messages back into the cache, to be taken (and consumed) again."""
        with self._lock:
            for msg in msgs:
                off = msg.queue_offset
                taken = self._consuming.pop(off, None)
                if taken is None:  # not taken (or already committed): nothing to put back
                    continue
                if off not in self._msgs:
                    bisect.insort(self._offsets, off)
                    self._msgs[off] = taken

    def rollback(self) -> None:
        """Put every taken message back into the cache."""
        with self._lock:
            for off, msg in self._consuming.items():
                if off not in self._msgs:
                    bisect.insort(self._offsets, off)
                    self._msgs[off] = msg
            self._consuming = {}

    def is_lock_expired(self, now: float | None = None) -> bool:
        """Whether the broker lock of this queue must be assumed lost (30 s after the last successful lock)."""
        t = time.monotonic() if now is None else now
        return t - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_TIME

    def is_pull_expired(self, now: float | None = None) -> bool:
        """Whether this queue has not been pulled for over 120 s."""
        t = time.monotonic() if now is None else now
        return t - self.last_pull_timestamp > PULL_MAX_IDLE_TIME

    def clear(self) -> None:
        """Forget every message and the largest offset seen (after an offset reset)."""
        with self._lock:
            self._msgs.clear()
            self._offsets.clear()
            self._consuming = {}
            self._count = self._size = 0
            self._max_offset = -1

    def __repr__(self) -> str:
        return (f"ProcessQueue(count={self._count}, size={self._size}, span={self.max_span}, "
                f"dropped={self.dropped}, locked={self.locked})")


__all__ = ["PULL_MAX_IDLE_TIME", "REBALANCE_LOCK_INTERVAL", "REBALANCE_LOCK_MAX_LIVE_TIME", "ProcessQueue"]
