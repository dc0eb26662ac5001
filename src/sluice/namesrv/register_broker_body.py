"""REGISTER_BROKER's body (RocketMQ's ``RegisterBrokerBody``): a broker's topic table with its data version, plain
or compressed.

Plain form: JSON ``{"filterServerList":[...],"topicConfigSerializeWrapper":{"dataVersion":{...},
"topicConfigTable":{name: TopicConfig}}}``.

Compressed form (``compressed``=true): one zlib stream holding big-endian int32-length-prefixed parts:
the DataVersion JSON, an int32 topic count, one entry per topic, then the filter server list JSON. A topic
entry is what Java's ``TopicConfig.encode`` writes: ``"<name> <readQueueNums> <writeQueueNums> <perm>
<topicFilterType>"`` separated by single spaces (Java 5 appends ``" <attributes JSON>"``); topicSysFlag and
order are not carried. Entries that are a JSON object are accepted too. Java 5 brokers append a topic queue
mapping section after the filter list; it is ignored here.

Pure: no I/O. The broker uses ``encode_register_broker_body`` to build what it sends.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Final

from sluice.common import fastjson
from sluice.common.compression import inflate
from sluice.common.errors import MessageFormatError
from sluice.common.structs import DataVersion, TopicConfig, TopicFilterType

_I32: Final = struct.Struct(">i")


# A broker's topic table, inflated: room for about half a million topics.
MAX_INFLATED_REGISTER_BODY = 64 * 1024 * 1024


class BodyFormatError(ValueError):
    """A request body that does not hold what its request code needs."""


@dataclass(slots=True)
class TopicConfigSerializeWrapper:
    """A broker's topic table and the version it had when sent."""

    data_version: DataVersion = field(default_factory=DataVersion)
    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"dataVersion": self.data_version.to_json(),
                "topicConfigTable": {n: tc.to_json() for n, tc in sorted(self.topic_config_table.items())}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicConfigSerializeWrapper:
        if not isinstance(d, dict):
            raise BodyFormatError("topicConfigSerializeWrapper must be a JSON object")
        table = d.get("topicConfigTable") or {}
        if not isinstance(table, dict):
            raise BodyFormatError("topicConfigTable must be a JSON object")
        configs: dict[str, TopicConfig] = {}
        for name, tc in table.items():
            if not isinstance(tc, dict):
                raise BodyFormatError(f"topic config of {name!r} must be a JSON object")
            tc = dict(tc)
            tc.setdefault("topicName", name)
            config = TopicConfig.from_json(tc)
            configs[config.topic_name] = config
        dv = d.get("dataVersion")
        if dv is not None and not isinstance(dv, dict):
            raise BodyFormatError("dataVersion must be a JSON object")
        return cls(DataVersion.from_json(dv), configs)


@dataclass(slots=True)
class RegisterBrokerBody:
    topic_config_wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)


def encode_topic_config_line(tc: TopicConfig) -> str:
    """Java's ``TopicConfig.encode``: the compressed body's per-topic entry (the attributes as JSON last)."""
    attributes = json.dumps(tc.attributes, separators=(",", ":"), ensure_ascii=False)
    return f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} {tc.topic_filter_type.value} " \
           f"{attributes}"


def decode_topic_config_line(text: str) -> TopicConfig:
    """One topic entry of the compressed body; raises ``BodyFormatError``."""
    text = text.strip()
    if text.startswith("{"):
        try:
            d = fastjson.loads(text)
        except ValueError as exc:
            raise BodyFormatError(f"topic config entry is not JSON: {exc}") from None
        if not isinstance(d, dict):
            raise BodyFormatError("topic config entry must be a JSON object")
        try:
            return TopicConfig.from_json(d)
        except KeyError as exc:
            raise BodyFormatError(f"topic config entry {text[:80]!r} has no {exc} field") from None
        except (TypeError, ValueError) as exc:
            raise BodyFormatError(f"topic config entry {text[:80]!r}: {exc}") from None
    fields = text.split(" ")
    if len(fields) < 5:
        raise BodyFormatError(f"topic config entry {text[:80]!r} has fewer than 5 space-separated fields")
    name, read_nums, write_nums, perm, filter_type = fields[:5]
    try:
        tc = TopicConfig(name, int(read_nums), int(write_nums), int(perm), TopicFilterType(filter_type))
    except ValueError as exc:
        raise BodyFormatError(f"topic config entry {text[:80]!r}: {exc}") from None
    if len(fields) >= 6:  # (as Java: attributes that do not parse, e.g. holding a space, are left out)
        try:
            attributes = fastjson.loads(fields[5])
        except ValueError:
            attributes = None
        if isinstance(attributes, dict):
            tc.attributes = {str(k): str(v) for k, v in attributes.items() if not isinstance(v, list | dict)}
    return tc


