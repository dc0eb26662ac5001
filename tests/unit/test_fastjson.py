"""fastjson's JSON variant, as RocketMQ's Java side writes its bodies: read and written."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.common import fastjson
from sluice.common.fastjson import FastjsonDecodeError, ObjectKey

# Written by RocketMQ 5.5.0 (fastjson2 2.0.59): ConsumeStats, ResetOffsetBody, ClusterInfo, consumer offsets.
CONSUME_STATS = (b'{"consumeTps":1.5,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"brokerOffset":5,'
                 b'"consumerOffset":3,"lastTimestamp":99,"pullOffset":0}}}')
RESET_OFFSET = b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"t"}:7}}'
CLUSTER_INFO = b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911"}}}}'
OFFSETS = b'{"offsetTable":{"t@g":{0:5,-1:7}}}'


def test_object_keys_are_read_as_hashable_mappings():
    stats = fastjson.loads(CONSUME_STATS)
    (key, value), = stats["offsetTable"].items()
    assert isinstance(key, ObjectKey)
    assert dict(key) == {"brokerName": "b", "queueId": 0, "topic": "t"}
    assert value["brokerOffset"] == 5 and stats["consumeTps"] == 1.5
    key = ObjectKey({"topic": "t", "brokerName": "b", "queueId": 1})
    assert fastjson.loads(RESET_OFFSET)["offsetTable"] == {key: 7}


def test_bare_number_keys_are_read_as_the_strings_standard_json_would_quote():
    assert fastjson.loads(CLUSTER_INFO)["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
    assert fastjson.loads(OFFSETS) == {"offsetTable": {"t@g": {"0": 5, "-1": 7}}}


def test_object_keys_are_written_as_fastjson_writes_them_fields_in_alphabetical_order():
    body = {"consumeTps": 1.5, "offsetTable": {ObjectKey({"topic": "t", "queueId": 0, "brokerName": "b"}): {
        "brokerOffset": 5, "consumerOffset": 3, "lastTimestamp": 99, "pullOffset": 0}}}
    assert fastjson.dumps(body) == CONSUME_STATS
    assert fastjson.loads(fastjson.dumps(body)) == body


def test_text_inside_strings_is_never_taken_for_keys():
    assert fastjson.loads(b'{"s":"{0:x}", 1 : "{\\"a\\":1}"}') == {"s": "{0:x}", "1": '{"a":1}'}


@pytest.mark.parametrize("bad", [b"{oops", b'{"a":1', b"{1}", b'{"a" 1}', b"[1,]", b'{"a":1}x', b"", b"\xff",
                                 b'{{"a":[1]}:1}', b"{-:1}", b"[" * 300 + b"{0:1}" + b"]" * 300,
                                 b"{" * 2000, b'{{{"a":1}:1}:3}', b'{{"a":1,{"b":1}:2}:3}',
                                 "{\u0663:1}".encode()])
def test_malformed_bodies_raise_a_value_error(bad):
    with pytest.raises(FastjsonDecodeError):
        fastjson.loads(bad)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20)


@given(json_values)
def test_standard_json_reads_as_json_does(value):
    text = json.dumps(value)
    assert fastjson.loads(text) == json.loads(text)
    assert json.loads(fastjson.dumps(value)) == json.loads(text)


@given(st.dictionaries(st.fixed_dictionaries({"topic": st.text(), "brokerName": st.text(),
                                              "queueId": st.integers(0, 1023)}).map(ObjectKey),
                       st.integers(-2**63, 2**63 - 1) | st.text(), max_size=5))
def test_object_keyed_maps_survive_a_round_trip(table):
    assert fastjson.loads(fastjson.dumps({"offsetTable": table})) == {"offsetTable": table}


def test_equal_object_keys_hash_alike():
    a, b = ObjectKey({"queueId": 1, "topic": "t"}), ObjectKey({"topic": "t", "queueId": 1.0})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
