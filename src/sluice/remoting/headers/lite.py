"""The headers of the lite-topic admin requests (RocketMQ 5.5's LiteManagerProcessor): what a broker holds of a
parent topic, a lite topic, a client's lite subscription and a group's lag, and a group's full dispatch."""

from __future__ import annotations

from collections.abc import Mapping

from sluice.remoting.errors import BadRequestError
from sluice.remoting.headers._base import RequestHeader, field_int, field_str

DEFAULT_MAX_COUNT = 1000  # GET_LITE_CLIENT_INFO's maxCount when not given


class GetParentTopicInfoRequestHeader(RequestHeader):
    __slots__ = ("topic",)
    TOPIC_FIELD = "topic"

    def __init__(self, topic: str) -> None:
        self.topic = topic

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> GetParentTopicInfoRequestHeader:
        return cls(field_str(ext, "topic"))

    def encode(self) -> dict[str, str]:
        return {"topic": self.topic}


class GetLiteTopicInfoRequestHeader(RequestHeader):
    __slots__ = ("parent_topic", "lite_topic")
    TOPIC_FIELD = "parent_topic"

    def __init__(self, parent_topic: str, lite_topic: str) -> None:
        self.parent_topic = parent_topic
        self.lite_topic = lite_topic

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> GetLiteTopicInfoRequestHeader:
        return cls(field_str(ext, "parentTopic"), field_str(ext, "liteTopic"))

    def encode(self) -> dict[str, str]:
        return {"parentTopic": self.parent_topic, "liteTopic": self.lite_topic}


class GetLiteClientInfoRequestHeader(RequestHeader):
    __slots__ = ("parent_topic", "group", "client_id", "max_count")
    TOPIC_FIELD = "parent_topic"
    GROUP_FIELD = "group"

    def __init__(self, parent_topic: str, group: str, client_id: str, max_count: int = DEFAULT_MAX_COUNT) -> None:
        self.parent_topic = parent_topic
        self.group = group
        self.client_id = client_id
        self.max_count = max_count

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> GetLiteClientInfoRequestHeader:
        h = cls(field_str(ext, "parentTopic"), field_str(ext, "group"), field_str(ext, "clientId"),
                field_int(ext, "maxCount", DEFAULT_MAX_COUNT))
        if h.max_count <= 0:
            raise BadRequestError("[maxCount] field invalid")
        return h

    def encode(self) -> dict[str, str]:
        return {"parentTopic": self.parent_topic, "group": self.group, "clientId": self.client_id,
                "maxCount": str(self.max_count)}


class GetLiteGroupInfoRequestHeader(RequestHeader):
    """``lite_topic`` empty: the group's lag over all its lite topics, the ``top_k`` largest by count and by age."""

    __slots__ = ("group", "lite_topic", "top_k")
    GROUP_FIELD = "group"

    def __init__(self, group: str, lite_topic: str = "", top_k: int = 0) -> None:
        self.group = group
        self.lite_topic = lite_topic
        self.top_k = top_k

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> GetLiteGroupInfoRequestHeader:
        return cls(field_str(ext, "group"), ext.get("liteTopic") or "", field_int(ext, "topK", 0))

    def encode(self) -> dict[str, str]:
        ext = {"group": self.group, "topK": str(self.top_k)}
        if self.lite_topic:
            ext["liteTopic"] = self.lite_topic
        return ext


class TriggerLiteDispatchRequestHeader(RequestHeader):
    """A full dispatch of ``group``'s lite topics to its readers (to ``client_id`` only, when given)."""

    __slots__ = ("group", "client_id")
    GROUP_FIELD = "group"

    def __init__(self, group: str, client_id: str = "") -> None:
        self.group = group
        self.client_id = client_id

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> TriggerLiteDispatchRequestHeader:
        return cls(field_str(ext, "group"), ext.get("clientId") or "")

    def encode(self) -> dict[str, str]:
        ext = {"group": self.group}
        if self.client_id:
            ext["clientId"] = self.client_id
        return ext


__all__ = ["DEFAULT_MAX_COUNT", "GetLiteClientInfoRequestHeader", "GetLiteGroupInfoRequestHeader",
           "GetLiteTopicInfoRequestHeader", "GetParentTopicInfoRequestHeader", "TriggerLiteDispatchRequestHeader"]
