"""The headers of sends and transactions: SEND_MESSAGE (long names) and SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE
(one-letter names), CONSUMER_SEND_MSG_BACK, END_TRANSACTION and CHECK_TRANSACTION_STATE."""

from __future__ import annotations

from collections.abc import Mapping

from sluice.common.decimal_text import parse_long
from sluice.remoting.errors import BadRequestError
from sluice.remoting.headers._base import RequestHeader, field_bool, field_int, field_str, text_bool

# SendMessageRequestHeaderV2's one-letter names → SendMessageRequestHeader's.
V2_KEYS = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
           "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
           "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}
V2_LONG_NAMES = frozenset(V2_KEYS.values())
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def _truthy(v: str | None) -> bool:
    """Booleans as Java ("true") and the C++ client ("1") write them."""
    return v is not None and v.lower() in ("true", "1")


class SendMessageRequestHeader(RequestHeader):
    """SEND_MESSAGE's header; ``decode_v2`` / ``encode_v2`` are SEND_MESSAGE_V2's and SEND_BATCH_MESSAGE's
    (RocketMQ's SendMessageRequestHeaderV2: the same fields under the letters a..n)."""

    __slots__ = ("producer_group", "topic", "default_topic", "default_topic_queue_nums", "queue_id", "sys_flag",
                 "born_timestamp", "flag", "properties", "reconsume_times", "unit_mode", "max_reconsume_times",
                 "batch", "broker_name")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "producer_group"

    def __init__(self, producer_group: str, topic: str, default_topic: str, default_topic_queue_nums: int,
                 queue_id: int, sys_flag: int, born_timestamp: int, flag: int, properties: str,
                 reconsume_times: int = 0, unit_mode: bool = False, max_reconsume_times: int | None = None,
                 batch: bool = False, broker_name: str | None = None) -> None:
        self.producer_group = producer_group
        self.topic = topic
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.flag = flag
        self.properties = properties
        self.reconsume_times = reconsume_times
        self.unit_mode = unit_mode
        self.max_reconsume_times = max_reconsume_times
        self.batch = batch
        self.broker_name = broker_name

    def _checked(self) -> SendMessageRequestHeader:
        # Java declares these int (bornTimestamp long): a value past that is refused before it reaches a record.
        if _INT_MIN <= self.queue_id <= _INT_MAX and _INT_MIN <= self.sys_flag <= _INT_MAX \
                and _INT_MIN <= self.flag <= _INT_MAX and _INT_MIN <= self.reconsume_times <= _INT_MAX \
                and _LONG_MIN <= self.born_timestamp <= _LONG_MAX:
            return self  # (the usual case, without building the list below)
        for name, value, bits in (("queueId", self.queue_id, 32), ("sysFlag", self.sys_flag, 32),
                                  ("flag", self.flag, 32), ("reconsumeTimes", self.reconsume_times, 32),
                                  ("bornTimestamp", self.born_timestamp, 64)):
            if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
                raise BadRequestError(f"header field {name!r} is {value}, not a {bits}-bit integer")
        return self

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> SendMessageRequestHeader:
        return cls(field_str(ext, "producerGroup", "DEFAULT_PRODUCER"), field_str(ext, "topic"),
                   field_str(ext, "defaultTopic", ""), field_int(ext, "defaultTopicQueueNums", 4),
                   field_int(ext, "queueId"), field_int(ext, "sysFlag", 0), field_int(ext, "bornTimestamp", 0),
                   field_int(ext, "flag", 0), ext.get("properties") or "", field_int(ext, "reconsumeTimes", 0),
                   _truthy(ext.get("unitMode")), parse_long(ext.get("maxReconsumeTimes")),
                   _truthy(ext.get("batch")), ext.get("brokerName") or None)._checked()

    @classmethod
    def decode_v2(cls, ext: Mapping[str, str]) -> SendMessageRequestHeader:
        if ext.keys() & V2_LONG_NAMES:  # a header mixing long names in: the general decode maps them
            return cls._decode_mapped(ext)
        try:  # the usual V2 header, every value a plain decimal where one is expected
            return cls(ext.get("a") or "DEFAULT_PRODUCER", ext["b"], ext.get("c", ""), int(ext.get("d") or 4),
                       int(ext["e"]), int(ext.get("f") or 0), int(ext.get("g") or 0), int(ext.get("h") or 0),
                       ext.get("i") or "", int(ext.get("j") or 0), _truthy(ext.get("k")), parse_long(ext.get("l")),
                       _truthy(ext.get("m")), ext.get("n") or None)._checked()
        except (KeyError, ValueError):
            return cls._decode_mapped(ext)  # missing or malformed: the general decode names the field

    @classmethod
    def _decode_mapped(cls, ext: Mapping[str, str]) -> SendMessageRequestHeader:
        try:
            return cls.decode({V2_KEYS.get(k, k): v for k, v in ext.items()})
        except BadRequestError as exc:  # name the key the request used: 'e' (queueId), not queueId alone
            text = str(exc)
            for key, name in V2_KEYS.items():
                text = text.replace(f"{name!r}", f"{key!r} ({name})")
            raise BadRequestError(text) from None

    def encode(self) -> dict[str, str]:
        return {V2_KEYS[k]: v for k, v in self.encode_v2().items()}

    def encode_v2(self) -> dict[str, str]:
        ext = {"a": self.producer_group, "b": self.topic, "c": self.default_topic,
               "d": str(self.default_topic_queue_nums), "e": str(self.queue_id), "f": str(self.sys_flag),
               "g": str(self.born_timestamp), "h": str(self.flag), "i": self.properties,
               "j": str(self.reconsume_times), "k": "true" if self.unit_mode else "false"}
        if self.max_reconsume_times is not None:
            ext["l"] = str(self.max_reconsume_times)
        ext["m"] = "true" if self.batch else "false"  # (inline: a hot path)
        if self.broker_name is not None:
            ext["n"] = self.broker_name
        return ext


