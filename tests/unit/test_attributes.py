"""Topic and group attributes: the ``+k=v,-k`` text as RocketMQ's AttributeParser reads it, and the changes
AttributeUtil allows."""

from __future__ import annotations

import pytest

from sluice.common.attributes import (
    GROUP_ATTRIBUTES,
    TOPIC_ATTRIBUTES,
    AttributeRefused,
    alter,
    java_hash_set_order,
    message_type_of_properties,
    modification_text,
    parse_modification,
)


def test_a_modification_reads_as_java_reads_it() -> None:
    assert parse_modification("+message.type=PRIORITY,-reserve.time") == {"+message.type": "PRIORITY",
                                                                          "-reserve.time": ""}
    assert parse_modification("+a=b=c,") == {"+a": "b"}  # (Java's split: the first part, trailing empties dropped)
    assert parse_modification(None) == {} and parse_modification("") == {}
    assert modification_text({"+message.type": "FIFO", "-x": ""}) == "+message.type=FIFO,-x"
    with pytest.raises(AttributeRefused, match="delete attribute format is wrong: k"):
        parse_modification("k")
    with pytest.raises(AttributeRefused, match="longer than"):
        parse_modification("+a=" + "x" * 5000)


def test_changes_are_allowed_as_rocketmq_allows_them() -> None:
    created = alter(True, TOPIC_ATTRIBUTES, {}, {"+message.type": "PRIORITY"})
    assert created == {"message.type": "PRIORITY"}
    assert alter(False, TOPIC_ATTRIBUTES, created, {"+message.type": "FIFO"}) == {"message.type": "FIFO"}
    assert alter(False, TOPIC_ATTRIBUTES, created, {"-message.type": ""}) == {}
    assert alter(False, TOPIC_ATTRIBUTES, created, {}) == created
    for create, current, change, words in (
            (True, {}, {"-message.type": ""}, "only add attribute is supported while creating topic"),
            (False, {}, {"-message.type": ""}, "attempt to delete a nonexistent key: message.type"),
            (False, {}, {"+queue.type": "BatchCQ"}, "attempt to update an unchangeable attribute. key: queue.type"),
            (False, {}, {"+a-b": "1"}, "kv string format wrong."),
            (True, {}, {"+reserve.time": "soon"}, 'For input string: "soon"'),
            (True, {}, {"+message.type": "normal"}, "value is not in set")):
        with pytest.raises(AttributeRefused, match=words):
            alter(create, TOPIC_ATTRIBUTES, current, change)
    assert alter(True, GROUP_ATTRIBUTES, {}, {"+lite.sub.reset.offset.exclusive": "TRUE"})
    with pytest.raises(AttributeRefused, match="boolean attribute format is wrong."):
        alter(True, GROUP_ATTRIBUTES, {}, {"+lite.sub.reset.offset.exclusive": "yes"})


def test_the_set_a_refusal_names_is_in_java_s_order() -> None:
    # (Java's HashSet order, which RocketMQ prints; checked against RocketMQ 5.5 in tests/reference/test_priority.py)
    assert java_hash_set_order(("UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE",
                                "MIXED")) == ["UNSPECIFIED", "MIXED", "TRANSACTION", "PRIORITY", "FIFO", "DELAY",
                                              "LITE", "NORMAL"]


@pytest.mark.parametrize(("props", "kind"), [
    ({"TRAN_MSG": "true", "DELAY": "3", "_SYS_MSG_PRIORITY_": "1"}, "TRANSACTION"),
    ({"DELAY": "3", "__SHARDINGKEY": "k"}, "DELAY"),
    ({"__SHARDINGKEY": "k", "_SYS_MSG_PRIORITY_": "1"}, "FIFO"),
    ({"_SYS_MSG_PRIORITY_": "1", "__LITE_TOPIC": "x"}, "PRIORITY"),
    ({"__LITE_TOPIC": "x"}, "LITE"),
    ({}, "NORMAL"),
])
def test_a_message_is_of_one_type_the_first_its_properties_name(props: dict[str, str], kind: str) -> None:
    assert message_type_of_properties(props) == kind
