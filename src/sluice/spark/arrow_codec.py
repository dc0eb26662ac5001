"""Stored message records ↔ Arrow columns, in bulk. Plain Python over numpy and pyarrow (no pyspark).

Reading: a pull response body is a run of stored records (``sluice.common.message_codec``). Instead of
decoding each record into a ``MessageExt``, ``records_to_batch`` finds where the records start (one small
Python step per record), then gathers every fixed-width field with numpy and cuts bodies and properties
out of the buffer with one Arrow ``take``; tags, keys and the message id come out of the properties strings
with vectorised regular expressions.

Writing: ``encode_batches`` turns an Arrow batch of rows (``value`` and optional ``keys``, ``tags``,
``topic``, ``properties``) into SEND_BATCH_MESSAGE bodies (``sluice.common.batch_codec`` records) with
Arrow string kernels, every message carrying its deterministic write key.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.client.message import RESERVED_PROPERTY_KEYS
from sluice.common.batch_codec import BATCH_RECORD_OVERHEAD
from sluice.common.compression import MAX_INFLATED_BODY_SIZE, inflate
from sluice.common.errors import MessageFormatError
from sluice.common.message_codec import (
    POS_BODY,
    POS_BODY_LENGTH,
    POS_PHYSICAL_OFFSET,
    POS_QUEUE_OFFSET,
    POS_STORE_TIMESTAMP,
    POS_SYS_FLAG,
    RECORD_FIXED_SIZE,
)
from sluice.common.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from sluice.common.sysflag import COMPRESSED_FLAG, MESSAGE_MAGIC_CODE_V1

WRITE_KEY_PROPERTY = "SPARK_WRITE_KEY"
"""The property every message written by the Spark sink carries: ``<sinkId>:<batchId>:<partition>:<seq>``."""

POS_MAGIC = 4
POS_BORN_TIMESTAMP = 40
POS_STORE_HOST = 64

_TOTAL = struct.Struct(">i")
_HEX = np.frombuffer(b"0123456789ABCDEF", np.uint8)
_TIMESTAMP = pa.timestamp("us", tz="UTC")

def arrow_schema(include_properties: bool) -> pa.Schema:
    """The Arrow schema of the rows ``records_to_batch`` builds: what Spark maps the source's schema
    (``datasource.source_schema``) to, and checks every batch against."""
    fields = [pa.field("topic", pa.string()), pa.field("broker", pa.string()), pa.field("queue_id", pa.int32()),
              pa.field("queue_offset", pa.int64()), pa.field("msg_id", pa.string()), pa.field("keys", pa.string()),
              pa.field("tags", pa.string()), pa.field("value", pa.binary()),
              pa.field("born_timestamp", _TIMESTAMP), pa.field("store_timestamp", _TIMESTAMP)]
    if include_properties:
        fields.append(pa.field("properties", pa.map_(pa.string(), pa.string())))
    return pa.schema(fields)


# == reading ======================================================================================
def record_starts(buf: bytes | memoryview) -> np.ndarray:
    """Where each record of a concatenation of whole records starts (checks that the sizes add up).

    Records of one size (a stream of fixed-size messages) are found without walking them: if the first
    record's size divides the buffer and every multiple of it holds that same size, those multiples are the
    walk's positions (each record's size leads to the next). Otherwise one step per record."""
    end = len(buf)
    if end >= 4:
        first = _TOTAL.unpack_from(buf, 0)[0]
        if first >= RECORD_FIXED_SIZE and end % first == 0:
            guess = np.arange(0, end, first, dtype=np.int64)
            if (np.ndarray((len(guess),), ">i4", buffer=buf, strides=(first,)) == first).all():
                return guess
    starts: list[int] = []
    append = starts.append
    unpack = _TOTAL.unpack_from
    pos = 0
    try:
        while pos < end:
            append(pos)
            size = unpack(buf, pos)[0]
            if size < RECORD_FIXED_SIZE:
                raise MessageFormatError(f"record at byte {pos} has size {size}")
            pos += size
    except struct.error:
        raise MessageFormatError(f"truncated record at byte {pos}") from None
    if pos != end:
        raise MessageFormatError(f"the last record overruns the buffer ({pos} > {end})")
    return np.asarray(starts, dtype=np.int64)


class _BigEndian:
    """Big-endian integers read at any byte position of a buffer: one unaligned view per width (each element
    ``i`` of the ``>i4`` view is the 4 bytes at ``buf[i:i + 4]``), so reading a field of n records is one take
    of n elements."""

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        self._views: dict[str, np.ndarray] = {}

    def at(self, pos: np.ndarray, dtype: str) -> np.ndarray:
        view = self._views.get(dtype)
        if view is None:
            width = np.dtype(dtype).itemsize
            view = np.ndarray((max(len(self.buf) - width + 1, 0),), dtype=dtype, buffer=self.buf, strides=(1,))
            self._views[dtype] = view
        try:
            values: np.ndarray = view[pos]
        except IndexError:
            raise MessageFormatError("a record's fields run past the end of the buffer") from None
        return values.astype(np.int64)


def _slices(buf: pa.Buffer, begin: np.ndarray, end: np.ndarray) -> pa.Array:
    """The byte ranges ``[begin[i], end[i])`` of ``buf`` as a compact binary array (one Arrow take)."""
    n = len(begin)
    if n == 0:
        return pa.array([], pa.binary())
    offsets = np.empty(2 * n, dtype=np.int32)
    offsets[0::2] = begin
    offsets[1::2] = end
    # Element 2i is the wanted range, element 2i+1 the bytes between it and the next one.
    interleaved = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(offsets), buf])
    return interleaved.take(pa.array(np.arange(0, 2 * n - 1, 2, dtype=np.int64)))


def _offsets(arr: pa.Array) -> np.ndarray:
    """The value offsets of a binary / string array (int64, ``len(arr) + 1`` of them)."""
    raw = np.frombuffer(arr.buffers()[1], dtype=np.int32)
    return raw[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)


def _offset_msg_ids(a: np.ndarray, starts: np.ndarray) -> pa.Array:
    """RocketMQ's offset message ids (store host + port + commit-log offset, 32 upper-case hex digits)."""
    n = len(starts)
    raw = np.concatenate([a[(starts + POS_STORE_HOST)[:, None] + np.arange(8)],
                          a[(starts + POS_PHYSICAL_OFFSET)[:, None] + np.arange(8)]], axis=1)
    text = np.empty((n, 32), dtype=np.uint8)
    text[:, 0::2] = _HEX[raw >> 4]
    text[:, 1::2] = _HEX[raw & 15]
    offsets = np.arange(0, 32 * n + 1, 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text.tobytes())])