def encode_register_broker_body(wrapper: TopicConfigSerializeWrapper, filter_server_list: list[str] | None = None,
                                compressed: bool = False) -> bytes:
    """REGISTER_BROKER's body, as a Java 4.9 broker writes it."""
    filters = list(filter_server_list or [])
    if not compressed:
        body = {"filterServerList": filters, "topicConfigSerializeWrapper": wrapper.to_json()}
        return json.dumps(body, separators=(",", ":")).encode("utf-8")
    parts: list[bytes] = []

    def put(blob: bytes) -> None:
        parts.append(_I32.pack(len(blob)))
        parts.append(blob)

    put(json.dumps(wrapper.data_version.to_json(), separators=(",", ":")).encode("utf-8"))
    parts.append(_I32.pack(len(wrapper.topic_config_table)))
    for _, tc in sorted(wrapper.topic_config_table.items()):
        put(encode_topic_config_line(tc).encode("utf-8"))
    put(json.dumps(filters, separators=(",", ":")).encode("utf-8"))
    return zlib.compress(b"".join(parts), 9)


def _filter_servers(value: Any) -> list[str]:
    """filterServerList: addresses (a number taken as its text); anything but a list counts as none."""
    if not isinstance(value, list):
        return []
    if any(isinstance(f, list | dict) for f in value):
        raise BodyFormatError("filterServerList holds a list or an object where addresses belong")
    return [str(f) for f in value]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise BodyFormatError(f"compressed register body ends inside {what}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int32(self, what: str) -> int:
        n: int = _I32.unpack(self.take(4, what))[0]
        return n

    def blob(self, what: str) -> bytes:
        return self.take(self.int32(what + " length"), what)


def decode_register_broker_body(body: bytes | memoryview, compressed: bool) -> RegisterBrokerBody:
    """Raises ``BodyFormatError`` (a ``ValueError``) describing what is wrong with ``body``."""
    if not compressed:
        try:
            d = fastjson.loads(body)
        except ValueError as exc:
            raise BodyFormatError(f"register broker body is not JSON: {exc}") from None
        if not isinstance(d, dict):
            raise BodyFormatError("register broker body must be a JSON object")
        try:
            wrapper = TopicConfigSerializeWrapper.from_json(d.get("topicConfigSerializeWrapper") or {})
        except (KeyError, TypeError, ValueError) as exc:
            raise BodyFormatError(f"register broker body has a malformed topic table: {exc}") from None
        return RegisterBrokerBody(wrapper, _filter_servers(d.get("filterServerList")))
    try:
        raw = inflate(body, MAX_INFLATED_REGISTER_BODY, "compressed register broker body")
    except MessageFormatError as exc:
        raise BodyFormatError(str(exc)) from None
    r = _Reader(raw)
    try:  # fastjson, as the plain form: its depth is bounded (json.loads' recursion is not)
        dv_json = fastjson.loads(r.blob("the data version"))
        count = r.int32("the topic count")
        if count < 0:
            raise BodyFormatError(f"compressed register broker body has a negative topic count {count}")
        table: dict[str, TopicConfig] = {}
        for i in range(count):
            tc = decode_topic_config_line(r.blob(f"topic config #{i}").decode("utf-8"))
            table[tc.topic_name] = tc
        filters: list[str] = []
        if r.pos < len(raw):
            filters = _filter_servers(fastjson.loads(r.blob("the filter server list")))
    except BodyFormatError:
        raise
    except ValueError as exc:  # not UTF-8, not JSON
        raise BodyFormatError(f"compressed register broker body holds bad JSON: {exc}") from None
    if not isinstance(dv_json, dict):
        raise BodyFormatError("compressed register broker body: dataVersion must be a JSON object")
    try:
        dv = DataVersion.from_json(dv_json)
    except (TypeError, ValueError) as exc:
        raise BodyFormatError(f"compressed register broker body: bad dataVersion: {exc}") from None
    return RegisterBrokerBody(TopicConfigSerializeWrapper(dv, table), filters)
