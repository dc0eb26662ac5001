"""Turning a list of ``Message`` into one batch send, with RocketMQ's batch rules.

A batch goes to one queue of one topic; every message carries its own properties including its own
``UNIQ_KEY``. Like RocketMQ's ``MessageBatch.generateFromList``: one topic, one ``wait_store_msg_ok``,
no delay levels, no retry topics; and the encoded body, like any body, must fit the producer's limit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sluice.client.message import DEFAULT_MAX_BODY_SIZE, Message
from sluice.client.message_id import create_uniq_ids
from sluice.common.batch_codec import encode_batch_record
from sluice.common.errors import MessageFormatError
from sluice.common.naming import RETRY_GROUP_TOPIC_PREFIX
from sluice.common.properties import PROPERTY_WAIT_STORE_MSG_OK


@dataclass(slots=True)
class EncodedBatch:
    """What a producer needs to send a batch: the request's topic, body and header properties, and the
    ``UNIQ_KEY`` given to each message (in order)."""

    topic: str
    body: bytes
    msg_ids: list[str]
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def wait_store_msg_ok(self) -> bool:
        return self.properties.get(PROPERTY_WAIT_STORE_MSG_OK) != "false"


def check_batch(messages: Sequence[Message], max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
    """Raise ``MessageFormatError`` (or ``InvalidNameError``) unless ``messages`` may be sent as one batch."""
    if not messages:
        raise MessageFormatError("a batch needs at least one message")
    for i, msg in enumerate(messages):
        _check_member(i, msg, messages[0], max_body_size)
        msg.validate(max_body_size)


def _check_member(i: int, msg: Message, first: Message, max_body_size: int) -> None:
    """The batch rules for message ``i`` (its own checks are ``Message._check`` / ``validate``)."""
    if not isinstance(msg, Message):
        raise MessageFormatError(f"batch item {i} is a {type(msg).__name__}, not a Message")
    if msg.delay_level > 0:
        raise MessageFormatError(f"batch message {i} has delay level {msg.delay_level}: "
                                 "delayed messages cannot be sent in a batch")
    if msg.deliver_at is not None or msg.delay is not None:
        raise MessageFormatError(f"batch message {i} has a timer (deliver_at / delay): timer messages cannot be "
                                 "sent in a batch")
    if msg.priority is not None:  # (the broker routes a single send by its priority, never a batch's)
        raise MessageFormatError(f"batch message {i} has a priority: priority messages are sent one by one")
    if msg.lite_topic is not None:  # (the broker enters only a single send in its lite topic)
        raise MessageFormatError(f"batch message {i} has a lite topic: lite topic messages are sent one by one")
    if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        raise MessageFormatError(f"batch message {i} is for retry topic {msg.topic!r}: "
                                 "retry topics cannot be sent to in a batch")
    if msg.topic != first.topic:
        raise MessageFormatError(f"batch message {i} is for topic {msg.topic!r} but message 0 for "
                                 f"{first.topic!r}: a batch goes to one topic")
    if msg.wait_store_msg_ok != first.wait_store_msg_ok:
        raise MessageFormatError(f"batch message {i} has wait_store_msg_ok={msg.wait_store_msg_ok} but "
                                 f"message 0 has {first.wait_store_msg_ok}: a batch must agree on it")
    if len(msg.body) > max_body_size:
        raise MessageFormatError(f"message body is {len(msg.body)} bytes, over the limit of {max_body_size}")


def encode_message_batch(
    messages: Sequence[Message],
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    new_ids: Callable[[int], list[str]] = create_uniq_ids,
) -> EncodedBatch:
    """Check ``messages`` (as ``check_batch`` does) and encode them, each with a fresh ``UNIQ_KEY`` from
    ``new_ids``, in one pass.

    The header properties hold just ``WAIT`` (what the C++ client sends); each inner message carries its
    own TAGS / KEYS / WAIT / UNIQ_KEY / user properties.
    """
    if not messages:
        raise MessageFormatError("a batch needs at least one message")
    first = messages[0]
    ids = new_ids(len(messages))
    parts: list[bytes] = []
    size = 0
    for i, (msg, uniq) in enumerate(zip(messages, ids, strict=True)):
        _check_member(i, msg, first, max_body_size)
        props = msg.wire_for_send(uniq, max_body_size)  # (fields are mutable: checked again, once)
        record = encode_batch_record(msg.body, props, msg.flag)
        size += len(record)
        if size > max_body_size:
            raise MessageFormatError(f"the batch's encoded body exceeds the limit of {max_body_size} bytes "
                                     f"(at message {i}); split it into smaller batches")
        parts.append(record)
    wait = "true" if first.wait_store_msg_ok else "false"
    return EncodedBatch(first.topic, b"".join(parts), ids, {PROPERTY_WAIT_STORE_MSG_OK: wait})


def split_batches(messages: Sequence[Message], max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> list[list[Message]]:
    """Split ``messages`` into consecutive runs whose encoded batch bodies each fit ``max_body_size``.

    Sizes are exact (UNIQ_KEYs are 32 characters). A single message too large for a batch of its own
    still gets a run; ``encode_message_batch`` then rejects it with a clear error.
    """
    runs: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for msg in messages:
        rec = len(encode_batch_record(b"", msg.wire_properties("0" * 32), msg.flag))
        rec += len(msg.body)
        if current and size + rec > max_body_size:
            runs.append(current)
            current, size = [], 0
        current.append(msg)
        size += rec
    if current:
        runs.append(current)
    return runs


__all__ = ["EncodedBatch", "check_batch", "encode_message_batch", "split_batches"]
