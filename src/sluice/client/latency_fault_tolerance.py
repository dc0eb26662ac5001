"""Latency-based broker avoidance for sends (RocketMQ MQFaultStrategy / LatencyFaultToleranceImpl).

After each send the broker's latency maps to a penalty: slow or failed brokers are skipped for a while,
so retries and new sends go to healthy brokers first.
"""

from __future__ import annotations

import time

# Send latency (ms) at or above each level → how long (ms) the broker is avoided.
LATENCY_MAX = (50, 100, 550, 1_000, 2_000, 3_000, 15_000)
NOT_AVAILABLE_DURATION = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)


class LatencyFaultTolerance:
    def __init__(self) -> None:
        self._until: dict[str, float] = {}  # broker name -> monotonic time it is usable again
        self._latency: dict[str, float] = {}

    def update(self, broker_name: str, latency_ms: float, isolation: bool = False) -> None:
        """Record a send's latency; ``isolation`` (a failed send) counts as the 30 s level."""
        latency = 30_000.0 if isolation else latency_ms
        duration = 0
        for i in range(len(LATENCY_MAX) - 1, -1, -1):
            if latency >= LATENCY_MAX[i]:
                duration = NOT_AVAILABLE_DURATION[i]
                break
        self._latency[broker_name] = latency
        if duration:
            self._until[broker_name] = time.monotonic() + duration / 1000
        else:
            self._until.pop(broker_name, None)

    def avoid(self, broker_name: str, seconds: float) -> None:
        """Avoid ``broker_name`` for ``seconds`` (it refused a send: pushing back, or no longer the master)."""
        until = time.monotonic() + seconds
        if self._until.get(broker_name, 0.0) < until:
            self._until[broker_name] = until

    def forget(self, broker_name: str) -> None:
        """Avoid ``broker_name`` no longer (its master changed: the failures were the old one's)."""
        self._until.pop(broker_name, None)
        self._latency.pop(broker_name, None)

    def is_available(self, broker_name: str) -> bool:
        until = self._until.get(broker_name)
        return until is None or time.monotonic() >= until

    def pick_one_at_least(self) -> str | None:
        """Of the avoided brokers, the one usable soonest (used when every broker is avoided)."""
        if not self._until:
            return None
        return min(self._until, key=self._until.__getitem__)
