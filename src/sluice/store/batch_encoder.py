"""A whole batch body turned into stored records at once (RocketMQ's ``MessageExtEncoder`` for a
``MessageExtBatch``), with numpy doing the per-record work.

A batch record already holds a stored record's body and its ``PROPERTIESLENGTH PROPERTIES`` tail, so each
stored record is a new 88-byte header, the batch's body bytes, the topic and the batch's properties bytes:
nothing is decoded. What the ConsumeQueue and the IndexFile need of every record (TAGS, KEYS, UNIQ_KEY)
is found by searching the batch body for each property's marker once and keeping the hits that start a
property of some record's properties — the same answer ``property_value`` gives record by record.
"""

from __future__ import annotations

import re
import zlib
from functools import lru_cache
from itertools import chain, islice, repeat
from typing import Final, NamedTuple

import numpy as np

from sluice.common.batch_codec import BatchColumns
from sluice.common.hashing import index_key_hashes, java_string_hash, tag_hash_code
from sluice.common.message_codec import RECORD_HEADER
from sluice.common.properties import KEY_SEPARATOR, property_marker
from sluice.common.speedups import speedups

# RECORD_HEADER as a numpy record: everything up to and including BODYLENGTH.
HEADER_DTYPE: Final = np.dtype([
    ("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("phys", ">i8"), ("sys_flag", ">i4"), ("born_ts", ">i8"), ("born_host", "V8"),
    ("store_ts", ">i8"), ("store_host", "V8"), ("reconsume", ">i4"), ("prepared", ">i8"), ("body_len", ">i4"),
])
assert HEADER_DTYPE.itemsize == RECORD_HEADER.size
_SEPARATOR: Final = 2  # between properties
_MASK32: Final = 0xFFFFFFFF


class BatchBody:
    """A batch body with its layout, and where its records' properties lie."""

    __slots__ = ("data", "view", "arr", "cols", "props_start", "props_end", "_separators")

    def __init__(self, data: bytes, cols: BatchColumns) -> None:
        self.data = data
        self.view = memoryview(data)
        self.arr = np.frombuffer(data, dtype=np.uint8)
        self.cols = cols
        self.props_start = cols.props_len_pos + 2
        self.props_end = cols.end
        self._separators: np.ndarray | None = None

    def separators(self) -> np.ndarray:
        """Positions of every 0x02 byte, then the end of the body."""
        if self._separators is None:
            self._separators = np.append(np.flatnonzero(self.arr == _SEPARATOR), len(self.data))
        return self._separators

    def props_lengths(self) -> np.ndarray:
        return self.props_end - self.props_start

    def props_have_nul(self) -> bool:
        """Whether any record's properties hold a NUL byte: compiled, else ``bulk_props_have_nul``."""
        if speedups is None:
            return self.bulk_props_have_nul()
        return speedups.spans_hold_nul(self.data, np.ascontiguousarray(self.props_start, np.int64),
                                       np.ascontiguousarray(self.props_end, np.int64))

    def bulk_props_have_nul(self) -> bool:
        """``props_have_nul`` with numpy."""
        nonempty = self.props_end > self.props_start
        if not nonempty.any():
            return False
        is_nul = np.append(self.arr == 0, False)
        bounds = np.stack([self.props_start[nonempty], self.props_end[nonempty]], axis=1).ravel()
        return bool(np.logical_or.reduceat(is_nul, bounds)[::2].any())

    def property_spans(self, name: str) -> PropertySpans:
        """Where each record's value of property ``name`` lies (records without it left out; for a repeated
        name the last one wins, as in ``decode_properties``): the compiled search of each record's properties,
        else ``bulk_property_spans``."""
        if speedups is None:
            return self.bulk_property_spans(name)
        found = speedups.property_spans(self.data, np.ascontiguousarray(self.props_start, np.int64),
                                        np.ascontiguousarray(self.props_end, np.int64), property_marker(name))
        if not found[0]:
            return _NO_SPANS
        return PropertySpans(*(np.frombuffer(col, dtype=np.int64) for col in found))

    def bulk_property_spans(self, name: str) -> PropertySpans:
        """``property_spans`` in pure Python: one search of the whole body for the marker, the hits that start a
        property of some record kept (numpy), or record by record when the body is full of markers."""
        marker = property_marker(name)
        cap = 4 * self.cols.count + 64  # bodies full of markers: search each record's properties instead
        found = [m.start() for m in islice(_marker_pattern(marker).finditer(self.data), cap + 1)]
        if len(found) > cap:
            return self._spans_record_by_record(marker)
        if not found:
            return _NO_SPANS
        pos = np.array(found, dtype=np.int64)
        rec = np.searchsorted(self.props_start, pos, side="right") - 1
        rec_c = np.maximum(rec, 0)
        start_of = self.props_start[rec_c]
        ok = (rec >= 0) & (pos + len(marker) <= self.props_end[rec_c])
        ok &= (pos == start_of) | (self.arr[np.maximum(pos - 1, 0)] == _SEPARATOR)
        pos, rec = pos[ok], rec[ok]
        if len(pos) == 0:
            return _NO_SPANS
        last = np.append(rec[1:] != rec[:-1], True)
        pos, rec = pos[last], rec[last]
        start = pos + len(marker)
        seps = self.separators()
        end = np.minimum(seps[np.searchsorted(seps, start)], self.props_end[rec])
        return PropertySpans(rec, start, end)

    def _spans_record_by_record(self, marker: bytes) -> PropertySpans:
        """``property_spans`` searching only inside each record's properties (``property_value``'s way)."""
        data = self.data
        recs: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        for i, (lo, hi) in enumerate(zip(self.props_start.tolist(), self.props_end.tolist(), strict=True)):
            j = data.rfind(marker, lo, hi)
            while j > lo and data[j - 1] != _SEPARATOR:  # inside another property's value: look further back
                j = data.rfind(marker, lo, j)
            if j < 0:
                continue
            start = j + len(marker)
            end = data.find(b"\x02", start, hi)
            recs.append(i)
            starts.append(start)
            ends.append(hi if end < 0 else end)
        return PropertySpans(*(np.array(a, dtype=np.int64) for a in (recs, starts, ends)))

    def values(self, spans: PropertySpans) -> list[str]:
        """The property values ``spans`` point at, as ``property_value`` decodes them."""
        data = self.data
        return [data[s:e].decode("utf-8", errors="replace")
                for s, e in zip(spans.start.tolist(), spans.end.tolist(), strict=True)]


class PropertySpans(NamedTuple):
    record: np.ndarray  # which record
    start: np.ndarray  # the value's first byte in the batch body
    end: np.ndarray


_EMPTY = np.zeros(0, dtype=np.int64)
_NO_SPANS: Final = PropertySpans(_EMPTY, _EMPTY, _EMPTY)


def tags_codes(body: BatchBody) -> np.ndarray:
    """Every record's ConsumeQueue tags code (0 without TAGS)."""
    out = np.zeros(body.cols.count, dtype=np.int64)
    spans = body.property_spans("TAGS")
    if len(spans.record):
        out[spans.record] = [tag_hash_code(t) if t else 0 for t in body.values(spans)]
    return out


def index_entries(body: BatchBody, topic: str) -> tuple[np.ndarray, np.ndarray]:
    """(key hashes, record numbers) of the IndexFile entries of a batch: ``topic#UNIQ_KEY`` and ``topic#k``
    for every KEYS value, per record in that order."""
    prefix = topic + "#"
    uniq = body.property_spans("UNIQ_KEY")
    if (uniq.end == uniq.start).any():  # an empty UNIQ_KEY is not indexed
        uniq = PropertySpans(*(a[uniq.end > uniq.start] for a in uniq))
    uniq_hashes = _prefixed_hashes(body, prefix, uniq)
    keys = body.property_spans("KEYS")
    if len(keys.record) == 0:
        return uniq_hashes, uniq.record
    key_recs: list[int] = []
    key_strs: list[str] = []
    for rec, value in zip(keys.record.tolist(), body.values(keys), strict=True):
        for k in value.split(KEY_SEPARATOR):
            if k:
                key_recs.append(rec)
                key_strs.append(prefix + k)
    hashes = np.concatenate([uniq_hashes, index_key_hashes(key_strs)])
    recs = np.concatenate([uniq.record, np.array(key_recs, dtype=np.int64)])
    order = np.argsort(recs, kind="stable")  # per record: UNIQ_KEY first, then its keys
    return hashes[order], recs[order]


def _prefixed_hashes(body: BatchBody, prefix: str, spans: PropertySpans) -> np.ndarray:
    """``index_key_hash(prefix + value)`` of each span: compiled where the values are ASCII, else
    ``bulk_prefixed_hashes``."""
    if len(spans.record) and speedups is not None:
        found = speedups.prefixed_index_hashes(body.data, np.ascontiguousarray(spans.start, np.int64),
                                               np.ascontiguousarray(spans.end, np.int64),
                                               java_string_hash(prefix) & _MASK32)
        if found is not None:
            return np.frombuffer(found, dtype=np.int64)
    return bulk_prefixed_hashes(body, prefix, spans)


def bulk_prefixed_hashes(body: BatchBody, prefix: str, spans: PropertySpans) -> np.ndarray:
    """``_prefixed_hashes`` with numpy when the values are ASCII of one length, else key by key."""
    n = len(spans.record)
    if n == 0:
        return _EMPTY
    lengths = spans.end - spans.start
    width = int(lengths[0])
    if n < 4 or not (lengths == width).all() or not prefix.isascii():
        return index_key_hashes([prefix + v for v in body.values(spans)])
    units = body.arr[spans.start[:, None] + np.arange(width)]
    if (units >= 0x80).any():
        return index_key_hashes([prefix + v for v in body.values(spans)])
    head, pow31 = _hash_terms(prefix, width)
    h = ((units.astype(np.uint64) @ pow31) + head) & np.uint64(_MASK32)
    h = h.astype(np.int64)
    h = np.where(h >= 0x80000000, h - 0x100000000, h)
    return np.where(h == -0x80000000, 0, np.abs(h))


@lru_cache(maxsize=256)
def _hash_terms(prefix: str, width: int) -> tuple[np.uint64, np.ndarray]:
    """hash(prefix + v) = hash(prefix) * 31**len(v) + hash(v), mod 2**32: the first term, and the powers of 31
    that weigh each of ``width`` characters of v."""
    head = (java_string_hash(prefix) & _MASK32) * pow(31, width, 1 << 32) & _MASK32
    return np.uint64(head), np.array([pow(31, width - 1 - i, 1 << 32) for i in range(width)], dtype=np.uint64)


@lru_cache(maxsize=64)
def _marker_pattern(marker: bytes) -> re.Pattern[bytes]:
    return re.compile(re.escape(marker))


def stored_records(body: BatchBody, header: bytes, topic_tail: bytes, first_phys: int, first_queue_offset: int,
                   store_timestamp: int) -> bytes:
    """The stored records of a batch body: each record's ``header`` (the 88 bytes all share) with its own
    TOTALSIZE, BODYCRC, FLAG, QUEUEOFFSET (from ``first_queue_offset`` up), PHYSICALOFFSET (from ``first_phys``
    on), STORETIMESTAMP and BODYLENGTH, then its body, ``TOPICLENGTH TOPIC`` and its properties tail. In one
    compiled call, else ``bulk_stored_records``."""
    if speedups is None:
        return bulk_stored_records(body, header, topic_tail, first_phys, first_queue_offset, store_timestamp)
    cols = body.cols
    return speedups.encode_records(body.data, *(np.ascontiguousarray(c, np.int64) for c in cols), header,
                                   topic_tail, first_phys, first_queue_offset, store_timestamp)


def bulk_stored_records(body: BatchBody, header: bytes, topic_tail: bytes, first_phys: int,
                        first_queue_offset: int, store_timestamp: int) -> bytes:
    """``stored_records`` with numpy: the header fields of every record set column by column."""
    cols = body.cols
    n = cols.count
    sizes = record_sizes(cols, len(topic_tail))
    bodies = list(map(body.view.__getitem__, map(slice, cols.body_start.tolist(), cols.props_len_pos.tolist())))
    headers = np.empty(n, HEADER_DTYPE)
    headers[:] = np.frombuffer(header, HEADER_DTYPE)[0]
    headers["total"] = sizes
    headers["crc"] = np.fromiter(map(zlib.crc32, bodies), dtype=np.int64, count=n) & 0x7FFFFFFF
    headers["flag"] = cols.flag
    headers["body_len"] = cols.props_len_pos - cols.body_start
    headers["queue_offset"] = np.arange(first_queue_offset, first_queue_offset + n)
    headers["phys"] = first_phys + np.concatenate([_ZERO, np.cumsum(sizes)[:-1]])
    headers["store_ts"] = store_timestamp
    size = HEADER_DTYPE.itemsize
    hv = memoryview(headers.tobytes())
    heads = map(hv.__getitem__, map(slice, range(0, n * size, size), range(size, (n + 1) * size, size)))
    tails = map(body.view.__getitem__, map(slice, cols.props_len_pos.tolist(), cols.end.tolist()))
    return b"".join(chain.from_iterable(zip(heads, bodies, repeat(topic_tail), tails)))


def record_sizes(cols: BatchColumns, topic_tail_len: int) -> np.ndarray:
    """Each stored record's TOTALSIZE: the header, ``TOPICLENGTH TOPIC`` and the batch record's body and
    properties (with their lengths)."""
    return (HEADER_DTYPE.itemsize + topic_tail_len) + (cols.end - cols.body_start)


_ZERO = np.zeros(1, dtype=np.int64)


__all__ = ["HEADER_DTYPE", "BatchBody", "PropertySpans", "bulk_prefixed_hashes", "bulk_stored_records",
           "index_entries", "record_sizes", "stored_records", "tags_codes"]
