"""The batch body of SEND_MESSAGE / SEND_BATCH_MESSAGE. Sans-IO.

Records are concatenated, each ``TOTALSIZE MAGICCODE(0) BODYCRC(0) FLAG BODYLENGTH BODY PROPERTIESLENGTH
PROPERTIES``, big-endian, TOTALSIZE = 20 + body + 2 + properties. The broker decodes with ``decode_batch``;
the client encodes with ``encode_batch`` (``sluice.client.batch`` adds RocketMQ's batch rules on top).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, NamedTuple

if TYPE_CHECKING:
    import numpy as np

from sluice.common.compression import inflate
from sluice.common.errors import MessageFormatError
from sluice.common.properties import decode_properties, encode_properties
from sluice.common.speedups import speedups

_HEAD: Final = struct.Struct(">iiiii")  # TOTALSIZE MAGICCODE BODYCRC FLAG BODYLENGTH
_PROPS_LEN: Final = struct.Struct(">h")
_TOTAL: Final = struct.Struct(">i")
BATCH_RECORD_OVERHEAD: Final = _HEAD.size + _PROPS_LEN.size  # 22
MAX_PROPERTIES_SIZE: Final = 32767


@dataclass(slots=True)
class BatchItem:
    """One message of a batch: what the producer chose per message. Topic, queue and timestamps come from
    the request header."""

    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0


def py_encode_batch_record(body: bytes, properties: bytes, flag: int = 0) -> bytes:
    """One record; ``properties`` is the already encoded properties string."""
    if len(properties) > MAX_PROPERTIES_SIZE:
        raise MessageFormatError(f"batch message properties are {len(properties)} bytes, over {MAX_PROPERTIES_SIZE}")
    if not -(2**31) <= flag < 2**31:
        raise MessageFormatError(f"message flag {flag} is not a 32-bit integer")
    total = BATCH_RECORD_OVERHEAD + len(body) + len(properties)
    return b"".join((_HEAD.pack(total, 0, 0, flag, len(body)), body, _PROPS_LEN.pack(len(properties)), properties))


def encode_batch(items: Iterable[BatchItem]) -> bytes:
    """The batch body for ``items``."""
    return b"".join(encode_batch_record(it.body, encode_properties(it.properties), it.flag) for it in items)


class BatchRecord(NamedTuple):
    """Where one record of a batch body lies: ``body`` is ``[body_start, props_len_pos)``, and
    ``[props_len_pos, end)`` is the properties with their 2-byte length, as a stored record's tail has them."""

    body_start: int
    props_len_pos: int
    end: int
    flag: int


class BatchColumns(NamedTuple):
    """``scan_batch``'s layout as int64 arrays, one element per record: what the store needs to turn a
    whole batch body into stored records at once."""

    body_start: np.ndarray
    props_len_pos: np.ndarray
    end: np.ndarray
    flag: np.ndarray

    @property
    def count(self) -> int:  # type: ignore[override]  # the records' count; tuple.count is never used on columns
        return len(self.body_start)

    def records(self) -> list[BatchRecord]:
        return [BatchRecord(*r) for r in zip(self.body_start.tolist(), self.props_len_pos.tolist(),
                                             self.end.tolist(), self.flag.tolist(), strict=True)]


def _uniform_starts(buf: bytes | memoryview, arr: np.ndarray, end: int) -> np.ndarray | None:
    """Where the records start when every record has the first one's TOTALSIZE (the usual batch: one
    producer, one body size) — checked for all at once; None otherwise (then the records are walked)."""
    import numpy as np

    if end < BATCH_RECORD_OVERHEAD:
        return None
    (total,) = _TOTAL.unpack_from(buf, 0)
    if total < BATCH_RECORD_OVERHEAD or total > end or end % total:
        return None
    start = np.arange(0, end, total, dtype=np.int64)
    if len(start) > 1 and not (arr[start[:, None] + np.arange(4)].view(">i4").ravel() == total).all():
        return None
    return start