class ConsumerSendMsgBackRequestHeader(RequestHeader):
    """CONSUMER_SEND_MSG_BACK: the message at commit log ``offset`` back to ``group``'s retry topic (or DLQ)."""

    __slots__ = ("offset", "group", "delay_level", "origin_msg_id", "origin_topic", "unit_mode",
                 "max_reconsume_times")
    TOPIC_FIELD = "origin_topic"
    GROUP_FIELD = "group"

    def __init__(self, offset: int, group: str, delay_level: int = 0, origin_msg_id: str | None = None,
                 origin_topic: str | None = None, unit_mode: bool | None = None,
                 max_reconsume_times: int | None = None) -> None:
        self.offset = offset
        self.group = group
        self.delay_level = delay_level
        self.origin_msg_id = origin_msg_id
        self.origin_topic = origin_topic
        self.unit_mode = unit_mode
        self.max_reconsume_times = max_reconsume_times

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> ConsumerSendMsgBackRequestHeader:
        group = field_str(ext, "group")
        return cls(field_int(ext, "offset"), group, field_int(ext, "delayLevel", 0), ext.get("originMsgId") or None,
                   ext.get("originTopic") or None, field_bool(ext, "unitMode") if ext.get("unitMode") else None,
                   parse_long(ext.get("maxReconsumeTimes")))

    def encode(self) -> dict[str, str]:
        ext = {"group": self.group, "offset": str(self.offset), "delayLevel": str(self.delay_level)}
        if self.origin_msg_id is not None:
            ext["originMsgId"] = self.origin_msg_id
        if self.origin_topic is not None:
            ext["originTopic"] = self.origin_topic
        if self.unit_mode is not None:
            ext["unitMode"] = text_bool(self.unit_mode)
        if self.max_reconsume_times is not None:
            ext["maxReconsumeTimes"] = str(self.max_reconsume_times)
        return ext


class EndTransactionRequestHeader(RequestHeader):
    """END_TRANSACTION: a producer's outcome (``commit_or_rollback``) for the half message it sent."""

    __slots__ = ("producer_group", "tran_state_table_offset", "commit_log_offset", "commit_or_rollback",
                 "from_transaction_check", "msg_id", "transaction_id", "topic", "broker_name")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "producer_group"

    def __init__(self, producer_group: str, tran_state_table_offset: int, commit_log_offset: int,
                 commit_or_rollback: int, from_transaction_check: bool = False, msg_id: str = "",
                 transaction_id: str | None = None, topic: str | None = None,
                 broker_name: str | None = None) -> None:
        self.producer_group = producer_group
        self.tran_state_table_offset = tran_state_table_offset
        self.commit_log_offset = commit_log_offset
        self.commit_or_rollback = commit_or_rollback
        self.from_transaction_check = from_transaction_check
        self.msg_id = msg_id
        self.transaction_id = transaction_id
        self.topic = topic
        self.broker_name = broker_name

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> EndTransactionRequestHeader:
        return cls(field_str(ext, "producerGroup"), field_int(ext, "tranStateTableOffset"),
                   field_int(ext, "commitLogOffset"), field_int(ext, "commitOrRollback"),
                   ext.get("fromTransactionCheck", "false").lower() == "true", ext.get("msgId", ""),
                   ext.get("transactionId"), ext.get("topic"), ext.get("bname"))

    def encode(self) -> dict[str, str]:
        ext = {"producerGroup": self.producer_group, "tranStateTableOffset": str(self.tran_state_table_offset),
               "commitLogOffset": str(self.commit_log_offset), "commitOrRollback": str(self.commit_or_rollback),
               "fromTransactionCheck": text_bool(self.from_transaction_check), "msgId": self.msg_id}
        if self.transaction_id is not None:
            ext["transactionId"] = self.transaction_id
        if self.topic is not None:
            ext["topic"] = self.topic
        if self.broker_name is not None:
            ext["bname"] = self.broker_name
        return ext


