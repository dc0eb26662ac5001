"""Lite topics (RocketMQ 5.5, RIP-83; RocketMQ's LiteUtil): a parent topic of ``message.type=LITE`` holds very many
lite topics, each a light message queue named ``%LMQ%$<parent>$<lite>``, created by the first message sent to it.
A message names its lite topic in ``__LITE_TOPIC``; the broker enters it in that light queue (INNER_MULTI_DISPATCH).

A lite topic's name is letters, digits, ``-`` and ``_``, at most ``MAX_LITE_TOPIC_SIZE`` bytes (RocketMQ's proxy's
``maxLiteTopicSize``); ``$`` separates the parts, so no parent topic or lite topic may hold one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sluice.common.errors import InvalidNameError
from sluice.common.naming import LMQ_PREFIX, validate_topic

SEPARATOR = "$"
LITE_TOPIC_PREFIX = LMQ_PREFIX + SEPARATOR
MAX_LITE_TOPIC_SIZE = 64
_VALID_LITE = re.compile(r"^[a-zA-Z0-9_-]+$")


def validate_lite_topic(lite_topic: str, max_size: int = MAX_LITE_TOPIC_SIZE) -> None:
    """Raise ``InvalidNameError`` unless ``lite_topic`` may name a lite topic (RocketMQ's GrpcValidator)."""
    if not lite_topic or not lite_topic.strip():
        raise InvalidNameError("lite topic cannot be the char sequence of whitespace")
    if len(lite_topic.encode("utf-8")) > max_size:
        raise InvalidNameError(f"lite topic exceed the max size {max_size}")
    if not _VALID_LITE.fullmatch(lite_topic):
        raise InvalidNameError("lite topic can only contain alphanumeric characters, hyphens(-), and underscores(_)")


def to_lmq_name(parent: str, lite_topic: str) -> str:
    """The light queue holding ``lite_topic`` of ``parent``."""
    return f"{LITE_TOPIC_PREFIX}{parent}{SEPARATOR}{lite_topic}"


def is_lite_queue(name: str) -> bool:
    return name.startswith(LITE_TOPIC_PREFIX)


def parent_and_lite(lmq_name: str) -> tuple[str, str] | None:
    """The parent topic and lite topic a light queue holds; None when it is no lite topic's."""
    if not lmq_name.startswith(LITE_TOPIC_PREFIX):
        return None
    parts = lmq_name[len(LITE_TOPIC_PREFIX):].split(SEPARATOR)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return parts[0], parts[1]


def lite_queue_problem(lmq_name: str) -> str | None:
    """Why ``lmq_name`` is not a lite topic's light queue that may exist (None: it may)."""
    pair = parent_and_lite(lmq_name)
    if pair is None:
        return f"{lmq_name[:80]!r} is not a lite topic's queue (%LMQ%$<parent>$<lite topic>)"
    try:
        validate_topic(pair[0])
        validate_lite_topic(pair[1])
    except InvalidNameError as exc:
        return str(exc)
    return None


def lite_prefix(parent: str) -> str:
    """What the light queue of every lite topic of ``parent`` starts with."""
    return f"{LITE_TOPIC_PREFIX}{parent}{SEPARATOR}"


def belongs_to(lmq_name: str, parent: str) -> bool:
    return lmq_name.startswith(lite_prefix(parent))


OFFSET_TYPES = ("POLICY", "OFFSET", "TAIL_N", "TIMESTAMP")
POLICY_LAST, POLICY_MIN, POLICY_MAX = 0, 1, 2  # RocketMQ's OffsetOption policy values


@dataclass(frozen=True)
class OffsetOption:
    """Where a lite subscription starts reading (RocketMQ's OffsetOption): ``POLICY`` (``POLICY_MIN``: the start,
    ``POLICY_MAX``: the end, ``POLICY_LAST``: where the group is), an ``OFFSET``, the last ``TAIL_N`` before the
    group's offset, or a ``TIMESTAMP`` (ignored, as by RocketMQ 5.5)."""

    type: str
    value: int

    def to_json(self) -> dict[str, object]:
        return {"type": self.type, "value": self.value}

    @classmethod
    def from_json(cls, data: object) -> OffsetOption | None:
        """The option of a JSON object; None when there is none; ``ValueError`` when it is malformed."""
        if data is None:
            return None
        if not isinstance(data, dict) or data.get("type") not in OFFSET_TYPES:
            raise ValueError(f"offsetOption must be an object with a type among {', '.join(OFFSET_TYPES)}")
        value = data.get("value", 0)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError("offsetOption.value must be an integer")
        return cls(str(data["type"]), value)
