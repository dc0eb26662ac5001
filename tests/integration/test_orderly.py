"""Orderly push consumers: messages sent with the same sharding key are consumed in the order they were sent,
one at a time per queue, across several queues and consumers, through failures and rebalances."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sluice import ConsumeOrderlyStatus, Message, MessageExt, Producer, PullConsumer, PushConsumer
from sluice.common.naming import dlq_topic
from tests.integration.helpers import FAST as FAST_SETTINGS
from tests.integration.helpers import committed_to_end, wait_until

FAST = {**FAST_SETTINGS, "lock_retry_interval": 200, "suspend_current_queue_time_millis": 100}
QUEUES = 4






def locked_queues(cs: list[PushConsumer], topic: str) -> list:
    return [mq for c in cs for mq, pq in list(c.aio.process_queues.items()) if mq.topic == topic and pq.locked]


class OrderChecker:
    """A listener recording, per key, the sequence numbers in delivery order; it also catches two listeners
    working on one queue at the same time."""

    def __init__(self, delay: float = 0.0, fail_first: set[int] | None = None) -> None:
        self.lock = threading.Lock()
        self.seqs: dict[str, list[int]] = {}
        self.by_consumer: dict[str, set[str]] = {}
        self.queues_of_key: dict[str, set[int]] = {}
        self.busy: set[tuple[str, int]] = set()
        self.overlaps: list[tuple[str, int]] = []
        self.delay = delay
        self.fail_first = fail_first or set()
        self.failed: set[tuple[str, int]] = set()
        self.count = 0

    def listener(self, name: str) -> Callable[[list[MessageExt]], ConsumeOrderlyStatus]:
        self.by_consumer[name] = set()

        def handle(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
            q = (msgs[0].topic, msgs[0].queue_id)
            with self.lock:
                if q in self.busy:
                    self.overlaps.append(q)
                self.busy.add(q)
            try:
                if self.delay:
                    time.sleep(self.delay)
                with self.lock:
                    for m in msgs:
                        key, seq = m.body.decode().split(":")
                        if int(seq) in self.fail_first and (key, int(seq)) not in self.failed:
                            self.failed.add((key, int(seq)))
                            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                    for m in msgs:
                        key, seq = m.body.decode().split(":")
                        self.seqs.setdefault(key, []).append(int(seq))
                        self.by_consumer[name].add(key)
                        self.queues_of_key.setdefault(key, set()).add(m.queue_id)
                        self.count += 1
                return ConsumeOrderlyStatus.SUCCESS
            finally:
                with self.lock:
                    self.busy.discard(q)

        return handle

    def complete(self, keys: list[str], per_key: int) -> bool:
        with self.lock:
            return all(set(self.seqs.get(k, ())) >= set(range(per_key)) for k in keys)


def start_consumer(cluster, group: str, topic: str, checker: OrderChecker, name: str, **extra) -> PushConsumer:
    c = PushConsumer(group, namesrv=cluster.namesrv_addr, orderly=True, **{**FAST, **extra})
    c.subscribe(topic)
    c.register_listener(checker.listener(name))
    return c.start()


def send_keyed(producer: Producer, topic: str, keys: list[str], seqs: range) -> None:
    """Interleaved: key0:0, key1:0, ..., key0:1, ... each sent with its key as the sharding key."""
    for seq in seqs:
        for key in keys:
            r = producer.send(Message(topic, f"{key}:{seq}".encode()), sharding_key=key)
            assert r.status.name == "SEND_OK"


def test_orderly_consumers_keep_per_key_order_across_queues_and_consumers(cluster):
    topic, group = "orderly-stable", "orderly-stable-cg"
    cluster.create_topic(topic, QUEUES, order=True)
    keys, per_key = [f"key{i}" for i in range(16)], 150
    checker = OrderChecker(delay=0.0005)
    cs = []
    try:
        cs.append(start_consumer(cluster, group, topic, checker, "c1"))
        cs.append(start_consumer(cluster, group, topic, checker, "c2"))
        wait_until(lambda: len(locked_queues(cs, topic)) == QUEUES and
                   all(len([m for m in c.aio.process_queues if m.topic == topic]) == QUEUES // 2 for c in cs),
                   60, "both consumers to lock two queues each")
        with Producer("orderly-pg", namesrv=cluster.namesrv_addr) as producer:
            send_keyed(producer, topic, keys, range(per_key))
        wait_until(lambda: checker.complete(keys, per_key), 60, "every message to be consumed")
        # Committed to the ends of the queues: nothing pulled is left to deliver (again, or out of order).
        wait_until(lambda: committed_to_end(cluster, group, topic, QUEUES), 60, "every queue committed")
    finally:
        for c in cs:
            c.shutdown()
    for key in keys:
        assert checker.seqs[key] == list(range(per_key)), f"{key} out of order"
    assert not checker.overlaps, f"two listeners ran on one queue at once: {checker.overlaps[:5]}"
    # The keys spread over all four queues, each key on one, and both consumers took part.
    assert all(len(q) == 1 for q in checker.queues_of_key.values())
    assert set().union(*checker.queues_of_key.values()) == set(range(QUEUES))
    assert checker.by_consumer["c1"] and checker.by_consumer["c2"]
    assert not checker.by_consumer["c1"] & checker.by_consumer["c2"]


def test_suspended_orderly_message_is_retried_before_the_next_of_its_queue(cluster):
    topic, group = "orderly-suspend", "orderly-suspend-cg"
    cluster.create_topic(topic, QUEUES, order=True)
    keys, per_key = [f"key{i}" for i in range(8)], 20
    checker = OrderChecker(fail_first={3, 11})
    c = start_consumer(cluster, group, topic, checker, "c1")
    try:
        wait_until(lambda: len(locked_queues([c], topic)) == QUEUES, 60, "the consumer to lock the queues")
        with Producer("orderly-pg", namesrv=cluster.namesrv_addr) as producer:
            send_keyed(producer, topic, keys, range(per_key))
        wait_until(lambda: checker.complete(keys, per_key), 60, "every message to be consumed")
    finally:
        c.shutdown()
    assert checker.failed == {(k, s) for k in keys for s in (3, 11)}
    for key in keys:
        assert checker.seqs[key] == list(range(per_key)), f"{key} out of order after a suspended message"


def test_orderly_order_survives_consumers_joining_and_leaving(cluster):
    """Across rebalances a message may come again (consumed but not yet committed when its queue moved), but no
    message is ever delivered before every earlier message of its key was, and none is lost."""
    topic, group = "orderly-rebalance", "orderly-rebalance-cg"
    cluster.create_topic(topic, QUEUES, order=True)
    keys, per_key = [f"key{i}" for i in range(12)], 120
    checker = OrderChecker(delay=0.001)
    cs = [start_consumer(cluster, group, topic, checker, "c1")]
    try:
        wait_until(lambda: len(locked_queues(cs, topic)) == QUEUES, 60, "c1 to lock the queues")
        with Producer("orderly-pg", namesrv=cluster.namesrv_addr) as producer:
            send_keyed(producer, topic, keys, range(0, 40))
            cs.append(start_consumer(cluster, group, topic, checker, "c2"))
            send_keyed(producer, topic, keys, range(40, 80))
            leaving = cs.pop(0)
            leaving.shutdown()
            send_keyed(producer, topic, keys, range(80, per_key))
        wait_until(lambda: checker.complete(keys, per_key), 60, "every message to be consumed")
        # Committed to the ends of the queues: nothing pulled is left to deliver (again, or out of order).
        wait_until(lambda: committed_to_end(cluster, group, topic, QUEUES), 60, "every queue committed")
    finally:
        for c in cs:
            c.shutdown()
    assert not checker.overlaps, f"two listeners ran on one queue at once: {checker.overlaps[:5]}"
    duplicates = 0
    for key in keys:
        highest = -1
        for seq in checker.seqs[key]:
            assert seq <= highest + 1, f"{key}: {seq} delivered before {highest + 1}"
            duplicates += seq <= highest
            highest = max(highest, seq)
        assert highest == per_key - 1
    print(f"orderly rebalance: {duplicates} redeliveries of {len(keys) * per_key}")
    assert checker.by_consumer["c2"]


def test_orderly_message_exhausting_its_retries_goes_to_the_dead_letter_queue_and_the_queue_moves_on(cluster):
    topic, group, max_times = "orderly-dlq", "orderly-dlq-cg", 2
    cluster.create_topic(topic, 1, order=True)
    lock = threading.Lock()
    seen: list[tuple[str, int]] = []

    def handle(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        with lock:
            seen.extend((m.body.decode(), m.reconsume_times) for m in msgs)
        if msgs[0].body == b"poison":
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    c = PushConsumer(group, namesrv=cluster.namesrv_addr, orderly=True, max_reconsume_times=max_times, **FAST)
    c.subscribe(topic)
    c.register_listener(handle)
    c.start()
    try:
        wait_until(lambda: len(locked_queues([c], topic)) == 1, 60, "the consumer to lock the queue")
        with Producer("orderly-pg", namesrv=cluster.namesrv_addr) as producer:
            for body in (b"before", b"poison", b"after"):
                producer.send(Message(topic, body), sharding_key="k")
        wait_until(lambda: ("after", 0) in seen, 60, "the message after the poison one")
        reader = PullConsumer("orderly-dlq-reader", namesrv=cluster.namesrv_addr, auto_commit=False)
        reader.start()
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    queues = reader.fetch_queues(dlq_topic(group))
                    break
                except Exception:
                    assert time.monotonic() < deadline, "no dead-letter queue appeared"
                    time.sleep(0.1)
            reader.assign(queues)
            for q in queues:
                reader.seek(q, 0)
            dead: list[MessageExt] = []
            while not dead and time.monotonic() < deadline:
                dead = reader.poll(0.5)
        finally:
            reader.shutdown()
    finally:
        c.shutdown()
    # Delivered, retried max_times in place (nothing after it meanwhile), then dead-lettered; the next one follows.
    assert seen == [("before", 0)] + [("poison", i) for i in range(max_times + 1)] + [("after", 0)]
    assert [m.body for m in dead] == [b"poison"]
