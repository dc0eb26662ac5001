"""RocketMQ's Java admin tools (``DefaultMQAdminExt``, what ``mqadmin`` and the dashboard are built on) against
Sluice: cluster and route lookups, topic creation and deletion, consume stats in the form fastjson writes, message
lookups by key and id, and resetting a group's offsets to a time."""

from __future__ import annotations

from collections import Counter

import pytest

from sluice import ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from tests.integration.helpers import FAST, wait_until
from tests.interop.java_clients import AdminError


def send(namesrv: str, topic: str, n: int, prefix: str = "m") -> list:
    with Producer("admin-test-producers", namesrv=namesrv) as producer:
        return [producer.send(Message(topic, f"{prefix}-{i}".encode(), tags="T", keys=[f"{prefix}-key-{i % 5}"]))
                for i in range(n)]


def consume_all(namesrv: str, group: str, topic: str, expect: int) -> None:
    """A Sluice push consumer reads ``expect`` messages, commits and leaves."""
    got: list[MessageExt] = []
    consumer = PushConsumer(group, namesrv=namesrv, **FAST)
    consumer.subscribe(topic, "*")

    @consumer.listener
    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.start()
    try:
        wait_until(lambda: len(got) >= expect, 30, f"{expect} messages")
    finally:
        consumer.shutdown()  # commits what it consumed


def test_java_admin_sees_the_cluster_and_the_routes_of_topics(sluice, java_admin):
    info = java_admin.call("clusterInfo")
    assert info["clusters"] == {"DefaultCluster": ["broker-a"]}
    assert info["brokers"] == {"broker-a": {"cluster": "DefaultCluster", "broker_name": "broker-a",
                                            "addrs": {"0": sluice.broker.broker_addr}}}
    sluice.create_topic("java-admin-route", 4)
    route = java_admin.call("topicRoute", topic="java-admin-route")
    assert route["queues"] == [{"broker_name": "broker-a", "read": 4, "write": 4, "perm": 6, "topic_sys_flag": 0}]
    assert route["brokers"] == [info["brokers"]["broker-a"]]
    with pytest.raises(AdminError) as e:
        java_admin.call("topicRoute", topic="java-admin-no-such-topic")
    assert e.value.code == 17  # TOPIC_NOT_EXIST


def test_java_admin_creates_updates_and_deletes_a_topic(sluice, java_admin):
    topic = "java-admin-topic"
    java_admin.call("createTopic", addr=sluice.broker.broker_addr, topic=topic, read=3, write=3, perm=6)
    wait_until(lambda: sluice.on_loop(lambda: sluice.broker.topic_config_manager.get(topic)) is not None, 10,
               "the topic on the broker")
    tc = sluice.on_loop(lambda: sluice.broker.topic_config_manager.get(topic))
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (3, 3, 6)
    wait_until(lambda: len(java_admin.call("topicRoute", topic=topic)["queues"]) == 1, 10, "the route")
    assert {r.queue.queue_id for r in send(sluice.namesrv, topic, 12)} == {0, 1, 2}

    java_admin.call("createTopic", addr=sluice.broker.broker_addr, topic=topic, read=3, write=3, perm=4)  # read-only
    wait_until(lambda: java_admin.call("topicRoute", topic=topic)["queues"][0]["perm"] == 4, 10, "the new perm")

    java_admin.call("deleteTopic", topic=topic, cluster="DefaultCluster")
    assert sluice.on_loop(lambda: sluice.broker.topic_config_manager.get(topic)) is None
    with pytest.raises(AdminError) as e:
        java_admin.call("topicRoute", topic=topic)
    assert e.value.code == 17


def test_java_admin_reads_consume_stats_per_queue(sluice, java_admin):
    topic, group = "java-admin-stats", "java-admin-stats-group"
    sluice.create_topic(topic, 4)
    sent = send(sluice.namesrv, topic, 40)
    consume_all(sluice.namesrv, group, topic, len(sent))
    ends = {q: sum(1 for r in sent if r.queue.queue_id == q) for q in range(4)}

    stats = java_admin.call("consumeStats", group=group)
    rows = {(r["topic"], r["queue_id"]): r for r in stats["offsets"]}
    assert {k for k in rows if k[0] == topic} == {(topic, q) for q in range(4)}
    for q in range(4):
        row = rows[(topic, q)]
        assert row["broker"] == "broker-a"
        assert row["broker_offset"] == row["consumer_offset"] == ends[q]
        assert row["last_timestamp"] > 0
    assert stats["total_diff"] == 0

    more = send(sluice.namesrv, topic, 10, prefix="more")
    stats = java_admin.call("consumeStats", group=group, topic=topic)
    assert {r["topic"] for r in stats["offsets"]} == {topic}
    assert stats["total_diff"] == len(more)  # the lag: sent, not consumed yet


