"""Remoting bodies in RocketMQ's fastjson dialect (``fastjson.loads``): bare number keys, object keys.

Property: any bytes parse or raise ``FastjsonDecodeError``; what orjson reads as standard JSON the fallback
parser reads the same (it is what reads every fastjson body), integers past 64 bits aside (``_same``); a
value ``dumps`` can write (finite numbers, nesting within its limit) reads back equal.
"""

from __future__ import annotations

import math
from typing import Any

from sluice.common import fastjson

from ._common import expect

_DUMPS_DEPTH = 200


def _writable(value: Any, depth: int = 0) -> bool:
    """Whether ``dumps`` writes ``value``: finite floats, nesting within its limit."""
    if depth > _DUMPS_DEPTH:
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_writable(k, depth + 1) and _writable(v, depth + 1) for k, v in value.items())
    if isinstance(value, fastjson.ObjectKey):
        return _writable(dict(value), depth)
    if isinstance(value, list):
        return all(_writable(v, depth + 1) for v in value)
    return True


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same JSON types (1 == 1.0 == True in Python, not in JSON).

    orjson reads an integer beyond 64 bits as the nearest float, where ``json`` keeps it exact: no RocketMQ
    field is wider than a Java long, so either reading is taken."""
    if isinstance(a, float) and type(b) is int and not -(2**63) <= b < 2**64:
        return a == float(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def check(data: bytes) -> None:
    try:
        value = fastjson.loads(data)
    except fastjson.FastjsonDecodeError:
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        try:
            fallback = fastjson._Parser(text).document()
        except fastjson.FastjsonDecodeError:
            fallback = None  # deeper than the fallback parser goes: orjson read it
        else:
            expect(_same(value, fallback), f"orjson and the fastjson parser disagree: {value!r} vs {fallback!r}")
    if _writable(value):
        again = fastjson.loads(fastjson.dumps(value))
        expect(_same(again, value), f"dumps/loads round trip changed {value!r} into {again!r}")
