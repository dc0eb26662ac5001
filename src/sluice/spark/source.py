"""The reading side of the Spark source, without Spark. Plain Python (no pyspark).

``SourcePlanner`` is the driver's part: where a query starts, how far each micro-batch goes
(``maxOffsetsPerTrigger``, ``Trigger.AvailableNow``), which offset ranges become Spark partitions, and the
data-loss check. ``read_range`` is the executor's part: pull one offset range of one queue and yield Arrow
record batches. ``sluice.spark.datasource`` wires both into Spark's data source API.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from sluice.client.message import PullStatus
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.spark.arrow_codec import arrow_schema, records_to_batch
from sluice.spark.offsets import (
    OffsetError,
    OffsetRange,
    Offsets,
    QueueRef,
    below_min,
    cap_ends,
    plan_ranges,
    rate_limit,
    resolve_spec,
    with_new_queues,
)
from sluice.spark.options import OptionError, SourceOptions
from sluice.spark.queue_client import QueueClient, TopicNotFoundError

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Offsets a query must read are gone (expired, or the queue is shorter than planned)."""


def _data_loss(opts: SourceOptions, what: str) -> None:
    if opts.fail_on_data_loss:
        raise DataLossError(f"{what}. Messages were lost (expired by retention, or a broker lost its tail); "
                            f"set option 'failOnDataLoss' to false to skip them and go on")
    log.warning("%s: skipped (failOnDataLoss is false)", what)


class SourcePlanner:
    """The driver side of a read. Holds a ``QueueClient`` (made on first use, dropped when pickled)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._client: QueueClient | None = None
        self.target: Offsets | None = None  # Trigger.AvailableNow: never read past these

    def __getstate__(self) -> dict[str, object]:
        return {"opts": self.opts, "_client": None, "target": self.target}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    @property
    def client(self) -> QueueClient:
        if self._client is None:
            self._client = QueueClient(self.opts.namesrv, self.opts.request_timeout_ms,
                                       self.opts.access.credentials, self.opts.access.tls_context())
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # == what there is ==============================================================================
    def queue_bounds(self) -> dict[QueueRef, tuple[int, int]]:
        """(min, max) offset of every queue the options select. A topic named by 'topics' must exist."""
        try:
            refs = self.client.queues(self.opts.topics, self.opts.topic_pattern)
        except TopicNotFoundError as exc:
            raise OptionError(f"option 'topics': topic '{exc.args[0]}' does not exist (the name server at "
                              f"{self.opts.namesrv} has no route for it)") from None
        except BrokerResponseError:
            raise
        except ClientError as exc:  # no name server answered
            raise OptionError(f"option 'namesrv': cannot reach the name server at {self.opts.namesrv}: {exc}") \
                from None
        return self.client.bounds(refs)

    def latest(self) -> Offsets:
        return {ref: hi for ref, (_lo, hi) in self.queue_bounds().items()}

    # == where to start and end =====================================================================
    def initial_offsets(self) -> Offsets:
        """Where a new query starts (``startingOffsets`` / ``startingTimestamp``)."""
        bounds = self.queue_bounds()
        if self.opts.starting_timestamp is not None:
            return self.client.offsets_by_time(bounds, self.opts.starting_timestamp)
        assert self.opts.starting is not None
        try:
            return resolve_spec(self.opts.starting, bounds, "earliest", "startingOffsets")
        except OffsetError as exc:
            raise OptionError(str(exc)) from None

    def ending_offsets(self) -> Offsets:
        """Where a batch read ends (``endingOffsets`` / ``endingTimestamp``), exclusive."""
        bounds = self.queue_bounds()
        if self.opts.ending_timestamp is not None:
            return self.client.offsets_by_time(bounds, self.opts.ending_timestamp)
        assert self.opts.ending is not None
        try:
            return resolve_spec(self.opts.ending, bounds, "latest", "endingOffsets")
        except OffsetError as exc:
            raise OptionError(str(exc)) from None

    def prepare_available_now(self) -> None:
        """Freeze today's ends: an AvailableNow run reads up to them and stops."""
        self.target = self.latest()

    def latest_offsets(self, start: Offsets, max_rows: int | None) -> Offsets:
        """The end of the next micro-batch from ``start``: every queue's max offset (or the AvailableNow
        target), queues new since ``start`` from their min offset, at most ``max_rows`` offsets in all."""
        bounds = self.queue_bounds()
        if self.target is not None:
            bounds = {ref: b for ref, b in bounds.items() if ref in self.target or ref in start}
            ends = {ref: min(hi, self.target.get(ref, hi)) for ref, (_lo, hi) in bounds.items()}
        else:
            ends = {ref: hi for ref, (_lo, hi) in bounds.items()}
        begin = with_new_queues(start, bounds)
        end = cap_ends(begin, ends)
        if max_rows is not None:
            end = rate_limit(begin, end, max_rows)
        return end

    def plan(self, start: Offsets, end: Offsets) -> list[OffsetRange]:
        """The ranges of one micro-batch (or batch read), after the data-loss check on the driver."""
        if start == end:
            return []
        moving = [ref for ref, off in end.items() if off > start.get(ref, -1)]
        if not moving:
            return []
        bounds = self.client.bounds(moving)
        begin = {ref: start.get(ref, bounds[ref][0]) for ref in moving}
        for ref, off, lo in below_min(begin, bounds):
            _data_loss(self.opts, f"{ref}: offset {off} is below the queue's min offset {lo}")
            begin[ref] = lo
        return plan_ranges(begin, {ref: end[ref] for ref in moving}, self.opts.min_partitions)

    def commit(self, end: Offsets) -> None:
        """Report the query's progress as the consumer group's offsets (when 'consumerGroup' is set)."""
        if not self.opts.report_progress or not end:
            return
        try:
            self.client.report_offsets(self.opts.consumer_group, end)
        except Exception as exc:  # monitoring only: Spark's checkpoint is what counts
            log.warning("could not report offsets of group %s: %s", self.opts.consumer_group, exc)


