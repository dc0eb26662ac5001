"""Batch bodies of SEND_BATCH_MESSAGE: ``scan_batch_columns`` / ``decode_batch``, ``inflate_batch`` for the C++
client's compressed batches, and what the store computes from a body without decoding it (``batch_encoder``).

Property: a body scans (compiled and pure-Python alike) or raises ``MessageFormatError``, exactly when a
record-by-record reading of the format (``reference_scan``) accepts or refuses it, into the same layout; the
bulk property search (TAGS, KEYS, UNIQ_KEY, DELAY), tags codes and index hashes equal what ``property_value``
gives record by record; the stored records built from the body pass ``check_record`` and decode to the batch's
bodies and properties; the compiled property search equals its pure-Python twin.
"""

from __future__ import annotations

import struct

from sluice.common.batch_codec import (
    BATCH_RECORD_OVERHEAD,
    decode_batch,
    inflate_batch,
    py_scan_batch_columns,
    scan_batch_columns,
)
from sluice.common.errors import MessageFormatError
from sluice.common.hashing import index_key_hash, tag_hash_code
from sluice.common.message import host_to_bytes
from sluice.common.message_codec import RECORD_HEADER, body_crc, check_record, decode_records
from sluice.common.properties import decode_properties, property_value
from sluice.common.sysflag import MESSAGE_MAGIC_CODE_V1
from sluice.store.batch_encoder import BatchBody, bulk_stored_records, index_entries, stored_records, tags_codes

from ._common import expect

INFLATE_LIMIT = 64 * 1024
TOPIC = "FuzzTopic"
_HEAD = struct.Struct(">iiiii")
_PROPS_LEN = struct.Struct(">h")
_NAMES = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY")


def reference_scan(data: bytes) -> list[tuple[int, int, int, int]] | None:
    """(body start, properties length position, end, flag) of each record, read one at a time as the
    ``batch_codec`` docstring lays the format out; None where that reading refuses the body."""
    out = []
    pos, n = 0, len(data)
    while pos < n:
        if n - pos < BATCH_RECORD_OVERHEAD:
            return None
        total, _magic, _crc, flag, body_len = _HEAD.unpack_from(data, pos)
        if total < BATCH_RECORD_OVERHEAD or total > n - pos or body_len < 0 or body_len + BATCH_RECORD_OVERHEAD > total:
            return None
        (props_len,) = _PROPS_LEN.unpack_from(data, pos + _HEAD.size + body_len)
        if props_len < 0 or BATCH_RECORD_OVERHEAD + body_len + props_len != total:
            return None
        out.append((pos + _HEAD.size, pos + _HEAD.size + body_len, pos + total, flag))
        pos += total
    return out


def _stored_records(body: BatchBody) -> bytes:
    """The records ``CommitLog.append_raw_batch`` writes for ``body`` (its header fields, here at offset 0), by the
    compiled encoder in use and by its numpy twin, which must agree."""
    topic_b = TOPIC.encode()
    addr, port = host_to_bytes("127.0.0.1:10911")
    header = RECORD_HEADER.pack(0, MESSAGE_MAGIC_CODE_V1, 0, 0, 0, 0, 0, 0, 0, addr, port, 0, addr, port, 0, 0, 0)
    tail = bytes([len(topic_b)]) + topic_b
    records = stored_records(body, header, tail, 0, 0, 0)
    twin = bulk_stored_records(body, header, tail, 0, 0, 0)
    expect(records == twin, "the compiled and the numpy batch encoders disagree")
    return records


def _check_body(data: bytes) -> None:
    ref = reference_scan(data)
    if scan_batch_columns is not py_scan_batch_columns:  # the compiled scan in use: its twin agrees
        try:
            twin = py_scan_batch_columns(data).records()
        except MessageFormatError:
            twin = None
        expect(twin == ref, "the Python scan_batch_columns disagrees with the format")
    try:
        cols = scan_batch_columns(data)
    except MessageFormatError:
        expect(ref is None, "scan_batch_columns refused a body the format allows")
        return
    expect(ref is not None and cols.records() == ref, f"scan_batch_columns layout {cols.records()} != {ref}")
    assert ref is not None
    props = [data[p + 2:end] for _, p, end, _ in ref]
    items = decode_batch(data)
    expect([(it.body, it.properties, it.flag) for it in items]
           == [(data[b:p], decode_properties(pr), f) for (b, p, _, f), pr in zip(ref, props, strict=True)],
           "decode_batch disagrees with the layout")
    body = BatchBody(data, cols)
    for name in _NAMES:
        spans = body.property_spans(name)
        got = dict(zip(spans.record.tolist(), body.values(spans), strict=True))
        want = {i: v for i, pr in enumerate(props) if (v := property_value(pr, name)) is not None}
        expect(got == want, f"property search for {name}: {got} != record by record {want}")
        bulk = body.bulk_property_spans(name)  # (the pure-Python twin of the compiled search in use)
        expect([a.tolist() for a in bulk] == [a.tolist() for a in spans], f"the two searches for {name} disagree")
    want_tags = [tag_hash_code(t) if (t := property_value(pr, "TAGS")) else 0 for pr in props]
    expect(tags_codes(body).tolist() == want_tags, "tags codes disagree with property_value")
    hashes, recs = index_entries(body, TOPIC)
    want_index: list[tuple[int, int]] = []
    for i, pr in enumerate(props):
        uniq, keys = property_value(pr, "UNIQ_KEY"), property_value(pr, "KEYS")
        want_index += [(index_key_hash(f"{TOPIC}#{uniq}"), i)] if uniq else []
        want_index += [(index_key_hash(f"{TOPIC}#{k}"), i) for k in (keys or "").split(" ") if k]
    expect(list(zip(hashes.tolist(), recs.tolist(), strict=True)) == want_index, "index entries disagree")
    has_nul = any(0 in pr for pr in props)
    expect(body.props_have_nul() == has_nul, "props_have_nul disagrees")
    expect(body.bulk_props_have_nul() == has_nul, "bulk_props_have_nul disagrees")
    if not ref or has_nul:  # the store refuses both before writing
        return
    stored = _stored_records(body)
    pos = 0
    for _ in ref:
        size = check_record(stored, pos, len(stored))
        expect(size > 0, "a stored record of the batch is not a record")
        pos += size
    expect(pos == len(stored), "stored records do not cover what was written")
    msgs = decode_records(stored)
    expect([(m.body, m._raw_properties, m.flag, m.topic) for m in msgs]
           == [(data[b:p], pr, f, TOPIC) for (b, p, _, f), pr in zip(ref, props, strict=True)],
           "stored records disagree with the batch")
    expect(all(m.body_crc == body_crc(m.body) for m in msgs), "stored record with a wrong body CRC")


def check(data: bytes) -> None:
    if not data:
        return
    if data[0] & 1:  # the C++ client's compressed batch
        try:
            inflated = inflate_batch(data[1:], INFLATE_LIMIT)
        except MessageFormatError:
            return
        expect(len(inflated) <= INFLATE_LIMIT, "inflated past its limit")
        _check_body(inflated)
    else:
        _check_body(data[1:])
