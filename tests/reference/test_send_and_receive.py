"""Differential: messages sent by the Java producer and by Sluice's producer, read back by Java and Sluice
consumers — what each client observes is the same on Sluice and on Apache RocketMQ."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

from sluice import Message, MessageExt, Producer, PullConsumer
from tests.integration.helpers import FAST
from tests.reference.conftest import System
from tests.reference.observe import assert_same, both, by_position, java_message, sluice_message


def placement(sent: list[dict[str, Any]], got: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the messages went, as far as the protocol decides it (which queue a message goes to is the client's
    choice, from a random start and per sending thread): each queue's offsets run 0, 1, 2, ... with no gap, and
    the send results name where each message was read."""
    where = {m["body"]: (m["queue_id"], m["queue_offset"]) for m in got}
    per_queue: dict[int, list[int]] = defaultdict(list)
    for q, off in where.values():
        per_queue[q].append(off)
    return {"messages": len(where), "gapless": all(sorted(v) == list(range(len(v))) for v in per_queue.values()),
            "results_match": all(where.get(r["body"]) == (r["queue_id"], r["queue_offset"]) for r in sent
                                 if "queue_id" in r)}


@pytest.mark.parametrize("mode", ["sync", "async", "oneway", "batch", "orderly"])
def test_what_the_java_producer_sends_is_read_back_alike(systems, mode):
    """The Java producer in one mode (every 10th body 6000 bytes, compressed); a Java lite pull consumer reads
    every queue from 0."""

    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("t")
        s.create_topic(topic, 4)
        records = s.java.run("produce", namesrv=s.namesrv, topic=topic, group=s.topic("p"), mode=mode, count=30)
        sent = [r for r in records if r["event"] == "sent"]
        got = [r for r in s.java.run("lite-pull", namesrv=s.namesrv, topic=topic, group=s.topic("g"), assign=True,
                                     expect=len(sent), timeout=40) if r["event"] == "received"]
        content = sorted(({k: v for k, v in java_message(m).items() if k not in ("queue_id", "queue_offset")}
                          for m in got), key=lambda m: m["body"])
        out = {"statuses": sorted({r["status"] for r in sent}), "content": content, **placement(sent, got)}
        if mode == "orderly":  # the selector decides the queue: positions are part of what is compared
            out["positions"] = by_position([java_message(m) for m in got])
        return out

    observed = assert_same(both(systems, scenario))
    assert len(observed["content"]) == 30 and observed["results_match"] and observed["gapless"]


def sluice_read(s: System, topic: str, group: str, expect: int) -> list[MessageExt]:
    """Sluice's PullConsumer reads ``topic`` from the start."""
    consumer = PullConsumer(group, namesrv=s.namesrv, **FAST)
    consumer.subscribe(topic)
    consumer.start()
    got: list[MessageExt] = []
    try:
        deadline = time.monotonic() + 40
        while len(got) < expect and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout=0.5))
    finally:
        consumer.shutdown()
    return got


def test_what_sluices_producer_sends_is_read_back_alike(systems):
    """Sluice's producer — sync sends with sharding keys, a batch, a compressed body, binary and non-ASCII data —
    read back by Sluice's pull consumer and by the Java lite pull consumer."""

    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("t")
        s.create_topic(topic, 4)
        results = []
        with Producer(s.topic("p"), namesrv=s.namesrv) as producer:
            for i in range(12):
                body = f"single-{i}-ünï".encode() + (b"z" * 6000 if i == 5 else b"")
                msg = Message(topic, body, tags=f"T{i % 2}", keys=[f"k{i}", "shared"], properties={"i": str(i)})
                results.append(producer.send(msg, sharding_key=f"key-{i % 3}"))
            batch = [Message(topic, f"batch-{i}".encode(), tags="B", properties={"i": str(i)}) for i in range(5)]
            r = producer.send_batch(batch, sharding_key="batch")
            results.append(r)
        ours = sluice_read(s, topic, s.topic("g1"), 17)
        java = [m for m in s.java.run("lite-pull", namesrv=s.namesrv, topic=topic, group=s.topic("g2"), assign=True,
                                      expect=17, timeout=40) if m["event"] == "received"]
        return {"results": [(r.status.name, r.queue.queue_id, r.queue_offset, len(r.msg_ids)) for r in results],
                "sluice_reads": by_position([sluice_message(m) for m in ours]),
                "java_reads": by_position([java_message(m) for m in java])}

    observed = assert_same(both(systems, scenario))
    assert len(observed["sluice_reads"]) == len(observed["java_reads"]) == 17


def test_delayed_messages_arrive_alike(systems):
    """Java producer with a delay level (1 s on both brokers here): the messages wait in SCHEDULE_TOPIC_XXXX and
    arrive in their queues with the properties the delay leaves on them."""

    def scenario(s: System) -> list[dict[str, Any]]:
        topic = s.topic("t")
        s.create_topic(topic, 4)
        sent = s.java.run("produce", namesrv=s.namesrv, topic=topic, group=s.topic("p"), mode="orderly", count=8,
                          delay_level=2, big_every=0)
        assert {r["status"] for r in sent if r["event"] == "sent"} == {"SEND_OK"}
        got = s.java.run("lite-pull", namesrv=s.namesrv, topic=topic, group=s.topic("g"), assign=True, expect=8,
                         timeout=60)
        return by_position([java_message(m) for m in got if m["event"] == "received"])

    got = assert_same(both(systems, scenario))
    assert len(got) == 8 and all(m["properties"]["DELAY"] == "2" for m in got)
