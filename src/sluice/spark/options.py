"""Options of the ``sluice`` Spark data source, checked up front. Plain Python (no pyspark).

Spark hands a data source its options as strings in a case-insensitive dict. Everything here turns them
into typed settings or raises ``OptionError`` with a message that names the option, so a bad option fails
the query when it starts rather than in the middle of a batch.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from sluice.common.errors import InvalidNameError
from sluice.common.naming import validate_group, validate_topic
from sluice.spark.offsets import OffsetError, OffsetSpec, parse_offset_spec

DEFAULT_CONSUMER_GROUP = "SLUICE_SPARK"
DEFAULT_PRODUCER_GROUP = "SLUICE_SPARK_WRITER"

# Canonical spelling of every option (Spark lower-cases the keys it passes).
SOURCE_OPTIONS = ("namesrv", "topics", "topicPattern", "startingOffsets", "endingOffsets", "startingTimestamp",
                  "endingTimestamp", "maxOffsetsPerTrigger", "minPartitions", "failOnDataLoss", "pullBatchSize",
                  "arrowBatchRows", "includeProperties", "consumerGroup", "requestTimeoutMs", "accessKey", "secretKey",
                  "tls", "tlsCaFile")
SINK_OPTIONS = ("namesrv", "topic", "sinkId", "producerGroup", "sendBatchSize", "maxInflightSends",
                "requestTimeoutMs", "accessKey", "secretKey", "tls", "tlsCaFile")
BATCH_ONLY = ("endingOffsets", "endingTimestamp")
STREAM_ONLY = ("maxOffsetsPerTrigger",)
# Options Spark itself adds to what a sink sees (writeStream's checkpoint, save(path)).
SPARK_PASS_THROUGH = ("checkpointLocation", "path")


class OptionError(ValueError):
    """A missing, unknown or malformed option; the message names it."""


@dataclass(frozen=True, slots=True)
class Access:
    """How the source or sink reaches the cluster: ACL 2.0 credentials (``accessKey`` / ``secretKey``: Spark
    redacts an option named like a secret from its plans and UI) and TLS (``tls``; ``tlsCaFile``: the CA the
    servers' certificates are checked against, else the system's)."""

    credentials: tuple[str, str] | None = field(default=None, repr=False)
    tls: bool = False
    tls_ca_file: str | None = None
    tls_ca_pem: str | None = field(default=None, repr=False)  # read on the driver: executors may not have the file

    def tls_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        from sluice.remoting.tls import client_context

        return client_context(cadata=self.tls_ca_pem)


def _access(opts: dict[str, str]) -> Access:
    ak, sk = _get(opts, "accessKey"), opts.get("secretkey")  # (a secret is taken as it is, spaces and all)
    if (ak is None) != (sk is None):
        raise OptionError("options 'accessKey' and 'secretKey' are given together (ACL 2.0 credentials) or not at all")
    ca = _get(opts, "tlsCaFile")
    pem = None
    if ca is not None:
        try:
            with open(ca, encoding="ascii") as f:
                pem = f.read(1 << 20)
        except (OSError, UnicodeDecodeError) as exc:
            raise OptionError(f"option 'tlsCaFile': cannot read {ca!r}: {exc}") from None
    return Access(credentials=None if ak is None or sk is None else (ak, sk),
                  tls=_bool(opts, "tls", ca is not None), tls_ca_file=ca, tls_ca_pem=pem)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _check_known(opts: dict[str, str], known: tuple[str, ...], what: str) -> None:
    allowed = {k.lower() for k in known} | {k.lower() for k in SPARK_PASS_THROUGH}
    for key in sorted(opts):
        if key not in allowed:
            raise OptionError(f"unknown option '{key}' for the sluice {what}; known options: {', '.join(known)}")


def _get(opts: dict[str, str], name: str) -> str | None:
    v = opts.get(name.lower())
    return None if v is None or v.strip() == "" else v.strip()


def _int(opts: dict[str, str], name: str, default: int | None, lo: int = 1) -> int | None:
    raw = _get(opts, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, not {raw!r}") from None
    if value < lo:
        raise OptionError(f"option '{name}' must be >= {lo}, not {value}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = _get(opts, name)
    if raw is None:
        return default
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise OptionError(f"option '{name}' must be true or false, not {raw!r}")


def _namesrv(opts: dict[str, str]) -> str:
    raw = _get(opts, "namesrv")
    if raw is None:
        raise OptionError("option 'namesrv' is required: the name server address(es), e.g. "
                          ".option(\"namesrv\", \"127.0.0.1:9876\")")
    for addr in raw.split(";"):
        host, sep, port = addr.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise OptionError(f"option 'namesrv' must be host:port (several separated by ';'), not {raw!r}")
    return raw


def _group(opts: dict[str, str], name: str, default: str) -> str:
    value = _get(opts, name) or default
    try:
        validate_group(value)
    except InvalidNameError as exc:
        raise OptionError(f"option '{name}': {exc}") from None
    return value


# == source =======================================================================================
@dataclass(frozen=True, slots=True)
class SourceOptions:
    namesrv: str
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    starting: OffsetSpec | None  # None when starting_timestamp is given
    starting_timestamp: int | None
    ending: OffsetSpec | None  # batch reads; None when ending_timestamp is given
    ending_timestamp: int | None
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    pull_batch_size: int
    arrow_batch_rows: int
    include_properties: bool
    consumer_group: str
    report_progress: bool  # consumerGroup given: commit() writes the query's progress to the broker
    request_timeout_ms: int
    access: Access = Access()

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one this source reads."""
        if self.topics is not None:
            return topic in self.topics
        assert self.topic_pattern is not None
        return re.fullmatch(self.topic_pattern, topic) is not None


