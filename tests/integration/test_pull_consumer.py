"""Pull consumers: ``subscribe`` shares a topic's queues across a group, ``assign`` picks queues by hand with
``seek`` and explicit ``commit``; committed offsets are where a restarted consumer continues."""

from __future__ import annotations

import time
from collections import Counter

from sluice import Message, MessageExt, Producer, PullConsumer
from tests.integration.helpers import FAST, wait_until


def send(namesrv: str, topic: str, bodies: list[bytes], **kwargs) -> None:
    with Producer("pull-pg", namesrv=namesrv) as producer:
        for b in bodies:
            assert producer.send(Message(topic, b), **kwargs).status.name == "SEND_OK"


def poll_until(consumer: PullConsumer, n: int, timeout: float = 15) -> list[MessageExt]:
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.poll(0.2))
    return got


def test_subscribed_pull_consumers_of_one_group_get_each_message_exactly_once(cluster):
    topic, group, n = "pull-subscribe", "pull-subscribe-cg", 2_000
    cluster.create_topic(topic, 8)
    cs = [PullConsumer(group, namesrv=cluster.namesrv_addr, **FAST) for _ in range(2)]
    for c in cs:
        c.subscribe(topic)
        c.start()
    try:
        wait_until(lambda: len(cs[0].assignment()) == len(cs[1].assignment()) == 4 and
                   not cs[0].assignment() & cs[1].assignment(), 15, "the two consumers to split the 8 queues")
        bodies = [f"p-{i}".encode() for i in range(n)]
        send(cluster.namesrv_addr, topic, bodies)
        got: list[list[MessageExt]] = [[], []]
        deadline = time.monotonic() + 15
        while sum(map(len, got)) < n and time.monotonic() < deadline:
            for i, c in enumerate(cs):
                got[i].extend(c.poll(0.05))
        time.sleep(0.3)
        for i, c in enumerate(cs):
            got[i].extend(c.poll(0))
    finally:
        for c in cs:
            c.shutdown()
    counts = Counter(m.body for part in got for m in part)
    assert set(counts) == set(bodies)
    assert max(counts.values()) == 1
    for part, c in zip(got, cs, strict=True):
        assert part, "both consumers got messages"
        assert {(m.topic, m.queue_id) for m in part} <= {(q.topic, q.queue_id) for q in c.assignment()}


def test_assigned_pull_consumer_seeks_and_commits_by_hand(cluster):
    topic, group = "pull-assign", "pull-assign-cg"
    cluster.create_topic(topic, 2)
    c = PullConsumer(group, namesrv=cluster.namesrv_addr, auto_commit=False, **FAST)
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

        # Nothing was committed by polling (auto_commit off): the broker still has the group at the start.
        time.sleep(0.5)
        assert c.committed(q0) <= 0
        c.commit()  # the position after everything polled
        assert c.committed(q0) == 10
        c.commit({q0: 4})  # or any offset
        assert c.committed(q0) == 4

        # seek goes back (and forward): what follows comes from there, already fetched messages are dropped.
        # It takes effect at once, even though the queue's pull is being held by the broker (long polling).
        time.sleep(0.3)
        t0 = time.monotonic()
        c.seek(q0, 7)
        assert [m.body for m in poll_until(c, 3)] == [b"0-7", b"0-8", b"0-9"]
        assert time.monotonic() - t0 < 3
        c.seek(q0, 2)
        again = poll_until(c, 8)
        assert [m.queue_offset for m in again] == list(range(2, 10))
        c.seek_to_end(q0)
        assert c.poll(0.3) == []
        c.seek_to_begin(q0)
        assert [m.queue_offset for m in poll_until(c, 10)] == list(range(10))
        # Seeking and polling commit nothing by themselves (auto_commit off), not even on the offset timer.
        time.sleep(0.5)
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
        wait_until(lambda: len(c.assignment()) == 4, 15, "the consumer to take the 4 queues")
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

    c = PullConsumer(group, namesrv=cluster.namesrv_addr, auto_commit=False, **FAST)
    c.subscribe(topic)
    c.start()
    try:
        rest = poll_until(c, len(bodies) - len(done))
        time.sleep(0.2)
        rest.extend(c.poll(0))
        c.commit()
    finally:
        c.shutdown()
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
        assert poll_until(c, 1, timeout=1) == []  # everything was consumed
        send(cluster.namesrv_addr, topic, [b"late-1", b"late-2"])
        late = poll_until(c, 2)
    finally:
        c.shutdown()
    assert sorted(m.body for m in late) == [b"late-1", b"late-2"]
    c = PullConsumer(group, namesrv=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.start()
    try:
        assert c.poll(1.0) == []
    finally:
        c.shutdown()