class _Properties:
    """The properties strings of n records split into (row, name, value) triples, in bulk.

    Like Java's parser: pairs are separated by ``\x02``, a name from its value by the first ``\x01``;
    segments without a name are skipped, and a name given twice keeps its last value.
    """

    def __init__(self, props: pa.Array) -> None:
        n = len(props)
        self.n = n
        lists = pc.split_pattern(props, PROPERTY_SEPARATOR)
        counts = np.diff(_offsets(lists))
        flat = lists.flatten()
        bounds = _offsets(flat)
        sep = pc.find_substring(flat, NAME_VALUE_SEPARATOR).to_numpy(zero_copy_only=False).astype(np.int64)
        ok = sep > 0
        rows = np.repeat(np.arange(n, dtype=np.int64), counts)[ok]
        begin, end, sep = bounds[:-1][ok], bounds[1:][ok], (bounds[:-1] + sep)[ok]
        data = flat.buffers()[2]
        self.rows = rows
        self.names = _to_string(_slices(data, begin, sep)) if len(rows) else pa.array([], pa.string())
        self.values = _to_string(_slices(data, sep + 1, end)) if len(rows) else pa.array([], pa.string())

    def pick(self, name: str) -> pa.Array:
        """One property of every row (null where a row lacks it)."""
        hits = np.flatnonzero(pc.equal(self.names, name).to_numpy(zero_copy_only=False))
        index = np.full(self.n, -1, dtype=np.int64)
        index[self.rows[hits]] = hits
        return self.values.take(pa.array(index, mask=index < 0))

    def user_map(self) -> pa.MapArray:
        """Each row's user properties (system names such as TAGS, KEYS, UNIQ_KEY left out) as a map."""
        keep = pc.invert(pc.is_in(self.names, _RESERVED)).to_numpy(zero_copy_only=False)
        counts = np.bincount(self.rows[keep], minlength=self.n)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        mask = pa.array(keep)
        return pa.MapArray.from_arrays(pa.array(offsets), self.names.filter(mask), self.values.filter(mask))


