"""Java consumers (RocketMQ 5.x client) read from Sluice: ``DefaultMQPushConsumer`` in clustering and broadcasting
groups with tag expressions, orderly, with RECONSUME_LATER through the retry topic to the dead-letter queue, and
``DefaultLitePullConsumer`` subscribed and assigned, with seek and commit."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

from sluice import ConsumeStatus, Message, MessageExt, MessageQueue, Producer, PullConsumer, PushConsumer
from sluice.cli.main import main as sluice_cli
from tests.integration.helpers import FAST, wait_until

TAGS = ("TagA", "TagB", "TagC")


def produce(namesrv: str, topic: str, n: int, keys: int = 0, prefix: str = "m") -> dict[str, dict]:
    """``n`` messages ``<prefix>-<i>``, tags TagA / TagB / TagC in turn, every 25th body 6000 bytes (sent
    compressed); with ``keys`` message i goes with sharding key ``key-<i % keys>``. Body → what was sent and where
    it was stored (``queue_id``, ``queue_offset``, ``msg_id``)."""
    sent = {}
    with Producer("sluice-producers", namesrv=namesrv) as producer:
        for i in range(n):
            body = f"{prefix}-{i}" if i % 25 != 24 else f"{prefix}-{i}-" + "z" * 6000
            shard = str(i % keys) if keys else "-"
            props = {"seq": str(i), "mode": "sluice", "note": "ünïcödé ok", "shard": shard}
            msg = Message(topic, body.encode(), tags=TAGS[i % 3], keys=[f"key-{i}", f"alt-{i}"], properties=props)
            r = producer.send(msg, sharding_key=f"key-{shard}" if keys else None)
            sent[body] = {"body": body, "tags": TAGS[i % 3], "keys": f"key-{i} alt-{i}", "properties": props,
                          "queue_id": r.queue.queue_id, "queue_offset": r.queue_offset, "msg_id": r.msg_id}
    return sent


def as_sent(record: dict) -> dict:
    """What a consumer reports, in the shape ``produce`` remembers it (user properties only)."""
    return {"body": record["body"], "tags": record["tags"], "keys": record["keys"],
            "properties": {k: record["properties"].get(k) for k in ("seq", "mode", "note", "shard")},
            "queue_id": record["queue_id"], "queue_offset": record["queue_offset"], "msg_id": record["id"]}


def bodies(*clients) -> set[str]:
    return {r["body"] for c in clients for r in c.received()}


def allocation(client, topic: str) -> list[int] | None:
    """The queue ids of ``topic`` the consumer's latest rebalance gave it."""
    allocated = [r["queue_ids"] for r in client.records("allocated") if r["topic"] == topic]
    return allocated[-1] if allocated else None


def split(clients, topic: str, queues: int) -> bool:
    """Every consumer's latest allocation of ``topic`` is its own, and together they cover every queue."""
    mine = [allocation(c, topic) for c in clients]
    if any(m is None for m in mine):
        return False
    together = [q for m in mine for q in m]
    return sorted(together) == list(range(queues)) and all(mine)


def test_java_clustering_consumers_share_the_queues_and_get_exactly_the_matching_tags(sluice, java, tmp_path):
    topic, group = "java-clustering", "java-clustering-group"
    sluice.create_topic(topic, 4)
    stop = tmp_path / "stop"
    consumers = [java.start("push-consume", namesrv=sluice.namesrv, topic=topic, group=group,
                            expression="TagA || TagB", consume_from="CONSUME_FROM_FIRST_OFFSET", stop_file=stop,
                            timeout=90) for _ in range(2)]
    wait_until(lambda: split(consumers, topic, 4), 45, "the two Java consumers splitting the four queues")

    sent = produce(sluice.namesrv, topic, 150)
    matching = {b for b, m in sent.items() if m["tags"] in ("TagA", "TagB")}
    wait_until(lambda: bodies(*consumers) >= matching, 30, "every TagA / TagB message at the Java consumers")
    stop.touch()
    for c in consumers:
        c.wait(30)

    got = [r for c in consumers for r in c.received()]
    assert bodies(*consumers) == matching  # every matching message, no TagC (the broker filters by tag hash)
    assert all(as_sent(r) == sent[r["body"]] for r in got)  # tags, keys, properties, queue, offset and id intact
    assert all(r["reconsume_times"] == 0 and r["topic"] == topic for r in got)
    queues_of = [{r["queue_id"] for r in c.received()} for c in consumers]
    assert queues_of[0] and queues_of[1] and not queues_of[0] & queues_of[1]  # each read only its own queues
    assert max(Counter(r["body"] for r in got).values()) == 1


