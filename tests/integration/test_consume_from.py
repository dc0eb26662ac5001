"""Where a new group starts (LAST / FIRST / TIMESTAMP) and the consistent-hash allocation."""

import threading
import time

from sluice import ConsumeStatus, Message, Producer, PullConsumer, PushConsumer
from tests.integration.helpers import FAST, wait_until


def _poll(consumer: PullConsumer, expected: int, timeout: float = 60) -> list[bytes]:
    """Poll until ``expected`` messages came. Each queue is read in order from where the group starts: a start
    too early shows among the first ``expected`` (older messages in place of newer ones), so nothing needs to be
    waited for after them."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected:
        assert time.monotonic() < deadline, f"{len(got)} of {expected} messages came: {got}"
        got.extend(m.body for m in consumer.poll(0.2))
    return got


def test_new_group_starts_at_first_last_or_a_timestamp(cluster):
    cluster.create_topic("Starts", 2)
    with Producer("starts-p", namesrv=cluster.namesrv_addr) as p:
        for i in range(20):
            p.send(Message("Starts", b"old-%d" % i))
        # The boundary falls strictly between the two waves' store times (milliseconds): a clock interval is
        # what a timestamp start is about, not a wait for something to settle.
        time.sleep(0.05)
        boundary = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(10):
            p.send(Message("Starts", b"new-%d" % i))
    settings = {k: v for k, v in FAST.items() if k != "consume_from"}

    def run(group: str, expected: int, **kw: object) -> list[bytes]:
        c = PullConsumer(group, namesrv=cluster.namesrv_addr, **settings, **kw)
        c.subscribe("Starts")
        c.start()
        try:
            return _poll(c, expected)
        finally:
            c.shutdown()

    everything = sorted([b"old-%d" % i for i in range(20)] + [b"new-%d" % i for i in range(10)])
    assert sorted(run("from-first", 30, consume_from="first")) == everything
    from_ts = run("from-ts", 10, consume_from="timestamp", consume_timestamp=boundary)
    assert sorted(from_ts) == sorted(b"new-%d" % i for i in range(10))
    # A brand-new group on queues that still start at 0 reads from the start, as RocketMQ does.
    assert sorted(run("from-last", 30, consume_from="last")) == everything


def test_consistent_hash_allocation_shares_the_queues_and_delivers_everything(cluster):
    cluster.create_topic("Ring", 8)
    seen: list[bytes] = []
    lock = threading.Lock()
    consumers = []
    for name in ("a", "b"):
        c = PushConsumer("ring-group", namesrv=cluster.namesrv_addr, allocate="CONSISTENT_HASH", **FAST)
        c.subscribe("Ring")

        @c.listener
        def on(msgs, _name=name):
            with lock:
                seen.extend(m.body for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        consumers.append(c.start())
    try:
        wait_until(lambda: sum(len([q for q in c.aio.process_queues if q.topic == "Ring"]) for c in consumers) == 8
                   and all(any(q.topic == "Ring" for q in c.aio.process_queues) for c in consumers),
                   60, "the two consumers to split the 8 queues")
        with Producer("ring-p", namesrv=cluster.namesrv_addr) as p:
            for i in range(400):
                p.send(Message("Ring", b"r-%d" % i))
        wait_until(lambda: len(seen) >= 400, 60, "every message")
    finally:
        for c in consumers:
            c.shutdown()
    assert sorted(seen) == sorted(b"r-%d" % i for i in range(400))
