"""Differential: push consumers — tag filtering, retries through ``%RETRY%<group>`` into ``%DLQ%<group>``, orderly
consumption and broadcasting — observed alike on Sluice and on Apache RocketMQ, with the Java client and with
Sluice's own."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from sluice import ConsumeOrderlyStatus, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from sluice.aio import PullConsumer
from sluice.client.admin import Admin
from tests.integration.helpers import FAST, wait_until
from tests.reference.conftest import System, run
from tests.reference.observe import assert_same, both, by_position, java_message, sluice_message
from tests.reference.test_send_and_receive import sluice_read

TAGS = ("TagA", "TagB", "TagC")


def produce(s: System, topic: str, n: int, keys: int = 4) -> None:
    """``n`` messages from Sluice's producer, tags TagA / TagB / TagC in turn, message i with sharding key
    ``key-<i % keys>`` (so the queue of each message is the same on both systems)."""
    with Producer(s.topic("p"), namesrv=s.namesrv) as producer:
        for i in range(n):
            msg = Message(topic, f"m-{i}".encode(), tags=TAGS[i % 3], keys=[f"k-{i}"],
                          properties={"seq": str(i), "shard": str(i % keys)})
            producer.send(msg, sharding_key=f"key-{i % keys}")


def test_a_java_push_consumer_gets_exactly_the_matching_tags(systems):
    def scenario(s: System) -> list[dict[str, Any]]:
        topic = s.topic("t")
        s.create_topic(topic, 4)
        produce(s, topic, 60)
        records = s.java.run("push-consume", namesrv=s.namesrv, topic=topic, group=s.topic("g"),
                             expression="TagA || TagC", consume_from="CONSUME_FROM_FIRST_OFFSET", expect=40,
                             linger=1, timeout=60)
        return by_position([java_message(r) for r in records if r["event"] == "received"])

    got = assert_same(both(systems, scenario))
    assert len(got) == 40 and {m["tags"] for m in got} == {"TagA", "TagC"}  # once each, no TagB


def test_java_retries_end_in_the_dead_letter_queue_alike(systems, tmp_path):
    """RECONSUME_LATER on every delivery, max reconsume times 1: each message comes twice (the original, then the
    retry copy from ``%RETRY%<group>``), then goes to ``%DLQ%<group>``."""

    def scenario(s: System) -> dict[str, Any]:
        topic, group = s.topic("t"), s.topic("g")
        s.create_topic(topic, 4)
        produce(s, topic, 6)
        stop = tmp_path / f"stop-{s.name}"
        consumer = s.java.start("push-consume", namesrv=s.namesrv, topic=topic, group=group,
                                reconsume_later="always", max_reconsume_times=1,
                                consume_from="CONSUME_FROM_FIRST_OFFSET", stop_file=stop, timeout=120)
        dlq = f"%DLQ%{group}"
        wait_until(lambda: len(consumer.records("failed")) >= 12, 90, f"two deliveries of each message on {s}")
        dead = [java_message(r) for r in s.java.run("lite-pull", namesrv=s.namesrv, topic=dlq, group=s.topic("r"),
                                                      assign=True, expect=6, timeout=60) if r["event"] == "received"]
        stop.touch()
        consumer.wait(60)
        # The order retries reach the retry topic and the DLQ in is a race of the client's threads: offsets there
        # are left out.
        deliveries = [java_message(r) | ({"queue_offset": None} if r["reconsume_times"] else {})
                      for r in consumer.records("failed")]
        for m in dead:
            m["queue_offset"] = None
        return {"deliveries": sorted(deliveries, key=lambda m: (m["body"], m["reconsume_times"])),
                "dead": sorted(dead, key=lambda m: m["body"])}

    observed = assert_same(both(systems, scenario))
    assert len(observed["deliveries"]) == 12 and len(observed["dead"]) == 6


def test_sluice_retries_end_in_the_dead_letter_queue_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic, group = s.topic("t"), s.topic("g")
        s.create_topic(topic, 4)
        produce(s, topic, 6)
        deliveries: list[dict[str, Any]] = []
        lock = threading.Lock()
        consumer = PushConsumer(group, namesrv=s.namesrv, max_reconsume_times=1, **FAST)
        consumer.subscribe(topic, "*")

        @consumer.listener
        def handle(msgs: list[MessageExt]) -> ConsumeStatus:
            with lock:
                deliveries.extend(sluice_message(m) | ({"queue_offset": None} if m.reconsume_times else {})
                                  for m in msgs)
            return ConsumeStatus.RECONSUME_LATER

        consumer.start()
        try:
            wait_until(lambda: len(deliveries) >= 12, 90, f"two deliveries of each message on {s}")
            dead = sluice_read(s, f"%DLQ%{group}", s.topic("r"), 6)
        finally:
            consumer.shutdown()
        dead_seen = [sluice_message(m) | {"queue_offset": None} for m in dead]
        return {"deliveries": sorted(deliveries, key=lambda m: (m["body"], m["reconsume_times"])),
                "dead": sorted(dead_seen, key=lambda m: m["body"])}

    observed = assert_same(both(systems, scenario))
    assert len(observed["deliveries"]) == 12 and len(observed["dead"]) == 6


def in_order(deliveries: list[tuple[str, int]]) -> dict[str, list[int]]:
    per_shard: dict[str, list[int]] = defaultdict(list)
    for shard, seq in deliveries:
        per_shard[shard].append(seq)
    return dict(sorted(per_shard.items()))


def test_orderly_consumers_see_each_shard_in_sending_order_alike(systems):
    """The Java orderly consumer and Sluice's orderly consumer (both locking their queues on the broker)."""

    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("t")
        s.create_topic(topic, 4)
        produce(s, topic, 60, keys=6)
        java = s.java.run("push-consume", namesrv=s.namesrv, topic=topic, group=s.topic("g1"), orderly=True,
                          consume_from="CONSUME_FROM_FIRST_OFFSET", expect=60, timeout=60)
        ours: list[tuple[str, int]] = []
        consumer = PushConsumer(s.topic("g2"), namesrv=s.namesrv, orderly=True, **FAST)
        consumer.subscribe(topic, "*")

        @consumer.listener
        def handle(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
            ours.extend((m.properties["shard"], int(m.properties["seq"])) for m in msgs)
            return ConsumeOrderlyStatus.SUCCESS

        consumer.start()
        try:
            wait_until(lambda: len(ours) >= 60, 60, f"60 messages at Sluice's orderly consumer on {s}")
        finally:
            consumer.shutdown()
        java_order = [(r["properties"]["shard"], int(r["properties"]["seq"])) for r in java if r["event"] == "received"]
        return {"java": in_order(java_order), "sluice": in_order(ours)}

    observed = assert_same(both(systems, scenario))
    for per_shard in observed.values():
        assert len(per_shard) == 6 and all(seqs == sorted(seqs) and len(seqs) == 10 for seqs in per_shard.values())


def test_broadcasting_consumers_each_get_every_matching_message_alike(systems, tmp_path):
    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("t")
        s.create_topic(topic, 4)
        produce(s, topic, 30)
        group = s.topic("g")
        java = s.java.run("push-consume", namesrv=s.namesrv, topic=topic, group=group, model="broadcasting",
                          expression="TagB", consume_from="CONSUME_FROM_FIRST_OFFSET", expect=10, linger=1,
                          timeout=60)
        ours: list[MessageExt] = []
        consumer = PushConsumer(group, namesrv=s.namesrv, message_model="BROADCASTING",
                                offset_store_dir=str(tmp_path / s.name), **FAST)
        consumer.subscribe(topic, "TagB")

        @consumer.listener
        def handle(msgs: list[MessageExt]) -> ConsumeStatus:
            ours.extend(msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.start()
        try:
            wait_until(lambda: len(ours) >= 10, 60, f"10 messages at Sluice's broadcasting consumer on {s}")
        finally:
            consumer.shutdown()
        return {"java": by_position([java_message(r) for r in java if r["event"] == "received"]),
                "sluice": by_position([sluice_message(m) for m in ours])}

    observed = assert_same(both(systems, scenario))
    assert len(observed["java"]) == len(observed["sluice"]) == 10


def test_a_groups_first_commits_of_every_queue_at_once_are_all_kept_alike(systems):
    """Sluice's client commits a topic's queues of a group together; Apache RocketMQ makes a group's offset table at
    its first commit without a lock, so the client sends one commit first: none may be lost on either broker."""
    def scenario(s: System) -> list[list[int]]:
        topic = s.topic("t")
        s.create_topic(topic, 8)

        async def go() -> list[list[int]]:
            kept = []
            async with Admin(s.namesrv) as admin:
                for g in range(3):
                    await admin.update_group(s.topic(f"g{g}"))
            for g in range(3):
                consumer = PullConsumer(s.topic(f"g{g}"), s.namesrv, auto_commit=False)
                await consumer.start()
                try:
                    queues = sorted(await consumer.fetch_queues(topic))
                    await consumer.commit({mq: 10 + mq.queue_id for mq in queues})
                    kept.append([await consumer.committed(mq) for mq in queues])
                finally:
                    await consumer.shutdown()
            return kept

        return run(go(), timeout=120)

    kept = assert_same(both(systems, scenario))
    assert kept == [list(range(10, 18))] * 3
