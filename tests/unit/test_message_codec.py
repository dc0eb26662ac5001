"""The stored-message record and the properties string round-trip exactly; hashes match Java's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.common.errors import MessageFormatError
from sluice.common.hashing import index_key_hash, index_key_hashes, java_string_hash
from sluice.common.message import create_message_id, decode_message_id
from sluice.common.message_codec import (
    RECORD_FIXED_SIZE,
    check_record,
    decode_record,
    decode_records,
    encode_record,
)
from sluice.common.properties import decode_properties, encode_properties

topics = st.from_regex(r"\A[%|a-zA-Z0-9_-]{1,127}\Z")
prop_text = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), max_size=40)
properties = st.dictionaries(prop_text.filter(bool), prop_text, max_size=8)
hosts = st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255), st.integers(0, 255),
                  st.integers(0, 65535)).map(lambda t: f"{t[0]}.{t[1]}.{t[2]}.{t[3]}:{t[4]}")
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(0, 2**62)


@settings(max_examples=300)
@given(topic=topics, body=st.binary(max_size=5000), props=properties, queue_id=st.integers(0, 1023), flag=i32,
       queue_offset=i64, phys=i64, born_ts=i64, store_ts=i64, born=hosts, store=hosts,
       reconsume=st.integers(0, 1000), sys_flag=st.sampled_from([0, 1, 2, 4, 8, 12]))
def test_record_round_trips(topic, body, props, queue_id, flag, queue_offset, phys, born_ts, store_ts, born,
                            store, reconsume, sys_flag):
    props_b = encode_properties(props)
    data = encode_record(topic=topic.encode(), body=body, properties=props_b, queue_id=queue_id, flag=flag,
                         queue_offset=queue_offset, physical_offset=phys, sys_flag=sys_flag,
                         born_timestamp=born_ts, born_host=born, store_timestamp=store_ts, store_host=store,
                         reconsume_times=reconsume)
    assert len(data) == RECORD_FIXED_SIZE + len(body) + len(topic) + len(props_b)
    assert check_record(data, 0, len(data)) == len(data)
    m = decode_record(data)
    assert (m.topic, m.body, m.properties, m.queue_id, m.flag) == (topic, body, props, queue_id, flag)
    assert (m.queue_offset, m.commit_log_offset, m.sys_flag) == (queue_offset, phys, sys_flag)
    assert (m.born_timestamp, m.born_host, m.store_timestamp, m.store_host) == (born_ts, born, store_ts, store)
    assert m.reconsume_times == reconsume and m.store_size == len(data)


@given(bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=10))
def test_concatenated_records_decode_in_order(bodies):
    data = b"".join(encode_record(topic=b"T", body=b, properties=b"") for b in bodies)
    assert [m.body for m in decode_records(data)] == bodies


def test_flipped_body_bit_fails_crc_check():
    data = bytearray(encode_record(topic=b"T", body=b"hello world", properties=b""))
    data[90] ^= 0x04
    with pytest.raises(MessageFormatError, match="CRC"):
        check_record(data, 0, len(data))


def test_truncated_record_is_rejected():
    data = encode_record(topic=b"T", body=b"x" * 100, properties=b"")
    with pytest.raises(MessageFormatError):
        check_record(data[:60] + bytes(len(data) - 60), 0, len(data))


def test_zeroes_are_a_clean_end():
    assert check_record(bytes(64), 0, 64) == 0


@given(props=properties)
def test_properties_round_trip_java_style(props):
    assert decode_properties(encode_properties(props)) == props


def test_properties_accept_cpp_trailing_separator():
    raw = b"TAGS\x01TagA\x02UNIQ_KEY\x01ABC\x02WAIT\x01true\x02"
    assert decode_properties(raw) == {"TAGS": "TagA", "UNIQ_KEY": "ABC", "WAIT": "true"}


@pytest.mark.parametrize(("s", "expected"), [("", 0), ("hello", 99162322), ("TagA", 2598919),
                                              ("polygenelubricants", -2147483648), ("é", 233), ("😀", 1772899)])
def test_java_string_hash_matches_java(s, expected):
    assert java_string_hash(s) == expected


def test_index_key_hash_maps_min_int_to_zero():
    assert index_key_hash("polygenelubricants") == 0


@given(st.lists(st.text(max_size=60), min_size=1, max_size=20))
def test_vectorised_key_hashes_equal_scalar(keys):
    assert index_key_hashes(keys).tolist() == [index_key_hash(k) for k in keys]


def test_offset_message_id_matches_spec_example():
    assert create_message_id("127.0.0.1:10911", 0) == "7F00000100002A9F0000000000000000"
    assert decode_message_id("7F00000100002A9F00000000000004D2") == ("127.0.0.1:10911", 1234)


def test_a_decoded_message_reads_its_properties_only_when_asked():
    props = {"TAGS": "t", "KEYS": "a b", "UNIQ_KEY": "0A" * 16, "x": "y"}
    record = encode_record(topic=b"T", body=b"body", properties=encode_properties(props), queue_offset=7)
    m = decode_record(record)
    assert (m.tags, m.keys, m.uniq_key, m.msg_id) == ("t", ["a", "b"], "0A" * 16, "0A" * 16)
    assert (m.get_property("x"), m.get_property("nope")) == ("y", None)
    assert m._properties is None  # the accessors above read the encoded bytes
    eager = m.replace(properties=dict(props))
    assert eager == m and m.properties == props and m._properties is not None
    m.properties["x"] = "z"
    assert m.properties["x"] == "z" and m != eager
    assert m.replace(queue_offset=8).queue_offset == 8 and m.replace(queue_offset=8).properties == m.properties


def test_records_of_several_topics_in_one_body_keep_their_own_topics():
    topics = ["a", "ab", "b", "b", "a", "", "ab"]
    body = b"".join(encode_record(topic=t.encode(), body=b"x", properties=b"") for t in topics)
    assert [m.topic for m in decode_records(body)] == topics
