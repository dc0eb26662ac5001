"""The ``sluice`` PySpark data source (Spark >= 4.2's Python data source API). The one module importing pyspark.

::

    from sluice.spark import register
    register(spark)
    df = (spark.readStream.format("sluice").option("namesrv", "127.0.0.1:9876")
          .option("topics", "orders").load())

The classes here are thin: offsets, options and planning live in ``offsets`` / ``options`` / ``source``,
reading and writing in ``source.read_range`` and ``sink.write_batches``, all without pyspark.
What Spark runs where: the stream reader's planning methods run in one long-lived
driver process per query; ``read`` runs on executors in a pickled copy, so everything a task needs travels
in its ``QueueRange``; a sink's ``write`` runs per task on executors and ``commit`` in a fresh writer.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sluice.spark import offsets as offs
from sluice.spark.arrow_codec import arrow_schema
from sluice.spark.options import (
    OptionError,
    SinkOptions,
    SourceOptions,
    check_sink_columns,
    parse_sink_options,
    parse_source_options,
)
from sluice.spark.sink import key_prefix, write_batches
from sluice.spark.source import SourcePlanner, read_range

log = logging.getLogger(__name__)


def source_schema(include_properties: bool) -> StructType:
    """The row schema of the source (all fields nullable, to agree with the Arrow batches)."""
    fields = [StructField("topic", StringType()), StructField("broker", StringType()),
              StructField("queue_id", IntegerType()), StructField("queue_offset", LongType()),
              StructField("msg_id", StringType()), StructField("keys", StringType()),
              StructField("tags", StringType()), StructField("value", BinaryType()),
              StructField("born_timestamp", TimestampType()), StructField("store_timestamp", TimestampType())]
    if include_properties:
        fields.append(StructField("properties", MapType(StringType(), StringType())))
    return StructType(fields)


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One Spark task's read: offsets ``[start, end)`` of one queue."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int

    def offset_range(self) -> offs.OffsetRange:
        return offs.OffsetRange(self.topic, self.broker, self.queue_id, self.start, self.end)


def _partitions(ranges: Sequence[offs.OffsetRange]) -> list[QueueRange]:
    return [QueueRange(r.topic, r.broker, r.queue_id, r.start, r.end) for r in ranges]


class _Reading:
    """What the batch and stream readers share: checked options, the planner, ``read``."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        expected = source_schema(opts.include_properties)
        if schema is not None and schema != expected:
            raise OptionError(f"the sluice source has a fixed schema ({expected.simpleString()}); do not give "
                              f"one with .schema(...), and use option 'includeProperties' for the properties map")
        self.opts = opts
        self.planner = SourcePlanner(opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange)
        yield from read_range(self.opts, partition.offset_range(), arrow_schema(self.opts.include_properties))


# == streaming read ===============================================================================
class SluiceStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over queue offsets: admission control (``maxOffsetsPerTrigger``) and AvailableNow."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        super().__init__(opts, schema)
        self.planner.queue_bounds()  # fail at query start on an unknown topic or an unreachable name server

    def initialOffset(self) -> dict[str, dict[str, int]]:
        return offs.to_json_dict(self.planner.initial_offsets())

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = self.planner.latest_offsets(offs.from_json_dict(start, "start offset"), max_rows)
        return offs.to_json_dict(end)

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        return offs.to_json_dict(self.planner.latest())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = self.planner.plan(offs.from_json_dict(start, "start offset"), offs.from_json_dict(end, "end offset"))
        return _partitions(ranges)

    def commit(self, end: dict[str, Any]) -> None:
        self.planner.commit(offs.from_json_dict(end, "committed offset"))

    def stop(self) -> None:
        self.planner.close()


# == batch read ===================================================================================
class SluiceBatchReader(_Reading, DataSourceReader):
    """``spark.read``: the ranges between the starting and ending offsets (or timestamps), fixed at planning."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        super().__init__(opts, schema)
        start = self.planner.initial_offsets()
        end = self.planner.ending_offsets()
        end = {ref: max(off, start.get(ref, off)) for ref, off in end.items()}
        self.ranges = self.planner.plan(start, end)
        self.planner.close()

    def partitions(self) -> Sequence[InputPartition]:
        return _partitions(self.ranges)


# == writes =======================================================================================
@dataclass
class SluiceCommit(WriterCommitMessage):
    """What one task wrote."""

    rows: int
    sends: int


def _check_input(opts: SinkOptions, schema: StructType) -> None:
    kinds = {}
    for f in schema.fields:
        t = f.dataType
        if isinstance(t, MapType):
            kinds[f.name] = f"map<{t.keyType.simpleString()},{t.valueType.simpleString()}>"
        else:
            kinds[f.name] = t.simpleString()
    check_sink_columns(kinds, opts.topic)


def _task() -> TaskContext:
    tc = TaskContext.get()
    if tc is None:  # pragma: no cover - Spark always runs write() in a task
        raise RuntimeError("the sluice sink's write() must run in a Spark task")
    return tc


class SluiceStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("sluice")``: at-least-once, every message keyed (query id, batch, task, row)."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check_input(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        tc = _task()
        sink_id = self.opts.sink_id or tc.getLocalProperty("sql.streaming.queryId") or "query"
        batch_id = tc.getLocalProperty("streaming.sql.batchId") or "0"
        s = write_batches(self.opts, iterator, key_prefix(sink_id, batch_id, tc.partitionId()))
        return SluiceCommit(s.rows, s.sends)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, SluiceCommit))
        log.info("sluice sink: batch %d wrote %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, SluiceCommit))
        log.warning("sluice sink: batch %d aborted after %d rows were sent (they stay: at-least-once; the "
                    "replay carries the same write keys)", batchId, rows)


class SluiceBatchWriter(DataSourceArrowWriter):
    """``df.write.format("sluice")``: like the stream writer, batch id 0, sink id from 'sinkId' or a fresh one."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check_input(opts, schema)
        self.opts = opts
        self.sink_id = opts.sink_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        s = write_batches(self.opts, iterator, key_prefix(self.sink_id, 0, _task().partitionId()))
        return SluiceCommit(s.rows, s.sends)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, SluiceCommit))
        log.info("sluice sink: wrote %d rows", rows)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("sluice sink: write aborted (messages already sent stay: at-least-once)")


# == the data source ==============================================================================
class SluiceDataSource(DataSource):
    """Format ``"sluice"``: streaming and batch reads of topics, streaming and batch writes to them."""

    @classmethod
    def name(cls) -> str:
        return "sluice"

    def schema(self) -> StructType:
        lowered = {k.lower(): v for k, v in self.options.items()}
        include = lowered.get("includeproperties", "false").strip().lower() == "true"
        return source_schema(include)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SluiceStreamReader(parse_source_options(self.options, streaming=True), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return SluiceBatchReader(parse_source_options(self.options, streaming=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return SluiceStreamWriter(parse_sink_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return SluiceBatchWriter(parse_sink_options(self.options, streaming=False), schema)


def register(spark: SparkSession) -> None:
    """Make ``format("sluice")`` available in ``spark`` (once per session)."""
    spark.dataSource.register(SluiceDataSource)
