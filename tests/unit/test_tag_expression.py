"""TAG subscription expressions as the broker reads them: RocketMQ's FilterAPI rules, whatever client sent them."""

from __future__ import annotations

import pytest

from sluice.broker.processors.pull_message_processor import SubscriptionParseError, tag_codes_of
from sluice.common.hashing import tag_hash_code


def codes(*tags: str) -> frozenset[int]:
    return frozenset(tag_hash_code(t) for t in tags)


@pytest.mark.parametrize("expression", ["", "*"])
def test_an_empty_expression_or_a_star_selects_every_message(expression):
    assert tag_codes_of(expression) is None


@pytest.mark.parametrize(("expression", "tags"), [
    ("TagA", ["TagA"]),
    ("TagA || TagB", ["TagA", "TagB"]),
    ("TagA ||", ["TagA"]),  # empty parts are dropped, as Java's String.split and FilterAPI do
    ("|| TagB", ["TagB"]),
    ("TagA || || TagB", ["TagA", "TagB"]),
    ("  TagA  ||TagB ", ["TagA", "TagB"]),
    (" * ", ["*"]),  # only an exact "*" means everything
    ("ünï || 中文", ["ünï", "中文"]),
])
def test_tags_are_split_on_double_bars_and_trimmed(expression, tags):
    assert tag_codes_of(expression) == codes(*tags)


@pytest.mark.parametrize("expression", [" ", " || || ", "|| "])
def test_an_expression_of_blanks_selects_nothing(expression):
    assert tag_codes_of(expression) == frozenset()


@pytest.mark.parametrize("expression", ["||", "||||", "||||||"])
def test_an_expression_of_nothing_but_bars_is_refused(expression):
    with pytest.raises(SubscriptionParseError):
        tag_codes_of(expression)
