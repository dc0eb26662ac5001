"""The headers of a consumer's requests to a broker: PULL_MESSAGE, its offsets (QUERY_CONSUMER_OFFSET,
UPDATE_CONSUMER_OFFSET), its group (GET_CONSUMER_LIST_BY_GROUP) and UNREGISTER_CLIENT (producers too)."""

from __future__ import annotations

from collections.abc import Mapping

from sluice.remoting.headers._base import RequestHeader, field_bool, field_int, field_str, text_bool


class PullMessageRequestHeader(RequestHeader):
    __slots__ = ("consumer_group", "topic", "queue_id", "queue_offset", "max_msg_nums", "sys_flag", "commit_offset",
                 "suspend_timeout_millis", "subscription", "sub_version", "expression_type")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, topic: str, queue_id: int, queue_offset: int, max_msg_nums: int = 32,
                 sys_flag: int = 0, commit_offset: int = -1, suspend_timeout_millis: int = 15_000,
                 subscription: str | None = None, sub_version: int = 0, expression_type: str = "TAG") -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.max_msg_nums = max_msg_nums
        self.sys_flag = sys_flag
        self.commit_offset = commit_offset
        self.suspend_timeout_millis = suspend_timeout_millis
        self.subscription = subscription
        self.sub_version = sub_version
        self.expression_type = expression_type

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> PullMessageRequestHeader:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "topic"), field_int(ext, "queueId"),
                   field_int(ext, "queueOffset"), field_int(ext, "maxMsgNums", 32), field_int(ext, "sysFlag", 0),
                   field_int(ext, "commitOffset", -1), field_int(ext, "suspendTimeoutMillis", 15_000),
                   ext.get("subscription"), field_int(ext, "subVersion", 0), ext.get("expressionType") or "TAG")

    def encode(self) -> dict[str, str]:
        ext = {"consumerGroup": self.consumer_group, "topic": self.topic, "queueId": str(self.queue_id),
               "queueOffset": str(self.queue_offset), "maxMsgNums": str(self.max_msg_nums),
               "sysFlag": str(self.sys_flag), "commitOffset": str(self.commit_offset),
               "suspendTimeoutMillis": str(self.suspend_timeout_millis)}
        if self.subscription is not None:
            ext["subscription"] = self.subscription
        ext["subVersion"] = str(self.sub_version)
        ext["expressionType"] = self.expression_type
        return ext


class QueryConsumerOffsetRequestHeader(RequestHeader):
    __slots__ = ("consumer_group", "topic", "queue_id", "set_zero_if_not_found")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, topic: str, queue_id: int,
                 set_zero_if_not_found: bool | None = None) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.set_zero_if_not_found = set_zero_if_not_found  # None: not sent (RocketMQ 4 clients), read as true

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> QueryConsumerOffsetRequestHeader:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "topic"), field_int(ext, "queueId"),
                   field_bool(ext, "setZeroIfNotFound", True) if ext.get("setZeroIfNotFound") else None)

    def encode(self) -> dict[str, str]:
        ext = {"consumerGroup": self.consumer_group, "topic": self.topic, "queueId": str(self.queue_id)}
        if self.set_zero_if_not_found is not None:
            ext["setZeroIfNotFound"] = text_bool(self.set_zero_if_not_found)
        return ext


class UpdateConsumerOffsetRequestHeader(RequestHeader):
    __slots__ = ("consumer_group", "topic", "queue_id", "commit_offset")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, topic: str, queue_id: int, commit_offset: int) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.commit_offset = commit_offset

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> UpdateConsumerOffsetRequestHeader:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "topic"), field_int(ext, "queueId"),
                   field_int(ext, "commitOffset"))

    def encode(self) -> dict[str, str]:
        return {"consumerGroup": self.consumer_group, "topic": self.topic, "queueId": str(self.queue_id),
                "commitOffset": str(self.commit_offset)}


class GetConsumerListByGroupRequestHeader(RequestHeader):
    __slots__ = ("consumer_group",)
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str) -> None:
        self.consumer_group = consumer_group

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> GetConsumerListByGroupRequestHeader:
        return cls(field_str(ext, "consumerGroup"))

    def encode(self) -> dict[str, str]:
        return {"consumerGroup": self.consumer_group}


class UnregisterClientRequestHeader(RequestHeader):
    """UNREGISTER_CLIENT: a client leaves its producer group, its consumer group, or both."""

    __slots__ = ("client_id", "producer_group", "consumer_group")

    def __init__(self, client_id: str, producer_group: str = "", consumer_group: str = "") -> None:
        self.client_id = client_id
        self.producer_group = producer_group
        self.consumer_group = consumer_group

    @property
    def resource_group(self) -> str | None:
        return self.consumer_group or self.producer_group or None

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> UnregisterClientRequestHeader:
        return cls(field_str(ext, "clientID"), ext.get("producerGroup") or "", ext.get("consumerGroup") or "")

    def encode(self) -> dict[str, str]:
        return {"clientID": self.client_id, "producerGroup": self.producer_group,
                "consumerGroup": self.consumer_group}


__all__ = ["GetConsumerListByGroupRequestHeader", "PullMessageRequestHeader", "QueryConsumerOffsetRequestHeader",
           "UnregisterClientRequestHeader", "UpdateConsumerOffsetRequestHeader"]