class CheckTransactionStateRequestHeader(RequestHeader):
    """CHECK_TRANSACTION_STATE, from a broker to a producer: what became of this half message?"""

    __slots__ = ("topic", "tran_state_table_offset", "commit_log_offset", "msg_id", "transaction_id",
                 "offset_msg_id", "broker_name")
    TOPIC_FIELD = "topic"

    def __init__(self, topic: str | None, tran_state_table_offset: int, commit_log_offset: int, msg_id: str = "",
                 transaction_id: str = "", offset_msg_id: str = "", broker_name: str = "") -> None:
        self.topic = topic
        self.tran_state_table_offset = tran_state_table_offset
        self.commit_log_offset = commit_log_offset
        self.msg_id = msg_id
        self.transaction_id = transaction_id
        self.offset_msg_id = offset_msg_id
        self.broker_name = broker_name

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> CheckTransactionStateRequestHeader:
        return cls(ext.get("topic"), field_int(ext, "tranStateTableOffset"), field_int(ext, "commitLogOffset"),
                   ext.get("msgId", ""), ext.get("transactionId", ""), ext.get("offsetMsgId", ""),
                   ext.get("bname", ""))

    def encode(self) -> dict[str, str]:
        ext = {"topic": self.topic} if self.topic is not None else {}
        ext.update({"tranStateTableOffset": str(self.tran_state_table_offset),
                    "commitLogOffset": str(self.commit_log_offset), "msgId": self.msg_id,
                    "transactionId": self.transaction_id, "offsetMsgId": self.offset_msg_id,
                    "bname": self.broker_name})
        return ext


class ReplyMessageRequestHeader(RequestHeader):
    """PUSH_REPLY_MESSAGE_TO_CLIENT, from a broker to the requesting client: a reply message as its responder sent it,
    with where and when the broker took it (RocketMQ's ReplyMessageRequestHeader)."""

    __slots__ = ("producer_group", "topic", "default_topic", "default_topic_queue_nums", "queue_id", "sys_flag",
                 "born_timestamp", "flag", "properties", "reconsume_times", "unit_mode", "born_host", "store_host",
                 "store_timestamp")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "producer_group"

    def __init__(self, producer_group: str, topic: str, default_topic: str, default_topic_queue_nums: int,
                 queue_id: int, sys_flag: int, born_timestamp: int, flag: int, properties: str, reconsume_times: int,
                 unit_mode: bool, born_host: str, store_host: str, store_timestamp: int) -> None:
        self.producer_group = producer_group
        self.topic = topic
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.flag = flag
        self.properties = properties
        self.reconsume_times = reconsume_times
        self.unit_mode = unit_mode
        self.born_host = born_host
        self.store_host = store_host
        self.store_timestamp = store_timestamp

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> ReplyMessageRequestHeader:
        return cls(field_str(ext, "producerGroup"), field_str(ext, "topic"), field_str(ext, "defaultTopic", ""),
                   field_int(ext, "defaultTopicQueueNums", 4), field_int(ext, "queueId"), field_int(ext, "sysFlag"),
                   field_int(ext, "bornTimestamp"), field_int(ext, "flag", 0), ext.get("properties") or "",
                   field_int(ext, "reconsumeTimes", 0), field_bool(ext, "unitMode"), field_str(ext, "bornHost"),
                   field_str(ext, "storeHost"), field_int(ext, "storeTimestamp"))

    def encode(self) -> dict[str, str]:
        return {"producerGroup": self.producer_group, "topic": self.topic, "defaultTopic": self.default_topic,
                "defaultTopicQueueNums": str(self.default_topic_queue_nums), "queueId": str(self.queue_id),
                "sysFlag": str(self.sys_flag), "bornTimestamp": str(self.born_timestamp), "flag": str(self.flag),
                "properties": self.properties, "reconsumeTimes": str(self.reconsume_times),
                "unitMode": text_bool(self.unit_mode), "bornHost": self.born_host, "storeHost": self.store_host,
                "storeTimestamp": str(self.store_timestamp)}


class RecallMessageRequestHeader(RequestHeader):
    """RECALL_MESSAGE: take back the timer message a recall handle names, before it is due."""

    __slots__ = ("producer_group", "topic", "recall_handle", "broker_name")
    TOPIC_FIELD = "topic"
    GROUP_FIELD = "producer_group"

    def __init__(self, producer_group: str | None, topic: str, recall_handle: str,
                 broker_name: str | None = None) -> None:
        self.producer_group = producer_group
        self.topic = topic
        self.recall_handle = recall_handle
        self.broker_name = broker_name

    @classmethod
    def decode(cls, ext: Mapping[str, str]) -> RecallMessageRequestHeader:
        return cls(ext.get("producerGroup"), field_str(ext, "topic"), field_str(ext, "recallHandle"),
                   ext.get("bname"))

    def encode(self) -> dict[str, str]:
        ext = {"topic": self.topic, "recallHandle": self.recall_handle}
        if self.producer_group is not None:
            ext["producerGroup"] = self.producer_group
        if self.broker_name is not None:
            ext["bname"] = self.broker_name
        return ext


__all__ = ["V2_KEYS", "CheckTransactionStateRequestHeader", "ConsumerSendMsgBackRequestHeader",
           "RecallMessageRequestHeader", "ReplyMessageRequestHeader",
           "EndTransactionRequestHeader", "SendMessageRequestHeader"]
