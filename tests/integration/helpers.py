"""Small helpers shared by the integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable

# Client settings that make rebalances, commits and route refreshes quick enough for tests.
FAST = {"rebalance_interval": 500, "persist_consumer_offset_interval": 200, "heartbeat_broker_interval": 1000,
        "poll_name_server_interval": 1000, "consume_from": "first"}


def wait_until(cond: Callable[[], bool], timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll ``cond`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
