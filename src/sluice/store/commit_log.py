"""CommitLog: every message, in arrival order, in segment files of RocketMQ's stored-record layout.

Appends run under one lock, which assigns physical and queue offsets; a batch is one copy into the
mapped segment. A record never straddles two segments: when the rest of a segment cannot hold the
records plus 8 bytes, a BLANK filler ``[remaining][0xCBD43194]`` closes it, as in RocketMQ.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Final, NamedTuple

import numpy as np

from sluice.common.batch_codec import MAX_PROPERTIES_SIZE, BatchColumns, encode_batch_record, scan_batch_columns
from sluice.common.config import MessageStoreConfig
from sluice.common.errors import MessageFormatError
from sluice.common.hashing import tag_hash_code
from sluice.common.lmq_dispatch import dispatch_names, lmq_entries, usable
from sluice.common.message import MessageExtBrokerInner, host_to_bytes
from sluice.common.message_codec import (
    POS_BODY,
    POS_PHYSICAL_OFFSET,
    POS_STORE_TIMESTAMP,
    RECORD_FIXED_SIZE,
    RECORD_HEADER,
    check_record,
)
from sluice.common.naming import LMQ_QUEUE_ID, is_lmq
from sluice.common.properties import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    encode_properties,
    has_property,
    property_value,
)
from sluice.common.sysflag import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE_V1,
    STOREHOST_V6_FLAG,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from sluice.store.batch_encoder import BatchBody, index_entries, record_sizes, stored_records, tags_codes
from sluice.store.mapped_file import MappedFile
from sluice.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

END_FILE_MIN_BLANK_LENGTH: Final = 8
_BLANK: Final = struct.Struct(">ii")
_TAIL_TOPIC: Final = struct.Struct(">B")
_TAIL_PROPS: Final = struct.Struct(">h")
_I64: Final = struct.Struct(">q")
_V6_MASK: Final = ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)


class DispatchRequest(NamedTuple):
    """What the ConsumeQueue and IndexFile need of one stored record."""

    topic: str
    queue_id: int
    phys_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: str | None  # the raw KEYS property
    uniq_key: str | None
    sys_flag: int
    lmq: tuple[tuple[str, int], ...] = ()  # (light queue, offset in it) of each it is also entered in


def queue_advances(r: DispatchRequest) -> list[tuple[tuple[str, int], int]]:
    """The queues a record takes an offset of, each with the next offset after it: its own, and its light
    queues'."""
    out = [] if no_queue_offset(r.sys_flag) else [((r.topic, r.queue_id), r.queue_offset + 1)]
    out += [((name, LMQ_QUEUE_ID), off + 1) for name, off in r.lmq]
    return out




class AppendResult(NamedTuple):
    wrote_offset: int
    wrote_bytes: int
    queue_offset: int
    store_timestamp: int
    phys_offsets: list[int]
    arrivals: dict[tuple[str, int], int]  # (topic, queue id) → the queue's new max offset
    queue_offsets: list[int] | None = None  # each record's queue offset (``append``; a raw batch's are consecutive)


class BatchDispatch(NamedTuple):
    """A run of records of one queue, appended together (``CommitLog.append_raw_batch``), as arrays."""

    topic: str
    queue_id: int
    first_queue_offset: int
    phys_offsets: np.ndarray
    sizes: np.ndarray
    tags_codes: np.ndarray
    index_hashes: np.ndarray  # IndexFile key hashes ...
    index_records: np.ndarray  # ... and the record (index into the arrays above) each one points at
    store_timestamp: int


@dataclass(slots=True)
class RawBatch:
    """A SEND_BATCH_MESSAGE body on its way into the store, stored without decoding it into messages.

    Every record goes to ``queue_id`` of ``topic`` with the request's born timestamp / host, sys flag and
    reconsume times; ``extra_properties`` (the request header's) are added to a record that lacks them.
    """

    topic: str
    queue_id: int
    data: bytes
    columns: BatchColumns
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_host: str | None
    reconsume_times: int
    extra_properties: dict[str, str]


