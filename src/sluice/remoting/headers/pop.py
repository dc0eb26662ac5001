"""The headers of POP consumption: POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, and PEEK_MESSAGE,
NOTIFICATION and POLLING_INFO, which ask what a pop would find."""

from __future__ import annotations

from collections.abc import Mapping

from sluice.remoting.headers._base import RequestHeader, field_bool, field_int, field_str, text_bool

DEFAULT_POP_MAX_MSG_NUMS = 32
INIT_MODE_MAX = 1  # a group new to a queue starts at its end (0: its start)


class PopMessageRequestHeader(RequestHeader):
    __slots__ = ("consumer_group", "topic", "queue_id", "max_msg_nums", "invisible_time", "poll_time", "born_time",
                 "init_mode", "exp_type", "exp", "order", "attempt_id", "broker_name")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, topic: str, queue_id: int, max_msg_nums: int, invisible_time: int,
                 poll_time: int = 0, born_time: int = 0, init_mode: int = INIT_MODE_MAX, exp_type: str = "TAG",
                 exp: str = "*", order: bool = False, attempt_id: str = "", broker_name: str | None = None) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.max_msg_nums = max_msg_nums
        self.invisible_time = invisible_time
        self.poll_time = poll_time
        self.born_time = born_time
        self.init_mode = init_mode
        self.exp_type = exp_type
        self.exp = exp
        self.order = order
        self.attempt_id = attempt_id
        self.broker_name = broker_name

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> PopMessageRequestHeader:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "topic"), field_int(ext, "queueId", -1),
                   field_int(ext, "maxMsgNums", DEFAULT_POP_MAX_MSG_NUMS), field_int(ext, "invisibleTime"),
                   field_int(ext, "pollTime", 0), field_int(ext, "bornTime", 0),
                   field_int(ext, "initMode", INIT_MODE_MAX), ext.get("expType") or "TAG", ext.get("exp") or "*",
                   field_bool(ext, "order"), ext.get("attemptId") or "", ext.get("bname"))

    def encode(self) -> dict[str, str]:
        ext = {"consumerGroup": self.consumer_group, "topic": self.topic, "queueId": str(self.queue_id),
               "maxMsgNums": str(self.max_msg_nums), "invisibleTime": str(self.invisible_time),
               "pollTime": str(self.poll_time), "bornTime": str(self.born_time), "initMode": str(self.init_mode),
               "expType": self.exp_type, "exp": self.exp, "order": text_bool(self.order)}
        if self.broker_name is not None:
            ext["bname"] = self.broker_name
        if self.attempt_id:
            ext["attemptId"] = self.attempt_id
        return ext


class AckMessageRequestHeader(RequestHeader):
    """ACK_MESSAGE: one popped message is done with; ``extra_info`` is its receipt handle."""

    __slots__ = ("consumer_group", "topic", "queue_id", "offset", "extra_info", "broker_name", "lite_topic")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, topic: str, queue_id: int, offset: int, extra_info: str,
                 broker_name: str | None = None, lite_topic: str | None = None) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.offset = offset
        self.extra_info = extra_info
        self.broker_name = broker_name
        self.lite_topic = lite_topic  # a lite topic's message: ``topic`` is its parent

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> AckMessageRequestHeader:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "topic"), field_int(ext, "queueId"),
                   field_int(ext, "offset"), field_str(ext, "extraInfo"), ext.get("bname"),
                   ext.get("liteTopic") or None)

    def encode(self) -> dict[str, str]:
        ext = {"consumerGroup": self.consumer_group, "topic": self.topic, "queueId": str(self.queue_id),
               "extraInfo": self.extra_info, "offset": str(self.offset)}
        if self.broker_name is not None:
            ext["bname"] = self.broker_name
        if self.lite_topic:
            ext["liteTopic"] = self.lite_topic
        return ext


class ChangeInvisibleTimeRequestHeader(RequestHeader):
    """CHANGE_MESSAGE_INVISIBLETIME: a popped message stays invisible ``invisible_time`` ms from now; ``suspend``
    (RocketMQ 5.5): its coming back then is not counted as a delivery (its reconsume times stay)."""

    __slots__ = ("consumer_group", "topic", "queue_id", "offset", "extra_info", "invisible_time", "broker_name",
                 "lite_topic", "suspend")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, topic: str, queue_id: int, offset: int, extra_info: str,
                 invisible_time: int, broker_name: str | None = None, lite_topic: str | None = None,
                 suspend: bool = False) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.offset = offset
        self.extra_info = extra_info
        self.invisible_time = invisible_time
        self.broker_name = broker_name
        self.lite_topic = lite_topic  # a lite topic's message: ``topic`` is its parent
        self.suspend = suspend

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> ChangeInvisibleTimeRequestHeader:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "topic"), field_int(ext, "queueId"),
                   field_int(ext, "offset"), field_str(ext, "extraInfo"), field_int(ext, "invisibleTime"),
                   ext.get("bname"), ext.get("liteTopic") or None, field_bool(ext, "suspend"))

    def encode(self) -> dict[str, str]:
        ext = {"consumerGroup": self.consumer_group, "topic": self.topic, "queueId": str(self.queue_id),
               "extraInfo": self.extra_info, "offset": str(self.offset), "invisibleTime": str(self.invisible_time)}
        if self.broker_name is not None:
            ext["bname"] = self.broker_name
        if self.lite_topic:
            ext["liteTopic"] = self.lite_topic
        if self.suspend:
            ext["suspend"] = "true"
        return ext