_RESERVED = pa.array(sorted(RESERVED_PROPERTY_KEYS), pa.string())


def _to_string(arr: pa.Array) -> pa.Array:
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: decode as Java does, replacing bad bytes
        return pa.array([None if v is None else v.decode("utf-8", errors="replace") for v in arr.to_pylist()],
                        pa.string())


@dataclass(slots=True)
class DecodedRecords:
    """What ``records_to_batch`` found: the rows, and the queue offset and sys flag of each."""

    batch: pa.RecordBatch
    queue_offsets: np.ndarray


def records_to_batch(buf: bytes | memoryview, topic: str, broker: str, queue_id: int, include_properties: bool,
                     schema: pa.Schema | None = None) -> DecodedRecords:
    """Decode a concatenation of stored records of one queue into one Arrow record batch of source rows."""
    schema = schema or arrow_schema(include_properties)
    starts = record_starts(buf)
    n = len(starts)
    if n == 0:
        return DecodedRecords(pa.RecordBatch.from_pylist([], schema=schema), np.empty(0, np.int64))
    a = np.frombuffer(buf, dtype=np.uint8)
    be = _BigEndian(buf)
    magic = be.at(starts + POS_MAGIC, ">i4")
    if not (magic == MESSAGE_MAGIC_CODE_V1).all():
        bad = int(starts[np.argmax(magic != MESSAGE_MAGIC_CODE_V1)])
        raise MessageFormatError(f"record at byte {bad} has a bad magic code")
    queue_offsets = be.at(starts + POS_QUEUE_OFFSET, ">i8")
    sys_flags = be.at(starts + POS_SYS_FLAG, ">i4")
    born = be.at(starts + POS_BORN_TIMESTAMP, ">i8")
    stored = be.at(starts + POS_STORE_TIMESTAMP, ">i8")
    body_len = be.at(starts + POS_BODY_LENGTH, ">i4")
    body_begin = starts + POS_BODY
    body_end = body_begin + body_len
    if (body_len < 0).any() or (body_end >= len(a)).any():
        raise MessageFormatError("a record's body runs past the end of the buffer")
    topic_len = a[body_end].astype(np.int64)
    props_len_pos = body_end + 1 + topic_len
    props_len = be.at(props_len_pos, ">i2")
    props_begin = props_len_pos + 2
    props_end = props_begin + props_len
    sizes = be.at(starts, ">i4")
    if (props_len < 0).any() or not (props_end == starts + sizes).all():
        raise MessageFormatError("field lengths do not add up to the record sizes")

    pbuf = pa.py_buffer(buf)
    bodies = _slices(pbuf, body_begin, body_end)
    if (sys_flags & COMPRESSED_FLAG).any():  # the producer zlib-compressed these bodies
        values = bodies.to_pylist()
        for i in np.flatnonzero(sys_flags & COMPRESSED_FLAG).tolist():
            with contextlib.suppress(MessageFormatError):  # else delivered as stored, as the client's consumers do
                values[i] = inflate(values[i], MAX_INFLATED_BODY_SIZE)
        bodies = pa.array(values, pa.binary())
    props = _Properties(_slices(pbuf, props_begin, props_end))
    msg_ids = props.pick(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if msg_ids.null_count:  # no UNIQ_KEY: the offset message id (only for the rows that lack one)
        lacking = np.flatnonzero(msg_ids.is_null().to_numpy(zero_copy_only=False))
        index = np.full(n, -1, dtype=np.int64)
        index[lacking] = np.arange(len(lacking))
        msg_ids = pc.coalesce(msg_ids, _offset_msg_ids(a, starts[lacking]).take(pa.array(index, mask=index < 0)))
    columns: list[pa.Array] = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(broker, pa.string()), n),
        pa.array(np.full(n, queue_id, dtype=np.int32)),
        pa.array(queue_offsets),
        msg_ids,
        props.pick(PROPERTY_KEYS),
        props.pick(PROPERTY_TAGS),
        bodies,
        pa.array(born * 1000).view(_TIMESTAMP),
        pa.array(stored * 1000).view(_TIMESTAMP),
    ]
    if include_properties:
        columns.append(props.user_map().cast(schema.field("properties").type))
    return DecodedRecords(pa.RecordBatch.from_arrays(columns, schema=schema), queue_offsets)


