"""Small value types shared by the name server, the broker and the client (RocketMQ's protocol structs).

JSON shapes are RocketMQ's: ``to_json`` gives what RocketMQ's Java side writes (standard JSON, quoted
keys); ``from_json`` accepts what any RocketMQ client or server sends (numbers as strings, enum names
or ordinals, missing fields).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.common.decimal_text import is_long
from sluice.common.sysflag import PERM_INHERIT, PERM_READ, PERM_WRITE

MASTER_ID = 0


def _int(v: Any, default: int = 0) -> int:
    """A JSON number (or numeric string) as an int; ``ValueError`` or ``TypeError`` for anything else."""
    if v is None or v == "":
        return default
    try:
        return int(v)
    except OverflowError:  # an infinite float: Infinity, or a number such as 1e999
        raise ValueError(f"{v!r} is not an integer") from None


def _text(v: Any) -> str:
    """A JSON string field (a number taken as its text); ``ValueError`` for an array or an object, whose text
    could nest without bound."""
    if isinstance(v, list | dict):
        raise ValueError(f"expected text, not a JSON {'array' if isinstance(v, list) else 'object'}")
    return str(v)


def _obj(v: Any, allow_none: bool = False) -> Any:
    """A JSON object where one belongs (``TypeError`` for anything else): what ``from_json`` reads fields of."""
    if v is None and allow_none:
        return None
    if not isinstance(v, Mapping):
        raise TypeError(f"a JSON object was expected, got {type(v).__name__}")
    return v


def _bool(v: Any, default: bool = False) -> bool:
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v != 0
    return _text(v).lower() in ("true", "1")


# == queues and topics =============================================================================
@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker; sorts by (topic, broker name, queue id) as RocketMQ does."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MessageQueue:
        d = _obj(d)
        return cls(str(d["topic"]), str(d["brokerName"]), _int(d["queueId"]))

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


class TopicFilterType(enum.Enum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


def perm_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def perm_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def perm_inherit(perm: int) -> bool:
    return bool(perm & PERM_INHERIT)


def perm_to_string(perm: int) -> str:
    return "".join(c if perm & bit else "-" for c, bit in (("R", PERM_READ), ("W", PERM_WRITE), ("X", PERM_INHERIT)))


@dataclass(slots=True)
class TopicConfig:
    """A topic as a broker holds it (a ``topics.json`` entry)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: TopicFilterType = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    # RocketMQ's topic attributes (``message.type`` ...: sluice.common.attributes), kept as given.
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"attributes": dict(self.attributes), "order": self.order, "perm": self.perm,
                "readQueueNums": self.read_queue_nums, "topicFilterType": self.topic_filter_type.value,
                "topicName": self.topic_name, "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums}

    @property
    def message_type(self) -> str:
        """RocketMQ's TopicMessageType of the topic: its ``message.type`` attribute, NORMAL when it has none."""
        return self.attributes.get("message.type") or "NORMAL"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicConfig:
        d = _obj(d)
        tft = d.get("topicFilterType", "SINGLE_TAG")
        if isinstance(tft, int):  # the enum's ordinal
            if tft not in (0, 1):
                raise ValueError(f"topicFilterType {tft} is neither 0 (SINGLE_TAG) nor 1 (MULTI_TAG)")
            tft = ("SINGLE_TAG", "MULTI_TAG")[tft]
        attrs = _obj(d.get("attributes"), allow_none=True) or {}
        return cls(_text(d["topicName"]), _int(d.get("readQueueNums"), 16), _int(d.get("writeQueueNums"), 16),
                   _int(d.get("perm"), 6), TopicFilterType(_text(tft)),
                   _int(d.get("topicSysFlag", d.get("topicSynFlag")), 0), _bool(d.get("order")),
                   {_text(k): _text(v) for k, v in attrs.items()})


@dataclass(slots=True)
class DataVersion:
    """A (timestamp, counter) pair a broker bumps whenever its topic table changes, and RocketMQ 5's
    ``stateVersion``: the master epoch of the registering broker, by which a name server tells a newer master of
    a group from an older one that still registers (a fenced master cut off from its group)."""

    timestamp: int = 0
    counter: int = 0
    state_version: int = 0

    def next_version(self, now_ms: int) -> None:
        self.timestamp = now_ms
        self.counter += 1

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> DataVersion:
        d = _obj(d, allow_none=True)
        d = d or {}
        return cls(_int(d.get("timestamp")), _int(d.get("counter")), _int(d.get("stateVersion"), 0))


# == routes ========================================================================================
@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> QueueData:
        d = _obj(d)
        return cls(str(d["brokerName"]), _int(d.get("readQueueNums")), _int(d.get("writeQueueNums")),
                   _int(d.get("perm")), _int(d.get("topicSysFlag", d.get("topicSynFlag")), 0))


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)  # broker id -> "ip:port"; 0 = master

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """The master's address, else any slave's."""
        if MASTER_ID in self.broker_addrs:
            return self.broker_addrs[MASTER_ID]
        return next(iter(self.broker_addrs.values()), None)

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
                "brokerName": self.broker_name, "cluster": self.cluster}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BrokerData:
        d = _obj(d)
        return cls(str(d.get("cluster", "")), str(d["brokerName"]),
                   {_int(k): str(v) for k, v in _obj(d.get("brokerAddrs") or {}).items()})


