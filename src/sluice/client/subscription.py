"""Subscription expressions: tags (``"*"`` for everything, or ``"TagA || TagB"``) or an SQL92 ``MessageSelector``.

``build_subscription`` turns an expression into the ``SubscriptionData`` sent in heartbeats and pulls:
the tags, their Java hash codes (what the broker compares with consume-queue tag codes) and a version
(creation time in ms). The broker filters by hash code only, so the client filters again by the exact
tag string with ``matches`` / ``filter_messages``. An SQL92 subscription carries the expression (checked here);
the broker evaluates it and the client passes on what it is sent, as RocketMQ's does.

Stricter than RocketMQ, which silently drops empty pieces: ``"a ||"``, ``"|| b"`` and ``"a || || b"`` are
errors here, as are tags containing ``|`` or control characters, and ``*`` next to other tags.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from sluice.client.message_selector import MessageSelector
from sluice.common.errors import InvalidSubscriptionError
from sluice.common.hashing import tag_hash_code
from sluice.common.message import MessageExt
from sluice.common.structs import SubscriptionData
from sluice.filter import SQL92

SUB_ALL = "*"
TAG_SEPARATOR = "||"
EXPRESSION_TYPE_TAG = "TAG"


def parse_tag_expression(expression: str | None) -> list[str]:
    """The tags an expression names, in order, without duplicates; ``[]`` means all messages.

    Raises ``InvalidSubscriptionError`` for a malformed expression.
    """
    if expression is None:
        return []
    if not isinstance(expression, str):
        raise InvalidSubscriptionError(f"a subscription expression must be a str, not {type(expression).__name__}")
    text = expression.strip()
    if not text or text == SUB_ALL:
        return []
    tags: list[str] = []
    for i, piece in enumerate(text.split(TAG_SEPARATOR)):
        tag = piece.strip()
        if not tag:
            where = "at the start" if i == 0 else "at the end" if i == text.count(TAG_SEPARATOR) else "in the middle"
            raise InvalidSubscriptionError(f"subscription expression {expression!r} has an empty tag {where}; "
                                           "write 'TagA || TagB', or '*' for all messages")
        if "|" in tag:
            raise InvalidSubscriptionError(f"subscription expression {expression!r}: tag {tag!r} contains '|' "
                                           "(tags are separated by '||')")
        if tag == SUB_ALL:
            raise InvalidSubscriptionError(f"subscription expression {expression!r}: '*' must be the whole "
                                           "expression, not one of several tags")
        if any(c < " " or c == "\x7f" for c in tag):
            raise InvalidSubscriptionError(f"subscription expression {expression!r}: tag {tag!r} contains a "
                                           "control character")
        if tag not in tags:
            tags.append(tag)
    return tags


def build_subscription(
    topic: str,
    expression: str | MessageSelector | None = SUB_ALL,
    sub_version: int | None = None,
) -> SubscriptionData:
    """``SubscriptionData`` for ``topic`` and a tag expression or a ``MessageSelector``. ``sub_version`` defaults
    to now (ms).

    The stored ``sub_string`` of a tag expression is normalised (``"*"`` or ``"TagA || TagB"``); an SQL92 one is
    kept as written.
    """
    version = time.time_ns() // 1_000_000 if sub_version is None else sub_version
    if isinstance(expression, MessageSelector):
        if expression.expression_type == SQL92:
            return SubscriptionData(topic, expression.expression, [], [], version, SQL92)
        expression = expression.expression
    tags = parse_tag_expression(expression)
    if not tags:
        return SubscriptionData(topic, SUB_ALL, [], [], version, EXPRESSION_TYPE_TAG)
    return SubscriptionData(topic, f" {TAG_SEPARATOR} ".join(tags), tags, [tag_hash_code(t) for t in tags],
                            version, EXPRESSION_TYPE_TAG)


def is_subscribe_all(sub: SubscriptionData) -> bool:
    """True when ``sub`` lets every message through (``"*"`` or no tags)."""
    return not sub.tags_set or sub.sub_string == SUB_ALL


def matches(sub: SubscriptionData, msg_tags: str | None) -> bool:
    """Whether a message with tag ``msg_tags`` passes ``sub`` (exact string match; untagged messages pass
    only ``"*"``)."""
    if is_subscribe_all(sub):
        return True
    return msg_tags is not None and msg_tags in sub.tags_set


def tag_filter(sub: SubscriptionData) -> Callable[[str | None], bool] | None:
    """A fast predicate on a message's tag for ``sub``, or None when every message passes."""
    if is_subscribe_all(sub):
        return None
    allowed = frozenset(sub.tags_set)
    return allowed.__contains__


def filter_messages(sub: SubscriptionData, msgs: Iterable[MessageExt]) -> list[MessageExt]:
    """The messages of ``msgs`` whose tag passes ``sub``, in order (what a pull hands on after the broker's
    hash-code filter)."""
    pred = tag_filter(sub)
    if pred is None:
        return list(msgs)
    return [m for m in msgs if pred(m.tags)]


__all__ = [
    "EXPRESSION_TYPE_TAG",
    "SUB_ALL",
    "TAG_SEPARATOR",
    "build_subscription",
    "filter_messages",
    "is_subscribe_all",
    "matches",
    "parse_tag_expression",
    "tag_filter",
]
