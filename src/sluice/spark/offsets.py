"""Offsets of the Spark source: one next-offset per queue, as canonical JSON. Plain Python (no pyspark).

The JSON Spark keeps in its checkpoint is ``{"<topic>": {"<broker>:<queueId>": <next offset>, ...}, ...}``
with topics in sorted order and queues sorted by (broker, queue id). Spark compares offsets as JSON *text*,
so the order must never change between calls (a reordered but equal offset looks like new data).

Also here: resolving ``startingOffsets`` / ``endingOffsets`` against the broker's min / max offsets, the
``maxOffsetsPerTrigger`` budget split, and cutting offset ranges into Spark partitions (``minPartitions``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

EARLIEST = -2  # in JSON offset specs, as in Spark's Kafka source
LATEST = -1


class OffsetError(ValueError):
    """An offset or offset spec that cannot be used; the message names the option it came from."""


class QueueRef(NamedTuple):
    """One queue of a topic on one broker; sorts canonically (topic, broker, queue id)."""

    topic: str
    broker: str
    queue_id: int

    @property
    def key(self) -> str:
        return queue_key(self.broker, self.queue_id)

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker}:{self.queue_id}"


Offsets = dict[QueueRef, int]


def queue_key(broker: str, queue_id: int) -> str:
    """The JSON key of a queue inside its topic: ``"<broker>:<queueId>"``."""
    return f"{broker}:{queue_id}"


def parse_queue_key(key: str, where: str = "offset") -> tuple[str | None, int]:
    """``"broker-a:3"`` → ("broker-a", 3); a bare ``"3"`` → (None, 3): queue 3 on every broker."""
    broker, sep, qid = key.rpartition(":")
    try:
        queue_id = int(qid)
    except ValueError:
        raise OffsetError(f"{where}: queue key {key!r} must be '<broker>:<queueId>' or '<queueId>'") from None
    if queue_id < 0 or (sep and not broker):
        raise OffsetError(f"{where}: queue key {key!r} must be '<broker>:<queueId>' or '<queueId>'")
    return (broker if sep else None), queue_id


# == canonical JSON ===============================================================================
def to_json_dict(offsets: Mapping[QueueRef, int]) -> dict[str, dict[str, int]]:
    """The offset as Spark stores it: a dict whose keys are inserted in canonical order."""
    out: dict[str, dict[str, int]] = {}
    for ref in sorted(offsets):
        out.setdefault(ref.topic, {})[ref.key] = int(offsets[ref])
    return out


def to_json(offsets: Mapping[QueueRef, int]) -> str:
    return json.dumps(to_json_dict(offsets), separators=(",", ":"))


def from_json_dict(data: Any, where: str = "offset") -> Offsets:
    """Parse an offset Spark hands back (a dict, or its JSON text) into ``{QueueRef: offset}``."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise OffsetError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise OffsetError(f"{where}: expected a JSON object of topics, got {type(data).__name__}")
    out: Offsets = {}
    for topic, queues in data.items():
        if not isinstance(queues, Mapping):
            raise OffsetError(f"{where}: topic {topic!r} must map to an object of '<broker>:<queueId>' keys")
        for key, value in queues.items():
            broker, qid = parse_queue_key(str(key), where)
            if broker is None:
                raise OffsetError(f"{where}: queue key {key!r} of topic {topic!r} must name its broker")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise OffsetError(f"{where}: offset of {topic} {key} must be an integer >= 0, not {value!r}")
            out[QueueRef(str(topic), broker, qid)] = value
    return out