def test_a_java_and_a_sluice_consumer_in_one_group_split_the_queues_between_them(sluice, java, tmp_path):
    """Both allocate averagely over the sorted member ids the broker lists: each takes its own half."""
    topic, group = "java-mixed", "java-mixed-group"
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
        theirs = java.start("push-consume", namesrv=sluice.namesrv, topic=topic, group=group,
                            consume_from="CONSUME_FROM_FIRST_OFFSET", stop_file=stop, timeout=90)
        wait_until(lambda: len(allocation(theirs, topic) or []) == 2
                   and len([mq for mq in ours.aio.process_queues if mq.topic == topic]) == 2, 45,
                   "the Sluice and the Java consumer holding two queues each")
        ours_q = {mq.queue_id for mq in ours.aio.process_queues if mq.topic == topic}
        assert not ours_q & set(allocation(theirs, topic) or [])
        sent = produce(sluice.namesrv, topic, 100)
        wait_until(lambda: {m.body.decode() for m in got} | bodies(theirs) >= set(sent), 30, "every message")
    finally:
        stop.touch()
        ours.shutdown()
    theirs.wait(30)
    both = [m.body.decode() for m in got] + [r["body"] for r in theirs.received()]
    assert sorted(both) == sorted(sent)  # every message once, across both
    assert {m.queue_id for m in got} == ours_q and {r["queue_id"] for r in theirs.received()} == {0, 1, 2, 3} - ours_q


def test_every_java_broadcasting_consumer_gets_every_matching_message(sluice, java, tmp_path):
    topic, group = "java-broadcasting", "java-broadcasting-group"
    sluice.create_topic(topic, 4)
    sent = produce(sluice.namesrv, topic, 120)
    matching = {b for b, m in sent.items() if m["tags"] == "TagB"}
    consumers = [java.start("push-consume", namesrv=sluice.namesrv, topic=topic, group=group, model="broadcasting",
                            expression="TagB", consume_from="CONSUME_FROM_FIRST_OFFSET", expect=len(matching),
                            linger=0.5, timeout=60) for _ in range(2)]
    for c in consumers:
        records = c.wait(70)
        assert records[-1] == {"event": "end", "reason": "complete"}
        assert sorted(r["body"] for r in c.received()) == sorted(matching)  # each exactly once, nothing else
        assert all(as_sent(r) == sent[r["body"]] for r in c.received())
        assert (c.home / ".rocketmq_offsets").is_dir()  # broadcasting offsets stay with the client


def test_java_orderly_consumer_receives_each_key_in_sending_order(sluice, java):
    topic, group = "java-orderly", "java-orderly-group"
    sluice.create_topic(topic, 4)
    sent = produce(sluice.namesrv, topic, 150, keys=6)
    consumer = java.start("push-consume", namesrv=sluice.namesrv, topic=topic, group=group, orderly=True,
                          consume_from="CONSUME_FROM_FIRST_OFFSET", expect=len(sent), timeout=60)
    records = consumer.wait(70)
    assert records[-1] == {"event": "end", "reason": "complete"}
    got = consumer.received()
    assert sorted(r["body"] for r in got) == sorted(sent)
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in got:  # the journal is in delivery order
        per_key[r["properties"]["shard"]].append(int(r["properties"]["seq"]))
    assert len(per_key) == 6
    assert all(seqs == sorted(seqs) for seqs in per_key.values())
    owners = sluice.on_loop(lambda: [sluice.broker.lock_manager.owner(group, MessageQueue(topic, "broker-a", q))
                                     for q in range(4)])
    assert owners == [None] * 4  # the client unlocked every queue at shutdown


def test_messages_a_java_listener_asks_to_reconsume_later_come_back_through_the_retry_topic(sluice, java):
    topic, group = "java-retry", "java-retry-group"
    sluice.create_topic(topic, 4)
    sent = produce(sluice.namesrv, topic, 40)
    consumer = java.start("push-consume", namesrv=sluice.namesrv, topic=topic, group=group, reconsume_later=1,
                          consume_from="CONSUME_FROM_FIRST_OFFSET", expect=len(sent), timeout=60)
    records = consumer.wait(70)
    assert records[-1] == {"event": "end", "reason": "complete"}, "not every message came back"
    failed = consumer.records("failed")
    again = consumer.received()
    assert sorted(r["body"] for r in failed) == sorted(sent)
    assert sorted(r["body"] for r in again) == sorted(sent)  # each came back once: none lost, none twice
    for r in again:  # via %RETRY%<group>, renamed back by the client, the original id kept
        assert r["reconsume_times"] == 1 and r["topic"] == topic
        assert r["properties"]["RETRY_TOPIC"] == topic and r["id"] == sent[r["body"]]["msg_id"]
        assert r["properties"]["ORIGIN_MESSAGE_ID"]
    assert sluice.broker.store.get_max_offset_in_queue(f"%RETRY%{group}", 0) == len(sent)


