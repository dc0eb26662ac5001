"""Between gRPC messages and stored ones (RocketMQ's GrpcConverter and GrpcValidator): what a gRPC producer may
send, how it is stored, how a stored message goes out to a gRPC consumer, and the handles the front gives out.

Everything a client sends is checked before it becomes a stored property: no control character in a key, a
message group or a message id (they would smuggle properties in), no user property named as one the system keeps,
no topic of the system's. Every stored value that goes out is made safe for protobuf (a time out of a Timestamp's
range goes out clamped), so one odd message cannot fail a receive that has already popped its batch.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from typing import Any

from sluice.client.message import PROPERTY_TRACE_CONTEXT, RESERVED_PROPERTY_KEYS
from sluice.common.errors import InvalidNameError
from sluice.common.extra_info import PROPERTY_POP_CK, Receipt, ReceiptError
from sluice.common.lite import validate_lite_topic
from sluice.common.message import MessageExt
from sluice.common.naming import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    validate_topic,
)
from sluice.common.properties import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_LITE_TOPIC,
    PROPERTY_PRIORITY,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from sluice.proxy.protocol import CODE, pb

MAX_BODY_SIZE = 4 * 1024 * 1024
MAX_USER_PROPERTIES_BYTES = 16 * 1024
MAX_PROPERTIES_BYTES = 32_767  # what a stored record's properties length holds
MAX_MESSAGE_ID = 128
MAX_MESSAGE_GROUP = 63
MAX_TRACE_CONTEXT = 512
MAX_DELAY_MS = 86_400_000  # a delivery time at most a day ahead (the proxy's bound)
# The range of a protobuf Timestamp (years 1 .. 9999), in ms since the epoch.
_TS_MIN_MS, _TS_MAX_MS = -62_135_596_800_000, 253_402_300_799_999
# A gRPC receipt handle: the broker's POP receipt, then where the message lies in the commit log.
HANDLE_SEPARATOR = "#"
NORMAL, FIFO, DELAY, TRANSACTION, LITE, PRIORITY = 1, 2, 3, 4, 5, 6


class Refused(Exception):
    """A request the front answers with an in-band status ``code`` (a Code name) and ``text``."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text

    def status(self) -> Any:
        return status(self.code, self.text)


def status(code: str, message: str = "") -> Any:
    return pb.Status(code=CODE[code], message=message or code)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _has_control(s: str) -> bool:
    return _CONTROL.search(s) is not None


# == topics ==========================================================================================
def check_topic(topic: str, send: bool = False) -> None:
    """``Refused`` ILLEGAL_TOPIC for a name that is not a topic, a system topic, or (``send``) a retry or dead-letter
    topic, which only the broker writes."""
    try:
        validate_topic(topic)
    except ValueError as exc:
        raise Refused("ILLEGAL_TOPIC", str(exc)) from None
    if topic.startswith(SYSTEM_TOPIC_PREFIX) or topic in NOT_ALLOWED_SEND_TOPICS or \
            topic == AUTO_CREATE_TOPIC_KEY_TOPIC:
        raise Refused("ILLEGAL_TOPIC", f"cannot access system topic {topic}")
    if send and topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        raise Refused("ILLEGAL_TOPIC", f"cannot send to {topic}: the broker writes retry and dead-letter topics")


