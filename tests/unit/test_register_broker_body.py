"""REGISTER_BROKER bodies: plain JSON and Java's compressed form, both ways; fastjson-style JSON."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from sluice.common.structs import DataVersion, TopicConfig, TopicFilterType
from sluice.namesrv.register_broker_body import (
    BodyFormatError,
    TopicConfigSerializeWrapper,
    decode_register_broker_body,
    encode_register_broker_body,
)

WRAPPER = TopicConfigSerializeWrapper(DataVersion(1700000000000, 3), {
    "TBW102": TopicConfig("TBW102", 8, 8, 7),
    "TopicTest": TopicConfig("TopicTest", 4, 2, 6, TopicFilterType.MULTI_TAG),
})


@pytest.mark.parametrize("compressed", [False, True])
def test_body_round_trips(compressed: bool):
    body = decode_register_broker_body(encode_register_broker_body(WRAPPER, ["f:1"], compressed), compressed)
    assert body.topic_config_wrapper == WRAPPER
    assert body.filter_server_list == ["f:1"]


def test_plain_body_is_rocketmq_json():
    d = json.loads(encode_register_broker_body(WRAPPER))
    assert d["filterServerList"] == []
    assert d["topicConfigSerializeWrapper"]["dataVersion"] == {"counter": 3, "stateVersion": 0,
                                                               "timestamp": 1700000000000}
    assert d["topicConfigSerializeWrapper"]["topicConfigTable"]["TopicTest"] == {
        "attributes": {}, "order": False, "perm": 6, "readQueueNums": 4, "topicFilterType": "MULTI_TAG",
        "topicName": "TopicTest", "topicSysFlag": 0, "writeQueueNums": 2}


def _java_compressed(entries: list[bytes], trailer: bytes = b"") -> bytes:
    """What a Java broker's RegisterBrokerBody.encode(true) writes."""
    def blob(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b
    raw = blob(b'{"counter":2,"stateVersion":0,"timestamp":5}') + struct.pack(">i", len(entries))
    raw += b"".join(blob(e) for e in entries) + blob(b"[]") + trailer
    return zlib.compress(raw, 9)


def test_compressed_body_as_java_5_writes_it():
    data = _java_compressed([b"T1 4 4 6 SINGLE_TAG ", b'T2 1 2 7 SINGLE_TAG {"+message.type":"NORMAL"}',
                             b"T3 8 8 6 MULTI_TAG"], trailer=struct.pack(">i", 0))
    body = decode_register_broker_body(data, compressed=True)
    table = body.topic_config_wrapper.topic_config_table
    assert body.topic_config_wrapper.data_version == DataVersion(5, 2)
    assert [(t.topic_name, t.read_queue_nums, t.write_queue_nums, t.perm) for t in table.values()] == [
        ("T1", 4, 4, 6), ("T2", 1, 2, 7), ("T3", 8, 8, 6)]
    assert [t.attributes for t in table.values()] == [{}, {"+message.type": "NORMAL"}, {}]


def test_compressed_body_carries_the_attributes_as_java_writes_them():
    tc = TopicConfig("P", 4, 4, attributes={"message.type": "PRIORITY"})
    wrapper = TopicConfigSerializeWrapper(DataVersion(1, 1), {"P": tc})
    data = encode_register_broker_body(wrapper, compressed=True)
    assert b'P 4 4 6 SINGLE_TAG {"message.type":"PRIORITY"}' in zlib.decompress(data)
    assert decode_register_broker_body(data, True).topic_config_wrapper.topic_config_table["P"] == tc


def test_compressed_body_accepts_json_topic_entries():
    data = _java_compressed([json.dumps(TopicConfig("J", 3, 3).to_json()).encode()])
    assert decode_register_broker_body(data, True).topic_config_wrapper.topic_config_table["J"].read_queue_nums == 3


@pytest.mark.parametrize("data, compressed, problem", [
    (b"not json", False, "not JSON"),
    (b"[1]", False, "JSON object"),
    (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"readQueueNums":"x"}}}}', False, "malformed"),
    (b"\x00\x01garbage", True, "does not inflate"),
    (zlib.compress(b"\x00\x00\x00\x10{}"), True, "ends inside"),
    (_java_compressed([b"T1 4 4"]), True, "fewer than 5"),
    (_java_compressed([b"T1 4 x 6 SINGLE_TAG"]), True, "T1 4 x"),
    (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicFilterType":-1}}}}', False, "neither 0"),
    (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1e999}}}', False, "not an integer"),
    (b'{"filterServerList":[["a"]]}', False, "where addresses belong"),
    (_java_compressed([b'{"readQueueNums":1}']), True, "no 'topicName' field"),
])
def test_bad_bodies_raise_a_clear_error(data: bytes, compressed: bool, problem: str):
    with pytest.raises(BodyFormatError, match=problem):
        decode_register_broker_body(data, compressed)


def test_a_body_with_fastjson_bare_number_keys_is_read():
    body = b'{"topicConfigSerializeWrapper":{"topicConfigTable":{},"dataVersion":{0:1}},"filterServerList":[]}'
    assert decode_register_broker_body(body, False).filter_server_list == []
