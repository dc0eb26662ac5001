"""A stored message's light queues (RocketMQ's LmqDispatch): INNER_MULTI_DISPATCH names them, and the broker writes
the message's offset in each into INNER_MULTI_QUEUE_OFFSET, in the same order."""

from __future__ import annotations

from collections.abc import Mapping

from sluice.common.naming import is_lmq
from sluice.common.properties import (
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    property_value,
)


def lmq_entries(props: Mapping[str, str] | bytes) -> tuple[tuple[str, int], ...]:
    """A stored record's light queues and its offsets in them (INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET);
    () when it has none (or they do not pair up: nothing is dispatched from them)."""
    if isinstance(props, bytes):
        names = property_value(props, PROPERTY_INNER_MULTI_DISPATCH)
        offsets = property_value(props, PROPERTY_INNER_MULTI_QUEUE_OFFSET) if names else None
    else:
        names = props.get(PROPERTY_INNER_MULTI_DISPATCH)
        offsets = props.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET) if names else None
    if not names or not offsets:
        return ()
    ns, offs = names.split(","), offsets.split(",")
    if len(ns) != len(offs):
        return ()
    return tuple((n, int(o)) for n, o in zip(ns, offs, strict=True) if is_lmq(n) and o.isdigit() and len(o) < 19)
