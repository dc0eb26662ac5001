"""C++ consumers (``rocketmq==0.4.4``) read from Sluice: push consumers in clustering and broadcasting groups with
tag expressions, failed messages coming back through the retry topic, orderly consumption per key, the pull
consumer, and the offsets they commit as ``sluice group progress`` shows them."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from sluice import ConsumeStatus, Message, MessageExt, MessageQueue, Producer, PushConsumer
from sluice.cli.main import main as sluice_cli
from tests.integration.helpers import FAST, wait_until

TAGS = ("TagA", "TagB", "TagC")


def produce(namesrv: str, topic: str, n: int, keys: int = 0, prefix: str = "m") -> dict[str, dict]:
    """``n`` messages ``<prefix>-<i>`` tagged TagA, TagB, TagC in turn, every 25th body 6000 bytes (sent
    compressed); with ``keys``, message i goes with sharding key ``key-<i % keys>`` (one queue per key, in order).
    Body → what was sent, as the C++ scripts report it."""
    sent = {}
    with Producer("sluice-producers", namesrv=namesrv) as producer:
        for i in range(n):
            body = f"{prefix}-{i}" if i % 25 != 24 else f"{prefix}-{i}-" + "z" * 6000
            shard = str(i % keys) if keys else "-"
            props = {"seq": str(i), "mode": "sluice", "note": "ünïcödé ok", "shard": shard}
            msg = Message(topic, body.encode(), tags=TAGS[i % 3], keys=[f"key-{i}", f"alt-{i}"], properties=props)
            producer.send(msg, sharding_key=f"key-{shard}" if keys else None)
            sent[body] = {"body": body, "tags": TAGS[i % 3], "keys": f"key-{i} alt-{i}", "properties": props}
    return sent


def as_sent(record: dict) -> dict:
    return {k: record[k] for k in ("body", "tags", "keys", "properties")}


def bodies(*clients) -> set[str]:
    return {r["body"] for c in clients for r in c.received()}


def pulling_every_queue(sluice, topic: str, queues: int, per_queue: int = 1) -> bool:
    """The broker holds at least ``per_queue`` long-polling pulls on each queue of ``topic``."""
    held = sluice.held_pulls(topic)
    return all(held.get(q, 0) >= per_queue for q in range(queues))


def split_between(clients, topic: str, queues: int, members: int) -> bool:
    """Each C++ consumer's latest rebalance saw ``members`` members, and the queues they pull are their own and
    cover ``topic`` together (read from their logs: the wheel reports no allocations)."""
    seen = [c.rebalance(topic) for c in clients]
    if any(s is None or len(s[0]) != members for s in seen):
        return False
    held = [q for s in seen for q in sorted(s[1])]
    return len(held) == len(set(held)) and set(held) <= set(range(queues)) and \
        (members > len(clients) or len(held) == queues)


def send_markers(namesrv: str, topic: str, queues: int, tags: str = "TagA") -> set[str]:
    """One message at the end of each queue of ``topic``; their bodies. A consumer that got every marker pulled
    each queue past everything sent before: whatever else it was to get (a duplicate, a message of another tag)
    would have reached it by then."""
    markers = {f"marker-{q}" for q in range(queues)}
    with Producer("sluice-markers", namesrv=namesrv) as producer:
        for q in range(queues):
            producer.send(Message(topic, f"marker-{q}".encode(), tags=tags), queue=MessageQueue(topic, "broker-a", q))
    return markers


def test_cpp_clustering_consumers_share_the_queues_and_get_exactly_the_matching_tags(sluice, cpp, tmp_path):
    topic, group = "cpp-clustering", "cpp-clustering-group"
    sluice.create_topic(topic, 4)
    stop = tmp_path / "stop"
    consumers = [cpp.start("push_consumer", namesrv=sluice.namesrv, topic=topic, group=group,
                           expression="TagA || TagB", stop_file=stop, timeout=90) for _ in range(2)]
    wait_until(lambda: len(sluice.group_members(group)) == 2, 60, "both C++ consumers in the group")
    # The rebalance that follows the second member's arrival: each pulls its own two queues.
    wait_until(lambda: split_between(consumers, topic, 4, members=2), 60, "the C++ consumers to split the queues")
    wait_until(lambda: pulling_every_queue(sluice, topic, 4), 60, "pulls on every queue")

    sent = produce(sluice.namesrv, topic, 150)
    matching = {b for b, m in sent.items() if m["tags"] in ("TagA", "TagB")}
    markers = send_markers(sluice.namesrv, topic, 4)
    wait_until(lambda: bodies(*consumers) >= matching | markers, 60,
               "every TagA / TagB message and every queue's end marker at the C++ consumers")
    stop.touch()
    for c in consumers:
        c.wait(60)

    got = [r for c in consumers for r in c.received() if r["body"] not in markers]
    assert bodies(*consumers) == matching | markers  # every matching message, no other
    assert all(as_sent(r) == sent[r["body"]] for r in got)  # tags, keys and user properties intact
    assert all(c.received() for c in consumers)  # both had queues
    queues_of = [{r["queue_id"] for r in c.received()} for c in consumers]
    assert not queues_of[0] & queues_of[1]  # ... and no queue was read by both
    assert max(Counter(r["body"] for c in consumers for r in c.received()).values()) == 1


def test_a_cpp_and_a_sluice_consumer_in_one_group_split_the_queues_between_them(sluice, cpp, tmp_path):
    """Both allocate "averagely" over the sorted member ids the broker lists: each takes its own half."""
    topic, group = "cpp-mixed", "cpp-mixed-group"
    sluice.create_topic(topic, 4)
    got: list[MessageExt] = []
    ours = PushConsumer(group, namesrv=sluice.namesrv, **FAST)
    ours.subscribe(topic, "*")

    @ours.listener
    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    ours.start()
    stop = tmp_path / "stop"
    try:
        wait_until(lambda: len([mq for mq in ours.aio.process_queues if mq.topic == topic]) == 4, 60,
                   "the Sluice consumer on all four queues")
        theirs = cpp.start("push_consumer", namesrv=sluice.namesrv, topic=topic, group=group, stop_file=stop,
                           timeout=90)
        ours_now = lambda: {mq.queue_id for mq in ours.aio.process_queues if mq.topic == topic}  # noqa: E731
        wait_until(lambda: len(ours_now()) == 2, 60, "the Sluice consumer handing two queues over")
        wait_until(lambda: split_between([theirs], topic, 4, members=2) and
                   theirs.rebalance(topic)[1] == {0, 1, 2, 3} - ours_now(), 60,
                   "the C++ consumer pulling the other two queues")
        sent = produce(sluice.namesrv, topic, 100)
        markers = send_markers(sluice.namesrv, topic, 4)
        wait_until(lambda: {m.body.decode() for m in got} | bodies(theirs) >= set(sent) | markers, 60,
                   "every message and every queue's end marker")
    finally:
        stop.touch()
        ours.shutdown()
    theirs.wait(60)
    both = [m.body.decode() for m in got] + [r["body"] for r in theirs.received()]
    assert sorted(both) == sorted([*sent, *markers])  # every message once, across both
    assert {m.queue_id for m in got} and {r["queue_id"] for r in theirs.received()}
    assert not {m.queue_id for m in got} & {r["queue_id"] for r in theirs.received()}


def test_every_cpp_broadcasting_consumer_gets_every_matching_message(sluice, cpp, tmp_path):
    topic, group = "cpp-broadcasting", "cpp-broadcasting-group"
    sluice.create_topic(topic, 4)
    stop = tmp_path / "stop"
    consumers = [cpp.start("push_consumer", namesrv=sluice.namesrv, topic=topic, group=group, model="broadcasting",
                           expression="TagB", stop_file=stop, timeout=90) for _ in range(2)]
    # A broadcasting consumer without a local offset starts at the end of each queue: wait until both are there.
    wait_until(lambda: pulling_every_queue(sluice, topic, 4, per_queue=2), 60, "both consumers on every queue")

    sent = produce(sluice.namesrv, topic, 120)
    matching = {b for b, m in sent.items() if m["tags"] == "TagB"}
    markers = send_markers(sluice.namesrv, topic, 4, tags="TagB")
    wait_until(lambda: all(bodies(c) >= matching | markers for c in consumers), 60,
               "every TagB message and every queue's end marker at both consumers")
    stop.touch()
    for c in consumers:
        c.wait(60)
        # each exactly once, nothing else
        assert sorted(r["body"] for r in c.received()) == sorted(matching | markers)
        assert all(as_sent(r) == sent[r["body"]] for r in c.received() if r["body"] not in markers)


def test_messages_a_cpp_callback_raised_on_come_back_and_none_is_lost(sluice, cpp):
    topic, group = "cpp-send-back", "cpp-send-back-group"
    sluice.create_topic(topic, 4)
    sent = produce(sluice.namesrv, topic, 40)  # before the group exists: a new group reads a young queue from 0
    consumer = cpp.start("push_consumer", namesrv=sluice.namesrv, topic=topic, group=group, fail_first=True,
                         expect=len(sent), timeout=60)
    records = consumer.wait(70)
    assert records[-1] == {"event": "end", "reason": "complete"}, "not every message came back"

    # The client hands a pull batch to the callback message by message, stops at the first that raises and sends
    # the whole batch back: every message is redelivered, also those the callback never saw.
    failed = [r for r in records if r["event"] == "failed"]
    again = consumer.received()
    assert failed and {r["body"] for r in failed} <= set(sent)
    assert sorted(r["body"] for r in again) == sorted(sent)  # each came back once: none lost
    assert all(r["reconsume_times"] == 1 and r["topic"] == topic for r in again)  # via %RETRY%<group>, renamed back
    assert all(as_sent(r) == sent[r["body"]] for r in again)
    retry = sluice.broker.store.get_max_offset_in_queue(f"%RETRY%{group}", 0)
    assert retry == len(sent)  # sent back once each (CONSUMER_SEND_MSG_BACK to the message's store host)


def test_cpp_orderly_consumer_receives_each_key_in_sending_order(sluice, cpp):
    topic, group = "cpp-orderly", "cpp-orderly-group"
    sluice.create_topic(topic, 4)
    sent = produce(sluice.namesrv, topic, 150, keys=6)
    consumer = cpp.start("push_consumer", namesrv=sluice.namesrv, topic=topic, group=group, orderly=True,
                         expect=len(sent), timeout=60)
    records = consumer.wait(70)
    assert records[-1] == {"event": "end", "reason": "complete"}

    got = consumer.received()
    assert sorted(r["body"] for r in got) == sorted(sent)
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in got:  # the journal is in delivery order
        per_key[r["properties"]["shard"]].append(int(r["properties"]["seq"]))
    assert len(per_key) == 6
    for seqs in per_key.values():
        assert seqs == sorted(seqs)


def test_a_restarted_cpp_orderly_consumer_resumes_every_queue_at_once(sluice, cpp):
    """The C++ client's shutdown unlocks all queues but the first of each broker; the broker drops the rest of a
    client's locks when it unregisters, so the next consumer of the group does not wait for them to expire."""
    topic, group = "cpp-orderly-restart", "cpp-orderly-restart-group"
    sluice.create_topic(topic, 4)
    first = produce(sluice.namesrv, topic, 40, prefix="first")
    records = cpp.run("push_consumer", namesrv=sluice.namesrv, topic=topic, group=group, orderly=True,
                      expect=len(first), timeout=30)
    assert records[-1] == {"event": "end", "reason": "complete"}

    second = produce(sluice.namesrv, topic, 40, prefix="second")
    # Orderly: each queue is read in order, so once its end marker came, anything read again would have too.
    markers = send_markers(sluice.namesrv, topic, 4)
    consumer = cpp.start("push_consumer", namesrv=sluice.namesrv, topic=topic, group=group, orderly=True,
                         expect=len(second) + len(markers), timeout=30)
    records = consumer.wait(40)
    assert records[-1] == {"event": "end", "reason": "complete"}, \
        f"queues still locked: {sorted({r['queue_id'] for r in consumer.received()} ^ {0, 1, 2, 3})}"
    # from where the first one stopped
    assert sorted(r["body"] for r in consumer.received()) == sorted([*second, *markers])


