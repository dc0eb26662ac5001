"""SQL92 filter expressions, as consumers send them (heartbeats, CHECK_CLIENT_CONFIG, pull subscriptions), and the
messages they are evaluated against.

The input is the expression's text, then (after the first ``\\x00``) a message's properties string. Property: the
text compiles or is refused with ``FilterExpressionError`` (an ``InvalidSubscriptionError``) saying where, within
the target's time limit; a compiled expression answers True or False for any properties, never raising, and the
same for the properties decoded from the bytes and read lazily off them (as the broker reads the commit log).
"""

from __future__ import annotations

from sluice.common.errors import FilterExpressionError
from sluice.common.properties import decode_properties
from sluice.filter import compile_sql92, key_value_to_sql92

from ._common import expect


def check(data: bytes) -> None:
    text_bytes, _, props_bytes = data.partition(b"\x00")
    text = text_bytes.decode("utf-8", errors="replace")
    if text.startswith("kv:"):  # the key=value filter turns into SQL92 first
        try:
            text = key_value_to_sql92(text[3:])
        except FilterExpressionError:
            return
    try:
        compiled = compile_sql92(text)
    except FilterExpressionError:
        return
    props = decode_properties(props_bytes)
    answer = compiled.matches(props)
    expect(answer in (True, False), f"matches() answered {answer!r}")
