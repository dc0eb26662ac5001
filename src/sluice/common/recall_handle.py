"""The recall handle (RocketMQ's RecallMessageHandle.HandleV1): what a broker answers a timer message's send with,
and what takes that message back before it is due. ``v1 <topic> <brokerName> <timestamp> <messageId>`` in URL-safe
Base64, the timestamp being the message's due time + 1 ms."""

from __future__ import annotations

import base64
import binascii
from typing import NamedTuple

VERSION_1 = "v1"


class RecallHandleError(ValueError):
    """A recall handle that cannot be read."""


class RecallHandle(NamedTuple):
    topic: str
    broker_name: str
    timestamp: str  # milliseconds, as text (RocketMQ keeps it so)
    message_id: str  # the message's UNIQ_KEY

    def encode(self) -> str:
        raw = " ".join((VERSION_1, self.topic, self.broker_name, self.timestamp, self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @classmethod
    def decode(cls, handle: str) -> RecallHandle:
        if not handle:
            raise RecallHandleError("recall handle is invalid")
        try:
            raw = base64.urlsafe_b64decode(handle.encode() + b"=" * (-len(handle) % 4)).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise RecallHandleError("recall handle is invalid") from None
        items = raw.split(" ")
        while items and not items[-1]:  # (as Java's String.split: trailing empty items dropped)
            items.pop()
        if len(items) < 5 or items[0] != VERSION_1:
            raise RecallHandleError("recall handle is invalid")
        return cls(items[1], items[2], items[3], items[4])


__all__ = ["RecallHandle", "RecallHandleError"]
