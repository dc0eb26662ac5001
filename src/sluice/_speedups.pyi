"""Sluice's per-message codecs in C (``src/sluice/_speedups.c``); each has a pure-Python twin that is the reference
(``sluice.common.speedups`` loads the module, or None where it was not built)."""

from collections.abc import Callable
from typing import final

from _typeshed import ReadableBuffer, WriteableBuffer

from sluice.common.message import MessageExt

def configure(error: type[Exception], /) -> None:
    """What the decoders raise (``MessageFormatError``)."""

def message_type(ext: type[MessageExt], host_text: Callable[[bytes], str], /) -> None:
    """What ``decode_records`` builds (a class of slots only), and how it names an 8-byte host field."""

def decode_records(buf: ReadableBuffer, hosts: dict[bytes, str], /) -> list[MessageExt]:
    """A concatenation of whole v1 records; ``hosts`` caches the text of each 8-byte host field."""

def check_record(buf: ReadableBuffer, pos: int, limit: int, check_crc: bool = True, /) -> int:
    """The size of the record at ``pos`` (0: a clean end, -1: BLANK filler)."""

def scan_batch(body: ReadableBuffer, /) -> tuple[bytes, bytes, bytes, bytes]:
    """Each record of a batch body: (body_start, props_len_pos, end, flag), columns of native int64."""

def encode_records(data: ReadableBuffer, body_start: ReadableBuffer, props_len_pos: ReadableBuffer,
                   end: ReadableBuffer, flag: ReadableBuffer, header: ReadableBuffer, topic_tail: ReadableBuffer,
                   first_phys: int, first_queue_offset: int, store_timestamp: int, /) -> bytes:
    """The stored records of a batch body (native int64 columns in): ``header`` with each record's own fields,
    its body, ``topic_tail`` and its properties tail."""

def spans_hold_nul(data: ReadableBuffer, starts: ReadableBuffer, ends: ReadableBuffer, /) -> bool:
    """Whether any span ``data[starts[i]:ends[i]]`` holds a NUL byte (native int64 columns)."""

def index_put_many(buf: WriteableBuffer, slot_num: int, entries_base: int, first_number: int, hashes: ReadableBuffer,
                   phys: ReadableBuffer, time_diff: int, /) -> int:
    """An IndexFile's entries and slot heads for keys hashed in ``hashes`` (native int64, with ``phys``), entry
    numbers from ``first_number``; the slots newly used, or -1 (nothing written) where a slot needs repair."""

def prefixed_index_hashes(data: ReadableBuffer, starts: ReadableBuffer, ends: ReadableBuffer, prefix_hash: int,
                          /) -> bytes | None:
    """IndexFile key hashes (native int64) of a prefix (its Java hash as unsigned 32 bits) and each span of
    ``data``; None where a span holds a byte beyond ASCII."""

def property_spans(data: ReadableBuffer, starts: ReadableBuffer, ends: ReadableBuffer, marker: ReadableBuffer,
                   /) -> tuple[bytes, bytes, bytes]:
    """Which records of ``data`` (properties at ``data[starts[i]:ends[i]]``) hold the property ``marker`` names
    (its name and 0x01), and where each value lies: (record, start, end), native int64 columns in and out."""

def encode_batch_record(body: ReadableBuffer, properties: ReadableBuffer, flag: int = 0) -> bytes:
    """One record of a batch body."""

def store_spans(buf: WriteableBuffer, spans: list[tuple[int, ReadableBuffer]], positions: ReadableBuffer = b"",
                values: ReadableBuffer = b"", width: int = 4, /) -> None:
    """Copy each (offset, bytes) of ``spans`` into ``buf``, and value i of ``values`` (``width`` bytes each) at
    ``positions[i]`` (native int64), with the GIL released; every span is checked before anything is written."""

@final
class UniqIdClock:
    """``MessageIdGenerator``'s clock and counter."""

    counter: int
    def __init__(self, prefix: str, month_bounds: Callable[[int], tuple[int, int]]) -> None: ...
    def create(self, now_ms: int | None = None, /) -> str:
        """A new id: the prefix, ms since the month's start (8 hex), the counter (4 hex)."""
    def create_many(self, n: int, /) -> list[str]:
        """``n`` ids from one clock read."""