def parse_source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Check and type the options of ``spark.readStream`` (``streaming``) or ``spark.read``."""
    opts = _lower(options)
    what = "streaming source" if streaming else "batch source"
    _check_known(opts, SOURCE_OPTIONS, what)
    misplaced = BATCH_ONLY if streaming else STREAM_ONLY
    for name in misplaced:
        if _get(opts, name) is not None:
            kind = "batch reads (spark.read)" if streaming else "streaming reads (spark.readStream)"
            raise OptionError(f"option '{name}' applies to {kind} only")
    namesrv = _namesrv(opts)

    topics_raw, pattern = _get(opts, "topics"), _get(opts, "topicPattern")
    if (topics_raw is None) == (pattern is None):
        raise OptionError("give exactly one of option 'topics' (comma-separated names) and option 'topicPattern' "
                          "(a regular expression)")
    topics: tuple[str, ...] | None = None
    if topics_raw is not None:
        names = [t.strip() for t in topics_raw.split(",") if t.strip()]
        if not names:
            raise OptionError(f"option 'topics' lists no topic: {topics_raw!r}")
        for t in names:
            try:
                validate_topic(t)
            except InvalidNameError as exc:
                raise OptionError(f"option 'topics': {exc}") from None
        topics = tuple(sorted(set(names)))
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'topicPattern' is not a valid regular expression ({exc}): {pattern!r}") \
                from None

    def spec(name: str, ts_name: str, default: str) -> tuple[OffsetSpec | None, int | None]:
        raw, ts = _get(opts, name), _int(opts, ts_name, None, lo=0)
        if raw is not None and ts is not None:
            raise OptionError(f"give option '{name}' or option '{ts_name}', not both")
        if ts is not None:
            return None, ts
        try:
            parsed = parse_offset_spec(name, raw if raw is not None else default)
        except OffsetError as exc:
            raise OptionError(str(exc)) from None
        if topics is not None:
            unknown = sorted(parsed.topics - set(topics))
            if unknown:
                raise OptionError(f"option '{name}' names topic {unknown[0]!r}, which option 'topics' does not list")
        return parsed, None

    starting, starting_ts = spec("startingOffsets", "startingTimestamp", "latest" if streaming else "earliest")
    ending: OffsetSpec | None = None
    ending_ts: int | None = None
    if not streaming:
        ending, ending_ts = spec("endingOffsets", "endingTimestamp", "latest")
        if ending is not None and ending.kind == "earliest":
            raise OptionError("option 'endingOffsets' must be 'latest' or JSON, not 'earliest'")
        if starting is not None and starting.kind == "latest":
            raise OptionError("option 'startingOffsets' must be 'earliest' or JSON for a batch read, not 'latest'")
        if starting_ts is not None and ending_ts is not None and ending_ts < starting_ts:
            raise OptionError(f"option 'endingTimestamp' ({ending_ts}) is before option 'startingTimestamp' "
                              f"({starting_ts})")
    group_given = _get(opts, "consumerGroup") is not None
    return SourceOptions(
        namesrv=namesrv,
        topics=topics,
        topic_pattern=pattern,
        starting=starting,
        starting_timestamp=starting_ts,
        ending=ending,
        ending_timestamp=ending_ts,
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", None),
        min_partitions=_int(opts, "minPartitions", None),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        pull_batch_size=_int(opts, "pullBatchSize", 1000) or 1000,
        arrow_batch_rows=_int(opts, "arrowBatchRows", 10_000) or 10_000,
        include_properties=_bool(opts, "includeProperties", False),
        consumer_group=_group(opts, "consumerGroup", DEFAULT_CONSUMER_GROUP),
        report_progress=group_given,
        request_timeout_ms=_int(opts, "requestTimeoutMs", 10_000) or 10_000,
        access=_access(opts),
    )


# == sink =========================================================================================
SINK_COLUMNS = ("value", "keys", "tags", "topic", "properties")


@dataclass(frozen=True, slots=True)
class SinkOptions:
    namesrv: str
    topic: str | None
    sink_id: str | None
    producer_group: str
    send_batch_size: int
    max_inflight_sends: int
    request_timeout_ms: int
    access: Access = Access()


def parse_sink_options(options: Mapping[str, str], streaming: bool) -> SinkOptions:
    """Check and type the options of ``df.writeStream`` (``streaming``) or ``df.write``."""
    opts = _lower(options)
    _check_known(opts, SINK_OPTIONS, "streaming sink" if streaming else "batch sink")
    namesrv = _namesrv(opts)
    topic = _get(opts, "topic")
    if topic is not None:
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            raise OptionError(f"option 'topic': {exc}") from None
    sink_id = _get(opts, "sinkId")
    if sink_id is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", sink_id):
        raise OptionError(f"option 'sinkId' may hold 1 to 64 letters, digits, '_', '.' and '-', not {sink_id!r}")
    return SinkOptions(
        namesrv=namesrv,
        topic=topic,
        sink_id=sink_id,
        producer_group=_group(opts, "producerGroup", DEFAULT_PRODUCER_GROUP),
        send_batch_size=_int(opts, "sendBatchSize", 1000) or 1000,
        max_inflight_sends=_int(opts, "maxInflightSends", 4) or 4,
        request_timeout_ms=_int(opts, "requestTimeoutMs", 10_000) or 10_000,
        access=_access(opts),
    )


def check_sink_columns(columns: Mapping[str, str], topic_option: str | None) -> None:
    """``columns`` maps each input column name to its Spark type name (``binary``, ``string``, ``map``...)."""
    lowered = {k.lower(): v for k, v in columns.items()}
    if "value" not in lowered:
        raise OptionError(f"the sluice sink needs a 'value' column (binary or string); the input has "
                          f"{', '.join(repr(c) for c in columns) or 'no columns'}")
    unknown = sorted(set(lowered) - set(SINK_COLUMNS))
    if unknown:
        raise OptionError(f"the sluice sink takes columns {', '.join(SINK_COLUMNS)}; the input also has "
                          f"{', '.join(repr(u) for u in unknown)} (select or drop it first)")
    wanted = {"value": ("binary", "string"), "keys": ("string",), "tags": ("string",), "topic": ("string",),
              "properties": ("map<string,string>",)}
    for name, kind in lowered.items():
        if kind not in wanted[name]:
            raise OptionError(f"column '{name}' must be of type {' or '.join(wanted[name])}, not {kind}")
    if topic_option is None and "topic" not in lowered:
        raise OptionError("option 'topic' is required when the input has no 'topic' column")
