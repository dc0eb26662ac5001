"""The stored / pulled message record (RocketMQ's v1 layout, as its ``MessageDecoder`` reads it, IPv4 hosts). Sans-IO.

``TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP BORNHOST
STORETIMESTAMP STOREHOST RECONSUMETIMES PREPAREDTRANSACTIONOFFSET BODYLENGTH BODY TOPICLENGTH TOPIC
PROPERTIESLENGTH PROPERTIES``, big-endian; 91 bytes plus body, topic and properties.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from functools import lru_cache
from types import ModuleType
from typing import Final

from sluice.common.errors import MessageFormatError
from sluice.common.message import MessageExt, bytes_to_host, host_to_bytes
from sluice.common.speedups import speedups
from sluice.common.sysflag import BLANK_MAGIC_CODE, BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE_V1, STOREHOST_V6_FLAG

# Everything up to and including BODYLENGTH.
RECORD_HEADER: Final = struct.Struct(">iiiiiqqiq4siq4siiqi")
RECORD_FIXED_SIZE: Final = RECORD_HEADER.size + 1 + 2  # 91
TOTAL_SIZE_AND_MAGIC: Final = struct.Struct(">ii")

POS_TOTAL_SIZE: Final = 0
POS_MAGIC: Final = 4
POS_BODY_CRC: Final = 8
POS_QUEUE_ID: Final = 12
POS_QUEUE_OFFSET: Final = 20
POS_PHYSICAL_OFFSET: Final = 28
POS_SYS_FLAG: Final = 36
POS_STORE_TIMESTAMP: Final = 56
POS_BODY_LENGTH: Final = 84
POS_BODY: Final = 88

_TOPIC_BYTES: Final = re.compile(rb"[%|a-zA-Z0-9_-]+")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_U8: Final = struct.Struct(">B")
_I16: Final = struct.Struct(">h")


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ's BODYCRC: CRC32 of the stored body masked to 31 bits."""
    return zlib.crc32(body) & 0x7FFFFFFF


def record_size(body_len: int, topic_len: int, props_len: int) -> int:
    return RECORD_FIXED_SIZE + body_len + topic_len + props_len


def encode_record(
    *,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: str = "127.0.0.1:0",
    store_timestamp: int = 0,
    store_host: str = "127.0.0.1:10911",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
) -> bytes:
    """Encode one record. ``topic`` and ``properties`` are already UTF-8 bytes."""
    if len(topic) > 127:
        raise MessageFormatError("topic longer than 127 bytes does not fit a v1 record")
    if len(properties) > 32767:
        raise MessageFormatError("properties longer than 32767 bytes do not fit a record")
    born_addr, born_port = host_to_bytes(born_host)
    store_addr, store_port = host_to_bytes(store_host)
    total = record_size(len(body), len(topic), len(properties))
    header = RECORD_HEADER.pack(
        total,
        MESSAGE_MAGIC_CODE_V1,
        body_crc(body),
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG),
        born_timestamp,
        born_addr,
        born_port,
        store_timestamp,
        store_addr,
        store_port,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    return b"".join((header, body, _U8.pack(len(topic)), topic, _I16.pack(len(properties)), properties))


def split_records(buf: bytes) -> list[bytes]:
    """Stored records laid end to end (a pull or pop body), one bytes each, by their TOTALSIZE words."""
    out: list[bytes] = []
    pos, end = 0, len(buf)
    while pos + 4 <= end:
        (size,) = _I32.unpack_from(buf, pos)
        if size < 4 or pos + size > end:
            raise MessageFormatError(f"record at {pos} of {size} bytes overruns the {end}-byte buffer")
        out.append(buf[pos:pos + size])
        pos += size
    return out


def py_check_record(buf: memoryview | bytes, pos: int, limit: int, check_crc: bool = True) -> int:
    """Validate the record at ``buf[pos:]`` without decoding it. ``0 <= pos <= limit <= len(buf)`` (the
    compiled twin raises ``ValueError`` otherwise).

    Returns its size; 0 for a clean end (zeroed bytes); -1 for a BLANK end-of-file filler; raises
    ``MessageFormatError`` for anything that is not a whole, intact record ending before ``limit``.
    """
    if pos + 8 > limit:
        return 0 if pos == limit or not any(bytes(buf[pos:limit])) else _bad("truncated record header")
    total: int
    total, magic = TOTAL_SIZE_AND_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if total != limit - pos:
            _bad(f"BLANK filler of {total} bytes where {limit - pos} remain")
        return -1
    if magic != MESSAGE_MAGIC_CODE_V1:
        if total == 0 and magic == 0:
            return 0
        _bad(f"bad magic code {magic:#x}")
    if total < RECORD_FIXED_SIZE or pos + total > limit:
        _bad(f"record size {total} out of bounds")
    body_len = _I32.unpack_from(buf, pos + POS_BODY_LENGTH)[0]
    if body_len < 0 or POS_BODY + body_len + 3 > total:
        _bad(f"body length {body_len} inconsistent with record size {total}")
    topic_len = buf[pos + POS_BODY + body_len]
    props_pos = pos + POS_BODY + body_len + 1 + topic_len
    if props_pos + 2 > pos + total:
        _bad("topic overruns the record")
    props_len = _I16.unpack_from(buf, props_pos)[0]
    if props_len < 0 or record_size(body_len, topic_len, props_len) != total:
        _bad("field lengths do not add up to the record size")
    # The body CRC does not cover topic and properties: check what a torn write (zeros) would break.
    if not _valid_topic_bytes(bytes(buf[pos + POS_BODY + body_len + 1 : props_pos])):
        _bad("topic bytes are not a valid topic name")
    if props_len and 0 in buf[props_pos + 2 : props_pos + 2 + props_len]:
        _bad("NUL byte in properties")
    if check_crc:
        stored_crc = _I32.unpack_from(buf, pos + POS_BODY_CRC)[0]
        if body_crc(buf[pos + POS_BODY : pos + POS_BODY + body_len]) != stored_crc:
            _bad("body CRC mismatch")
    return total