# == send ============================================================================================
def stored_properties(m: Any) -> tuple[dict[str, str], str]:
    """The properties a gRPC message is stored with, and its message group; ``Refused`` says what is wrong."""
    sp = m.system_properties
    if not m.body:
        raise Refused("MESSAGE_BODY_EMPTY", "the message body is empty")
    if len(m.body) > MAX_BODY_SIZE:
        raise Refused("MESSAGE_BODY_TOO_LARGE", f"the body of {len(m.body)} bytes exceeds {MAX_BODY_SIZE}")
    if sp.message_type == TRANSACTION and (sp.HasField("message_group") or sp.HasField("delivery_timestamp")):
        raise Refused("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",
                      "a transactional message has no message group and no delivery time")
    if sp.HasField("message_group") and sp.HasField("delivery_timestamp"):
        raise Refused("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", "a FIFO message has no delivery time")
    props: dict[str, str] = {}
    size = 0
    for k, v in m.user_properties.items():
        if not k or k in RESERVED_PROPERTY_KEYS or _has_control(k) or _has_control(v):
            raise Refused("ILLEGAL_MESSAGE_PROPERTY_KEY", f"user property {k[:40]!r} is not allowed")
        size += len(k.encode()) + len(v.encode())
        props[k] = v
    if size > MAX_USER_PROPERTIES_BYTES:
        raise Refused("MESSAGE_PROPERTIES_TOO_LARGE", f"user properties of {size} bytes exceed 16 KiB")
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag or _has_control(sp.tag):
            raise Refused("ILLEGAL_MESSAGE_TAG", f"tag {sp.tag[:40]!r} is not allowed")
        props[PROPERTY_TAGS] = sp.tag
    for key in sp.keys:
        if not key.strip() or _has_control(key):
            raise Refused("ILLEGAL_MESSAGE_KEY", f"key {key[:40]!r} is not allowed")
    if sp.keys:
        props[PROPERTY_KEYS] = " ".join(sp.keys)
    msg_id = sp.message_id
    if not msg_id or len(msg_id) > MAX_MESSAGE_ID or _has_control(msg_id) or " " in msg_id:
        raise Refused("ILLEGAL_MESSAGE_ID", f"message id {msg_id[:40]!r} is not allowed")
    props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = msg_id
    group = ""
    if sp.HasField("message_group"):
        group = sp.message_group
        if not group or len(group.encode()) > MAX_MESSAGE_GROUP or _has_control(group):
            raise Refused("ILLEGAL_MESSAGE_GROUP", f"a message group is 1 to {MAX_MESSAGE_GROUP} bytes of text")
        props[PROPERTY_SHARDING_KEY] = group
    if sp.HasField("delivery_timestamp"):
        ts = sp.delivery_timestamp
        # The client's unit trap: some callers put milliseconds into the seconds.
        ms = ts.seconds if ts.seconds > 10**11 else ts.seconds * 1000 + ts.nanos // 1_000_000
        if ms - time.time() * 1000 > MAX_DELAY_MS:
            raise Refused("ILLEGAL_DELIVERY_TIME", "a delivery time more than a day ahead")
        props[PROPERTY_TIMER_DELIVER_MS] = str(max(ms, 0))
    if sp.HasField("lite_topic") and sp.lite_topic:  # (RocketMQ 5.5: the broker enters it in that lite topic)
        try:
            validate_lite_topic(sp.lite_topic)
        except InvalidNameError as exc:
            raise Refused("ILLEGAL_LITE_TOPIC", str(exc)) from None
        props[PROPERTY_LITE_TOPIC] = sp.lite_topic
    if sp.HasField("trace_context") and sp.trace_context:  # (W3C traceparent: RocketMQ's TRACE_CONTEXT property)
        if len(sp.trace_context) > MAX_TRACE_CONTEXT or _has_control(sp.trace_context):
            raise Refused("ILLEGAL_MESSAGE_PROPERTY_KEY", f"a trace context is 1 to {MAX_TRACE_CONTEXT} characters "
                                                          f"of text")
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    if sp.HasField("priority"):  # (RIP-80; on a FIFO, delay or transactional message the broker drops it)
        if sp.priority < 0:
            raise Refused("BAD_REQUEST", f"the message priority {sp.priority} is below 0")
        props[PROPERTY_PRIORITY] = str(sp.priority)
    if sum(len(k.encode()) + len(v.encode()) + 2 for k, v in props.items()) > MAX_PROPERTIES_BYTES - 256:
        raise Refused("MESSAGE_PROPERTIES_TOO_LARGE", "the message's properties do not fit a stored record")
    return props, group


