"""Small helpers shared by the integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sluice import Message, MessageQueue, Producer

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


def send_markers(namesrv: str, topic: str, queues: int, broker: str = "broker-a", prefix: str = "marker",
                 **message_args: Any) -> set[bytes]:
    """One message ``<prefix>-<queue id>`` at the end of every queue of ``topic`` on ``broker``; their bodies.

    Consumers that got every marker have read each queue past everything sent before it: a duplicate (or any
    other message they were not to get) would have reached them by then. "Nothing else arrives" checks wait on
    these instead of sleeping."""
    markers = [f"{prefix}-{q}".encode() for q in range(queues)]
    with Producer("test-markers", namesrv=namesrv) as producer:
        for q, body in enumerate(markers):
            producer.send(Message(topic, body, **message_args), queue=MessageQueue(topic, broker, q))
    return set(markers)


def committed_to_end(cluster: Any, group: str, topic: str, queues: int) -> bool:
    """``group`` has committed every queue of ``topic`` on every broker of ``cluster`` up to its end: all it ever
    pulled from them was consumed (read from the brokers' stores, on the servers' loop)."""

    async def check() -> bool:
        for broker in cluster.brokers:
            store = broker.store
            for q in range(queues):
                end = store.get_max_offset_in_queue(topic, q)
                if end and store.consumer_offsets.query_offset(group, topic, q) != end:
                    return False
        return True

    return cluster.loop.run(check())