def py_scan_batch_columns(data: bytes | bytearray | memoryview) -> BatchColumns:
    """The layout of every record of a batch body, checked; raises ``MessageFormatError`` (with the byte
    position) on bad input. Each record's TOTALSIZE must agree with its lengths; an empty body has no records.

    Only the walk from one TOTALSIZE to the next is a Python loop; the other fields are read and checked
    for all records at once.
    """
    # numpy on first use: clients import this module to encode batches and must not load numpy.
    import numpy as np

    buf = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    end = len(buf)
    arr = np.frombuffer(buf, dtype=np.uint8)
    start = _uniform_starts(buf, arr, end)
    if start is None:
        starts: list[int] = []
        add = starts.append
        unpack_total = _TOTAL.unpack_from
        pos = 0
        while pos < end:
            if end - pos < BATCH_RECORD_OVERHEAD:
                raise MessageFormatError(f"batch body truncated at byte {pos}: {end - pos} bytes left, "
                                         f"a record needs at least {BATCH_RECORD_OVERHEAD}")
            (total,) = unpack_total(buf, pos)
            if total < BATCH_RECORD_OVERHEAD or total > end - pos:
                raise MessageFormatError(f"batch record at byte {pos}: total size {total} does not fit the "
                                         f"{end - pos} bytes left")
            add(pos)
            pos += total
        start = np.array(starts, dtype=np.int64)
    # TOTALSIZE MAGIC CRC FLAG BODYLENGTH
    head = arr[start[:, None] + np.arange(_HEAD.size)].view(">i4").astype(np.int64)
    total, flag, body_len = head[:, 0], head[:, 3], head[:, 4]
    props_len_pos = start + _HEAD.size + body_len
    bad = (body_len < 0) | (props_len_pos + _PROPS_LEN.size > start + total)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise MessageFormatError(f"batch record at byte {int(start[i])}: body length {int(body_len[i])} overruns "
                                 f"total size {int(total[i])}")
    props_len = arr[props_len_pos[:, None] + np.arange(_PROPS_LEN.size)].view(">i2").astype(np.int64)[:, 0]
    bad = (props_len < 0) | (BATCH_RECORD_OVERHEAD + body_len + props_len != total)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise MessageFormatError(f"batch record at byte {int(start[i])}: total size {int(total[i])} disagrees with "
                                 f"body length {int(body_len[i])} + properties length {int(props_len[i])} + "
                                 f"{BATCH_RECORD_OVERHEAD}")
    return BatchColumns(start + _HEAD.size, props_len_pos, start + total, flag)


def c_scan_batch_columns(data: bytes | bytearray | memoryview) -> BatchColumns:
    """``py_scan_batch_columns`` in C."""
    import numpy as np

    assert speedups is not None
    return BatchColumns(*(np.frombuffer(col, dtype=np.int64) for col in speedups.scan_batch(data)))


if speedups is not None:
    encode_batch_record = speedups.encode_batch_record
    scan_batch_columns = c_scan_batch_columns
else:
    encode_batch_record = py_encode_batch_record
    scan_batch_columns = py_scan_batch_columns


def scan_batch(data: bytes | bytearray | memoryview) -> list[BatchRecord]:
    """``scan_batch_columns`` as one ``BatchRecord`` per record."""
    return scan_batch_columns(data).records()


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchItem]:
    """Every message of a batch body (``scan_batch``'s checks), with its properties decoded."""
    buf = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    return [BatchItem(bytes(buf[r.body_start:r.props_len_pos]),
                      decode_properties(bytes(buf[r.props_len_pos + 2:r.end])) if r.end > r.props_len_pos + 2 else {},
                      r.flag)
            for r in scan_batch(buf)]


def inflate_batch(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """A zlib-compressed batch body, inflated (at most ``limit`` bytes). Raises ``MessageFormatError``.

    The C++ 1.2.x producer compresses a whole batch body of 4 KiB or more and sets the compressed bit of the
    request's sysFlag; the records inside are not compressed one by one.
    """
    return inflate(data, limit, "compressed batch body")


__all__ = [
    "BATCH_RECORD_OVERHEAD",
    "MAX_PROPERTIES_SIZE",
    "BatchItem",
    "BatchColumns",
    "BatchRecord",
    "scan_batch",
    "scan_batch_columns",
    "decode_batch",
    "encode_batch",
    "encode_batch_record",
    "inflate_batch",
]