# == receive =========================================================================================
def _set_time(field: Any, ms: int) -> None:
    field.FromMilliseconds(min(max(ms, _TS_MIN_MS), _TS_MAX_MS))


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def to_pb_message(m: MessageExt, topic: Any, invisible: float, lite_pop: bool = False) -> Any:
    """A stored message as it goes out to a gRPC consumer (or in a transaction check): the user's properties only,
    the system's as system properties, an MD5 digest of the body (what both official clients check alike).
    ``lite_pop``: popped from its lite topic (its receipt handle names it)."""
    props = m.properties
    out = pb.Message(body=m.body)
    out.topic.CopyFrom(topic)
    sp = out.system_properties
    sp.message_id = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or m.msg_id
    if PROPERTY_POP_CK in props:  # the broker's receipt, and where the message lies (for a forward to the DLQ)
        sp.receipt_handle = make_handle(Receipt.parse(props[PROPERTY_POP_CK]), m.commit_log_offset,
                                        props.get(PROPERTY_LITE_TOPIC) if lite_pop else None)
    sp.body_encoding = 1  # IDENTITY: bodies are inflated before they leave
    sp.body_digest.type = 2  # MD5
    sp.body_digest.checksum = hashlib.md5(m.body).hexdigest().upper()
    _set_time(sp.born_timestamp, m.born_timestamp)
    sp.born_host = m.born_host
    _set_time(sp.store_timestamp, m.store_timestamp)
    sp.store_host = m.store_host
    sp.queue_id = m.queue_id
    sp.queue_offset = m.queue_offset
    if invisible:
        sp.invisible_duration.FromMilliseconds(int(invisible * 1000))
    sp.delivery_attempt = min(max(m.reconsume_times, 0) + 1, 2**31 - 1)
    if props.get(PROPERTY_TAGS):
        sp.tag = props[PROPERTY_TAGS]
    if props.get(PROPERTY_KEYS):
        sp.keys.extend(k for k in props[PROPERTY_KEYS].split(" ") if k)
    sp.message_type = NORMAL
    if props.get(PROPERTY_SHARDING_KEY):
        sp.message_group = props[PROPERTY_SHARDING_KEY]
        sp.message_type = FIFO
    due = _int(props.get(PROPERTY_TIMER_OUT_MS)) or _int(props.get(PROPERTY_TIMER_DELIVER_MS))
    if due is None:
        delay_ms = _int(props.get(PROPERTY_TIMER_DELAY_MS))
        delay_s = _int(props.get(PROPERTY_TIMER_DELAY_SEC))
        if delay_ms is not None or delay_s is not None:
            due = m.born_timestamp + (delay_ms if delay_ms is not None else (delay_s or 0) * 1000)
    if due is not None:
        _set_time(sp.delivery_timestamp, due)
        sp.message_type = DELAY
    elif props.get(PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
        sp.message_type = DELAY
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        sp.message_type = TRANSACTION
    priority = _int(props.get(PROPERTY_PRIORITY))
    if priority is not None and 0 <= priority < 2**31:
        sp.priority = priority
        if sp.message_type == NORMAL:
            sp.message_type = PRIORITY
    if props.get(PROPERTY_LITE_TOPIC):
        sp.lite_topic = props[PROPERTY_LITE_TOPIC]
        if sp.message_type == NORMAL:
            sp.message_type = LITE
    if props.get(PROPERTY_TRACE_CONTEXT):
        sp.trace_context = props[PROPERTY_TRACE_CONTEXT]
    for k, v in props.items():
        if k not in RESERVED_PROPERTY_KEYS:
            out.user_properties[k] = v
    return out


# == handles =========================================================================================
def make_handle(receipt: Receipt, commit_log_offset: int | None, lite_topic: str | None = None) -> str:
    """A receipt handle: the broker's receipt, the message's commit-log offset, and the lite topic of a lite pop's
    message (its acknowledgement and invisibility changes must name it: a client that leaves it out, as the Java
    client 5.2.0's nack does, still reaches the right queue)."""
    if commit_log_offset is None:
        return str(receipt)
    handle = f"{receipt}{HANDLE_SEPARATOR}{commit_log_offset}"
    return f"{handle}{HANDLE_SEPARATOR}{lite_topic}" if lite_topic else handle


def parse_handle(handle: str) -> tuple[Receipt, int | None]:
    """A receipt handle this front gave: the broker's receipt and the message's commit-log offset."""
    parts = handle.split(HANDLE_SEPARATOR)
    if len(parts) == 1:
        return Receipt.parse(handle), None
    if len(parts) > 3:
        raise ReceiptError("a receipt handle has at most three parts")
    offset = parts[1]
    if not offset.isdigit() or len(offset) > 19:
        raise ReceiptError(f"receipt handle's {offset[:40]!r} is not a commit-log offset")
    return Receipt.parse(parts[0]), int(offset)


def handle_lite_topic(handle: str) -> str | None:
    """The lite topic a receipt handle of a lite pop's message names (None: it is no lite pop's)."""
    parts = handle.split(HANDLE_SEPARATOR)
    return parts[2] or None if len(parts) == 3 else None


@dataclass(frozen=True, slots=True)
class TransactionId:
    """A gRPC transaction id: where the half message lies, which is all END_TRANSACTION needs."""

    broker_name: str
    commit_log_offset: int
    queue_offset: int

    def encode(self) -> str:
        return f"{self.broker_name}:{self.commit_log_offset}:{self.queue_offset}"

    @classmethod
    def decode(cls, text: str) -> TransactionId:
        broker, _, rest = text.rpartition(":")
        broker, _, commit_log = broker.rpartition(":")
        if not broker or not commit_log.isdigit() or not rest.isdigit() or len(text) > 300:
            raise ValueError(f"transaction id {text[:80]!r} is not one this front gave")
        return cls(broker, int(commit_log), int(rest))


__all__ = ["HANDLE_SEPARATOR", "MAX_BODY_SIZE", "Refused", "TransactionId", "check_topic", "make_handle",
           "parse_handle", "status", "stored_properties", "to_pb_message"]
