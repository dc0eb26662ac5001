"""The headers of reads of a queue's bounds (GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME) and of messages by key or offset (QUERY_MESSAGE, VIEW_MESSAGE_BY_ID)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from sluice.remoting.headers._base import RequestHeader, field_bool, field_int, field_str, text_bool


class _TopicQueueRequestHeader(RequestHeader):
    """A request about one queue of a topic, and nothing more."""

    __slots__ = ("topic", "queue_id")
    TOPIC_FIELD = "topic"

    def __init__(self, topic: str, queue_id: int) -> None:
        self.topic = topic
        self.queue_id = queue_id

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> Self:
        return cls(field_str(ext, "topic"), field_int(ext, "queueId"))

    def encode(self) -> dict[str, str]:
        return {"topic": self.topic, "queueId": str(self.queue_id)}


class GetMaxOffsetRequestHeader(_TopicQueueRequestHeader):
    __slots__ = ()


class GetMinOffsetRequestHeader(_TopicQueueRequestHeader):
    __slots__ = ()


class GetEarliestMsgStoretimeRequestHeader(_TopicQueueRequestHeader):
    __slots__ = ()


class SearchOffsetRequestHeader(RequestHeader):
    __slots__ = ("topic", "queue_id", "timestamp")
    TOPIC_FIELD = "topic"

    def __init__(self, topic: str, queue_id: int, timestamp: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.timestamp = timestamp

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> SearchOffsetRequestHeader:
        return cls(field_str(ext, "topic"), field_int(ext, "queueId"), field_int(ext, "timestamp"))

    def encode(self) -> dict[str, str]:
        return {"topic": self.topic, "queueId": str(self.queue_id), "timestamp": str(self.timestamp)}


class QueryMessageRequestHeader(RequestHeader):
    """QUERY_MESSAGE: a topic's messages by key (or by unique id: ``_UNIQUE_KEY_QUERY``, an extra field Java's
    client adds) stored within a time range."""

    __slots__ = ("topic", "key", "max_num", "begin_timestamp", "end_timestamp", "unique_key_query")
    TOPIC_FIELD = "topic"

    def __init__(self, topic: str, key: str, max_num: int = 32, begin_timestamp: int = 0, end_timestamp: int = 0,
                 unique_key_query: bool = False) -> None:
        self.topic = topic
        self.key = key
        self.max_num = max_num
        self.begin_timestamp = begin_timestamp
        self.end_timestamp = end_timestamp
        self.unique_key_query = unique_key_query

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> QueryMessageRequestHeader:
        max_num = field_int(ext, "maxNum", 32)
        unique = field_bool(ext, "_UNIQUE_KEY_QUERY")
        return cls(field_str(ext, "topic"), field_str(ext, "key"), max_num, field_int(ext, "beginTimestamp", 0),
                   field_int(ext, "endTimestamp", 0), unique)

    def encode(self) -> dict[str, str]:
        ext = {"topic": self.topic, "key": self.key, "maxNum": str(self.max_num),
               "beginTimestamp": str(self.begin_timestamp), "endTimestamp": str(self.end_timestamp)}
        if self.unique_key_query:
            ext["_UNIQUE_KEY_QUERY"] = text_bool(True)
        return ext


class ViewMessageRequestHeader(RequestHeader):
    """VIEW_MESSAGE_BY_ID: the message at a commit log offset (``topic`` only from RocketMQ 5 clients)."""

    __slots__ = ("offset", "topic")
    TOPIC_FIELD = "topic"

    def __init__(self, offset: int, topic: str | None = None) -> None:
        self.offset = offset
        self.topic = topic

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> ViewMessageRequestHeader:
        return cls(field_int(ext, "offset"), ext.get("topic"))

    def encode(self) -> dict[str, str]:
        ext = {"offset": str(self.offset)}
        if self.topic is not None:
            ext["topic"] = self.topic
        return ext


__all__ = ["GetEarliestMsgStoretimeRequestHeader", "GetMaxOffsetRequestHeader", "GetMinOffsetRequestHeader",
           "QueryMessageRequestHeader", "SearchOffsetRequestHeader", "ViewMessageRequestHeader"]