class PeekMessageRequestHeader(RequestHeader):
    __slots__ = ("consumer_group", "topic", "queue_id", "max_msg_nums")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, topic: str, queue_id: int = -1,
                 max_msg_nums: int = DEFAULT_POP_MAX_MSG_NUMS) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.max_msg_nums = max_msg_nums

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> PeekMessageRequestHeader:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "topic"), field_int(ext, "queueId", -1),
                   field_int(ext, "maxMsgNums", DEFAULT_POP_MAX_MSG_NUMS))

    def encode(self) -> dict[str, str]:
        return {"consumerGroup": self.consumer_group, "topic": self.topic, "queueId": str(self.queue_id),
                "maxMsgNums": str(self.max_msg_nums)}


class NotificationRequestHeader(RequestHeader):
    __slots__ = ("consumer_group", "topic", "queue_id", "poll_time")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, topic: str, queue_id: int = -1, poll_time: int = 0) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.poll_time = poll_time

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> NotificationRequestHeader:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "topic"), field_int(ext, "queueId", -1),
                   field_int(ext, "pollTime", 0))

    def encode(self) -> dict[str, str]:
        return {"consumerGroup": self.consumer_group, "topic": self.topic, "queueId": str(self.queue_id),
                "pollTime": str(self.poll_time)}


class PollingInfoRequestHeader(RequestHeader):
    __slots__ = ("consumer_group", "topic", "queue_id")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, consumer_group: str, topic: str, queue_id: int = -1) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> PollingInfoRequestHeader:
        return cls(field_str(ext, "consumerGroup"), field_str(ext, "topic"), field_int(ext, "queueId", -1))

    def encode(self) -> dict[str, str]:
        return {"consumerGroup": self.consumer_group, "topic": self.topic, "queueId": str(self.queue_id)}


class PopLiteMessageRequestHeader(RequestHeader):
    """POP_LITE_MESSAGE: a lite push consumer's pop of the lite topics of ``topic`` (the parent) it was told of."""

    __slots__ = ("client_id", "consumer_group", "topic", "max_msg_num", "invisible_time", "poll_time", "born_time",
                 "attempt_id")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "consumer_group"

    def __init__(self, client_id: str, consumer_group: str, topic: str, max_msg_num: int, invisible_time: int,
                 poll_time: int, born_time: int = 0, attempt_id: str = "") -> None:
        self.client_id = client_id
        self.consumer_group = consumer_group
        self.topic = topic
        self.max_msg_num = max_msg_num
        self.invisible_time = invisible_time
        self.poll_time = poll_time
        self.born_time = born_time
        self.attempt_id = attempt_id

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> PopLiteMessageRequestHeader:
        return cls(field_str(ext, "clientId"), field_str(ext, "consumerGroup"), field_str(ext, "topic"),
                   field_int(ext, "maxMsgNum"), field_int(ext, "invisibleTime"), field_int(ext, "pollTime"),
                   field_int(ext, "bornTime", 0), ext.get("attemptId") or "")

    def encode(self) -> dict[str, str]:
        ext = {"clientId": self.client_id, "consumerGroup": self.consumer_group, "topic": self.topic,
               "maxMsgNum": str(self.max_msg_num), "invisibleTime": str(self.invisible_time),
               "pollTime": str(self.poll_time), "bornTime": str(self.born_time)}
        if self.attempt_id:
            ext["attemptId"] = self.attempt_id
        return ext


class NotifyUnsubscribeLiteRequestHeader(RequestHeader):
    """NOTIFY_UNSUBSCRIBE_LITE, broker to client: ``client_id`` reads ``lite_topic`` no more (it expired, or
    another reader of the group took it over)."""

    __slots__ = ("lite_topic", "consumer_group", "client_id")
    GROUP_FIELD = "consumer_group"

    def __init__(self, lite_topic: str, consumer_group: str, client_id: str) -> None:
        self.lite_topic = lite_topic
        self.consumer_group = consumer_group
        self.client_id = client_id

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> NotifyUnsubscribeLiteRequestHeader:
        return cls(field_str(ext, "liteTopic"), field_str(ext, "consumerGroup"), field_str(ext, "clientId"))

    def encode(self) -> dict[str, str]:
        return {"liteTopic": self.lite_topic, "consumerGroup": self.consumer_group, "clientId": self.client_id}


__all__ = ["DEFAULT_POP_MAX_MSG_NUMS", "INIT_MODE_MAX", "AckMessageRequestHeader", "ChangeInvisibleTimeRequestHeader",
           "NotificationRequestHeader", "NotifyUnsubscribeLiteRequestHeader", "PeekMessageRequestHeader",
           "PollingInfoRequestHeader", "PopLiteMessageRequestHeader", "PopMessageRequestHeader"]
