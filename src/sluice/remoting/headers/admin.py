"""The headers of a broker's admin requests: topics (UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC_IN_BROKER,
GET_TOPIC_CONFIG, GET_TOPIC_STATS_INFO, QUERY_TOPIC_CONSUME_BY_WHO) and groups (GET_CONSUME_STATS,
GET_CONSUMER_CONNECTION_LIST, INVOKE_BROKER_TO_RESET_OFFSET)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from sluice.common.sysflag import PERM_READ, PERM_WRITE
from sluice.remoting.headers._base import RequestHeader, field_bool, field_int, field_str, text_bool


class CreateTopicRequestHeader(RequestHeader):
    """UPDATE_AND_CREATE_TOPIC: a topic's config, created or replaced."""

    __slots__ = ("topic", "default_topic", "read_queue_nums", "write_queue_nums", "perm", "topic_filter_type",
                 "topic_sys_flag", "order", "attributes")
    TOPIC_FIELD = "topic"

    def __init__(self, topic: str, default_topic: str = "TBW102", read_queue_nums: int = 16,
                 write_queue_nums: int = 16, perm: int = PERM_READ | PERM_WRITE, topic_filter_type: str = "SINGLE_TAG",
                 topic_sys_flag: int = 0, order: bool = False, attributes: str | None = None) -> None:
        self.topic = topic
        self.default_topic = default_topic
        self.read_queue_nums = read_queue_nums
        self.write_queue_nums = write_queue_nums
        self.perm = perm
        self.topic_filter_type = topic_filter_type
        self.topic_sys_flag = topic_sys_flag
        self.order = order
        # ``+key=value,-key``: the topic's attributes to add, change or remove (sluice.common.attributes)
        self.attributes = attributes

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> CreateTopicRequestHeader:
        return cls(field_str(ext, "topic"), ext.get("defaultTopic") or "TBW102", field_int(ext, "readQueueNums", 16),
                   field_int(ext, "writeQueueNums", 16), field_int(ext, "perm", PERM_READ | PERM_WRITE),
                   ext.get("topicFilterType") or "SINGLE_TAG", field_int(ext, "topicSysFlag", 0),
                   field_bool(ext, "order"), ext.get("attributes") or None)

    def encode(self) -> dict[str, str]:
        out = {"topic": self.topic, "defaultTopic": self.default_topic, "readQueueNums": str(self.read_queue_nums),
               "writeQueueNums": str(self.write_queue_nums), "perm": str(self.perm),
               "topicFilterType": self.topic_filter_type, "topicSysFlag": str(self.topic_sys_flag),
               "order": text_bool(self.order)}
        if self.attributes:
            out["attributes"] = self.attributes
        return out


class _TopicRequestHeader(RequestHeader):
    """A request about one topic, and nothing more."""

    __slots__ = ("topic",)
    TOPIC_FIELD = "topic"

    def __init__(self, topic: str) -> None:
        self.topic = topic

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> Self:
        return cls(field_str(ext, "topic"))

    def encode(self) -> dict[str, str]:
        return {"topic": self.topic}


class DeleteTopicRequestHeader(_TopicRequestHeader):
    __slots__ = ()


class GetTopicConfigRequestHeader(_TopicRequestHeader):
    __slots__ = ()


class GetTopicStatsInfoRequestHeader(_TopicRequestHeader):
    __slots__ = ()


class QueryTopicConsumeByWhoRequestHeader(_TopicRequestHeader):
    __slots__ = ()


class GetConsumeStatsRequestHeader(RequestHeader):
    """GET_CONSUME_STATS: a group's offsets against its topics' (``topic``: one of them only)."""

    __slots__ = ("consumer_group", "topic")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, topic: str = "") -> None:
        self.consumer_group = consumer_group
        self.topic = topic

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> GetConsumeStatsRequestHeader:
        return cls(field_str(ext, "consumerGroup"), ext.get("topic") or "")

    def encode(self) -> dict[str, str]:
        ext = {"consumerGroup": self.consumer_group}
        if self.topic:
            ext["topic"] = self.topic
        return ext


class GetConsumerConnectionListRequestHeader(RequestHeader):
    __slots__ = ("consumer_group",)
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str) -> None:
        self.consumer_group = consumer_group

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> GetConsumerConnectionListRequestHeader:
        return cls(field_str(ext, "consumerGroup"))

    def encode(self) -> dict[str, str]:
        return {"consumerGroup": self.consumer_group}


