"""REGISTER_BROKER bodies at the name server: plain fastjson JSON, or one zlib stream of length-prefixed
parts (``decode_register_broker_body``).

Property: a body decodes or raises ``BodyFormatError``, never more than its inflation limit held; what
decodes re-encodes (plain JSON, which carries every field) to a body that decodes equal. The first byte
picks the form: plain, the rest as a zlib stream, or the rest compressed here first (so that mutations
reach the parts inside the stream).
"""

from __future__ import annotations

import zlib

from sluice.namesrv.register_broker_body import (
    BodyFormatError,
    RegisterBrokerBody,
    decode_register_broker_body,
    encode_register_broker_body,
)

from ._common import expect


def _decode(body: bytes, compressed: bool) -> RegisterBrokerBody | None:
    try:
        return decode_register_broker_body(body, compressed)
    except BodyFormatError:
        return None


def check(data: bytes) -> None:
    if not data:
        return
    mode, rest = data[0] % 3, data[1:]
    if mode == 0:
        got = _decode(rest, False)
    elif mode == 1:
        got = _decode(rest, True)
    else:
        got = _decode(zlib.compress(rest), True)
    if got is None:
        return
    wrapper, filters = got.topic_config_wrapper, got.filter_server_list
    expect(all(isinstance(f, str) for f in filters), "a filter server that is not a string")
    for name, tc in wrapper.topic_config_table.items():
        expect(name == tc.topic_name, f"topic {tc.topic_name!r} filed under {name!r}")
        expect(all(type(v) is int for v in (tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)),
               f"topic config with a field that is not an int: {tc!r}")
    again = _decode(encode_register_broker_body(wrapper, filters), False)
    expect(again == got, f"re-encoded body decodes differently: {got!r} -> {again!r}")
