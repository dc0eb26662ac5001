"""A message's light queues (RocketMQ's LmqDispatch): INNER_MULTI_DISPATCH names them, and the broker writes the
message's offset in each into INNER_MULTI_QUEUE_OFFSET, in the same order.

Only a name that may be a light queue is ever dispatched to — ``%LMQ%`` then a topic's characters, each once, not
the message's own topic, of a topic that may have light queues — whether it comes from a send, from a stored
record read back (recovery, a slave) or from a client that wrote the offsets itself: the names become paths and
offsets of queues, so they are checked wherever they are read.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.common.errors import InvalidNameError
from sluice.common.lite import belongs_to, is_lite_queue, lite_queue_problem
from sluice.common.naming import is_lmq, topic_allows_lmq, validate_topic
from sluice.common.properties import (
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    property_value,
)


def lmq_problem(topic: str, names: list[str], max_names: int) -> str | None:
    """Why a message of ``topic`` cannot be entered in the light queues ``names`` (None: it can)."""
    if len(names) > max_names:
        return f"INNER_MULTI_DISPATCH names {len(names)} light queues, more than max_lmq_dispatch ({max_names})"
    for name in names:
        if not is_lmq(name):
            return f"INNER_MULTI_DISPATCH: {name[:80]!r} is not a light queue (%LMQ%<name>)"
        if is_lite_queue(name):  # (a lite topic's: '$' separates its parent and its name)
            problem = lite_queue_problem(name)
            if problem is not None:
                return f"INNER_MULTI_DISPATCH: {problem}"
            if not belongs_to(name, topic) or len(names) != 1:
                return f"INNER_MULTI_DISPATCH: {name[:80]!r} is a lite topic of another topic than {topic!r}, or " \
                       f"not the only queue named (a lite topic's message is in its lite topic alone)"
        else:
            try:
                validate_topic(name)
            except InvalidNameError as exc:
                return f"INNER_MULTI_DISPATCH: {name[:80]!r}: {exc}"
        if name == topic:
            return f"INNER_MULTI_DISPATCH names the message's own topic {name!r}"
    if len(set(names)) != len(names):
        return "INNER_MULTI_DISPATCH names a light queue twice"
    return None


def dispatch_names(topic: str, props: Mapping[str, str]) -> list[str] | None:
    """The light queues a message of ``topic`` asks to be entered in (None: none, or a topic that has none)."""
    spec = props.get(PROPERTY_INNER_MULTI_DISPATCH)
    if not spec or not spec.strip() or not topic_allows_lmq(topic):
        return None
    return spec.split(",")


def usable(topic: str, names: list[str]) -> list[str]:
    """Of ``names``, those a message of ``topic`` may be entered in, each once, in order."""
    return [n for n in dict.fromkeys(names) if n != topic and lmq_problem(topic, [n], 1) is None]


def lmq_entries(topic: str, props: Mapping[str, str] | bytes) -> tuple[tuple[str, int], ...]:
    """A stored record's light queues and its offsets in them; () when it has none, or they do not pair up, or it
    is of a topic that has none (nothing is dispatched from them)."""
    if not topic_allows_lmq(topic):
        return ()
    if isinstance(props, bytes):
        names = property_value(props, PROPERTY_INNER_MULTI_DISPATCH)
        offsets = property_value(props, PROPERTY_INNER_MULTI_QUEUE_OFFSET) if names else None
    else:
        names = props.get(PROPERTY_INNER_MULTI_DISPATCH)
        offsets = props.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET) if names else None
    if not names or not offsets:
        return ()
    ns, offs = names.split(","), offsets.split(",")
    if len(ns) != len(offs) or len(set(ns)) != len(ns):
        return ()
    ok = set(usable(topic, ns))
    return tuple((n, int(o)) for n, o in zip(ns, offs, strict=True) if n in ok and o.isdigit() and len(o) < 19)
