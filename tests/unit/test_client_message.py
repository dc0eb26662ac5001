"""The user-facing Message: validation and the properties it puts on the wire."""

from __future__ import annotations

import pytest

from sluice.client.message import (
    MAX_PROPERTIES_SIZE,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    Message,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)
from sluice.common.errors import InvalidNameError, MessageFormatError
from sluice.common.properties import decode_properties, encode_properties
from sluice.common.structs import MessageQueue


def test_wire_properties_carry_tags_keys_wait_delay_uniq_key_and_user_properties():
    m = Message("orders", b"x", tags="paid", keys=["o-1", "o-2"], properties={"area": "hz"}, delay_level=3)
    props = m.properties_for_wire("ABC")
    assert props == {"TAGS": "paid", "KEYS": "o-1 o-2", "WAIT": "true", "DELAY": "3", "UNIQ_KEY": "ABC",
                     "area": "hz"}
    assert decode_properties(encode_properties(props)) == props


def test_minimal_message_carries_only_wait():
    assert Message("t", b"x").properties_for_wire() == {"WAIT": "true"}
    assert Message("t", b"x", wait_store_msg_ok=False).properties_for_wire() == {"WAIT": "false"}


def test_keys_given_as_a_string_are_split_on_spaces():
    m = Message("t", b"x", keys="a  b")
    assert m.keys == ["a", "b"]
    assert m.properties_for_wire()["KEYS"] == "a b"


def test_body_may_be_any_bytes_like_object():
    assert Message("t", bytearray(b"ab")).body == b"ab"
    assert Message("t", memoryview(b"ab")).body == b"ab"


def test_empty_body_is_refused():
    with pytest.raises(MessageFormatError, match="empty"):
        Message("t", b"")


def test_str_body_is_refused_with_a_clear_error():
    with pytest.raises(MessageFormatError, match="bytes"):
        Message("t", "text")  # type: ignore[arg-type]


def test_body_over_the_producer_limit_is_refused():
    m = Message("t", b"x" * 101)
    m.validate(max_body_size=101)
    with pytest.raises(MessageFormatError, match="over the limit of 100"):
        m.validate(max_body_size=100)


def test_default_body_limit_is_4_mib():
    Message("t", b"x" * (4 * 1024 * 1024)).validate()
    with pytest.raises(MessageFormatError):
        Message("t", b"x" * (4 * 1024 * 1024 + 1)).validate()


@pytest.mark.parametrize("topic", ["", "a b", "x" * 128, "tópico"])
def test_invalid_topic_is_refused(topic):
    with pytest.raises(InvalidNameError):
        Message(topic, b"x")


def test_system_topics_cannot_be_sent_to():
    with pytest.raises(InvalidNameError, match="system topic"):
        Message("SCHEDULE_TOPIC_XXXX", b"x")


@pytest.mark.parametrize("name", ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "__SHARDINGKEY"])
def test_reserved_property_names_are_refused(name):
    with pytest.raises(MessageFormatError, match="reserved"):
        Message("t", b"x", properties={name: "v"})


def test_reserved_property_added_after_construction_is_refused_on_the_wire():
    m = Message("t", b"x")
    m.properties["TAGS"] = "sneaky"
    with pytest.raises(MessageFormatError, match="reserved"):
        m.properties_for_wire()
    with pytest.raises(MessageFormatError, match="reserved"):
        m.validate()


@pytest.mark.parametrize("props", [{"a": ""}, {" ": "v"}, {"a\x01": "v"}, {"a": "v\x02"}, {"a": 1}])
def test_blank_or_separator_carrying_or_non_str_properties_are_refused(props):
    with pytest.raises(MessageFormatError):
        Message("t", b"x", properties=props)


@pytest.mark.parametrize("tags", ["", " a", "a|b", "a\x01"])
def test_tags_that_cannot_be_subscribed_to_are_refused(tags):
    with pytest.raises(MessageFormatError):
        Message("t", b"x", tags=tags)


