"""The batch body of SEND_MESSAGE / SEND_BATCH_MESSAGE (spec §5.2). Sans-IO.

Records are concatenated, each ``TOTALSIZE MAGICCODE(0) BODYCRC(0) FLAG BODYLENGTH BODY PROPERTIESLENGTH
PROPERTIES``, big-endian, TOTALSIZE = 20 + body + 2 + properties. The broker decodes with ``decode_batch``;
the client encodes with ``encode_batch`` (``sluice.client.batch`` adds RocketMQ's batch rules on top).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from sluice.common.errors import MessageFormatError
from sluice.common.properties import decode_properties, encode_properties

_HEAD: Final = struct.Struct(">iiiii")  # TOTALSIZE MAGICCODE BODYCRC FLAG BODYLENGTH
_PROPS_LEN: Final = struct.Struct(">h")
BATCH_RECORD_OVERHEAD: Final = _HEAD.size + _PROPS_LEN.size  # 22
MAX_PROPERTIES_SIZE: Final = 32767


@dataclass(slots=True)
class BatchItem:
    """One message of a batch: what the producer chose per message. Topic, queue and timestamps come from
    the request header."""

    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0


def encode_batch_record(body: bytes, properties: bytes, flag: int = 0) -> bytes:
    """One record; ``properties`` is the already encoded properties string."""
    if len(properties) > MAX_PROPERTIES_SIZE:
        raise MessageFormatError(f"batch message properties are {len(properties)} bytes, over {MAX_PROPERTIES_SIZE}")
    total = BATCH_RECORD_OVERHEAD + len(body) + len(properties)
    return b"".join((_HEAD.pack(total, 0, 0, flag, len(body)), body, _PROPS_LEN.pack(len(properties)), properties))


def encode_batch(items: Iterable[BatchItem]) -> bytes:
    """The batch body for ``items``."""
    return b"".join(encode_batch_record(it.body, encode_properties(it.properties), it.flag) for it in items)


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchItem]:
    """Every message of a batch body. Raises ``MessageFormatError`` (with the byte position) on bad input.

    Each record's TOTALSIZE must agree with its lengths; an empty body decodes to ``[]``.
    """
    buf = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    end = len(buf)
    out: list[BatchItem] = []
    pos = 0
    unpack_head = _HEAD.unpack_from
    unpack_props_len = _PROPS_LEN.unpack_from
    while pos < end:
        if end - pos < BATCH_RECORD_OVERHEAD:
            raise MessageFormatError(f"batch body truncated at byte {pos}: {end - pos} bytes left, "
                                     f"a record needs at least {BATCH_RECORD_OVERHEAD}")
        total, _magic, _crc, flag, body_len = unpack_head(buf, pos)
        if body_len < 0 or total < BATCH_RECORD_OVERHEAD or total > end - pos:
            raise MessageFormatError(f"batch record at byte {pos}: total size {total}, body length {body_len} "
                                     f"do not fit the {end - pos} bytes left")
        body_start = pos + _HEAD.size
        props_len_pos = body_start + body_len
        if props_len_pos + _PROPS_LEN.size > pos + total:
            raise MessageFormatError(f"batch record at byte {pos}: body length {body_len} overruns total size {total}")
        (props_len,) = unpack_props_len(buf, props_len_pos)
        if props_len < 0 or BATCH_RECORD_OVERHEAD + body_len + props_len != total:
            raise MessageFormatError(f"batch record at byte {pos}: total size {total} disagrees with body length "
                                     f"{body_len} + properties length {props_len} + {BATCH_RECORD_OVERHEAD}")
        props_start = props_len_pos + _PROPS_LEN.size
        body = bytes(buf[body_start:props_len_pos])
        props = decode_properties(bytes(buf[props_start:props_start + props_len])) if props_len else {}
        out.append(BatchItem(body, props, flag))
        pos += total
    return out


def inflate_batch(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """A zlib-compressed batch body, inflated (at most ``limit`` bytes). Raises ``MessageFormatError``.

    The C++ 1.2.x producer compresses a whole batch body of 4 KiB or more and sets the compressed bit of the
    request's sysFlag; the records inside are not compressed one by one.
    """
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(bytes(data), limit + 1)
    except zlib.error as exc:
        raise MessageFormatError(f"compressed batch body does not inflate: {exc}") from None
    if len(out) > limit:
        raise MessageFormatError(f"compressed batch body inflates to more than {limit} bytes")
    if not inflater.eof:
        raise MessageFormatError("compressed batch body is truncated")
    return out


__all__ = [
    "BATCH_RECORD_OVERHEAD",
    "MAX_PROPERTIES_SIZE",
    "BatchItem",
    "decode_batch",
    "encode_batch",
    "encode_batch_record",
    "inflate_batch",
]
