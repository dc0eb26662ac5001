"""Property filters end to end: consumers subscribed with SQL92 or ``key=value`` get exactly the matching messages,
filtered by the broker as it reads the queue (retry topics too); bad filters are refused with RocketMQ's response
codes and a remark that says where, and change nothing stored; a broker with property filters off refuses them."""

from __future__ import annotations

import io
import json
import threading

import pytest

from sluice import (
    BrokerResponseError,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    MessageSelector,
    Producer,
    PullConsumer,
    PushConsumer,
)
from sluice.common.message import MessageExtBrokerInner
from sluice.common.message_codec import decode_records
from sluice.common.naming import retry_topic
from sluice.remoting import RequestCode, ResponseCode
from tests.integration.helpers import FAST, wait_until
from tests.integration.test_broker_bad_input import Raw, pull_ext
from tests.integration.test_pull_consumer import poll_past

C = RequestCode
R = ResponseCode
REGIONS = ("hz", "sh", "bj")


@pytest.fixture
def filtering(empty_cluster):
    """A name server and a broker with property filters on (and quick retries)."""
    empty_cluster.start_broker("broker-a", enable_property_filter=True,
                               message_delay_level="100ms 200ms 300ms 500ms 1s 2s 3s")
    return empty_cluster


@pytest.fixture
def raw(filtering):
    r = Raw(filtering, filtering.brokers[0].broker_addr)
    try:
        yield r
    finally:
        r.close()


def produce(namesrv: str, topic: str, n: int) -> list[dict[str, str]]:
    """``n`` messages: body ``m-<i>``, properties ``i``, ``region`` (hz / sh / bj in turn), ``price`` (i * 10)."""
    sent = []
    with Producer("filter-producers", namesrv=namesrv) as producer:
        for i in range(n):
            props = {"i": str(i), "region": REGIONS[i % 3], "price": str(i * 10)}
            producer.send(Message(topic, f"m-{i}".encode(), tags="even" if i % 2 == 0 else "odd", properties=props))
            sent.append({"body": f"m-{i}", **props})
    return sent


def bodies(msgs: list[MessageExt]) -> list[str]:
    return sorted(m.body.decode() for m in msgs)


def test_a_push_consumer_with_an_sql92_selector_gets_exactly_the_matching_messages(filtering):
    topic = "sql-push"
    filtering.create_topic(topic, 4)
    sent = produce(filtering.namesrv_addr, topic, 120)
    expected = sorted(m["body"] for m in sent if m["region"] in ("hz", "bj") and 200 <= int(m["price"]) < 900)
    got: list[MessageExt] = []
    lock = threading.Lock()
    c = PushConsumer("sql-push-group", namesrv=filtering.namesrv_addr, **FAST)
    c.subscribe(topic, MessageSelector.by_sql("region IN ('hz', 'bj') AND price BETWEEN 200 AND 890"))

    @c.listener
    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            got.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c.start()
    try:
        wait_until(lambda: len(got) >= len(expected), 60, "every matching message")
        # a marker that matches, sent last to every queue: once each came, nothing unmatched was on its way
        with Producer("filter-producers", namesrv=filtering.namesrv_addr) as p:
            for q in range(4):
                p.send(Message(topic, b"marker", properties={"region": "hz", "price": "200"}),
                       queue=MessageQueue(topic, "broker-a", q))
        wait_until(lambda: sum(m.body == b"marker" for m in got) == 4, 60, "the four markers")
    finally:
        c.shutdown()
    assert bodies([m for m in got if m.body != b"marker"]) == expected


def test_a_pull_consumer_with_a_key_value_filter_gets_the_messages_with_that_property(filtering):
    topic = "kv-pull"
    filtering.create_topic(topic, 2)
    sent = produce(filtering.namesrv_addr, topic, 60)
    with PullConsumer("kv-pull-group", namesrv=filtering.namesrv_addr, **FAST) as c:
        c.subscribe(topic, filter="region=sh")
        c.start()
        markers = set()
        with Producer("filter-producers", namesrv=filtering.namesrv_addr) as p:
            for q in range(2):
                p.send(Message(topic, f"end-{q}".encode(), properties={"region": "sh"}),
                       queue=MessageQueue(topic, "broker-a", q))
                markers.add(f"end-{q}".encode())
        got = poll_past(c, markers)
    assert bodies([m for m in got if m.body not in markers]) == sorted(m["body"] for m in sent
                                                                          if m["region"] == "sh")
    assert all(m.properties["region"] == "sh" for m in got)


