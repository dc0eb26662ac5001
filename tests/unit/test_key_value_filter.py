"""The contest spec's ``key=value`` filter and ``MessageSelector``: what a consumer subscribes with, checked when it
subscribes."""

from __future__ import annotations

import pytest

from sluice import MessageSelector, PullConsumer, PushConsumer
from sluice.client.subscription import build_subscription
from sluice.common.errors import FilterExpressionError, InvalidSubscriptionError
from sluice.filter import compile_sql92, key_value_to_sql92


@pytest.mark.parametrize(("pairs", "sql"), [
    ("area=hz", "area = 'hz'"),
    (" area = hz ", "area = 'hz'"),
    ("area=hz,level=gold", "area = 'hz' AND level = 'gold'"),
    ("expr=a=b", "expr = 'a=b'"),
    ("quote=it's", "quote = 'it''s'"),
    ("empty=", "empty = ''"),
    ("TAGS=TagA", "TAGS = 'TagA'"),
])
def test_key_value_pairs_are_sql92_equalities_joined_by_and(pairs, sql):
    assert key_value_to_sql92(pairs) == sql


def test_a_key_value_filter_selects_exactly_the_messages_with_that_value():
    f = compile_sql92(key_value_to_sql92("area=hz,level=gold"))
    assert f.matches({"area": "hz", "level": "gold", "x": "y"})
    assert not f.matches({"area": "hz", "level": "silver"})
    assert not f.matches({"area": "hz"})  # a missing property is not a match
    assert not f.matches({"area": "HZ", "level": "gold"})  # values compare exactly


@pytest.mark.parametrize(("pairs", "reason", "column"), [
    ("area", "is not key=value", 1),
    ("area=hz, level", "is not key=value", 10),
    ("=hz", "a key is missing", 1),
    ("area=hz,,b=1", "is not key=value", 9),
    ("my-area=hz", "cannot be a key", 1),
    ("1area=hz", "cannot be a key", 1),
    ("a=1, and=2", "cannot be a key", 6),
])
def test_a_malformed_key_value_filter_is_refused_saying_where(pairs, reason, column):
    with pytest.raises(FilterExpressionError) as info:
        key_value_to_sql92(pairs)
    assert reason in info.value.reason and info.value.column == column


def test_selectors_check_their_sql_when_made():
    assert MessageSelector.by_sql("a > 1") == MessageSelector("SQL92", "a > 1")
    assert MessageSelector.by_tag(None) == MessageSelector("TAG", "*")
    assert MessageSelector.by_key_value("a=1") == MessageSelector("SQL92", "a = '1'")
    with pytest.raises(FilterExpressionError, match="column 5"):
        MessageSelector.by_sql("a > 'x' OR b")
    with pytest.raises(InvalidSubscriptionError, match="unknown expression type"):
        MessageSelector("REGEX", ".*")


def test_an_sql92_subscription_carries_the_expression_and_its_type():
    sub = build_subscription("t", MessageSelector.by_sql("a BETWEEN 1 AND 3"), sub_version=7)
    assert (sub.sub_string, sub.expression_type, sub.tags_set, sub.code_set, sub.sub_version) == \
        ("a BETWEEN 1 AND 3", "SQL92", [], [], 7)
    assert sub.to_json()["expressionType"] == "SQL92"
    tags = build_subscription("t", MessageSelector.by_tag("A || B"))
    assert (tags.sub_string, tags.expression_type) == ("A || B", "TAG")


@pytest.mark.parametrize("consumer_class", [PushConsumer, PullConsumer])
def test_consumers_subscribe_with_a_selector_or_a_key_value_filter(consumer_class):
    c = consumer_class("g-filters", namesrv="127.0.0.1:1")
    c.subscribe("t1", MessageSelector.by_sql("a = 'x'"))
    c.subscribe("t2", filter="area=hz")
    c.subscribe("t3", "*", filter="")  # an empty filter is every message, as in the contest spec
    subs = c.aio.subscriptions
    assert (subs["t1"].expression_type, subs["t1"].sub_string) == ("SQL92", "a = 'x'")
    assert (subs["t2"].expression_type, subs["t2"].sub_string) == ("SQL92", "area = 'hz'")
    assert (subs["t3"].expression_type, subs["t3"].sub_string) == ("TAG", "*")
    with pytest.raises(InvalidSubscriptionError, match="not both"):
        c.subscribe("t4", "TagA", filter="area=hz")
    with pytest.raises(FilterExpressionError, match="column 5"):
        c.subscribe("t5", filter="a=1,my-key=2")
    assert "t4" not in subs and "t5" not in subs
