"""Counters of one broker (the start of RocketMQ's BrokerStatsManager)."""

from __future__ import annotations

from sluice.store.results import PutMessageResult


class BrokerStats:
    __slots__ = ("put_msgs", "put_failures", "get_msgs")

    def __init__(self) -> None:
        self.put_msgs = 0
        self.put_failures = 0
        self.get_msgs = 0

    def record_put(self, r: PutMessageResult) -> None:
        if r.ok:
            self.put_msgs += r.msg_num
        else:
            self.put_failures += 1

    def record_get(self, n: int) -> None:
        self.get_msgs += n
