"""Producing test data with the Sluice client, reading it back, and running streaming queries to the end."""

from __future__ import annotations

import time
from collections.abc import Callable

from sluice import Message, MessageExt, Producer, PullConsumer
from sluice.common.structs import MessageQueue


def produce(namesrv: str, topic: str, count: int, queues: int, body: Callable[[int], bytes] | None = None,
            batch: int = 500, **message_args: object) -> None:
    """``count`` messages, queue by queue in batches (message i goes to queue i % queues)."""
    make = body or (lambda i: b"m-%d" % i)
    with Producer("spark-test-pg", namesrv=namesrv) as producer:
        per_queue: list[list[int]] = [list(range(q, count, queues)) for q in range(queues)]
        for q, items in enumerate(per_queue):
            mq = MessageQueue(topic, "broker-a", q)
            for i in range(0, len(items), batch):
                msgs = [Message(topic, make(j), **message_args) for j in items[i:i + batch]]  # type: ignore[arg-type]
                assert producer.send_batch(msgs, queue=mq).status.name == "SEND_OK"


def read_all(namesrv: str, topic: str, expected: int, timeout: float = 60) -> list[MessageExt]:
    """Every message of ``topic`` through the Sluice pull consumer (stops once ``expected`` arrived)."""
    consumer = PullConsumer(f"read-{topic}"[:60], namesrv=namesrv, auto_commit=False)
    consumer.start()
    try:
        consumer.assign(consumer.fetch_queues(topic))
        for mq in consumer.assignment():
            consumer.seek(mq, 0)
        got: list[MessageExt] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            got.extend(consumer.poll(0.5, max_messages=10_000))
        time.sleep(0.2)
        got.extend(consumer.poll(0))
        return got
    finally:
        consumer.shutdown()