def test_java_admin_finds_messages_by_key_and_by_id(sluice, java_admin):
    topic = "java-admin-lookup"
    sluice.create_topic(topic, 4)
    sent = send(sluice.namesrv, topic, 20)
    found = java_admin.call("queryMessage", topic=topic, key="m-key-3")
    assert sorted(m["body"] for m in found) == ["m-13", "m-18", "m-3", "m-8"]
    assert all(m["keys"] == "m-key-3" and m["topic"] == topic for m in found)

    r = sent[7]
    by_id = java_admin.call("viewMessage", topic=topic, msgId=r.msg_id)  # the client's id (UNIQ_KEY)
    by_offset_id = java_admin.call("viewMessage", topic=topic, msgId=r.offset_msg_id)  # the broker's id
    for m in (by_id, by_offset_id):
        assert (m["body"], m["queue_id"], m["queue_offset"], m["id"]) == ("m-7", r.queue.queue_id, r.queue_offset,
                                                                          r.msg_id)
    with pytest.raises(AdminError):
        java_admin.call("viewMessage", topic=topic, msgId="0" * 32)


def test_java_admin_resets_an_offline_group_to_a_time(sluice, java_admin):
    topic, group = "java-admin-reset", "java-admin-reset-group"
    sluice.create_topic(topic, 4)
    first = send(sluice.namesrv, topic, 20, prefix="first")
    consume_all(sluice.namesrv, group, topic, len(first))
    stored = sluice.on_loop(lambda: [sluice.broker.store.get_message_store_timestamp(topic, r.queue.queue_id,
                                                                                     r.queue_offset) for r in first])
    second = send(sluice.namesrv, topic, 20, prefix="second")
    consume_all(sluice.namesrv, group, topic, len(second))

    when = max(stored) + 1  # after every "first" message was stored, before any "second" one
    reset = java_admin.call("resetOffsetByTimestamp", topic=topic, group=group, timestamp=when, force=True)
    expected = {q: sum(1 for r in first if r.queue.queue_id == q) for q in range(4)}
    assert {r["queue_id"]: r["offset"] for r in reset} == expected
    assert {r["broker"] for r in reset} == {"broker-a"}
    committed = sluice.on_loop(lambda: {q: sluice.broker.store.consumer_offsets.query_offset(group, topic, q)
                                        for q in range(4)})
    assert committed == expected

    with pytest.raises(AdminError) as e:
        java_admin.call("resetOffsetByTimestamp", topic="java-admin-no-such-topic", group=group, timestamp=when)
    assert e.value.code == 17


def test_a_java_consumer_online_during_a_reset_consumes_again_from_the_new_offsets(sluice, java, java_admin, tmp_path):
    """The broker answers each queue's next pull with PULL_OFFSET_MOVED to the reset offset; the client drops
    what it holds of the queue and reads on from there (RocketMQ 5's server-side reset)."""
    topic, group = "java-admin-reset-online", "java-admin-reset-online-group"
    sluice.create_topic(topic, 4)
    first = send(sluice.namesrv, topic, 12, prefix="first")
    stored = sluice.on_loop(lambda: [sluice.broker.store.get_message_store_timestamp(topic, r.queue.queue_id,
                                                                                     r.queue_offset) for r in first])
    second = send(sluice.namesrv, topic, 12, prefix="second")
    stop = tmp_path / "stop"
    consumer = java.start("push-consume", namesrv=sluice.namesrv, topic=topic, group=group, stop_file=stop,
                          consume_from="CONSUME_FROM_FIRST_OFFSET", timeout=120)
    ends = {q: sum(1 for r in first + second if r.queue.queue_id == q) for q in range(4)}
    committed = lambda: sluice.on_loop(  # noqa: E731
        lambda: {q: sluice.broker.store.consumer_offsets.query_offset(group, topic, q) for q in range(4)})
    wait_until(lambda: committed() == ends, 30, "the consumer committing every message")

    reset = java_admin.call("resetOffsetByTimestamp", topic=topic, group=group, timestamp=max(stored) + 1)
    assert {r["queue_id"]: r["offset"] for r in reset} == {
        q: sum(1 for r in first if r.queue.queue_id == q) for q in range(4)}
    pokes = send(sluice.namesrv, topic, 8, prefix="poke")  # wakes the pulls the broker holds
    again = {f"second-{i}" for i in range(12)} | {f"poke-{i}" for i in range(8)}
    wait_until(lambda: {r["body"] for r in consumer.received()[24:]} >= again, 60,
               "the messages after the reset time once more, and the new ones")
    stop.touch()
    consumer.wait(30)
    counts = Counter(r["body"] for r in consumer.received())
    assert all(counts[f"first-{i}"] == 1 for i in range(12))  # before the reset time: not again
    assert all(counts[f"second-{i}"] == 2 for i in range(12))
    assert all(counts[f"poke-{i}"] == 1 for i in range(len(pokes)))


def test_a_request_sluice_does_not_serve_is_answered_and_logged_with_its_code_and_the_client(sluice, java_admin,
                                                                                           caplog):
    answer = java_admin.call("raw", addr=sluice.broker.broker_addr, code=9999)
    assert answer["code"] == 3 and "9999" in answer["remark"]  # REQUEST_CODE_NOT_SUPPORTED, naming the code
    lines = [r.getMessage() for r in caplog.records if "9999" in r.getMessage()]
    assert len(lines) == 1 and "JAVA" in lines[0] and "127.0.0.1:" in lines[0]
    assert sluice.on_loop(lambda: sluice.broker.dispatcher.unsupported_seen.pop(9999)) == 1  # expected here
    assert java_admin.call("clusterInfo")["clusters"]  # the connection goes on serving