class _PutSection:
    """``with log._append_section(n) as (segment, store_ts)``: the put lock held, the segment the next ``n``
    bytes go to and the store timestamp (a class, not a generator context manager: it runs once a put)."""

    __slots__ = ("log", "nbytes")

    def __init__(self, log: CommitLog, nbytes: int) -> None:
        self.log = log
        self.nbytes = nbytes

    def __enter__(self) -> tuple[MappedFile, int]:
        log = self.log
        if self.nbytes + END_FILE_MIN_BLANK_LENGTH > log.file_size:
            raise SegmentOverflow(f"{self.nbytes} bytes of records exceed a commit log segment of {log.file_size}")
        log.put_lock.acquire()
        try:
            if log.closed:
                raise CommitLogClosed("the message store is shut down")
            store_ts = int(time.time() * 1000)
            log.begin_time_in_lock = time.monotonic()
            return log._segment_for(self.nbytes), store_ts
        except BaseException:
            log.begin_time_in_lock = 0.0
            log.put_lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        self.log.begin_time_in_lock = 0.0
        self.log.put_lock.release()


class ReplicationGap(Exception):
    """Replicated bytes that do not continue this log where it ends."""


class SegmentOverflow(Exception):
    """The records cannot fit in one segment, however empty."""


class CommitLogClosed(Exception):
    """The store shut down while this append waited for the put lock."""


class PropertiesTooLarge(Exception):
    """A message's encoded properties exceed ``max_properties_size``."""


@lru_cache(maxsize=4096)
def _topic_tail(topic: str) -> bytes:
    """``TOPICLENGTH TOPIC`` of a stored record."""
    topic_b = topic.encode("utf-8")
    return _TAIL_TOPIC.pack(len(topic_b)) + topic_b


def tags_code_of(tags: str | None) -> int:
    return tag_hash_code(tags) if tags else 0


def no_queue_offset(sys_flag: int) -> bool:
    """Prepared and rolled-back transaction messages take no logical offset and are not dispatched."""
    t = sys_flag & TRANSACTION_TYPE_MASK
    return t == TRANSACTION_PREPARED_TYPE or t == TRANSACTION_ROLLBACK_TYPE