class ResetOffsetRequestHeader(RequestHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET: a group's offsets on a topic moved to a time (-1: the end) or, for one
    queue, to an offset (-1: none given; Java's admin writes "null" for that)."""

    __slots__ = ("topic", "group", "queue_id", "timestamp", "offset")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "group"

    def __init__(self, topic: str, group: str, queue_id: int = -1, timestamp: int = -1, offset: int = -1) -> None:
        self.topic = topic
        self.group = group
        self.queue_id = queue_id
        self.timestamp = timestamp
        self.offset = offset

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> ResetOffsetRequestHeader:
        return cls(field_str(ext, "topic"), field_str(ext, "group"), field_int(ext, "queueId", -1),
                   field_int(ext, "timestamp", -1),
                   field_int(ext, "offset", -1) if ext.get("offset") not in (None, "", "null") else -1)

    def encode(self) -> dict[str, str]:
        return {"topic": self.topic, "group": self.group, "queueId": str(self.queue_id),
                "timestamp": str(self.timestamp), "offset": str(self.offset)}


__all__ = ["CreateTopicRequestHeader", "DeleteTopicRequestHeader", "GetConsumeStatsRequestHeader",
           "GetConsumerConnectionListRequestHeader", "GetTopicConfigRequestHeader", "GetTopicStatsInfoRequestHeader",
           "QueryTopicConsumeByWhoRequestHeader", "ResetOffsetRequestHeader"]


class DeleteSubscriptionGroupRequestHeader(RequestHeader):
    """DELETE_SUBSCRIPTIONGROUP: a group's config, and with ``cleanOffset`` its committed offsets."""

    __slots__ = ("group_name", "clean_offset")
    GROUP_FIELD = "group_name"

    def __init__(self, group_name: str, clean_offset: bool = False) -> None:
        self.group_name = group_name
        self.clean_offset = clean_offset

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> Self:
        return cls(field_str(ext, "groupName"), field_bool(ext, "cleanOffset"))

    def encode(self) -> dict[str, str]:
        return {"groupName": self.group_name, "cleanOffset": text_bool(self.clean_offset)}


class GetProducerConnectionListRequestHeader(RequestHeader):
    """GET_PRODUCER_CONNECTION_LIST: the connections of a producer group."""

    __slots__ = ("producer_group",)
    GROUP_FIELD = "producer_group"

    def __init__(self, producer_group: str) -> None:
        self.producer_group = producer_group

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> Self:
        return cls(field_str(ext, "producerGroup"))

    def encode(self) -> dict[str, str]:
        return {"producerGroup": self.producer_group}


class GetConsumeStatsInBrokerHeader(RequestHeader):
    """GET_BROKER_CONSUME_STATS: every group's progress on this broker (``isOrder``: on ordered topics only)."""

    __slots__ = ("is_order",)

    def __init__(self, is_order: bool = False) -> None:
        self.is_order = is_order

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> Self:
        return cls(field_bool(ext, "isOrder"))

    def encode(self) -> dict[str, str]:
        return {"isOrder": text_bool(self.is_order)}


class GetConsumerRunningInfoRequestHeader(RequestHeader):
    """GET_CONSUMER_RUNNING_INFO: what one client of a group is doing; the broker relays it to that client."""

    __slots__ = ("consumer_group", "client_id", "jstack_enable")
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, client_id: str, jstack_enable: bool = False) -> None:
        self.consumer_group = consumer_group
        self.client_id = client_id
        self.jstack_enable = jstack_enable

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> Self:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "clientId"), field_bool(ext, "jstackEnable"))

    def encode(self) -> dict[str, str]:
        return {"consumerGroup": self.consumer_group, "clientId": self.client_id,
                "jstackEnable": text_bool(self.jstack_enable)}


class ConsumeMessageDirectlyResultRequestHeader(RequestHeader):
    """CONSUME_MESSAGE_DIRECTLY: one stored message handed to one client's listener (the broker relays it)."""

    __slots__ = ("consumer_group", "client_id", "msg_id", "broker_name", "topic")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, client_id: str, msg_id: str, broker_name: str | None = None,
                 topic: str | None = None) -> None:
        self.consumer_group = consumer_group
        self.client_id = client_id
        self.msg_id = msg_id
        self.broker_name = broker_name
        self.topic = topic

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> Self:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "clientId"), field_str(ext, "msgId"),
                   ext.get("brokerName") or None, ext.get("topic") or None)

    def encode(self) -> dict[str, str]:
        ext = {"consumerGroup": self.consumer_group, "clientId": self.client_id, "msgId": self.msg_id}
        if self.broker_name is not None:
            ext["brokerName"] = self.broker_name
        if self.topic is not None:
            ext["topic"] = self.topic
        return ext
