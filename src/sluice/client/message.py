"""What users of the client handle: ``Message`` to send, and the results of sending, pulling and consuming.

Received messages are ``sluice.common.message.MessageExt`` (decoded stored records).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sluice.common.errors import InvalidNameError, MessageFormatError
from sluice.common.lite import validate_lite_topic
from sluice.common.message import MessageExt
from sluice.common.naming import NOT_ALLOWED_SEND_TOPICS, validate_topic
from sluice.common.properties import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_LITE_TOPIC,
    PROPERTY_PRIORITY,
    PROPERTY_SEPARATOR,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
)
from sluice.common.structs import MessageQueue

DEFAULT_MAX_BODY_SIZE = 4 * 1024 * 1024
"""Largest body the client sends by default (RocketMQ's ``maxMessageSize``, 4 MiB)."""

MAX_PROPERTIES_SIZE = 32767
"""Largest encoded properties string a stored record can hold."""

RESERVED_PROPERTY_KEYS: frozenset[str] = frozenset({
    # RocketMQ's MessageConst.STRING_HASH_SET: names the system sets or reads itself.
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
    "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
    "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
    "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
    "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
    "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS",
    "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY",
    "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
    "__CRC32#", "_SYS_MSG_PRIORITY_", "__LITE_TOPIC",
    # Not reserved by Java, but Sluice's API sets them through arguments (send(sharding_key=...), transactions).
    "__SHARDINGKEY", "__transactionId__", "TRACE_CONTEXT",
})
"""Property names a user may not set through ``Message.properties``."""


def _has_separator(s: str) -> bool:
    return NAME_VALUE_SEPARATOR in s or PROPERTY_SEPARATOR in s


def validate_send_topic(topic: str) -> None:
    """Raise ``InvalidNameError`` unless a producer may send to ``topic``."""
    if type(topic) is str and topic in _SENDABLE_TOPICS:  # checked before: a str's answer never changes
        return
    validate_topic(topic)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise InvalidNameError(f"sending to system topic {topic!r} is not allowed")
    if type(topic) is str:
        if len(_SENDABLE_TOPICS) >= _SENDABLE_TOPICS_MAX:
            _SENDABLE_TOPICS.clear()
        _SENDABLE_TOPICS.add(topic)


_SENDABLE_TOPICS: set[str] = set()
_SENDABLE_TOPICS_MAX = 4096


def validate_tag(tag: str, what: str = "tag") -> None:
    """Raise ``MessageFormatError`` unless ``tag`` can be filtered on (no '|', no control characters, not blank)."""
    if not tag or tag.strip() != tag:
        raise MessageFormatError(f"{what} {tag!r} must not be empty or start / end with whitespace")
    if "|" in tag:
        raise MessageFormatError(f"{what} {tag!r} must not contain '|' (reserved for 'a || b' subscriptions)")
    if any(c < " " or c == "\x7f" for c in tag):
        raise MessageFormatError(f"{what} {tag!r} must not contain control characters")


@dataclass(slots=True)
class Message:
    """A message to send.

    ``keys`` may be a list or one space-separated string; it is stored as a list. ``delay_level`` (1..18 on
    a default broker, 0 = none) delays delivery; so do ``deliver_at`` (a ``datetime``, or milliseconds since
    the epoch) and ``delay`` (a ``timedelta``): the broker's timer wheel delivers the message then, within its
    precision (1 s by default), at most 3 days ahead. ``wait_store_msg_ok`` asks the broker to answer only once
    the message is flushed / replicated as configured. ``properties`` holds user properties only: names the
    system uses (``TAGS``, ``KEYS``, ``UNIQ_KEY`` ... see ``RESERVED_PROPERTY_KEYS``) are refused.

    Everything that does not depend on the producer's configuration is checked here, so a bad message
    fails where it is built; ``validate`` repeats the checks (fields are mutable) and adds the size limit.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0
    wait_store_msg_ok: bool = True
    deliver_at: datetime | int | None = None
    delay: timedelta | None = None
    # A W3C ``traceparent`` carried as TRACE_CONTEXT (what RocketMQ 5's clients carry as ``trace_context``); a
    # producer with ``enable_otel`` sets it to its publish span's.
    trace_context: str | None = None
    # RocketMQ 5.4's priority (RIP-80), 0 the lowest: the broker stores the message in queue
    # min(priority, queues - 1), and on a topic of message type PRIORITY a POP consumer takes the highest queue
    # first. A priority message has no delay, no sharding key and no transaction, and is never batched.
    priority: int | None = None
    # RocketMQ 5.5's lite topic (docs/client.md#lite-topics): the message is also entered in that lite topic of its
    # topic (a ``message.type=LITE`` parent). Letters, digits, ``-`` and ``_``, at most 64 bytes; never batched.
    lite_topic: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.body, bytearray | memoryview):
            self.body = bytes(self.body)
        if isinstance(self.keys, str):
            self.keys = [k for k in self.keys.split(KEY_SEPARATOR) if k]
        elif self.keys is not None:
            self.keys = list(self.keys)
        self.properties = dict(self.properties)
        self._check()

    def _check(self) -> None:
        validate_send_topic(self.topic)
        if not isinstance(self.body, bytes):
            raise MessageFormatError(f"message body must be bytes, not {type(self.body).__name__}")
        if not self.body:
            raise MessageFormatError("message body is empty")
        if self.tags is not None:
            validate_tag(self.tags)
        for key in self.key_list():
            if not isinstance(key, str) or not key or any(c.isspace() for c in key) or _has_separator(key):
                raise MessageFormatError(f"message key {key!r} must be a non-empty string without whitespace")
        if not isinstance(self.flag, int) or not -(2**31) <= self.flag < 2**31:
            raise MessageFormatError(f"message flag {self.flag!r} must be a 32-bit integer")
        if not isinstance(self.delay_level, int) or self.delay_level < 0:
            raise MessageFormatError(f"delay level {self.delay_level!r} must be an integer >= 0 (0 = no delay)")
        timers = [name for name, v in (("deliver_at", self.deliver_at), ("delay", self.delay),
                                       ("delay_level", self.delay_level or None)) if v is not None] \
            if self.deliver_at is not None or self.delay is not None else ()
        if len(timers) > 1:
            raise MessageFormatError(f"a message has one of deliver_at, delay and delay_level, not "
                                     f"{' and '.join(timers)}")
        if self.deliver_at is not None and not (
                isinstance(self.deliver_at, datetime) or isinstance(self.deliver_at, int) and self.deliver_at >= 0):
            raise MessageFormatError(f"deliver_at {self.deliver_at!r} must be a datetime or milliseconds since the "
                                     f"epoch")
        if self.delay is not None and not (isinstance(self.delay, timedelta) and self.delay > timedelta(0)):
            raise MessageFormatError(f"delay {self.delay!r} must be a positive timedelta")
        if self.priority is not None:
            if isinstance(self.priority, bool) or not isinstance(self.priority, int) or \
                    not 0 <= self.priority < 2**31:
                raise MessageFormatError(f"priority {self.priority!r} must be an integer within 0 .. 2147483647")
            if self.delay_level or self.deliver_at is not None or self.delay is not None:
                raise MessageFormatError("a priority message has no delay (delay_level, deliver_at, delay)")
        if self.lite_topic is not None:
            if not isinstance(self.lite_topic, str):
                raise MessageFormatError(f"lite topic {self.lite_topic!r} must be a str")
            try:
                validate_lite_topic(self.lite_topic)
            except InvalidNameError as exc:
                raise MessageFormatError(f"lite topic {self.lite_topic[:80]!r}: {exc}") from None
        _check_user_properties(self.properties)
        if self.trace_context is not None and (not isinstance(self.trace_context, str) or len(
                self.trace_context) > 512 or _has_separator(self.trace_context)):
            raise MessageFormatError("trace_context must be a W3C traceparent: text of at most 512 characters")

    def key_list(self) -> list[str]:
        """The message keys as a list (empty when none)."""
        keys = self.keys
        if keys is None:
            return []
        if isinstance(keys, str):
            return [k for k in keys.split(KEY_SEPARATOR) if k]
        return keys

    def validate(self, max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        """Raise ``MessageFormatError`` / ``InvalidNameError`` unless this message may be sent.

        ``max_body_size`` is the producer's limit on the (uncompressed) body.
        """
        # A stored record holds the properties behind a signed 16-bit length (leave room for a UNIQ_KEY).
        self.wire_for_send("0" * 32, max_body_size)

    def wire_for_send(self, uniq_key: str, max_body_size: int = DEFAULT_MAX_BODY_SIZE,
                      sharding_key: str | None = None) -> bytes:
        """``validate`` and ``wire_properties`` in one pass, for the send path: the properties bytes as sent
        (with the sharding key last, as ``properties_for_wire`` plus ``__SHARDINGKEY`` would order them)."""
        self._check()
        if len(self.body) > max_body_size:
            raise MessageFormatError(f"message body is {len(self.body)} bytes, over the limit of {max_body_size}")
        wire = self._wire_properties(uniq_key)
        if sharding_key is not None and self.priority is not None:
            raise MessageFormatError("a priority message has no sharding key (it is not a FIFO message)")
        if sharding_key is not None:
            wire += _SHARDING_SUFFIX + sharding_key.encode("utf-8")
        if len(wire) > MAX_PROPERTIES_SIZE:
            raise MessageFormatError(f"message properties (tags, keys, user properties) take {len(wire)} bytes "
                                     f"encoded, over the limit of {MAX_PROPERTIES_SIZE}")
        return wire

    def wire_properties(self, uniq_key: str | None = None) -> bytes:
        """``properties_for_wire`` encoded (``name\x01value\x02`` pairs), built directly: the send path's form."""
        _check_user_properties(self.properties)
        return self._wire_properties(uniq_key)

    def _wire_properties(self, uniq_key: str | None) -> bytes:
        parts: list[str] = []
        if self.tags:
            parts.append(_TAGS_PREFIX + self.tags)
        keys = self.key_list()
        if keys:
            parts.append(_KEYS_PREFIX + KEY_SEPARATOR.join(keys))
        parts.append(_WAIT_TRUE if self.wait_store_msg_ok else _WAIT_FALSE)
        if self.delay_level > 0:
            parts.append(f"{PROPERTY_DELAY_TIME_LEVEL}{NAME_VALUE_SEPARATOR}{self.delay_level}")
        timer = self._timer_property()
        if timer is not None:
            parts.append(NAME_VALUE_SEPARATOR.join(timer))
        if uniq_key:
            parts.append(_UNIQ_PREFIX + uniq_key)
        if self.trace_context:
            parts.append(_TRACE_CONTEXT_PREFIX + self.trace_context)
        if self.priority is not None:
            parts.append(f"{PROPERTY_PRIORITY}{NAME_VALUE_SEPARATOR}{self.priority}")
        if self.lite_topic is not None:
            parts.append(f"{PROPERTY_LITE_TOPIC}{NAME_VALUE_SEPARATOR}{self.lite_topic}")
        if self.properties:
            parts.extend(map(NAME_VALUE_SEPARATOR.join, self.properties.items()))
        return PROPERTY_SEPARATOR.join(parts).encode("utf-8")

    def properties_for_wire(self, uniq_key: str | None = None) -> dict[str, str]:
        """Every property the message carries on the wire: TAGS, KEYS, WAIT, DELAY, UNIQ_KEY, then user ones."""
        _check_user_properties(self.properties)
        props: dict[str, str] = {}
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        keys = self.key_list()
        if keys:
            props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
        props[PROPERTY_WAIT_STORE_MSG_OK] = "true" if self.wait_store_msg_ok else "false"
        if self.delay_level > 0:
            props[PROPERTY_DELAY_TIME_LEVEL] = str(self.delay_level)
        timer = self._timer_property()
        if timer is not None:
            props[timer[0]] = timer[1]
        if uniq_key:
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq_key
        if self.trace_context:
            props[PROPERTY_TRACE_CONTEXT] = self.trace_context
        if self.priority is not None:
            props[PROPERTY_PRIORITY] = str(self.priority)
        if self.lite_topic is not None:
            props[PROPERTY_LITE_TOPIC] = self.lite_topic
        props.update(self.properties)
        return props

    def _timer_property(self) -> tuple[str, str] | None:
        """``deliver_at`` as TIMER_DELIVER_MS (ms since the epoch; a naive datetime is local time), ``delay`` as
        TIMER_DELAY_MS (counted from the broker's clock when it stores the message)."""
        if self.deliver_at is not None:
            at = self.deliver_at
            ms = round(at.timestamp() * 1000) if isinstance(at, datetime) else at
            return PROPERTY_TIMER_DELIVER_MS, str(ms)
        if self.delay is not None:
            return PROPERTY_TIMER_DELAY_MS, str(max(1, round(self.delay.total_seconds() * 1000)))
        return None


_TAGS_PREFIX = PROPERTY_TAGS + NAME_VALUE_SEPARATOR
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
_TRACE_CONTEXT_PREFIX = PROPERTY_TRACE_CONTEXT + NAME_VALUE_SEPARATOR
_KEYS_PREFIX = PROPERTY_KEYS + NAME_VALUE_SEPARATOR
_UNIQ_PREFIX = PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX + NAME_VALUE_SEPARATOR
_WAIT_TRUE = f"{PROPERTY_WAIT_STORE_MSG_OK}{NAME_VALUE_SEPARATOR}true"
_WAIT_FALSE = f"{PROPERTY_WAIT_STORE_MSG_OK}{NAME_VALUE_SEPARATOR}false"
_SHARDING_SUFFIX = f"{PROPERTY_SEPARATOR}{PROPERTY_SHARDING_KEY}{NAME_VALUE_SEPARATOR}".encode()


def _check_user_properties(properties: Mapping[str, str]) -> None:
    for name, value in properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise MessageFormatError(f"property {name!r}: names and values must be str, "
                                     f"not {type(name).__name__} / {type(value).__name__}")
        if name in RESERVED_PROPERTY_KEYS:
            raise MessageFormatError(f"property name {name!r} is reserved by the system; use the Message "
                                     "arguments (tags=, keys=, delay_level=, ...) or another name")
        if not name.strip() or not value.strip():
            raise MessageFormatError(f"property {name!r}: name and value must not be blank")
        if _has_separator(name) or _has_separator(value):
            raise MessageFormatError(f"property {name!r}: names and values must not contain \\x01 or \\x02")


# == results =======================================================================================
class SendStatus(enum.Enum):
    """How far a sent message got. Anything but SEND_OK means: stored, but not as durable as configured."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"

    @classmethod
    def from_response_code(cls, code: int) -> SendStatus | None:
        """The status a SEND_MESSAGE response code stands for; None when the message was not stored."""
        return _SEND_STATUS_BY_CODE.get(code)


# Response codes (RocketMQ's ResponseCode, as in sluice.remoting.codes) as plain ints: importing sluice.remoting
# would pull in its asyncio shells.
_SEND_STATUS_BY_CODE: dict[int, SendStatus] = {
    0: SendStatus.SEND_OK,  # SUCCESS
    10: SendStatus.FLUSH_DISK_TIMEOUT,
    12: SendStatus.FLUSH_SLAVE_TIMEOUT,
    11: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(slots=True)
class SendResult:
    """The outcome of a send.

    ``msg_id`` is the client-made ``UNIQ_KEY`` (for a batch: the first message's), ``offset_msg_id`` the
    broker's id (store host + commit-log offset; for a batch the broker's comma-joined list),
    ``queue_offset`` the (first) message's logical offset in ``queue``, and ``msg_ids`` every message's
    ``UNIQ_KEY`` (one element for a single message).
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    msg_ids: list[str] = field(default_factory=list)
    transaction_id: str | None = None
    # The broker's region and trace switch (a producer with trace on records a send only when the switch is on).
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    # A timer message's: what takes it back before it is due (``Producer.recall_message``).
    recall_handle: str | None = None


class ConsumeStatus(enum.Enum):
    """What a concurrent listener returns: consumed, or send the batch back to be retried later."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    """What an orderly listener returns: consumed, or pause this queue and retry the same messages."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class PullStatus(enum.Enum):
    """The outcome of a pull."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"

    @classmethod
    def from_response_code(cls, code: int) -> PullStatus | None:
        """The status a PULL_MESSAGE response code stands for; None for an error code."""
        return _PULL_STATUS_BY_CODE.get(code)


_PULL_STATUS_BY_CODE: dict[int, PullStatus] = {
    0: PullStatus.FOUND,  # SUCCESS
    19: PullStatus.NO_NEW_MSG,  # PULL_NOT_FOUND
    20: PullStatus.NO_MATCHED_MSG,  # PULL_RETRY_IMMEDIATELY
    21: PullStatus.OFFSET_ILLEGAL,  # PULL_OFFSET_MOVED
}


@dataclass(slots=True)
class PullResult:
    """The outcome of a pull: messages found (after client-side tag filtering) and where to pull next."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0


__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "MAX_PROPERTIES_SIZE",
    "NOT_ALLOWED_SEND_TOPICS",
    "RESERVED_PROPERTY_KEYS",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "Message",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
    "validate_send_topic",
    "validate_tag",
]