@pytest.mark.parametrize("expression", ["*", "TagA || TagC"])
def test_cpp_pull_consumer_reads_every_matching_message_once(sluice, cpp, expression):
    topic = "cpp-pull"
    sluice.create_topic(topic, 4)
    sent = produce(sluice.namesrv, topic, 100)
    matching = {b for b, m in sent.items() if expression == "*" or m["tags"] in expression.split(" || ")}
    consumer = cpp.start("pull_consumer", namesrv=sluice.namesrv, topic=topic, group="cpp-pull-group",
                         expression=expression, expect=len(matching), timeout=60)
    records = consumer.wait(70)
    assert records[-1] == {"event": "end", "reason": "complete"}
    got = consumer.received()
    assert sorted(r["body"] for r in got) == sorted(matching)
    assert all(as_sent(r) == sent[r["body"]] for r in got)
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r in got:
        per_queue[r["queue_id"]].append(r["queue_offset"])
    assert sorted(per_queue) == [0, 1, 2, 3]
    for offsets in per_queue.values():  # in queue order; with "*" every offset from 0
        assert offsets == sorted(offsets) and (expression != "*" or offsets == list(range(len(offsets))))


def test_offsets_committed_by_a_cpp_consumer_show_in_sluice_group_progress(sluice, cpp, capsys):
    topic, group = "cpp-progress", "cpp-progress-group"
    sluice.create_topic(topic, 4)
    sent = produce(sluice.namesrv, topic, 80)
    consumer = cpp.start("push_consumer", namesrv=sluice.namesrv, topic=topic, group=group, expect=len(sent),
                         timeout=60)
    consumer.wait(70)  # it commits what it consumed at shutdown
    assert bodies(consumer) == set(sent)

    capsys.readouterr()
    assert sluice_cli(["group", "progress", group, "--topic", topic, "--namesrv", sluice.namesrv, "--json"]) == 0
    progress = json.loads(capsys.readouterr().out)
    queues = {q["queueId"]: q for q in progress["queues"] if q["topic"] == topic}
    assert sorted(queues) == [0, 1, 2, 3]
    assert all(q["consumerOffset"] == q["brokerOffset"] > 0 and q["lag"] == 0 for q in queues.values())
    assert sum(q["brokerOffset"] for q in queues.values()) == len(sent) and progress["totalLag"] == 0
