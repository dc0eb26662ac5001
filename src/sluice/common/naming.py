"""Topic and group naming rules (RocketMQ's Validators)."""

import re

from sluice.common.errors import InvalidNameError

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
_VALID_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


def validate_topic(topic: str) -> None:
    """Raise ``InvalidNameError`` unless ``topic`` is a legal topic name."""
    if not topic:
        raise InvalidNameError("topic name is empty")
    if len(topic.encode("utf-8")) > TOPIC_MAX_LENGTH:
        raise InvalidNameError(f"topic name is longer than {TOPIC_MAX_LENGTH} bytes: {topic[:40]!r}...")
    if not _VALID_NAME.match(topic):
        raise InvalidNameError(f"topic name {topic!r} may only contain letters, digits, '%', '|', '_' and '-'")


def validate_group(group: str) -> None:
    """Raise ``InvalidNameError`` unless ``group`` is a legal producer / consumer group name."""
    if not group:
        raise InvalidNameError("group name is empty")
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidNameError(f"group name is longer than {GROUP_MAX_LENGTH} characters")
    if not _VALID_NAME.match(group):
        raise InvalidNameError(f"group name {group!r} may only contain letters, digits, '%', '|', '_' and '-'")


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group