@dataclass(slots=True)
class TopicRouteData:
    """GET_ROUTEINFO_BY_TOPIC's answer."""

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"brokerDatas": [b.to_json() for b in self.broker_datas], "filterServerTable": {},
                             "queueDatas": [q.to_json() for q in self.queue_datas]}
        if self.order_topic_conf:
            d["orderTopicConf"] = self.order_topic_conf
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicRouteData:
        d = _obj(d)
        return cls([QueueData.from_json(q) for q in d.get("queueDatas") or []],
                   [BrokerData.from_json(b) for b in d.get("brokerDatas") or []],
                   d.get("orderTopicConf") or None)

    def broker(self, broker_name: str) -> BrokerData | None:
        return next((b for b in self.broker_datas if b.broker_name == broker_name), None)

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """Writable queues on brokers that have a master, sorted (as RocketMQ's topicRouteData2TopicPublishInfo)."""
        out: list[MessageQueue] = []
        if self.order_topic_conf:
            for item in self.order_topic_conf.split(";"):
                name, _, count = item.partition(":")
                if name and is_long(count):
                    out.extend(MessageQueue(topic, name, i) for i in range(int(count)))
            return out
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            b = self.broker(q.broker_name)
            if not perm_writeable(q.perm) or b is None or b.master_addr is None:
                continue
            out.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums))
        return out

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues, sorted."""
        out: list[MessageQueue] = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if perm_readable(q.perm):
                out.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.read_queue_nums))
        return out


@dataclass(slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO's answer: every broker group, and the groups of each cluster."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrTable": {n: b.to_json() for n, b in sorted(self.broker_addr_table.items())},
                "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.cluster_addr_table.items())}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ClusterInfo:
        d = _obj(d)
        return cls({str(n): BrokerData.from_json(b) for n, b in _obj(d.get("brokerAddrTable") or {}).items()},
                   {str(c): {str(n) for n in names} for c, names in _obj(d.get("clusterAddrTable") or {}).items()})


# == client registration ===========================================================================
class ConsumeType(enum.IntEnum):
    CONSUME_ACTIVELY = 0  # pull
    CONSUME_PASSIVELY = 1  # push
    CONSUME_POP = 2  # RocketMQ 5's simple consumers


class MessageModel(enum.IntEnum):
    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(enum.IntEnum):
    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


def _enum(cls: type[enum.IntEnum], v: Any, default: enum.IntEnum) -> Any:
    """Enums arrive as ordinals (C++), names (Java) or strings of digits."""
    if v is None:
        return default
    if isinstance(v, int) and not isinstance(v, bool):
        return cls(v)
    s = str(v)
    if is_long(s):
        return cls(int(s))
    return cls[s]


@dataclass(slots=True)
class SubscriptionData:
    """A consumer's subscription to one topic: the expression and the tags it names."""

    topic: str
    sub_string: str = "*"
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"

    def to_json(self) -> dict[str, Any]:
        return {"classFilterMode": False, "codeSet": self.code_set, "expressionType": self.expression_type,
                "subString": self.sub_string, "subVersion": self.sub_version, "tagsSet": self.tags_set,
                "topic": self.topic}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionData:
        d = _obj(d)
        return cls(str(d["topic"]), str(d.get("subString") or "*"), [str(t) for t in d.get("tagsSet") or []],
                   [_int(c) for c in d.get("codeSet") or []], _int(d.get("subVersion")),
                   str(d.get("expressionType") or "TAG"))


@dataclass(slots=True)
class ConsumerData:
    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscriptions: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"consumeFromWhere": self.consume_from_where.name, "consumeType": self.consume_type.name,
                "groupName": self.group_name, "messageModel": self.message_model.name,
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions], "unitMode": self.unit_mode}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ConsumerData:
        d = _obj(d)
        return cls(str(d["groupName"]),
                   _enum(ConsumeType, d.get("consumeType"), ConsumeType.CONSUME_PASSIVELY),
                   _enum(MessageModel, d.get("messageModel"), MessageModel.CLUSTERING),
                   _enum(ConsumeFromWhere, d.get("consumeFromWhere"), ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
                   [SubscriptionData.from_json(s) for s in d.get("subscriptionDataSet") or []],
                   _bool(d.get("unitMode")))


@dataclass(slots=True)
class HeartbeatData:
    """HEART_BEAT's body."""

    client_id: str
    producer_groups: list[str] = field(default_factory=list)
    consumers: list[ConsumerData] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"clientID": self.client_id, "consumerDataSet": [c.to_json() for c in self.consumers],
                "producerDataSet": [{"groupName": g} for g in self.producer_groups]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HeartbeatData:
        d = _obj(d)
        return cls(str(d["clientID"]), [str(p["groupName"]) for p in d.get("producerDataSet") or []],
                   [ConsumerData.from_json(c) for c in d.get("consumerDataSet") or []])


__all__ = [
    "MASTER_ID",
    "BrokerData",
    "ClusterInfo",
    "ConsumeFromWhere",
    "ConsumeType",
    "ConsumerData",
    "DataVersion",
    "HeartbeatData",
    "MessageModel",
    "MessageQueue",
    "QueueData",
    "SubscriptionData",
    "TopicConfig",
    "TopicFilterType",
    "TopicRouteData",
    "perm_inherit",
    "perm_readable",
    "perm_to_string",
    "perm_writeable",
]
