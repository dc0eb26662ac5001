"""Tag subscription expressions and client-side tag filtering."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.client.subscription import (
    build_subscription,
    filter_messages,
    matches,
    parse_tag_expression,
    tag_filter,
)
from sluice.common.errors import InvalidSubscriptionError
from sluice.common.hashing import java_string_hash
from sluice.common.message_codec import decode_record, encode_record


@pytest.mark.parametrize("expr", [None, "", "*", "  *  ", "   "])
def test_star_empty_and_none_subscribe_to_everything(expr):
    sub = build_subscription("T", expr, sub_version=5)
    assert (sub.topic, sub.sub_string, sub.tags_set, sub.code_set, sub.sub_version) == ("T", "*", [], [], 5)
    assert sub.expression_type == "TAG"


def test_tags_are_split_on_double_bar_and_trimmed():
    sub = build_subscription("T", "  TagA||TagB ||   TagC  ", sub_version=1)
    assert sub.tags_set == ["TagA", "TagB", "TagC"]
    assert sub.sub_string == "TagA || TagB || TagC"


def test_code_set_holds_java_string_hash_codes():
    sub = build_subscription("T", "TagA || TagB")
    assert sub.code_set == [java_string_hash("TagA"), java_string_hash("TagB")]
    assert java_string_hash("TagA") == 2598919


def test_duplicate_tags_are_kept_once():
    assert parse_tag_expression("a || b || a") == ["a", "b"]


def test_sub_version_defaults_to_now_in_ms():
    import time

    before = time.time_ns() // 1_000_000
    v = build_subscription("T", "*").sub_version
    assert before <= v <= time.time_ns() // 1_000_000


def test_tags_may_contain_inner_spaces():
    assert parse_tag_expression("big order || x") == ["big order", "x"]


@pytest.mark.parametrize("expr, where", [("a ||", "end"), ("|| b", "start"), ("a || || b", "middle"),
                                         ("||", "start"), ("a ||   ||b", "middle")])
def test_empty_tags_are_errors_that_say_where(expr, where):
    with pytest.raises(InvalidSubscriptionError, match=where):
        parse_tag_expression(expr)


@pytest.mark.parametrize("expr", ["a | b", "a ||| b", "a|", "* || a", "a || *", "a\x01", "a || b\tc\n"])
def test_forbidden_characters_and_mixed_star_are_errors(expr):
    with pytest.raises(InvalidSubscriptionError):
        parse_tag_expression(expr)


def test_invalid_subscription_error_is_a_value_error():
    with pytest.raises(ValueError):
        build_subscription("T", "a ||")


def test_non_string_expression_is_an_error():
    with pytest.raises(InvalidSubscriptionError, match="str"):
        parse_tag_expression(42)  # type: ignore[arg-type]


def test_matches_exact_tag_strings_only():
    sub = build_subscription("T", "TagA || TagB")
    assert matches(sub, "TagA") and matches(sub, "TagB")
    assert not matches(sub, "TagC") and not matches(sub, "taga") and not matches(sub, None)


def test_star_matches_untagged_messages_too():
    sub = build_subscription("T", "*")
    assert matches(sub, None) and matches(sub, "anything")
    assert tag_filter(sub) is None


_tag = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="|*",
                             blacklist_categories=("Zs", "Cc")), min_size=1, max_size=6)


@given(st.lists(_tag, min_size=1, max_size=5), st.lists(st.sampled_from([" ", "  ", ""]), min_size=12, max_size=12))
def test_any_well_formed_expression_parses_back_to_its_tags(tags, pads):
    expr = "||".join(f"{pads[i % 12]}{t}{pads[(i + 1) % 12]}" for i, t in enumerate(tags))
    assert parse_tag_expression(expr) == list(dict.fromkeys(tags))
    sub = build_subscription("T", expr)
    assert all(matches(sub, t) for t in tags)


def _msg(tags: str | None, offset: int):
    props = f"TAGS\x01{tags}".encode() if tags else b""
    return decode_record(encode_record(topic=b"T", body=b"x", properties=props, queue_offset=offset))


def test_filter_messages_keeps_matching_messages_in_order():
    msgs = [_msg("a", 0), _msg("b", 1), _msg(None, 2), _msg("a", 3), _msg("c", 4)]
    got = filter_messages(build_subscription("T", "a || c"), msgs)
    assert [m.queue_offset for m in got] == [0, 3, 4]
    assert filter_messages(build_subscription("T", "*"), msgs) == msgs
