"""Bounded zlib inflation: a compressed body never grows past the limit its reader sets (no zip bombs)."""

from __future__ import annotations

import zlib

from sluice.common.errors import MessageFormatError

# What a consumer (or any reader of stored messages) lets one compressed body grow to: four times the largest
# message a broker accepts. Past it the body is delivered as stored, with a warning.
MAX_INFLATED_BODY_SIZE = 16 * 1024 * 1024


def inflate(data: bytes | bytearray | memoryview, limit: int, what: str = "compressed body") -> bytes:
    """``data`` inflated, at most ``limit`` bytes; ``MessageFormatError`` naming ``what`` when it does not
    inflate, inflates to more than ``limit`` bytes, or is truncated. Never holds more than ``limit`` + 1 bytes."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(bytes(data), limit + 1)
    except zlib.error as exc:
        raise MessageFormatError(f"{what} does not inflate: {exc}") from None
    if len(out) > limit:
        raise MessageFormatError(f"{what} inflates to more than {limit} bytes")
    if not inflater.eof:
        raise MessageFormatError(f"{what} is truncated")
    return out
