"""Pull consumers: ``subscribe`` shares a topic's queues across a group, ``assign`` picks queues by hand with
``seek`` and explicit ``commit``; committed offsets are where a restarted consumer continues."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from sluice import Message, MessageExt, MessageQueue, Producer, PullConsumer
from sluice.common.errors import ClientError
from tests.integration.helpers import FAST, send_markers, wait_until


def send(namesrv: str, topic: str, bodies: list[bytes], **kwargs) -> None:
    with Producer("pull-pg", namesrv=namesrv) as producer:
        for b in bodies:
            assert producer.send(Message(topic, b), **kwargs).status.name == "SEND_OK"


def poll_until(consumer: PullConsumer, n: int, timeout: float = 60) -> list[MessageExt]:
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.poll(0.2))
    return got


def poll_past(consumer: PullConsumer, markers: set[bytes], timeout: float = 60) -> list[MessageExt]:
    """Poll until every one of ``markers`` came; everything polled."""
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while not markers <= {m.body for m in got}:
        assert time.monotonic() < deadline, f"markers {sorted(markers - {m.body for m in got})} never came"
        got.extend(consumer.poll(0.2))
    return got


class OffsetTimer:
    """Counts the rounds of a consumer's offset timer (``persist_consumer_offset_interval``), so that a test can
    wait until the timer has had its chances to commit instead of sleeping."""

    def __init__(self, consumer: PullConsumer) -> None:
        self.rounds = 0
        persist = consumer.aio.persist_offsets

        async def counted() -> None:
            await persist()
            self.rounds += 1

        consumer.aio.persist_offsets = counted  # type: ignore[method-assign]

    def wait_rounds(self, n: int = 2) -> None:
        target = self.rounds + n
        wait_until(lambda: self.rounds >= target, 60, f"{n} rounds of the offset timer")


def held_pulls(cluster, topic: str) -> dict[int, int]:
    """Queue id → pulls the broker holds (long polling) on that queue of ``topic``."""

    async def held() -> dict[int, int]:
        return cluster.brokers[0].hold_service.held_queues(topic)

    return cluster.loop.run(held())


def test_subscribed_pull_consumers_of_one_group_get_each_message_exactly_once(cluster):
    topic, group, n = "pull-subscribe", "pull-subscribe-cg", 2_000
    cluster.create_topic(topic, 8)
    cs = [PullConsumer(group, namesrv=cluster.namesrv_addr, **FAST) for _ in range(2)]
    for c in cs:
        c.subscribe(topic)
        c.start()
    try:
        wait_until(lambda: len(cs[0].assignment()) == len(cs[1].assignment()) == 4 and
                   not cs[0].assignment() & cs[1].assignment(), 60, "the two consumers to split the 8 queues")
        bodies = [f"p-{i}".encode() for i in range(n)]
        send(cluster.namesrv_addr, topic, bodies)
        # Each queue is polled in order: once its end marker came, a duplicate from it would have too.
        markers = send_markers(cluster.namesrv_addr, topic, 8)
        got: list[list[MessageExt]] = [[], []]
        deadline = time.monotonic() + 60
        while not markers <= {m.body for part in got for m in part} and time.monotonic() < deadline:
            for i, c in enumerate(cs):
                got[i].extend(c.poll(0.05))
    finally:
        for c in cs:
            c.shutdown()
    counts = Counter(m.body for part in got for m in part)
    assert set(counts) == set(bodies) | markers
    assert max(counts.values()) == 1
    for part, c in zip(got, cs, strict=True):
        assert part, "both consumers got messages"
        assert {(m.topic, m.queue_id) for m in part} <= {(q.topic, q.queue_id) for q in c.assignment()}


def test_assigned_pull_consumer_seeks_and_commits_by_hand(cluster):
    topic, group = "pull-assign", "pull-assign-cg"
    cluster.create_topic(topic, 2)
    # A long suspend: a seek that waited for the held pull would take a minute.
    c = PullConsumer(group, namesrv=cluster.namesrv_addr, auto_commit=False, broker_suspend_max_time_millis=60_000,
                     consumer_timeout_millis_when_suspend=90_000, **FAST)
    timer = OffsetTimer(c)
    c.start()
    try:
        q0, q1 = sorted(c.fetch_queues(topic))
        # Ten messages in each queue.
        with Producer("pull-pg", namesrv=cluster.namesrv_addr) as producer:
            for q in (q0, q1):
                for i in range(10):
                    producer.send(Message(topic, f"{q.queue_id}-{i}".encode()), queue=q)
        c.assign([q0])
        assert c.assignment() == {q0}
        first = poll_until(c, 10)
        assert [m.body for m in first] == [f"0-{i}".encode() for i in range(10)]
        assert [m.queue_offset for m in first] == list(range(10))

        # Nothing was committed by polling (auto_commit off), not even by the offset timer's next rounds: the
        # broker still has the group at the start.
        timer.wait_rounds()
        assert c.committed(q0) <= 0
        c.commit()  # the position after everything polled
        assert c.committed(q0) == 10
        c.commit({q0: 4})  # or any offset
        assert c.committed(q0) == 4
        # A commit no broker takes is an error, not a log line; the other queues' commits are made all the same.
        nowhere = MessageQueue(topic, "no-such-broker", 0)
        with pytest.raises(ClientError, match="no-such-broker"):
            c.commit({q0: 5, nowhere: 1})
        assert c.committed(q0) == 5
        c.commit({q0: 4})

        # seek goes back (and forward): what follows comes from there, already fetched messages are dropped.
        # It takes effect at once, even though the queue's pull is being held by the broker (long polling).
        wait_until(lambda: held_pulls(cluster, topic).get(q0.queue_id, 0) >= 1, 60, "a held pull on the queue")
        t0 = time.monotonic()
        c.seek(q0, 7)
        assert [m.body for m in poll_until(c, 3)] == [b"0-7", b"0-8", b"0-9"]
        assert time.monotonic() - t0 < 30  # not after the held pull's 60 s
        c.seek(q0, 2)
        again = poll_until(c, 8)
        assert [m.queue_offset for m in again] == list(range(2, 10))
        c.seek_to_end(q0)
        assert c.poll(0.3) == []
        c.seek_to_begin(q0)
        assert [m.queue_offset for m in poll_until(c, 10)] == list(range(10))
        # Seeking and polling commit nothing by themselves (auto_commit off), not even on the offset timer.
        timer.wait_rounds()
        assert c.committed(q0) == 4

        # Re-assigning replaces the queues: now only q1, from its committed offset (none: the start).
        c.assign([q1])
        assert c.assignment() == {q1}
        assert [m.body for m in poll_until(c, 10)] == [f"1-{i}".encode() for i in range(10)]
        assert c.poll(0.2) == []
        assert c.committed(q0) == 4  # giving the queue up did not commit the position either
    finally:
        c.shutdown()


def test_restarted_pull_consumer_continues_from_the_committed_offset(cluster):
    topic, group = "pull-restart", "pull-restart-cg"
    cluster.create_topic(topic, 4)
    bodies = [f"r-{i}".encode() for i in range(400)]
    send(cluster.namesrv_addr, topic, bodies)

    # Explicit commits: the first consumer commits after 150 messages, polls more, and stops without committing.
    c = PullConsumer(group, namesrv=cluster.namesrv_addr, auto_commit=False, **FAST)
    c.subscribe(topic)
    c.start()
    try:
        wait_until(lambda: len(c.assignment()) == 4, 60, "the consumer to take the 4 queues")
        done: list[MessageExt] = []
        while len(done) < 150:
            batch = c.poll(1.0, max_messages=min(40, 150 - len(done)))
            assert len(batch) <= min(40, 150 - len(done)), "poll returned more than max_messages"
            done.extend(batch)
        assert len(done) == 150
        c.commit()
        committed = {q: c.committed(q) for q in c.assignment()}
        extra = c.poll(0.5)  # polled, never committed
    finally:
        c.shutdown()
    assert sum(committed.values()) == len(done)
    for q, off in committed.items():
        assert off == 1 + max((m.queue_offset for m in done if m.queue_id == q.queue_id), default=-1)

    # Each queue is read in order: once its end marker came, everything the consumer was to read again had too.
    markers = send_markers(cluster.namesrv_addr, topic, 4)
    c = PullConsumer(group, namesrv=cluster.namesrv_addr, auto_commit=False, **FAST)
    c.subscribe(topic)
    c.start()
    try:
        rest = poll_past(c, markers)
        c.commit()
    finally:
        c.shutdown()
    rest = [m for m in rest if m.body not in markers]
    # It continued exactly at the committed offsets: the uncommitted "extra" ones come again, nothing else.
    assert Counter(m.body for m in done + rest) == Counter(bodies)
    assert {m.body for m in extra} <= {m.body for m in rest}
    for q, off in committed.items():
        assert min(m.queue_offset for m in rest if m.queue_id == q.queue_id) == off

    # With auto_commit, the position after every polled message is committed (on shutdown at the latest).
    c = PullConsumer(group, namesrv=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.start()
    try:
        send(cluster.namesrv_addr, topic, [b"late-1", b"late-2"])
        ends = send_markers(cluster.namesrv_addr, topic, 4, prefix="end")
        late = poll_past(c, ends)
    finally:
        c.shutdown()
    # Everything before was consumed and committed: only what was sent since comes.
    assert sorted(m.body for m in late) == sorted([b"late-1", b"late-2", *ends])
    again = send_markers(cluster.namesrv_addr, topic, 4, prefix="again")
    c = PullConsumer(group, namesrv=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.start()
    try:
        assert {m.body for m in poll_past(c, again)} == again
    finally:
        c.shutdown()