# == writing ======================================================================================
_HEADER = np.dtype([("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("flag", ">i4"), ("body_len", ">i4")])


class RowError(ValueError):
    """A row the sink cannot turn into a message; the message names the column."""


@dataclass(slots=True)
class EncodedChunk:
    """One SEND_BATCH_MESSAGE worth of rows for one topic."""

    topic: str
    body: bytes
    count: int


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    i = batch.schema.get_field_index(name)
    return None if i < 0 else batch.column(i)


def _check_no_separators(arr: pa.Array, column: str) -> None:
    bad = pc.any(pc.match_substring_regex(arr, "[\\x01\\x02]")).as_py()
    if bad:
        raise RowError(f"column '{column}' holds \\x01 or \\x02 characters, which message properties cannot carry")


def _properties_text(props: pa.MapArray) -> pa.Array:
    """Each row's map as ``name\\x01value`` pairs joined by ``\\x02`` (null for an empty or null map)."""
    names = props.keys.cast(pa.string())
    values = props.items.cast(pa.string())
    if len(names):
        if pc.any(pc.is_in(names, pa.array(sorted(RESERVED_PROPERTY_KEYS)))).as_py():
            bad = pc.filter(names, pc.is_in(names, pa.array(sorted(RESERVED_PROPERTY_KEYS))))[0].as_py()
            raise RowError(f"column 'properties' uses the reserved property name {bad!r}")
        if pc.any(pc.or_(pc.is_null(values), pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0))).as_py():
            raise RowError("column 'properties' has a null or blank value")
        if pc.any(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(names)), 0)).as_py():
            raise RowError("column 'properties' has a blank name")
        _check_no_separators(names, "properties")
        _check_no_separators(values, "properties")
    pairs = pc.binary_join_element_wise(names, values, NAME_VALUE_SEPARATOR)
    offsets = props.offsets
    lists = pa.ListArray.from_arrays(offsets, pairs, mask=props.is_null())
    text = pc.binary_join(lists, PROPERTY_SEPARATOR)
    return pc.if_else(pc.equal(pc.utf8_length(text), 0), pa.scalar(None, pa.string()), text)


def rows_to_properties(batch: pa.RecordBatch, write_keys: pa.Array) -> pa.Array:
    """The encoded properties string of every row: KEYS, TAGS, the user's properties, the write key.

    No per-message WAIT: the batch request's header properties carry it for every message."""
    parts: list[pa.Array | pa.Scalar] = []
    keys = _column(batch, "keys")
    if keys is not None:
        keys = keys.cast(pa.string())
        _check_no_separators(keys, "keys")
        keys = pc.utf8_trim_whitespace(keys)
        keys = pc.if_else(pc.equal(pc.utf8_length(keys), 0), pa.scalar(None, pa.string()), keys)
        parts.append(pc.binary_join_element_wise(f"{PROPERTY_KEYS}{NAME_VALUE_SEPARATOR}", keys, ""))
    tags = _column(batch, "tags")
    if tags is not None:
        tags = tags.cast(pa.string())
        _check_no_separators(tags, "tags")
        if pc.any(pc.match_substring(tags, "|")).as_py():
            raise RowError("column 'tags' holds '|', which is reserved for 'a || b' subscriptions")
        tags = pc.if_else(pc.equal(pc.utf8_length(tags), 0), pa.scalar(None, pa.string()), tags)
        parts.append(pc.binary_join_element_wise(f"{PROPERTY_TAGS}{NAME_VALUE_SEPARATOR}", tags, ""))
    props = _column(batch, "properties")
    if props is not None:
        parts.append(_properties_text(props))
    parts.append(pc.binary_join_element_wise(f"{WRITE_KEY_PROPERTY}{NAME_VALUE_SEPARATOR}", write_keys, ""))
    return pc.binary_join_element_wise(*parts, PROPERTY_SEPARATOR, null_handling="skip")