@pytest.mark.parametrize("keys", [["a b"], [""], ["a\x02"]])
def test_keys_with_whitespace_or_separators_are_refused(keys):
    with pytest.raises(MessageFormatError):
        Message("t", b"x", keys=keys)


def test_negative_delay_level_and_out_of_range_flag_are_refused():
    with pytest.raises(MessageFormatError, match="delay"):
        Message("t", b"x", delay_level=-1)
    with pytest.raises(MessageFormatError, match="flag"):
        Message("t", b"x", flag=2**31)


def test_properties_too_large_for_a_record_are_refused():
    m = Message("t", b"x", properties={"big": "v" * MAX_PROPERTIES_SIZE})
    with pytest.raises(MessageFormatError, match="properties"):
        m.validate()


def test_send_status_from_response_codes():
    assert SendStatus.from_response_code(0) is SendStatus.SEND_OK
    assert SendStatus.from_response_code(10) is SendStatus.FLUSH_DISK_TIMEOUT
    assert SendStatus.from_response_code(11) is SendStatus.SLAVE_NOT_AVAILABLE
    assert SendStatus.from_response_code(12) is SendStatus.FLUSH_SLAVE_TIMEOUT
    assert SendStatus.from_response_code(13) is None


def test_pull_status_from_response_codes():
    assert [PullStatus.from_response_code(c) for c in (0, 19, 20, 21, 1)] == [
        PullStatus.FOUND, PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG, PullStatus.OFFSET_ILLEGAL, None]


def test_result_types_hold_their_fields():
    q = MessageQueue("t", "b", 0)
    r = SendResult(SendStatus.SEND_OK, "U", "O", q, 7)
    assert (r.queue, r.queue_offset, r.msg_ids) == (q, 7, [])
    p = PullResult(PullStatus.NO_NEW_MSG, 5, 0, 5)
    assert p.messages == [] and p.suggest_which_broker_id == 0
    assert {s.name for s in ConsumeStatus} == {"CONSUME_SUCCESS", "RECONSUME_LATER"}
    assert {s.name for s in ConsumeOrderlyStatus} == {"SUCCESS", "SUSPEND_CURRENT_QUEUE_A_MOMENT"}


@pytest.mark.parametrize("m", [Message("t", b"x"), Message("t", b"x", tags="A", keys="k1 k2", properties={"p": "v"}),
                               Message("t", b"x", wait_store_msg_ok=False, delay_level=3, properties={"é": "ü"})])
def test_wire_properties_are_the_encoded_properties_for_wire(m):
    assert m.wire_properties("U" * 32) == encode_properties(m.properties_for_wire("U" * 32))
    assert m.wire_properties() == encode_properties(m.properties_for_wire())


@pytest.mark.parametrize("sharding_key", [None, "order-42", "é"])
@pytest.mark.parametrize("m", [Message("t", b"x"), Message("t", b"x", tags="A", keys="k1 k2", properties={"p": "v"}),
                               Message("t", b"x", wait_store_msg_ok=False, delay_level=3, properties={"é": "ü"})])
def test_send_path_properties_are_the_properties_for_wire_with_the_sharding_key_last(m, sharding_key):
    props = m.properties_for_wire("U" * 32)
    if sharding_key is not None:
        props["__SHARDINGKEY"] = sharding_key
    assert m.wire_for_send("U" * 32, sharding_key=sharding_key) == encode_properties(props)


def test_send_path_checks_what_validate_checks():
    m = Message("t", b"x")
    m.properties["TAGS"] = "sneaky"
    with pytest.raises(MessageFormatError, match="reserved"):
        m.wire_for_send("U" * 32)
    with pytest.raises(MessageFormatError, match="over the limit"):
        Message("t", b"xx").wire_for_send("U" * 32, max_body_size=1)
    with pytest.raises(MessageFormatError, match="properties"):
        Message("t", b"x", properties={"big": "v" * (MAX_PROPERTIES_SIZE - 60)}).wire_for_send("U" * 32,
                                                                                               sharding_key="k" * 50)