# == executors ====================================================================================
def read_range(opts: SourceOptions, r: OffsetRange, schema: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
    """Pull ``[r.start, r.end)`` of one queue and yield it as Arrow record batches of source rows.

    Missing offsets (expired, or the queue ends early) fail the read, or are skipped with a warning when
    ``failOnDataLoss`` is false.
    """
    schema = schema or arrow_schema(opts.include_properties)
    ref = QueueRef(r.topic, r.broker, r.queue_id)
    expected = r.start  # the next offset the output must hold
    bodies: list[bytes | memoryview] = []
    buffered = 0

    def flush() -> Iterator[pa.RecordBatch]:
        nonlocal expected, bodies, buffered
        if not bodies:
            return
        data = bodies[0] if len(bodies) == 1 else b"".join(bodies)
        bodies, buffered = [], 0
        decoded = records_to_batch(data, r.topic, r.broker, r.queue_id, opts.include_properties, schema)
        offsets = decoded.queue_offsets
        batch = decoded.batch
        keep = (offsets >= expected) & (offsets < r.end)
        if not keep.all():  # a pull restarted where an earlier one ended: drop what is already out
            batch = batch.filter(pa.array(keep))
            offsets = offsets[keep]
        if len(offsets) == 0:
            return
        first, last = int(offsets[0]), int(offsets[-1])
        if first != expected or last - first + 1 != len(offsets) or (np.diff(offsets) <= 0).any():
            _data_loss(opts, f"{ref}: offsets {expected}..{last} should be contiguous, but "
                             f"{last - expected + 1 - len(offsets)} of them are missing")
        expected = last + 1
        yield batch

    with QueueClient(opts.namesrv, opts.request_timeout_ms, opts.access.credentials,
                     opts.access.tls_context()) as client:
        for offset, result in client.pull_range(ref, r.start, r.end, opts.consumer_group, opts.pull_batch_size):
            if result.status is PullStatus.FOUND:
                bodies.append(result.body)
                buffered += result.next_begin_offset - offset
                if buffered >= opts.arrow_batch_rows:
                    yield from flush()
                continue
            yield from flush()
            if result.status is PullStatus.OFFSET_ILLEGAL and result.next_begin_offset > offset:
                _data_loss(opts, f"{ref}: offset {offset} is below the queue's min offset {result.min_offset}")
            elif result.status is PullStatus.NO_MATCHED_MSG and result.next_begin_offset > offset:
                _data_loss(opts, f"{ref}: offsets {offset}..{result.next_begin_offset - 1} were removed")
            else:
                _data_loss(opts, f"{ref}: the queue ends at offset {result.max_offset}, before the planned end "
                                 f"{r.end} (pull at {offset}: {result.status.value})")
            expected = max(expected, min(result.next_begin_offset, r.end))
        yield from flush()
    if expected < r.end:
        _data_loss(opts, f"{ref}: offsets {expected}..{r.end - 1} could not be read")
