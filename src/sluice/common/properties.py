"""The message properties string: ``name \\x01 value`` pairs separated by ``\\x02``."""

import functools
from operator import methodcaller

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
_SPLIT_PAIR = methodcaller("split", NAME_VALUE_SEPARATOR, 1)

# Well-known property keys (MessageConst)
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_ID = "__transactionId__"
# Timer messages (RocketMQ 5): when to deliver — absolute, or relative to the broker's clock — and what the
# broker's timer wheel records on the way.
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"
# RocketMQ 5.4 (RIP-80): a message's priority, 0 the lowest; on a PRIORITY topic it picks the queue.
PROPERTY_PRIORITY = "_SYS_MSG_PRIORITY_"
PROPERTY_LITE_TOPIC = "__LITE_TOPIC"
# Light message queues: the queues a message is also entered in ("%LMQ%a,%LMQ%b"), and (written by the broker) its
# offset in each.
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
# Request-reply (RocketMQ 4.6, RIP-16): a request names its requester and the id its reply carries back; a reply
# is marked as one; the broker and the requester stamp when they passed it on and took it.
PROPERTY_CORRELATION_ID = "CORRELATION_ID"
PROPERTY_MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_MESSAGE_TTL = "TTL"
PROPERTY_REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
PROPERTY_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
PROPERTY_MESSAGE_TYPE = "MSG_TYPE"
REPLY_MESSAGE_FLAG = "reply"
KEY_SEPARATOR = " "


def encode_properties(props: dict[str, str]) -> bytes:
    """Encode properties as Java does (no trailing separator)."""
    if not props:
        return b""
    return PROPERTY_SEPARATOR.join(map(NAME_VALUE_SEPARATOR.join, props.items())).encode("utf-8")


def property_value(data: bytes, name: str) -> str | None:
    """The value of property ``name`` in an encoded properties string, without decoding the rest; None when
    absent. Agrees with ``decode_properties(data).get(name)`` (for a repeated name, the last one wins)."""
    marker = property_marker(name)
    i = data.rfind(marker)
    while i > 0 and data[i - 1] != 2:  # not at a segment start: part of another value
        i = data.rfind(marker, 0, i)
    if i < 0:
        return None
    start = i + len(marker)
    end = data.find(b"\x02", start)
    return data[start:end if end >= 0 else len(data)].decode("utf-8", errors="replace")


def has_property(data: bytes, name: str) -> bool:
    """Whether an encoded properties string holds property ``name``."""
    marker = property_marker(name)
    return data.startswith(marker) or b"\x02" + marker in data


@functools.cache
def property_marker(name: str) -> bytes:
    """``name`` and the name/value separator: what starts property ``name`` in an encoded string."""
    return f"{name}{NAME_VALUE_SEPARATOR}".encode()


def decode_properties(data: bytes | str) -> dict[str, str]:
    """Decode a properties string written by Java (no trailing separator) or C++ (trailing separator).

    Like Java's parser, segments without a name/value separator are skipped.
    """
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", errors="replace")
    if not text:
        return {}
    try:  # the usual shape, split in C: every segment "name\x01value"
        out = dict(map(_SPLIT_PAIR, text.rstrip(PROPERTY_SEPARATOR).split(PROPERTY_SEPARATOR)))
        if "" not in out:
            return out
    except ValueError:
        pass
    out = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        name, sep, value = segment.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            out[name] = value
    return out