class CommitLog:
    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.queue = MappedFileQueue(config.store_path_commit_log, config.mapped_file_size_commit_log,
                                     config.commit_log_pwrite_min_bytes)
        self.file_size = config.mapped_file_size_commit_log
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        # A light queue's next offset when the table has none (the light-queue store keeps them: set by the
        # dispatcher).
        self.lmq_next: Callable[[str], int] = lambda name: 0
        self.put_lock = threading.Lock()
        # Signalled when a zero fill ahead of the writer ends (``WarmMappedFileService``).
        self.zero_fill_done = threading.Condition()
        self.default_store_host = host_to_bytes(config.store_host)
        self.begin_time_in_lock = 0.0  # when the current append started (0: none running)
        self.closed = False
        # Called (under the put lock) when an append rolled over to a new segment: the store has the one after
        # it made ahead, and checks the disk, off the put path.
        self.on_roll: Callable[[], None] | None = None
        # (min offset, store time of the record there): ``refresh_earliest_store_time``.
        self._earliest: tuple[int, int] | None = None

    # -- offsets ------------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    @property
    def flushed_where(self) -> int:
        return self.queue.flushed_where

    # -- appending ----------------------------------------------------------------------------------
    def append(self, msgs: list[MessageExtBrokerInner],
               dispatcher: Callable[[list[DispatchRequest]], None]) -> AppendResult:
        """Append ``msgs`` as consecutive records in one segment and dispatch them, under the put lock.

        Dispatching inside the lock keeps every ConsumeQueue written in queue-offset order.
        """
        prepared = []
        default_store = self.default_store_host
        max_props = self.config.max_properties_size
        batch_bytes = 0
        lmq_on = self.config.enable_lmq and self.config.enable_multi_dispatch
        for m in msgs:
            topic_tail = _topic_tail(m.topic)
            props = m.properties
            lmq = dispatch_names(m.topic, props) if lmq_on else None
            if lmq is not None:
                # Its offsets in its light queues are taken under the lock: sized here for the longest they
                # can be, encoded there (RocketMQ's LmqDispatch.wrapLmqDispatch).
                props = {**props, PROPERTY_INNER_MULTI_QUEUE_OFFSET: ",".join("9" * 19 for _ in lmq)}
            elif PROPERTY_INNER_MULTI_QUEUE_OFFSET in props:  # (only the broker writes it, for what it dispatches)
                props = {k: v for k, v in props.items() if k != PROPERTY_INNER_MULTI_QUEUE_OFFSET}
            props_b = encode_properties(props)
            if len(props_b) > max_props:
                raise PropertiesTooLarge(f"properties of {len(props_b)} bytes exceed {max_props} bytes")
            if b"\0" in props_b:
                raise MessageFormatError("message properties may not contain NUL characters")
            body = m.body
            total = RECORD_FIXED_SIZE - 1 + len(body) + len(topic_tail) + len(props_b)
            batch_bytes += total
            born_addr, born_port = host_to_bytes(m.born_host)
            store_addr, store_port = host_to_bytes(m.store_host) if m.store_host else default_store
            tags = props.get(PROPERTY_TAGS)
            prepared.append((m, total, zlib.crc32(body) & 0x7FFFFFFF,
                             topic_tail + _TAIL_PROPS.pack(len(props_b)) + props_b, born_addr, born_port, store_addr,
                             store_port, tag_hash_code(tags) if tags else 0, lmq, props))
        table = self.topic_queue_table
        with self._append_section(batch_bytes) as (mf, store_ts):
            phys = mf.file_from_offset + mf.wrote_position
            first_phys = phys
            parts: list[bytes] = []
            phys_offsets: list[int] = []
            dispatch: list[DispatchRequest] = []
            first_queue_offset = -1
            advanced: dict[tuple[str, int], int] = {}  # the queues' next offsets, kept once the bytes are written
            for (m, total, crc, tail, born_addr, born_port, store_addr, store_port, tags_code, lmq,
                 props) in prepared:
                lmq_offsets: tuple[tuple[str, int], ...] = ()
                if lmq is not None:
                    taken = []
                    for name in usable(m.topic, lmq):
                        lkey = (name, LMQ_QUEUE_ID)
                        loff = advanced.get(lkey, -1)
                        if loff < 0:
                            loff = table.get(lkey, -1)
                            if loff < 0:
                                loff = self.lmq_next(name)
                        advanced[lkey] = loff + 1
                        taken.append((name, loff))
                    lmq_offsets = tuple(taken)
                    by_name = dict(taken)
                    props[PROPERTY_INNER_MULTI_QUEUE_OFFSET] = ",".join(
                        str(by_name[n]) if n in by_name else "" for n in lmq)
                    props_b = encode_properties(props)
                    topic_tail = _topic_tail(m.topic)
                    tail = topic_tail + _TAIL_PROPS.pack(len(props_b)) + props_b
                    total = RECORD_FIXED_SIZE - 1 + len(m.body) + len(topic_tail) + len(props_b)
                key = (m.topic, m.queue_id)
                sys_flag = m.sys_flag & _V6_MASK
                if no_queue_offset(sys_flag):
                    qoff = 0
                else:
                    qoff = advanced.get(key, -1)
                    if qoff < 0:
                        qoff = table.get(key, -1)
                        if qoff < 0:
                            qoff = self.lmq_next(m.topic) if m.queue_id == LMQ_QUEUE_ID and is_lmq(m.topic) else 0
                    advanced[key] = qoff + 1
                if first_queue_offset < 0:
                    first_queue_offset = qoff
                body = m.body
                parts.append(RECORD_HEADER.pack(
                    total, MESSAGE_MAGIC_CODE_V1, crc, m.queue_id, m.flag, qoff, phys, sys_flag,
                    m.born_timestamp, born_addr, born_port, store_ts, store_addr, store_port,
                    m.reconsume_times, m.prepared_transaction_offset, len(body)))
                parts.append(body)
                parts.append(tail)
                dispatch.append(DispatchRequest(
                    m.topic, m.queue_id, phys, total, tags_code, store_ts, qoff, props.get(PROPERTY_KEYS),
                    props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), sys_flag, lmq_offsets))
                phys_offsets.append(phys)
                phys += total
            mf.append(b"".join(parts))
            table.update(advanced)
            dispatcher(dispatch)
        arrivals = dict(a for d in dispatch for a in queue_advances(d))
        return AppendResult(first_phys, phys - first_phys, first_queue_offset, store_ts, phys_offsets, arrivals,
                            [d.queue_offset for d in dispatch])

    def append_raw_batch(self, batch: RawBatch, dispatcher: Callable[[BatchDispatch], None]) -> AppendResult:
        """Append every record of ``batch`` to its queue: each stored record is the batch record's body and
        properties bytes behind a new header, so nothing is decoded, and every per-record field is computed
        for the whole batch at once (``batch_encoder``). Raises as ``append`` does."""
        extra = batch.extra_properties
        if extra and any(len(BatchBody(batch.data, batch.columns).property_spans(name).record) < batch.columns.count
                         for name in extra):
            batch = _with_extra_properties(batch)
        body = BatchBody(batch.data, batch.columns)
        cols = batch.columns
        n = cols.count
        props_len = body.props_lengths()
        max_props = self.config.max_properties_size
        if (props_len > max_props).any():
            raise PropertiesTooLarge(f"properties of {int(props_len.max())} bytes exceed {max_props} bytes")
        if body.props_have_nul():
            raise MessageFormatError("message properties may not contain NUL characters")
        if b"DELAY\x01" in batch.data and any(
                v not in ("", "0") for v in body.values(body.property_spans(PROPERTY_DELAY_TIME_LEVEL))):
            raise MessageFormatError("a batch message cannot carry a delay level")
        topic_b = batch.topic.encode("utf-8")
        topic_tail = _TAIL_TOPIC.pack(len(topic_b)) + topic_b
        sizes = record_sizes(cols, len(topic_tail))
        batch_bytes = int(sizes.sum())
        tags = tags_codes(body)
        if self.config.message_index_enable:
            index_hashes, index_records = index_entries(body, batch.topic)
        else:
            index_hashes = index_records = np.zeros(0, dtype=np.int64)
        born_addr, born_port = host_to_bytes(batch.born_host)
        store_addr, store_port = host_to_bytes(batch.store_host) if batch.store_host else self.default_store_host
        header = RECORD_HEADER.pack(0, MESSAGE_MAGIC_CODE_V1, 0, batch.queue_id, 0, 0, 0, batch.sys_flag & _V6_MASK,
                                    batch.born_timestamp, born_addr, born_port, 0, store_addr, store_port,
                                    batch.reconsume_times, 0, 0)
        key = (batch.topic, batch.queue_id)
        with self._append_section(batch_bytes) as (mf, store_ts):
            first_phys = mf.file_from_offset + mf.wrote_position
            first_qoff = self.topic_queue_table.get(key, -1)
            if first_qoff < 0:
                first_qoff = self.lmq_next(batch.topic) if batch.queue_id == LMQ_QUEUE_ID and is_lmq(batch.topic) \
                    else 0
            phys = np.empty(n, dtype=np.int64)
            phys[0] = first_phys
            np.cumsum(sizes[:-1], out=phys[1:])
            phys[1:] += first_phys
            mf.append(stored_records(body, header, topic_tail, first_phys, first_qoff, store_ts))
            self.topic_queue_table[key] = first_qoff + n
            dispatcher(BatchDispatch(batch.topic, batch.queue_id, first_qoff, phys, sizes, tags, index_hashes,
                                     index_records, store_ts))
        return AppendResult(first_phys, batch_bytes, first_qoff, store_ts, phys.tolist(), {key: first_qoff + n})

    def _append_section(self, nbytes: int) -> _PutSection:
        """Under the put lock: the segment that takes the next ``nbytes`` and the store timestamp."""
        return _PutSection(self, nbytes)

    def _segment_for(self, nbytes: int) -> MappedFile:
        """The segment the next ``nbytes`` go to: the last one, or a new one once a BLANK closes it."""
        mf = self.queue.last_or_create(0)
        if mf.wrote_position + nbytes + END_FILE_MIN_BLANK_LENGTH > mf.zero_fence:
            self._wait_for_zero_fill(mf, mf.wrote_position + nbytes + END_FILE_MIN_BLANK_LENGTH)
        if nbytes + END_FILE_MIN_BLANK_LENGTH > mf.remaining():
            mf.append(_BLANK.pack(mf.remaining(), BLANK_MAGIC_CODE))
            mf.wrote_position = self.file_size
            mf = self.queue.last_or_create(0)
            if self.on_roll is not None:
                self.on_roll()
        return mf

    def _wait_for_zero_fill(self, mf: MappedFile, end: int) -> None:
        """The append would reach the range the warm service is zero-filling: wait until that fill ends."""
        mf.zero_overrun = True
        with self.zero_fill_done:
            while mf.zero_fence < end:
                self.zero_fill_done.wait()

    def append_replicated(self, offset: int, data: memoryview | bytes, reput: Callable[[], None]) -> MappedFile:
        """A slave's append: ``data``, the master's log bytes from ``offset`` (this log's end), written as they
        came into the segment holding ``offset`` (the master never sends across a segment's end: its BLANK
        filler comes with the bytes). Under the put lock, then ``reput`` (which dispatches the records that
        are whole now); returns the segment."""
        n = len(data)
        with self.put_lock:
            if self.closed:
                raise CommitLogClosed("the message store is shut down")
            # (an empty log starts wherever the master's oldest segment does)
            fresh = not self.queue.files and offset % self.file_size == 0
            if offset != self.max_offset and not fresh:
                raise ReplicationGap(f"replicated bytes at {offset}, but this log ends at {self.max_offset}")
            mf = self.queue.last_or_create(offset)
            pos = offset - mf.file_from_offset
            if pos != mf.wrote_position or pos + n > self.file_size:
                raise ReplicationGap(f"{n} replicated bytes at {offset} do not fit the segment at "
                                     f"{mf.file_from_offset} (written to {mf.wrote_position})")
            if pos + n > mf.zero_fence:
                self._wait_for_zero_fill(mf, pos + n)
            mf.append(data)
            if mf.is_full() and self.on_roll is not None:
                self.on_roll()
            reput()
            return mf

    # -- reading ------------------------------------------------------------------------------------
    def _locate(self, phys_offset: int, size: int) -> tuple[MappedFile, int] | None:
        """The segment and position of ``size`` written bytes at ``phys_offset``; None when not there."""
        mf = self.queue.find_by_offset(phys_offset)
        if mf is None:
            return None
        pos = phys_offset - mf.file_from_offset
        return (mf, pos) if pos + size <= mf.wrote_position else None

    def get_data(self, phys_offset: int, size: int) -> memoryview | None:
        """A zero-copy view of ``size`` bytes at ``phys_offset``; None when that segment is gone."""
        found = self._locate(phys_offset, size)
        return found[0].buf[found[1] : found[1] + size] if found else None

    def store_timestamp_at(self, phys_offset: int, size: int) -> int | None:
        found = self._locate(phys_offset, size)
        return _I64.unpack_from(found[0].buf, found[1] + POS_STORE_TIMESTAMP)[0] if found else None

    def refresh_earliest_store_time(self) -> None:
        """Read the store time of the oldest record, for ``earliest_store_time`` (on a thread that may block on
        the disk: retention's, after each round)."""
        low = self.min_offset
        if self._earliest is not None and self._earliest[0] == low:
            return
        size = self.record_size_at(low)
        ts = self.store_timestamp_at(low, size) if size else None
        if ts is not None:
            self._earliest = (low, ts)

    def earliest_store_time(self) -> int:
        """The store time (ms) of the oldest record as last read by ``refresh_earliest_store_time``; -1 when not
        known for the current oldest record (an empty log, or one whose oldest segment went since)."""
        e = self._earliest
        return e[1] if e is not None and e[0] == self.min_offset else -1

    def record_size_at(self, phys_offset: int) -> int | None:
        found = self._locate(phys_offset, 8)
        if found is None:
            return None
        mf, pos = found
        total, magic = _BLANK.unpack_from(mf.buf, pos)
        if magic != MESSAGE_MAGIC_CODE_V1 or pos + total > mf.wrote_position:
            return None
        return total

    # -- recovery -----------------------------------------------------------------------------------
    def scan(self, start_offset: int, check_crc: bool) -> Iterator[tuple[int, memoryview]]:
        """Yield (offset, record view) of each intact record from ``start_offset``.

        Stops at the clean end or at the first invalid record; afterwards ``scan_end`` holds where the
        valid data ends and ``scan_error`` why it stopped (None at a clean end).
        """
        self.scan_end = start_offset
        self.scan_error: str | None = None
        files = self.queue.files
        idx = next((i for i, f in enumerate(files) if f.file_from_offset + self.file_size > start_offset), None)
        if idx is None:
            return
        pos = start_offset - files[idx].file_from_offset
        while idx < len(files):
            mf = files[idx]
            buf = mf.buf
            while True:
                try:
                    size = check_record(buf, pos, self.file_size, check_crc)
                except MessageFormatError as exc:
                    self.scan_end = mf.file_from_offset + pos
                    self.scan_error = f"{exc} at offset {self.scan_end}"
                    return
                if size == 0:
                    self.scan_end = mf.file_from_offset + pos
                    if idx + 1 < len(files):
                        self.scan_error = f"zeroed record at offset {self.scan_end} before the last segment"
                    return
                if size < 0:  # BLANK: the segment is closed, records go on in the next one
                    self.scan_end = mf.file_from_offset + self.file_size
                    break
                phys = mf.file_from_offset + pos
                if _I64.unpack_from(buf, pos + POS_PHYSICAL_OFFSET)[0] != phys:
                    self.scan_end = phys
                    self.scan_error = f"record at {phys} claims another physical offset"
                    return
                yield phys, buf[pos : pos + size]
                pos += size
                self.scan_end = mf.file_from_offset + pos
            idx += 1
            pos = 0

    def set_end(self, offset: int) -> None:
        """Make ``offset`` the end of the log: zero everything after it, delete later segments."""
        self.queue.truncate_dirty(offset)

    def close(self) -> None:
        self.queue.close()