def write_keys(prefix: str, seqs: np.ndarray) -> pa.Array:
    """``<prefix>:<seq>`` for each sequence number of ``seqs``."""
    return pc.binary_join_element_wise(prefix, pa.array(seqs.astype(np.int64)).cast(pa.string()), ":")


def encode_rows(batch: pa.RecordBatch, keys: pa.Array) -> pa.Array:
    """Every row as one batch-codec record (binary); the records' bytes lie back to back in the array."""
    n = batch.num_rows
    value = _column(batch, "value")
    if value is None:
        raise RowError("the input has no 'value' column")
    body = value.cast(pa.binary())
    body_len = pc.binary_length(body).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if body.null_count or (body_len == 0).any():
        raise RowError("column 'value' is null or empty in some row: a message needs a body")
    props = rows_to_properties(batch, keys).cast(pa.binary())
    props_len = pc.binary_length(props).to_numpy(zero_copy_only=False).astype(np.int64)
    if (props_len > 32767).any():
        raise RowError("a row's keys, tags and properties take more than 32767 bytes encoded")
    header = np.zeros(n, dtype=_HEADER)
    header["total"] = BATCH_RECORD_OVERHEAD + body_len + props_len
    header["body_len"] = body_len
    header_arr = pa.FixedSizeBinaryArray.from_buffers(pa.binary(_HEADER.itemsize), n,
                                                      [None, pa.py_buffer(header.tobytes())]).cast(pa.binary())
    plen = props_len.astype(">i2")
    plen_arr = pa.FixedSizeBinaryArray.from_buffers(pa.binary(2), n, [None, pa.py_buffer(plen.tobytes())]) \
        .cast(pa.binary())
    return pc.binary_join_element_wise(header_arr, body, plen_arr, props, b"")


def chunk_records(records: pa.Array, topic: str, max_rows: int, max_bytes: int) -> Iterator[EncodedChunk]:
    """Cut encoded records (``encode_rows``) into batch bodies of at most ``max_rows`` / ``max_bytes``."""
    n = len(records)
    if n == 0:
        return
    offsets = _offsets(records)
    data = records.buffers()[2]
    assert data is not None
    i = 0
    while i < n:
        j = min(n, i + max_rows)
        limit = offsets[i] + max_bytes
        if offsets[j] > limit:
            j = max(i + 1, int(np.searchsorted(offsets, limit, side="right")) - 1)
        yield EncodedChunk(topic, data[int(offsets[i]):int(offsets[j])].to_pybytes(), j - i)
        i = j


def split_by_topic(batch: pa.RecordBatch, topic_option: str | None) -> list[tuple[str, pa.RecordBatch, np.ndarray]]:
    """(topic, rows, row positions in ``batch``) per target topic: the ``topic`` option, else the column."""
    if topic_option is not None:
        return [(topic_option, batch, np.arange(batch.num_rows))]
    topics = _column(batch, "topic")
    if topics is None:
        raise RowError("the input has no 'topic' column and option 'topic' is not set")
    topics = topics.cast(pa.string())
    if topics.null_count:
        raise RowError("column 'topic' is null in some row (set option 'topic', or fill the column)")
    out = []
    uniques: Sequence[str] = pc.unique(topics).to_pylist()
    for t in sorted(uniques):
        mask = pc.equal(topics, t)
        positions = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        out.append((t, batch.filter(mask), positions))
    return out
