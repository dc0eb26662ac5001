"""The client produces and consumes without what only Linux or POSIX has (as on Windows; ``tests/without_posix.py``):
the threaded API and ``sluice.aio`` in a child interpreter, against a real name server and broker."""

from __future__ import annotations

from tests.without_posix import run_without_posix

PRODUCE_AND_CONSUME = """
import asyncio, sys, time

import sluice.aio
from sluice import Message, Producer, PullConsumer

namesrv, topic = sys.argv[1], sys.argv[2]
with Producer("portable-p", namesrv=namesrv) as producer:
    for i in range(5):
        assert producer.send(Message(topic, b"sync-%d" % i)).status.name == "SEND_OK"

async def aio() -> list[bytes]:
    async with sluice.aio.Producer("portable-ap", namesrv=namesrv) as producer:
        for i in range(5):
            await producer.send(Message(topic, b"aio-%d" % i))
    consumer = sluice.aio.PullConsumer("portable-ac", namesrv=namesrv, consume_from="first")
    await consumer.start()
    try:
        await consumer.assign(await consumer.fetch_queues(topic))
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            got.extend(m.body for m in await consumer.poll(0.5))
        return got
    finally:
        await consumer.shutdown()

got_aio = asyncio.run(aio())
consumer = PullConsumer("portable-c", namesrv=namesrv, consume_from="first")
consumer.start()
try:
    consumer.assign(consumer.fetch_queues(topic))
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        got.extend(m.body for m in consumer.poll(0.5))
finally:
    consumer.shutdown()
print(" ".join(sorted(b.decode() for b in got)))
print(" ".join(sorted(b.decode() for b in got_aio)))
"""


def test_the_client_produces_and_consumes_without_the_posix_only_modules(cluster):
    topic = "portable"
    cluster.create_topic(topic, 2)
    out = run_without_posix(PRODUCE_AND_CONSUME, cluster.namesrv_addr, topic, timeout=240).stdout.splitlines()
    every = sorted([f"sync-{i}" for i in range(5)] + [f"aio-{i}" for i in range(5)])
    assert out == [" ".join(every), " ".join(every)]