@lru_cache(maxsize=4096)
def _valid_topic_bytes(topic: bytes) -> bool:
    return _TOPIC_BYTES.fullmatch(topic) is not None


def _bad(reason: str) -> int:
    raise MessageFormatError(reason)


def decode_record(buf: memoryview | bytes, pos: int = 0) -> MessageExt:
    """Decode the v1 record at ``buf[pos:]`` into a ``MessageExt``."""
    if len(buf) - pos < 8:
        raise MessageFormatError(f"cannot decode record at {pos}: fewer than 8 bytes")
    total = _I32.unpack_from(buf, pos)[0]
    if total < RECORD_FIXED_SIZE or pos + total > len(buf):
        raise MessageFormatError(f"cannot decode record at {pos}: total size {total} does not fit")
    return decode_records(bytes(buf[pos:pos + total]))[0]


# RECORD_HEADER with each host as its 8 raw bytes (address, port), the key of the text form's cache.
_DECODE_HEADER: Final = struct.Struct(">iiiiiqqiq8sq8siqi")
_HOSTS: dict[bytes, str] = {}
_HOSTS_MAX = 4096


def _host8(raw: bytes) -> str:
    """``host:port`` of a record's 8-byte host field, remembered (a consumer sees few distinct hosts)."""
    text = _HOSTS.get(raw)
    if text is None:
        if len(_HOSTS) >= _HOSTS_MAX:
            _HOSTS.clear()
        text = _HOSTS[raw] = bytes_to_host(raw[:4], int.from_bytes(raw[4:], "big", signed=True))
    return text


@lru_cache(maxsize=4096)
def _topic_name(raw: bytes) -> str:
    return raw.decode("utf-8")


def py_decode_records(buf: memoryview | bytes) -> list[MessageExt]:
    """Decode a concatenation of whole records (a pull response body).

    ``decode_record`` inlined into one loop: this runs once per consumed message."""
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    out: list[MessageExt] = []
    add = out.append
    unpack = _DECODE_HEADER.unpack_from
    unpack_i16 = _I16.unpack_from
    hosts, host8, topic_name = _HOSTS, _host8, _topic_name
    last_raw, topic = b"", ""  # a pull's records share one topic: reuse the last one's name when it matches
    pos = 0
    n = len(buf)
    try:
        while pos < n:
            if pos + 8 > n:
                raise MessageFormatError("trailing bytes after the last record")
            (total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, born_raw,
             store_ts, store_raw, reconsume_times, prepared_tx_offset, body_len) = unpack(buf, pos)
            if magic != MESSAGE_MAGIC_CODE_V1:
                raise MessageFormatError(f"bad magic code {magic:#x} at {pos}")
            if total < RECORD_FIXED_SIZE or body_len < 0 or pos + total > n:
                raise MessageFormatError(f"record at {pos}: total size {total}, body length {body_len} do not fit")
            p = pos + POS_BODY
            body = buf[p:p + body_len]
            p += body_len
            topic_len = buf[p]
            if topic_len != len(last_raw) or not buf.startswith(last_raw, p + 1):
                last_raw = buf[p + 1:p + 1 + topic_len]
                topic = topic_name(last_raw)
            p += 1 + topic_len
            props_len = unpack_i16(buf, p)[0]
            p += 2
            if props_len < 0 or RECORD_FIXED_SIZE + body_len + topic_len + props_len != total:
                raise MessageFormatError(f"field lengths of the record at {pos} do not add up to its size")
            add(MessageExt(topic, body, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts,
                           hosts.get(born_raw) or host8(born_raw), store_ts, hosts.get(store_raw) or host8(store_raw),
                           reconsume_times, prepared_tx_offset, buf[p:p + props_len], total, crc))
            pos += total
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise MessageFormatError(f"cannot decode record at {pos}: {exc}") from exc
    return out


def _c_decode_records(buf: memoryview | bytes) -> list[MessageExt]:
    """``py_decode_records`` in C."""
    return c_decode_records(buf, _HOSTS)


def _c_message_type(compiled: ModuleType) -> bool:
    """Whether the compiled decoder can build ``MessageExt`` (it fills its slots; a changed class keeps Python)."""
    try:
        compiled.message_type(MessageExt, _host8)
    except TypeError:
        return False
    return True


if speedups is not None and _c_message_type(speedups):
    c_decode_records: Callable[[memoryview | bytes, dict[bytes, str]], list[MessageExt]] = speedups.decode_records
    decode_records = _c_decode_records
    check_record = speedups.check_record
else:
    decode_records = py_decode_records
    check_record = py_check_record
