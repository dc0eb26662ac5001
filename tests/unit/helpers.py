"""Small helpers for store tests."""

from __future__ import annotations

from sluice.common.message import MessageExt, MessageExtBrokerInner
from sluice.common.message_codec import decode_records
from sluice.store import GetMessageStatus, MessageStore


def msg(topic: str = "T", body: bytes = b"body", queue_id: int = 0, tags: str | None = None,
        keys: str | None = None, uniq: str | None = None) -> MessageExtBrokerInner:
    props: dict[str, str] = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    if uniq:
        props["UNIQ_KEY"] = uniq
    return MessageExtBrokerInner(topic, body, queue_id=queue_id, properties=props, born_host="10.0.0.1:5000")


def read_queue(store: MessageStore, topic: str, queue_id: int, start: int = 0) -> list[MessageExt]:
    """Every message of a queue from ``start``, following next_begin_offset."""
    out: list[MessageExt] = []
    offset = start
    while True:
        r = store.get_messages("g", topic, queue_id, offset, 32)
        if r.status is GetMessageStatus.FOUND:
            out.extend(decode_records(b"".join(r.buffers)))
        elif r.status is not GetMessageStatus.NO_MATCHED_MESSAGE:
            return out
        offset = r.next_begin_offset
