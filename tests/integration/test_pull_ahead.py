"""A concurrent PushConsumer sends a queue's next pull as soon as an answer with messages arrives, before it
decodes that answer, so the broker serves the next pull while the consumer decodes; flow control still
bounds what a queue holds."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from sluice.client.aio import Producer, PushConsumer
from sluice.client.aio import consumer_base as consumer_base_module
from sluice.client.message import ConsumeStatus, Message

BATCH = 32


def _send_backlog(cluster, topic: str, n: int) -> list[bytes]:
    bodies = [f"m-{i}".encode() for i in range(n)]

    async def go() -> None:
        async with Producer("pull-ahead-producer", namesrv=cluster.namesrv_addr) as p:
            for i in range(0, n, 50):
                await p.send_batch([Message(topic, b) for b in bodies[i:i + 50]])

    asyncio.run(go())
    return bodies


def _collect(got: list[bytes], expected: int, done: asyncio.Event, gate: asyncio.Event | None = None):
    """An async listener that appends the bodies to ``got`` (after ``gate`` opens) and sets ``done`` at
    ``expected`` messages."""

    async def on(msgs):
        if gate is not None:
            await gate.wait()
        got.extend(m.body for m in msgs)
        if len(got) >= expected:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    return on


class HeldBack:
    """Counts the times flow control kept a pull of ``consumer`` from going out (the pull loop's own check, made
    when no pull of the queue is in flight)."""

    def __init__(self, consumer: PushConsumer) -> None:
        self.times = 0
        check = consumer._flow_controlled

        def counted(pq, size_limit, *more, **named):
            held = check(pq, size_limit, *more, **named)
            if held and not more and not named:
                self.times += 1
            return held

        consumer._flow_controlled = counted  # type: ignore[method-assign]


async def _most_held(consumer: PushConsumer, held_back: HeldBack, measure, floor: int, timeout: float = 60) -> int:
    """The largest ``measure`` of any process queue of ``consumer`` (its listener stuck), sampled every 10 ms
    until it reached ``floor`` and flow control then held the queue's pulls back three times: with no pull in
    flight and none let out, nothing more can come until the listener moves. (At the deadline, what was seen.)"""
    most = 0
    reached_at: int | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        most = max([most, *(measure(pq) for pq in consumer.process_queues.values())])
        if reached_at is None and most >= floor:
            reached_at = held_back.times
        if reached_at is not None and held_back.times >= reached_at + 3:
            break
    return most


def test_the_next_pull_is_on_the_wire_before_an_answer_is_decoded(cluster, monkeypatch: pytest.MonkeyPatch):
    cluster.create_topic("ahead", 1)
    bodies = _send_backlog(cluster, "ahead", 10 * BATCH)
    pending_at_decode: list[bool] = []
    real_decode = consumer_base_module.decode_records

    async def scenario() -> list[bytes]:
        got: list[bytes] = []
        done = asyncio.Event()
        consumer = PushConsumer("ahead-group", namesrv=cluster.namesrv_addr, consume_from="first",
                                consume_message_batch_max_size=BATCH)
        consumer.subscribe("ahead")

        # The opaques of this topic's pulls (the consumer also long-polls its group's retry topic, on the same
        # connection: those pulls must not count).
        ahead_pulls: set[int] = set()
        real_command = consumer._pull_command

        def pull_command(mq, *args):
            req, sub, timeout = real_command(mq, *args)
            if mq.topic == "ahead":
                ahead_pulls.add(req.opaque)
            return req, sub, timeout

        def decode(body):  # is the next pull of "ahead" in flight while an answer of it is decoded?
            conns = list(consumer.client.remoting._conns.values())
            pending_at_decode.append(any(o in c._pending for c in conns for o in ahead_pulls))
            return real_decode(body)

        monkeypatch.setattr(consumer, "_pull_command", pull_command)
        monkeypatch.setattr(consumer_base_module, "decode_records", decode)

        consumer.register_listener(_collect(got, len(bodies), done))
        await consumer.start()
        try:
            await asyncio.wait_for(done.wait(), 60)
        finally:
            await consumer.shutdown()
        return got

    got = asyncio.run(scenario())
    assert got == bodies  # one queue: in order, each once
    assert len(pending_at_decode) >= 10
    # The first pull opens the connection and goes the ordinary way; every later answer is decoded with the
    # next pull already sent.
    assert all(pending_at_decode[1:]), pending_at_decode


def _held_while_stuck(cluster, topic: str, group: str, total: int, measure, floor: int,
                      **settings: int) -> tuple[int, list[bytes]]:
    """The most a queue held (by ``measure``) while its listener was stuck (see ``_most_held``); then the
    listener is let go and every message is collected."""

    async def scenario() -> tuple[int, list[bytes]]:
        release = asyncio.Event()
        got: list[bytes] = []
        done = asyncio.Event()
        consumer = PushConsumer(group, namesrv=cluster.namesrv_addr, consume_from="first",
                                consume_message_batch_max_size=BATCH, **settings)
        consumer.subscribe(topic)
        consumer.register_listener(_collect(got, total, done, gate=release))
        held_back = HeldBack(consumer)
        await consumer.start()
        try:
            most = await _most_held(consumer, held_back, measure, floor)
            release.set()
            await asyncio.wait_for(done.wait(), 60)
        finally:
            await consumer.shutdown()
        return most, got

    return asyncio.run(scenario())


def test_pulling_ahead_keeps_a_queue_within_its_threshold_plus_one_batch(cluster):
    cluster.create_topic("bounded", 1)
    bodies = _send_backlog(cluster, "bounded", 20 * BATCH)
    threshold = 2 * BATCH

    most, got = _held_while_stuck(cluster, "bounded", "bounded-group", len(bodies), lambda pq: pq.msg_count,
                                  threshold, pull_threshold_for_queue=threshold)
    assert threshold <= most <= threshold + BATCH
    assert sorted(got) == sorted(bodies) and len(got) == len(bodies)


def test_pulling_ahead_keeps_a_queue_within_its_byte_limit_plus_one_answer(cluster):
    """100 KiB bodies: an answer carries at most 256 KiB (the broker's transfer cap), so a stuck listener's
    queue holds at most its byte limit plus one answer, also when the next pull was sent ahead."""
    cluster.create_topic("heavy", 1)
    body = os.urandom(100 * 1024)  # incompressible: the producer deflates bodies over 4 KiB
    limit = 1 << 20

    async def produce() -> None:
        async with Producer("pull-ahead-producer", namesrv=cluster.namesrv_addr) as p:
            for _ in range(40):
                await p.send(Message("heavy", body))

    asyncio.run(produce())

    most, got = _held_while_stuck(cluster, "heavy", "heavy-group", 40, lambda pq: pq.msg_size, limit,
                                  pull_threshold_size_for_queue=1)
    assert len(got) == 40
    assert limit <= most <= limit + 256 * 1024
