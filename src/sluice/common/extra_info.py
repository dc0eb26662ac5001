"""POP receipts (RocketMQ's ``ExtraInfoUtil``): the ``POP_CK`` string a popped message carries and the offset
summaries of a POP_MESSAGE answer, from which a client builds the receipts of the messages it got.

A receipt is eight fields separated by one space::

    ckOffset popTime invisibleTime reviveQid retry brokerName queueId queueOffset

``retry`` is "0" for a message of the topic itself, "1" for one of the POP retry topic ``%RETRY%<group>_<topic>``
and "2" for the v2 name ``%RETRY%<group>+<topic>``. ``reviveQid`` 999 marks an orderly (FIFO) pop.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.common.naming import RETRY_GROUP_TOPIC_PREFIX

KEY_SEPARATOR = " "
ORDER_REVIVE_QUEUE = 999
PROPERTY_POP_CK = "POP_CK"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class ReceiptError(ValueError):
    """A receipt handle that is not one the broker could have made."""


def retry_flag(topic: str) -> str:
    """The receipt's ``retry`` field for a message of ``topic``."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "2" if "+" in topic else "1"
    return "0"


def pop_retry_topic(topic: str, group: str, v2: bool = False) -> str:
    """Where un-acknowledged popped messages of ``topic`` come back for ``group`` (KeyBuilder.buildPopRetryTopic)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}{'+' if v2 else '_'}{topic}"


def real_topic(retry: str, topic: str, group: str) -> str:
    """The topic a receipt's message lives in, given the topic it was popped from (ExtraInfoUtil.getRealTopic)."""
    if retry == "0":
        return topic
    return pop_retry_topic(topic, group, v2=retry == "2")


def _long(text: str, what: str) -> int:
    if not text or not (text.isascii() and (text.isdigit() or (text[0] == "-" and text[1:].isdigit()))):
        raise ReceiptError(f"receipt field {what} {text[:40]!r} is not an integer")
    value = int(text)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ReceiptError(f"receipt field {what} {text[:40]!r} is out of range")
    return value


@dataclass(frozen=True, slots=True)
class Receipt:
    """One popped message's receipt handle, parsed."""

    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    queue_offset: int

    @property
    def orderly(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QUEUE

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    def __str__(self) -> str:
        return KEY_SEPARATOR.join(map(str, (self.ck_offset, self.pop_time, self.invisible_time, self.revive_qid,
                                            self.retry, self.broker_name, self.queue_id, self.queue_offset)))

    @staticmethod
    def offset_field(text: str) -> int:
        """A receipt's last field (queueOffset), checked as ``parse`` checks it."""
        value = _long(text, "queueOffset")
        if value < 0:
            raise ReceiptError("a receipt field is negative")
        return value

    @classmethod
    def parse(cls, text: str) -> Receipt:
        """Parse a ``POP_CK`` string; ``ReceiptError`` says what is wrong with one the broker did not make."""
        parts = text.split(KEY_SEPARATOR)
        if len(parts) != 8:
            raise ReceiptError(f"a receipt has 8 space-separated fields, not {len(parts)}")
        ck, pop_time, invisible, qid, retry, broker, queue_id, offset = parts
        if retry not in ("0", "1", "2"):
            raise ReceiptError(f"receipt retry field {retry[:40]!r} is not 0, 1 or 2")
        if not broker:
            raise ReceiptError("receipt has no broker name")
        r = cls(_long(ck, "ckOffset"), _long(pop_time, "popTime"), _long(invisible, "invisibleTime"),
                _long(qid, "reviveQid"), retry, broker, _long(queue_id, "queueId"), _long(offset, "queueOffset"))
        if min(r.ck_offset, r.pop_time, r.invisible_time, r.revive_qid, r.queue_id, r.queue_offset) < 0:
            raise ReceiptError("a receipt field is negative")
        if r.queue_id > 2**31 - 1 or r.revive_qid > 2**31 - 1:
            raise ReceiptError("a receipt's queue id is out of range")
        return r


class OffsetInfo:
    """``startOffsetInfo`` / ``msgOffsetInfo`` of a POP_MESSAGE answer: per (retry flag, queue id), where the pop
    started and the queue offsets of the messages it returned, in body order."""

    def __init__(self) -> None:
        self.start: dict[tuple[str, int], int] = {}
        self.offsets: dict[tuple[str, int], list[int]] = {}

    def add(self, topic: str, queue_id: int, start_offset: int, offsets: list[int]) -> None:
        key = (retry_flag(topic), queue_id)
        self.start[key] = start_offset
        self.offsets[key] = offsets

    def start_offset_info(self) -> str:
        return ";".join(f"{r} {q} {o}" for (r, q), o in self.start.items())

    def msg_offset_info(self) -> str:
        return ";".join(f"{r} {q} {','.join(map(str, offs))}" for (r, q), offs in self.offsets.items())

    @classmethod
    def parse(cls, start_info: str, msg_info: str) -> OffsetInfo:
        """The client's side: read both strings back (``ReceiptError`` on one the broker did not make)."""
        info = cls()
        for text, into in ((start_info, info.start), (msg_info, info.offsets)):
            for entry in filter(None, text.split(";")):
                parts = entry.split(KEY_SEPARATOR)
                if len(parts) != 3:
                    raise ReceiptError(f"offset info entry {entry[:60]!r} has not 3 fields")
                key = (parts[0], _long(parts[1], "queueId"))
                if key in into:
                    raise ReceiptError(f"offset info names {parts[0]} {parts[1]} twice")
                if into is info.start:
                    info.start[key] = _long(parts[2], "startOffset")
                else:
                    info.offsets[key] = [_long(o, "offset") for o in parts[2].split(",")]
        return info


__all__ = ["KEY_SEPARATOR", "ORDER_REVIVE_QUEUE", "PROPERTY_FIRST_POP_TIME", "PROPERTY_POP_CK", "OffsetInfo",
           "Receipt", "ReceiptError", "pop_retry_topic", "real_topic", "retry_flag"]