# == startingOffsets / endingOffsets ==============================================================
@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``earliest``, ``latest``, or per-queue offsets from JSON (``EARLIEST`` / ``LATEST`` allowed as values).

    JSON keys are ``"<broker>:<queueId>"``, or a bare ``"<queueId>"`` meaning that queue on every broker.
    Queues the JSON does not name take ``default`` (``earliest`` for a start, ``latest`` for an end).
    """

    kind: str  # "earliest" | "latest" | "json"
    queues: tuple[tuple[str, str | None, int, int], ...] = ()  # (topic, broker or None, queue id, offset)

    @property
    def topics(self) -> set[str]:
        return {t for t, _, _, _ in self.queues}


def parse_offset_spec(option: str, text: str) -> OffsetSpec:
    """Parse the value of ``option`` (``startingOffsets`` / ``endingOffsets``); errors name the option."""
    value = text.strip()
    if value.lower() in ("earliest", "latest"):
        return OffsetSpec(value.lower())
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise OffsetError(f"option '{option}' must be 'earliest', 'latest' or JSON like "
                          f'{{"topic": {{"broker-a:0": 42}}}}; it is not valid JSON ({exc}): {text!r}') from None
    if not isinstance(data, dict) or not data:
        raise OffsetError(f"option '{option}' JSON must be a non-empty object of topics, e.g. "
                          f'{{"topic": {{"broker-a:0": 42}}}}: {text!r}')
    queues: list[tuple[str, str | None, int, int]] = []
    for topic, per_queue in data.items():
        if not isinstance(per_queue, dict):
            raise OffsetError(f"option '{option}': topic {topic!r} must map to an object of "
                              f"'<broker>:<queueId>' (or '<queueId>') keys, not {per_queue!r}")
        for key, off in per_queue.items():
            broker, qid = parse_queue_key(str(key), f"option '{option}'")
            if isinstance(off, bool) or not isinstance(off, int) or off < EARLIEST:
                raise OffsetError(f"option '{option}': offset of {topic} {key} must be an integer >= 0, "
                                  f"or -2 (earliest) / -1 (latest), not {off!r}")
            queues.append((str(topic), broker, qid, off))
    return OffsetSpec("json", tuple(queues))


def resolve_spec(spec: OffsetSpec, bounds: Mapping[QueueRef, tuple[int, int]], default: str,
                 option: str) -> Offsets:
    """Per-queue offsets for ``spec`` given each queue's (min, max) offsets.

    JSON values beyond a queue's max offset are refused (they would read messages that do not exist yet);
    values below its min are kept, so the data-loss check (``failOnDataLoss``) sees them.
    """
    def pick(kind_or_value: str | int, lo: int, hi: int) -> int:
        if kind_or_value in ("earliest", EARLIEST):
            return lo
        if kind_or_value in ("latest", LATEST):
            return hi
        assert isinstance(kind_or_value, int)
        return kind_or_value

    out: Offsets = {}
    named: dict[tuple[str, str | None, int], int] = {(t, b, q): off for t, b, q, off in spec.queues}
    for ref, (lo, hi) in sorted(bounds.items()):
        if spec.kind != "json":
            out[ref] = pick(spec.kind, lo, hi)
            continue
        value = named.get((ref.topic, ref.broker, ref.queue_id), named.get((ref.topic, None, ref.queue_id)))
        if value is None:
            out[ref] = pick(default, lo, hi)
            continue
        off = pick(value, lo, hi)
        if off > hi:
            raise OffsetError(f"option '{option}': offset {off} of {ref.topic} {ref.key} is beyond the queue's "
                              f"max offset {hi}")
        out[ref] = off
    known = {(r.topic, r.queue_id) for r in bounds} | {(r.topic, None) for r in bounds}
    known_full = {(r.topic, r.broker, r.queue_id) for r in bounds}
    for t, b, q, _ in spec.queues:
        if (b is not None and (t, b, q) not in known_full) or (b is None and (t, q) not in known):
            where = f"{b}:{q}" if b is not None else str(q)
            raise OffsetError(f"option '{option}' names queue {where} of topic {t!r}, which the topic does not have")
    return out


# == planning =====================================================================================
def with_new_queues(start: Mapping[QueueRef, int], bounds: Mapping[QueueRef, tuple[int, int]]) -> Offsets:
    """``start`` plus every queue of ``bounds`` it lacks, starting at that queue's min offset (queues added
    to a topic, or topics matching the pattern, after the query started)."""
    out = dict(start)
    for ref, (lo, _hi) in bounds.items():
        if ref not in out:
            out[ref] = lo
    return out


def cap_ends(start: Mapping[QueueRef, int], ends: Mapping[QueueRef, int]) -> Offsets:
    """Per queue, the end never goes backwards from the start (a queue that shrank, or vanished: no data)."""
    return {ref: max(off, ends.get(ref, off)) for ref, off in start.items()}


def rate_limit(start: Mapping[QueueRef, int], end: Mapping[QueueRef, int], max_rows: int) -> Offsets:
    """Move each queue at most part of the way from ``start`` to ``end`` so that at most ``max_rows`` offsets
    are covered in all: the budget is split in proportion to each queue's lag, and the rounding remainder
    handed out one offset at a time (largest fractional share first, then canonical order). Exact: when the
    total lag exceeds ``max_rows``, exactly ``max_rows`` offsets are covered."""
    if max_rows < 1:
        raise ValueError("max_rows must be >= 1")
    lags = {ref: max(end.get(ref, off) - off, 0) for ref, off in start.items()}
    total = sum(lags.values())
    if total <= max_rows:
        return {ref: off + lags[ref] for ref, off in start.items()}
    take: dict[QueueRef, int] = {}
    fractions: list[tuple[int, QueueRef]] = []
    for ref in sorted(lags):
        share, rest = divmod(lags[ref] * max_rows, total)
        take[ref] = share
        fractions.append((-rest, ref))
    remainder = max_rows - sum(take.values())
    for _, ref in sorted(fractions):
        if remainder == 0:
            break
        if take[ref] < lags[ref]:
            take[ref] += 1
            remainder -= 1
    return {ref: off + take[ref] for ref, off in start.items()}


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one queue: what one Spark task reads."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(start: Mapping[QueueRef, int], end: Mapping[QueueRef, int],
                min_partitions: int | None = None) -> list[OffsetRange]:
    """One range per queue with data between ``start`` and ``end``; with ``min_partitions``, large ranges are
    cut into more pieces (each queue into a share of ``min_partitions`` proportional to its size), as Spark's
    Kafka source does."""
    ranges = [OffsetRange(ref.topic, ref.broker, ref.queue_id, off, end[ref])
              for ref, off in sorted(start.items()) if ref in end and end[ref] > off]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, min(r.size, round(r.size / total * min_partitions)))
        step, extra = divmod(r.size, parts)
        pos = r.start
        for i in range(parts):
            n = step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.broker, r.queue_id, pos, pos + n))
            pos += n
    return out


def below_min(start: Mapping[QueueRef, int],
              bounds: Mapping[QueueRef, tuple[int, int]]) -> list[tuple[QueueRef, int, int]]:
    """Queues whose start offset has expired: (queue, start, min offset) for each start below the min."""
    return [(ref, off, bounds[ref][0]) for ref, off in sorted(start.items())
            if ref in bounds and off < bounds[ref][0]]
