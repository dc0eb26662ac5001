"""The message properties string (``name \\x01 value`` pairs, ``\\x02``-separated) from records and headers.

Property: ``decode_properties`` reads any bytes; ``property_value`` and ``has_property`` (which read one
property off the bytes without decoding the rest) agree with it; a decoded dict re-encodes to bytes that
decode equal; a ``MessageExt`` answers ``tags`` / ``keys`` / ``uniq_key`` the same before and after it
decodes its properties.
"""

from __future__ import annotations

from sluice.common.message import MessageExt
from sluice.common.properties import decode_properties, encode_properties, has_property, property_value

from ._common import expect

_WELL_KNOWN = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "REAL_TOPIC", "MAX_RECONSUME_TIMES", "TRAN_MSG")


def _message(raw: bytes) -> MessageExt:
    return MessageExt("T", b"", 0, 0, 0, 0, 0, 0, "127.0.0.1:1", 0, "127.0.0.1:2", 0, 0, raw, 0, 0)


def check(data: bytes) -> None:
    props = decode_properties(data)
    for name in (*_WELL_KNOWN, *list(props)[:8]):
        if "\ufffd" in name:  # stands for bytes that were not UTF-8: no marker to search the bytes for
            continue
        expect(property_value(data, name) == props.get(name),
               f"property_value({name!r}) = {property_value(data, name)!r}, decoded {props.get(name)!r}")
        expect(has_property(data, name) == (name in props), f"has_property({name!r}) disagrees")
    expect(decode_properties(encode_properties(props)) == props, "properties do not survive a round trip")
    lazy, eager = _message(data), _message(data)
    eager.properties  # noqa: B018  # decoded now: the accessors below read the dict
    expect((lazy.tags, lazy.keys, lazy.uniq_key) == (eager.tags, eager.keys, eager.uniq_key),
           "MessageExt accessors differ before and after decoding the properties")
