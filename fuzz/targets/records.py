"""Message records: pull response bodies (``decode_records``), one stored record (``check_record``, what
recovery trusts, and ``decode_record``) and the compressed bodies a consumer inflates.

Property: each decoder returns or raises ``MessageFormatError``, and the compiled ones (``sluice._speedups``)
exactly as their pure-Python twins; a record ``check_record`` passes decodes,
with a body matching its CRC, into the same fields ``dispatch_request_of`` (recovery) reads; every decoded
message re-encodes (``encode_record``) to a record that decodes equal; inflation stays within its limit.
"""

from __future__ import annotations

from collections.abc import Callable

from sluice.common.compression import inflate
from sluice.common.errors import MessageFormatError
from sluice.common.message import MessageExt
from sluice.common.message_codec import (
    POS_BODY_CRC,
    RECORD_FIXED_SIZE,
    body_crc,
    check_record,
    decode_record,
    decode_records,
    encode_record,
    py_check_record,
    py_decode_records,
)
from sluice.common.properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
from sluice.common.speedups import speedups
from sluice.common.sysflag import BORNHOST_V6_FLAG, COMPRESSED_FLAG, STOREHOST_V6_FLAG
from sluice.store.commit_log import dispatch_request_of, tags_code_of

from ._common import PropertyViolation, expect

INFLATE_LIMIT = 64 * 1024


def _reencoded(m: MessageExt) -> bytes:
    return encode_record(topic=m.topic.encode(), body=m.body, properties=m._raw_properties, queue_id=m.queue_id,
                         flag=m.flag, queue_offset=m.queue_offset, physical_offset=m.commit_log_offset,
                         sys_flag=m.sys_flag, born_timestamp=m.born_timestamp, born_host=m.born_host,
                         store_timestamp=m.store_timestamp, store_host=m.store_host,
                         reconsume_times=m.reconsume_times, prepared_transaction_offset=m.prepared_transaction_offset)


def _check_message(m: MessageExt) -> None:
    props = MessageExt(**{**_fields(m), "properties": m._raw_properties}).properties  # decoded afresh
    expect(m.tags == props.get(PROPERTY_TAGS), "tags read from the raw properties disagree with the decoded ones")
    expect(m.uniq_key == props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), "uniq key disagrees")
    if len(m.topic.encode()) <= 127:  # a v1 record holds longer topics only when another writer wrote them
        again = decode_records(_reencoded(m))
        v6 = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
        expect(len(again) == 1 and again[0].replace(sys_flag=m.sys_flag, body_crc=m.body_crc) == m
               and again[0].sys_flag == m.sys_flag & ~v6 and again[0].body_crc == body_crc(m.body),
               f"re-encoded record decodes differently: {m!r}")
    if m.sys_flag & COMPRESSED_FLAG:
        try:
            out = inflate(m.body, INFLATE_LIMIT)
        except MessageFormatError:
            return
        expect(len(out) <= INFLATE_LIMIT, "inflated past its limit")


def _fields(m: MessageExt) -> dict[str, object]:
    return {name: getattr(m, name) for name in (
        "topic", "body", "queue_id", "flag", "queue_offset", "commit_log_offset", "sys_flag", "born_timestamp",
        "born_host", "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
        "store_size", "body_crc")}


def _check_stored(data: bytes, check_crc: bool) -> None:
    try:
        size = check_record(data, 0, len(data), check_crc)
    except MessageFormatError:
        return
    if size <= 0:
        return
    try:
        m = decode_record(data, 0)
    except MessageFormatError as exc:
        raise PropertyViolation(f"check_record passed a record decode_record refuses: {exc}") from exc
    expect(m.store_size == size, "check_record and decode_record disagree on the size")
    if check_crc:
        expect(int.from_bytes(data[POS_BODY_CRC:POS_BODY_CRC + 4], "big", signed=True) == body_crc(m.body),
               "check_record passed a body CRC mismatch")
    req = dispatch_request_of(0, memoryview(data)[:size])
    raw = m._raw_properties
    expect((req.topic, req.queue_id, req.size, req.queue_offset, req.sys_flag, req.store_timestamp)
           == (m.topic, m.queue_id, m.store_size, m.queue_offset, m.sys_flag, m.store_timestamp),
           "recovery's dispatch request disagrees with the decoded record")
    tags = m.tags
    expect(req.tags_code == tags_code_of(tags), "recovery's tags code disagrees")
    fresh = MessageExt(**{**_fields(m), "properties": raw}).properties
    expect(req.keys == fresh.get(PROPERTY_KEYS) and req.uniq_key == fresh.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
           "recovery's keys disagree with the decoded properties")


def _outcome(fn: Callable[..., object], *args: object) -> tuple[str, object]:
    try:
        return "ok", fn(*args)
    except MessageFormatError:
        return "refused", None


def _check_twins(data: bytes) -> None:
    """The compiled decoders against the Python ones, on the whole input and a record at a derived place."""
    if speedups is None:
        return
    expect(_outcome(decode_records, data) == _outcome(py_decode_records, data), "C and Python decode_records differ")
    pos = data[0] % (len(data) + 1) if data else 0
    for crc in (True, False):
        expect(_outcome(check_record, data, pos, len(data), crc) == _outcome(py_check_record, data, pos, len(data),
                                                                             crc), "C and Python check_record differ")


def check(data: bytes) -> None:
    _check_twins(data)
    try:
        msgs = decode_records(data)
    except MessageFormatError:
        msgs = []
    expect(sum(m.store_size for m in msgs) in (0, len(data)), "decoded records do not cover the body")
    expect(all(m.store_size >= RECORD_FIXED_SIZE for m in msgs), "a record smaller than the fixed part")
    for m in msgs:
        _check_message(m)
    _check_stored(data, True)
    _check_stored(data, False)
    try:
        one = decode_record(data, 0)
    except MessageFormatError:
        pass
    else:
        expect(decode_records(data[:one.store_size]) == [one], "decode_record and decode_records disagree")
    if data[:1] == b"\x78":  # a zlib header: the whole input as a compressed body too
        try:
            expect(len(inflate(data, INFLATE_LIMIT)) <= INFLATE_LIMIT, "inflated past its limit")
        except MessageFormatError:
            pass
