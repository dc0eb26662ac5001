"""Java consumers (RocketMQ 5.x client) subscribed with ``MessageSelector.bySql`` read from Sluice: the push consumer
(filter data from its heartbeats) and the lite pull consumer (the expression in every pull) get exactly the messages
the expression selects; a broker that refuses the expression, or has property filters off, stops their start as
RocketMQ's does (CHECK_CLIENT_CONFIG)."""

from __future__ import annotations

from sluice import Message, MessageQueue, Producer
from sluice.filter import compile_sql92
from sluice.remoting import ResponseCode

SQL = "region IN ('hz', 'bj') AND price >= 300 AND NOT (note CONTAINS 'skip')"


def produce(namesrv: str, topic: str, n: int, queues: int) -> tuple[dict[str, dict[str, str]], set[str]]:
    """``n`` messages with ``region`` / ``price`` / ``note`` properties, then at the end of every queue a marker
    that ``SQL`` selects; body → properties, and the markers' bodies."""
    sent = {}
    with Producer("java-sql-producers", namesrv=namesrv) as producer:
        for i in range(n):
            props = {"region": ("hz", "sh", "bj")[i % 3], "price": str(i * 10), "note": "skip" if i % 7 == 0 else "-"}
            producer.send(Message(topic, f"m-{i}".encode(), properties=props))
            sent[f"m-{i}"] = props
        markers = set()
        for q in range(queues):
            props = {"region": "hz", "price": "1000", "note": "marker"}
            producer.send(Message(topic, f"marker-{q}".encode(), properties=props), queue=MessageQueue(topic,
                                                                                                    "broker-a", q))
            sent[f"marker-{q}"] = props
            markers.add(f"marker-{q}")
    return sent, markers


def enable_property_filter(sluice, on: bool = True) -> None:
    sluice.on_loop(lambda: setattr(sluice.broker.config, "enable_property_filter", on))


def test_a_java_push_consumer_with_bysql_gets_exactly_the_selected_messages(sluice, java):
    enable_property_filter(sluice)
    topic, group = "java-sql-push", "java-sql-push-group"
    sluice.create_topic(topic, 2)
    sent, markers = produce(sluice.namesrv, topic, 90, 2)
    selected = {b for b, p in sent.items() if compile_sql92(SQL).matches(p)}
    assert markers < selected and len(selected) < len(sent) / 2
    records = java.run("push-consume", namesrv=sluice.namesrv, topic=topic, group=group, sql=SQL,
                       consume_from="CONSUME_FROM_FIRST_OFFSET", expect=len(selected), timeout=90)
    assert records[-1] == {"event": "end", "reason": "complete"}
    got = [r for r in records if r["event"] == "received"]
    # every marker came after its queue's other messages: anything unselected would have been counted by now
    assert sorted(r["body"] for r in got) == sorted(selected)
    assert all({k: r["properties"][k] for k in ("region", "price", "note")} == sent[r["body"]] for r in got)


def test_a_java_lite_pull_consumer_with_bysql_gets_exactly_the_selected_messages(sluice, java):
    enable_property_filter(sluice)
    topic, group = "java-sql-lite", "java-sql-lite-group"
    sluice.create_topic(topic, 2)
    sent, markers = produce(sluice.namesrv, topic, 90, 2)
    selected = {b for b, p in sent.items() if compile_sql92(SQL).matches(p)}
    records = java.run("lite-pull", namesrv=sluice.namesrv, topic=topic, group=group, sql=SQL, expect=len(selected),
                       timeout=90)
    assert records[-1] == {"event": "end", "reason": "complete"}
    assert sorted(r["body"] for r in records if r["event"] == "received") == sorted(selected)


def test_a_java_consumer_with_malformed_sql_is_refused_at_start_saying_where(sluice, java):
    enable_property_filter(sluice)
    sluice.create_topic("java-sql-bad", 1)
    records = java.run("push-consume", namesrv=sluice.namesrv, topic="java-sql-bad", group="java-sql-bad-group",
                       sql="region = 'hz' AND price >> 3", timeout=60)
    (failed,) = [r for r in records if r["event"] == "start-failed"]
    assert failed["code"] == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "unexpected '>'" in failed["message"] and "column 26" in failed["message"]


def test_a_java_consumer_is_refused_at_start_while_property_filters_are_off(sluice, java):
    enable_property_filter(sluice, False)
    sluice.create_topic("java-sql-off", 1)
    records = java.run("lite-pull", namesrv=sluice.namesrv, topic="java-sql-off", group="java-sql-off-group",
                       sql="region = 'hz'", timeout=60)
    (failed,) = [r for r in records if r["event"] == "start-failed"]
    assert failed["code"] == ResponseCode.SYSTEM_ERROR and "filter message by SQL92" in failed["message"]
