"""Producing test data with the Sluice client, reading it back, and running streaming queries to the end."""

from __future__ import annotations

import time
from collections.abc import Callable

from sluice import Message, MessageExt, Producer, PullConsumer
from sluice.client import _loop
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
    """Every message of ``topic`` through the Sluice pull consumer: at least ``expected``, and every queue read to
    the end the broker reports (so whatever else the topic holds comes too, without waiting on a clock)."""
    consumer = PullConsumer(f"read-{topic}"[:60], namesrv=namesrv, auto_commit=False)
    consumer.start()
    try:
        consumer.assign(consumer.fetch_queues(topic))
        for mq in consumer.assignment():
            consumer.seek(mq, 0)
        got: list[MessageExt] = []
        deadline = time.monotonic() + timeout
        while not (len(got) >= expected and _read_to_the_ends(consumer)) and time.monotonic() < deadline:
            got.extend(consumer.poll(0.5, max_messages=10_000))
        return got
    finally:
        consumer.shutdown()


def _read_to_the_ends(consumer: PullConsumer) -> bool:
    """Every assigned queue polled up to the broker's end of it."""

    async def check() -> bool:
        aio = consumer.aio
        for mq, state in list(aio._queues.items()):
            if state.consumed < await aio.client.api.get_max_offset(await aio.broker_addr(mq), mq):
                return False
        return True

    return _loop.run(check())
