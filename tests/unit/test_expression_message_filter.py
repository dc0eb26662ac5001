"""The broker side of SQL92 filters: records matched on their properties as the store reads a queue (retry topics
by their original topic's filter), and the filters a group's heartbeats register."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.broker.consumer_filter_manager import ConsumerFilterManager
from sluice.broker.expression_message_filter import (
    ExpressionForRetryMessageFilter,
    ExpressionMessageFilter,
    record_properties,
)
from sluice.broker.processors.pull_message_processor import tag_codes_of
from sluice.common.message import MessageExtBrokerInner
from sluice.common.message_codec import decode_records, encode_record
from sluice.common.properties import encode_properties
from sluice.common.structs import SubscriptionData
from sluice.filter import compile_sql92
from sluice.store import GetMessageStatus


def put(store, props: dict[str, str], topic: str = "T") -> None:
    store.put_message(MessageExtBrokerInner(topic, b"body", queue_id=0, properties=props, born_host="10.0.0.1:5000"))


def record(props: dict[str, str]) -> memoryview:
    return memoryview(b"\0" * 7 + encode_record(topic=b"T", body=b"hello", properties=encode_properties(props)))


def test_a_pull_with_a_record_filter_serves_only_matching_messages_and_moves_past_the_rest(store):
    for i in range(100):
        put(store, {"n": str(i), "parity": "even" if i % 2 == 0 else "odd"})
    flt = ExpressionMessageFilter(compile_sql92("n >= 90 AND parity = 'odd'"))
    r = store.get_messages("g", "T", 0, 0, 32, None, flt)
    assert r.status is GetMessageStatus.FOUND
    got = decode_records(b"".join(r.buffers))
    assert [m.properties["n"] for m in got] == ["91", "93", "95", "97", "99"]
    assert r.queue_offsets == [91, 93, 95, 97, 99] and r.next_begin_offset == 100

    none = store.get_messages("g", "T", 0, 0, 32, None, ExpressionMessageFilter(compile_sql92("n > 1000")))
    assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 100  # all scanned


def test_a_filtered_pull_stops_at_max_count_and_resumes_after_the_last_served(store):
    for i in range(50):
        put(store, {"n": str(i)})
    flt = ExpressionMessageFilter(compile_sql92("n >= 10"))
    r = store.get_messages("g", "T", 0, 0, 4, None, flt)
    assert r.queue_offsets == [10, 11, 12, 13] and r.next_begin_offset == 14


def test_tags_codes_and_a_record_filter_both_apply(store):
    for i in range(10):
        store.put_message(MessageExtBrokerInner("T", b"b", queue_id=0, born_host="10.0.0.1:5000",
                                                properties={"TAGS": "A" if i < 5 else "B", "n": str(i)}))
    r = store.get_messages("g", "T", 0, 0, 32, tag_codes_of("B"), ExpressionMessageFilter(compile_sql92("n > 7")))
    assert r.queue_offsets == [8, 9]


PROPS = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e", "f", "TAGS", "x\x01y"]),
                        st.text(alphabet="ab1 \x01é", max_size=4), max_size=6)


@settings(max_examples=200, deadline=None)
@given(props=PROPS, expression=st.sampled_from([
    "a = '1'", "a IS NULL", "a = b", "b IS NOT NULL AND a <> 'a'", "TAGS IN ('a', 'b')",
    "a = '1' OR b = '1' OR c = '1' OR d = '1' OR e = '1' OR f = '1' OR TAGS = '1'"]))  # decoded whole
def test_a_stored_record_matches_as_its_decoded_properties_do(props, expression):
    compiled = compile_sql92(expression)
    rec = record(props)
    assert record_properties(rec, 7) == encode_properties(props)
    decoded = decode_records(bytes(rec[7:]))[0].properties
    with_values = {k: v for k, v in decoded.items() if v}  # RocketMQ's decoder drops empty values
    assert ExpressionMessageFilter(compiled)(rec, 7) is compiled.matches(with_values)


def test_a_property_with_an_empty_value_is_missing_to_a_filter():
    rec = record({"a": "", "b": "1"})
    assert ExpressionMessageFilter(compile_sql92("a IS NULL"))(rec, 7)  # looked up
    many = "a IS NULL AND b = '1' AND c IS NULL AND d IS NULL AND e IS NULL AND f IS NULL AND g IS NULL"
    assert ExpressionMessageFilter(compile_sql92(many))(rec, 7)  # decoded whole


def test_a_record_whose_lengths_do_not_add_up_is_served_for_the_consumer_to_report():
    rec = bytearray(record({"a": "1"}))
    rec[7 + 3] += 1  # TOTALSIZE one more than the fields
    assert record_properties(memoryview(rec), 7) is None
    assert ExpressionMessageFilter(compile_sql92("a = '2'"))(memoryview(rec), 7) is True


def test_a_retried_message_meets_the_filter_of_its_original_topic():
    flt = ExpressionForRetryMessageFilter({"orders": compile_sql92("region = 'hz'")})
    assert flt(record({"RETRY_TOPIC": "orders", "region": "hz"}), 7)
    assert not flt(record({"RETRY_TOPIC": "orders", "region": "sh"}), 7)
    assert flt(record({"RETRY_TOPIC": "payments", "region": "sh"}), 7)  # no filter on that topic
    assert flt(record({"region": "sh"}), 7)


def sql(topic: str, expression: str, version: int) -> SubscriptionData:
    return SubscriptionData(topic, expression, [], [], version, "SQL92")


def test_heartbeats_register_compiled_filters_by_topic_and_group_with_their_version():
    m = ConsumerFilterManager()
    m.register("g", [sql("t1", "a = '1'", 5), SubscriptionData("t2", "*"), sql("t3", "b >", 5)])
    assert m.get("t1", "g").client_version == 5 and m.get("t1", "g").compiled.matches({"a": "1"})
    assert m.get("t2", "g") is None  # a tag subscription has no filter data
    assert m.get("t3", "g") is None  # nor one that does not compile: pulls meet FILTER_DATA_NOT_EXIST
    first = m.get("t1", "g").compiled

    m.register("g", [sql("t1", "a = '1'", 9)])  # the same expression, a newer version
    assert m.get("t1", "g").client_version == 9 and m.get("t1", "g").compiled is first
    m.register("g", [sql("t1", "a = '2'", 3)])  # an older heartbeat changes nothing
    assert m.get("t1", "g").expression == "a = '1'"
    m.register("g", [sql("t1", "a = '2'", 10)])
    assert m.get("t1", "g").compiled.matches({"a": "2"})

    m.register("g", [SubscriptionData("t1", "*")])  # back to tags: the filter goes
    assert m.get("t1", "g") is None and m.of_group("g") == {}


def test_filters_of_groups_gone_offline_are_forgotten():
    m = ConsumerFilterManager()
    m.register("g1", [sql("t", "a = '1'", 1)])
    m.register("g2", [sql("t", "a = '2'", 1)])
    m.retain({"g2"})
    assert m.get("t", "g1") is None and m.get("t", "g2") is not None