def test_unmatched_messages_never_leave_the_broker(filtering, raw):
    """One pull with the subscription flag: the response holds only matching records, and moves past the rest."""
    topic = "sql-raw"
    filtering.create_topic(topic, 1)
    produce(filtering.namesrv_addr, topic, 40)
    resp = raw(C.PULL_MESSAGE, pull_ext(topic, subscription="i >= 35 OR region = 'none'", expressionType="SQL92",
                                        sysFlag="4"))
    assert resp.code == R.SUCCESS
    assert [m.properties["i"] for m in decode_records(resp.body)] == ["35", "36", "37", "38", "39"]
    assert resp.ext_fields["nextBeginOffset"] == "40"
    none = raw(C.PULL_MESSAGE, pull_ext(topic, subscription="i > 100", expressionType="SQL92", sysFlag="4"))
    assert none.code == R.PULL_RETRY_IMMEDIATELY and none.ext_fields["nextBeginOffset"] == "40" and not none.body


def test_retried_messages_meet_the_filter_of_their_topic_again(filtering):
    """A failed delivery comes back through the retry topic; a retry-topic message its group's filter no longer
    matches is not delivered."""
    topic, group = "sql-retry", "sql-retry-group"
    filtering.create_topic(topic, 1)
    deliveries: list[tuple[str, int]] = []
    lock = threading.Lock()
    c = PushConsumer(group, namesrv=filtering.namesrv_addr, **FAST)
    c.subscribe(topic, MessageSelector.by_sql("region = 'hz'"))

    @c.listener
    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            deliveries.extend((m.body.decode(), m.reconsume_times) for m in msgs)
        return ConsumeStatus.RECONSUME_LATER if any(m.reconsume_times == 0 and m.body == b"fail-once"
                                                    for m in msgs) else ConsumeStatus.CONSUME_SUCCESS

    c.start()
    try:
        broker = filtering.brokers[0]
        wait_until(lambda: broker.topic_config_manager.get(retry_topic(group)) is not None, 30, "the retry topic")

        async def put_retried() -> None:  # as a Java consumer would send them back, one matching, one not
            for body, region in (("retried-sh", "sh"), ("retried-hz", "hz")):
                broker.store.put_message(MessageExtBrokerInner(
                    retry_topic(group), body.encode(), queue_id=0, born_host="127.0.0.1:1", reconsume_times=1,
                    properties={"RETRY_TOPIC": topic, "region": region}))

        filtering.loop.run(put_retried())
        with Producer("filter-producers", namesrv=filtering.namesrv_addr) as p:
            p.send(Message(topic, b"fail-once", properties={"region": "hz"}))
            p.send(Message(topic, b"never", properties={"region": "sh"}))
            p.send(Message(topic, b"ok", properties={"region": "hz"}))
        wait_until(lambda: {("fail-once", 1), ("retried-hz", 1), ("ok", 0)} <= set(deliveries), 60,
                   "the redelivery and the matching retried message")
    finally:
        c.shutdown()
    assert sorted(deliveries) == [("fail-once", 0), ("fail-once", 1), ("ok", 0), ("retried-hz", 1)]


# == bad input ====================================================================================================
def check_body(sub_string: str, expression_type: str = "SQL92") -> bytes:
    return json.dumps({"clientId": "c1", "group": "g", "subscriptionData": {
        "topic": "t", "subString": sub_string, "expressionType": expression_type, "subVersion": 1,
        "classFilterMode": False, "tagsSet": [], "codeSet": []}}).encode()


@pytest.mark.parametrize(("sub_string", "expression_type", "code", "remark"), [
    ("a > 1", "SQL92", R.SUCCESS, None),
    ("TagA || TagB", "TAG", R.SUCCESS, None),
    ("a >> 1", "SQL92", R.SUBSCRIPTION_PARSE_FAILED, "unexpected '>'"),
    ("a > 'x'", "SQL92", R.SUBSCRIPTION_PARSE_FAILED, "(at column 5)"),
    ("", "SQL92", R.SUBSCRIPTION_PARSE_FAILED, "empty"),
    (".*", "REGEX", R.SUBSCRIPTION_PARSE_FAILED, "unknown expression type 'REGEX'"),
    ("a = 1", "sql92", R.SUBSCRIPTION_PARSE_FAILED, "unknown expression type"),  # RocketMQ's types are exact
])
def test_check_client_config_compiles_the_filter(raw, sub_string, expression_type, code, remark):
    resp = raw(C.CHECK_CLIENT_CONFIG, {}, check_body(sub_string, expression_type))
    assert resp.code == code
    if remark is not None:
        assert remark in resp.remark