def dispatch_request_of(phys: int, record: memoryview, lmq: bool = False) -> DispatchRequest:
    """Rebuild the dispatch request of a stored record (recovery), a record ``check_record`` passed: the header
    fields it needs and three properties read from the bytes, nothing else decoded."""
    (total, _, _, queue_id, _, queue_offset, _, sys_flag, _, _, _, store_ts, _, _, _, _,
     body_len) = RECORD_HEADER.unpack_from(record, 0)
    topic_pos = POS_BODY + body_len
    topic_len = record[topic_pos]
    props_pos = topic_pos + 1 + topic_len
    props_len = _PROPS_LEN.unpack_from(record, props_pos)[0]
    props = bytes(record[props_pos + 2:props_pos + 2 + props_len])
    topic = _topic_of(bytes(record[topic_pos + 1:props_pos]))
    return DispatchRequest(topic, queue_id, phys, total,
                           tags_code_of(property_value(props, PROPERTY_TAGS)), store_ts, queue_offset,
                           property_value(props, PROPERTY_KEYS),
                           property_value(props, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), sys_flag,
                           lmq_entries(topic, props) if lmq and has_property(props, PROPERTY_INNER_MULTI_QUEUE_OFFSET)
                           else ())


_PROPS_LEN: Final = struct.Struct(">h")


@lru_cache(maxsize=4096)
def _topic_of(raw: bytes) -> str:
    return raw.decode("utf-8")


def _with_extra_properties(batch: RawBatch) -> RawBatch:
    """``batch`` with the header's properties added to each record that lacks them (the record's own win)."""
    data = batch.data
    extra = list(batch.extra_properties.items())
    parts = []
    for body_start, props_pos, end, flag in batch.columns.records():
        props = data[props_pos + 2:end]
        for name, value in extra:
            if not has_property(props, name):
                pair = f"{name}{NAME_VALUE_SEPARATOR}{value}".encode()
                props = props + PROPERTY_SEPARATOR.encode() + pair if props else pair
        if len(props) > MAX_PROPERTIES_SIZE:
            raise PropertiesTooLarge(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES_SIZE} bytes")
        parts.append(encode_batch_record(data[body_start:props_pos], props, flag))
    out = b"".join(parts)
    return replace(batch, data=out, columns=scan_batch_columns(out))


def split_keys(keys: str | None) -> list[str]:
    return [k for k in keys.split(KEY_SEPARATOR) if k] if keys else []