def test_messages_a_java_listener_never_consumes_end_in_the_dead_letter_queue(sluice, java, tmp_path):
    topic, group = "java-dlq", "java-dlq-group"
    sluice.create_topic(topic, 4)
    sent = produce(sluice.namesrv, topic, 12)
    stop = tmp_path / "stop"
    consumer = java.start("push-consume", namesrv=sluice.namesrv, topic=topic, group=group,
                          reconsume_later="always", max_reconsume_times=2, consume_from="CONSUME_FROM_FIRST_OFFSET",
                          stop_file=stop, timeout=90)
    dlq = f"%DLQ%{group}"
    wait_until(lambda: sluice.broker.store.get_max_offset_in_queue(dlq, 0) >= len(sent), 60,
               "every message in the dead-letter queue")
    stop.touch()
    consumer.wait(30)
    deliveries = Counter(r["body"] for r in consumer.records("failed"))
    assert set(deliveries) == set(sent) and set(deliveries.values()) == {3}  # first delivery + 2 retries

    reader = PullConsumer("dlq-reader", namesrv=sluice.namesrv, **FAST)
    reader.subscribe(dlq)
    reader.start()
    dead: list[MessageExt] = []
    try:
        wait_until(lambda: len({m.body for m in dead.__iadd__(reader.poll(timeout=0.2))}) >= len(sent), 30,
                   "the dead letters")
    finally:
        reader.shutdown()
    # Each one there; twice is allowed: a send-back the client gives up waiting for (3 s, a loaded machine) is sent
    # again by its producer, and both copies reach the dead-letter queue (RocketMQ's client does the same).
    assert set(m.body.decode() for m in dead) == set(sent)
    for m in dead:  # the original id and topic stay with a dead letter
        assert m.msg_id == sent[m.body.decode()]["msg_id"] and m.properties["RETRY_TOPIC"] == topic
        assert m.reconsume_times == 3


def test_java_lite_pull_consumer_subscribed_reads_everything_and_commits_it(sluice, java, capsys):
    topic, group = "java-lite-subscribe", "java-lite-subscribe-group"
    sluice.create_topic(topic, 4)
    sent = produce(sluice.namesrv, topic, 80)
    records = java.run("lite-pull", namesrv=sluice.namesrv, topic=topic, group=group, expect=len(sent), timeout=40)
    assert records[-1] == {"event": "end", "reason": "complete"}
    got = [r for r in records if r["event"] == "received"]
    assert sorted(r["body"] for r in got) == sorted(sent)
    assert all(as_sent(r) == sent[r["body"]] for r in got)
    ends = {q: max(m["queue_offset"] for m in sent.values() if m["queue_id"] == q) + 1 for q in range(4)}
    (committed,) = [r for r in records if r["event"] == "committed"]
    assert {int(q): o for q, o in committed["offsets"].items()} == ends  # commitSync reached the broker

    capsys.readouterr()
    assert sluice_cli(["group", "progress", group, "--topic", topic, "--namesrv", sluice.namesrv, "--json"]) == 0
    progress = json.loads(capsys.readouterr().out)
    assert {q["queueId"]: q["consumerOffset"] for q in progress["queues"]} == ends and progress["totalLag"] == 0


def test_java_lite_pull_consumer_assigned_reads_from_where_it_seeks_and_commits(sluice, java):
    topic, group = "java-lite-assign", "java-lite-assign-group"
    sluice.create_topic(topic, 4)
    sent = produce(sluice.namesrv, topic, 80)
    seek = {0: 2, 1: 5}
    expected = {b for b, m in sent.items() if m["queue_offset"] >= seek.get(m["queue_id"], 0)}
    records = java.run("lite-pull", namesrv=sluice.namesrv, topic=topic, group=group, assign=True,
                       seek=",".join(f"{q}:{o}" for q, o in seek.items()), expect=len(expected), timeout=40)
    assert records[-1] == {"event": "end", "reason": "complete"}
    got = [r for r in records if r["event"] == "received"]
    assert sorted(r["body"] for r in got) == sorted(expected)  # nothing before the seek offsets, nothing twice
    (committed,) = [r for r in records if r["event"] == "committed"]
    ends = {q: max(m["queue_offset"] for m in sent.values() if m["queue_id"] == q) + 1 for q in range(4)}
    assert {int(q): o for q, o in committed["offsets"].items()} == ends
    stored = sluice.on_loop(lambda: {q: sluice.broker.store.consumer_offsets.query_offset(group, topic, q)
                                     for q in range(4)})
    assert stored == ends