def pull_refused(filtering, raw, topic: str, **ext: str) -> tuple[int, str]:
    """A pull (with a piggy-backed commit of offset 5); what it answered, and that it committed nothing."""
    resp = raw(C.PULL_MESSAGE, pull_ext(topic, sysFlag=str(int(ext.pop("sysFlag", "4")) | 1), commitOffset="5",
                                        **ext))
    offsets = filtering.loop.run(_query(filtering, topic))
    assert offsets == -1, "a refused pull committed an offset"
    return resp.code, resp.remark


async def _query(filtering, topic: str) -> int:
    return filtering.brokers[0].store.consumer_offsets.query_offset("bad-input-group", topic, 0)


@pytest.mark.parametrize(("ext", "code", "remark"), [
    ({"subscription": "a >> 1", "expressionType": "SQL92"}, R.SUBSCRIPTION_PARSE_FAILED, "at column 4"),
    ({"subscription": "", "expressionType": "SQL92"}, R.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's"),
    ({"subscription": "a > 1", "expressionType": "REGEX"}, R.SUBSCRIPTION_PARSE_FAILED, "unknown expression type"),
])
def test_a_pull_with_a_bad_filter_is_refused_and_commits_nothing(filtering, raw, ext, code, remark):
    filtering.create_topic("bad-filter", 1)
    got_code, got_remark = pull_refused(filtering, raw, "bad-filter", **ext)
    assert got_code == code and remark in got_remark
    assert filtering.loop.run(_max_offset(filtering, "bad-filter")) == 0


async def _max_offset(filtering, topic: str) -> int:
    return filtering.brokers[0].store.get_max_offset_in_queue(topic, 0)


def heartbeat(raw, group: str, topic: str, expression: str, version: int) -> None:
    body = json.dumps({"clientID": "hb-client", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
            "topic": topic, "subString": expression, "expressionType": "SQL92", "subVersion": version,
            "classFilterMode": False, "tagsSet": [], "codeSet": []}]}]}).encode()
    assert raw(C.HEART_BEAT, {}, body).code == R.SUCCESS


def test_pulls_relying_on_the_heartbeat_meet_the_filter_data_it_registered(filtering, raw):
    """As the Java push consumer pulls: no subscription in the request, the broker's filter data from heartbeats."""
    topic = "hb-filter"
    filtering.create_topic(topic, 1)
    produce(filtering.namesrv_addr, topic, 9)
    plain = {"consumerGroup": "hb-group", "sysFlag": "0", "expressionType": "SQL92"}

    heartbeat(raw, "hb-group", topic, "region = 'bj'", 100)
    resp = raw(C.PULL_MESSAGE, pull_ext(topic, subVersion="100", **plain))
    assert resp.code == R.SUCCESS and [m.properties["i"] for m in decode_records(resp.body)] == ["2", "5", "8"]

    heartbeat(raw, "hb-group", topic, "region = 'bj'", 100)
    assert raw(C.PULL_MESSAGE, pull_ext(topic, subVersion="200", **plain)).code == R.SUBSCRIPTION_NOT_LATEST

    heartbeat(raw, "hb-group", topic, "region >> 'bj'", 300)  # a broken expression: no filter data any more
    resp = raw(C.PULL_MESSAGE, pull_ext(topic, subVersion="300", **plain))
    assert resp.code == R.FILTER_DATA_NOT_EXIST and "filter data is not exist" in resp.remark


def test_a_broker_with_property_filters_off_refuses_sql92_consumers_at_start(empty_cluster):
    empty_cluster.start_broker("broker-a")  # enable_property_filter off, as RocketMQ's default
    empty_cluster.create_topic("no-sql", 1)
    c = PushConsumer("no-sql-group", namesrv=empty_cluster.namesrv_addr, **FAST)
    c.subscribe("no-sql", filter="region=hz")
    c.listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    with pytest.raises(BrokerResponseError) as info:
        c.start()
    assert info.value.code == R.SYSTEM_ERROR and "filter message by SQL92" in info.value.remark
    assert not c.aio.started
    c.shutdown()  # nothing to do, and no error


def test_the_filter_benchmark_serves_a_tenth_in_every_filtered_case(tmp_path):
    from sluice.bench.filter_bench import CASES, FilterBenchOptions, run

    out = io.StringIO()
    results = {r["case"]: r for r in run(FilterBenchOptions(count=2000, directory=str(tmp_path)), out)}
    assert set(CASES) < set(results) and len(out.getvalue().splitlines()) == len(CASES) + 1
    assert results["unfiltered"]["served"] == 2000
    assert all(results[c]["served"] == 200 and results[c]["scanned"] == 2000 for c in CASES if c != "unfiltered")
