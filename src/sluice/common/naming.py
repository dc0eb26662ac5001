"""Topic and group naming rules (RocketMQ's Validators)."""

import functools
import re

from sluice.common.errors import InvalidNameError

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
_VALID_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # RocketMQ's name for the delayed-message topic
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # the broker's own topics (timer wheel, POP's revive log): no client sends there
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"  # a cluster's reply topic is <cluster>_REPLY_TOPIC
_REPLY_SUFFIX = "_" + REPLY_TOPIC_POSTFIX
LMQ_PREFIX = "%LMQ%"  # a light message queue's name starts so; it has one queue, 0 (RocketMQ's MixAll)
LMQ_QUEUE_ID = 0
TIMER_TOPIC = "rmq_sys_wheel_timer"  # timer messages wait here for the timer wheel (RocketMQ 5)
# System topics producers may not send to (RocketMQ TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
                                     TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT, TIMER_TOPIC})

# The topics RocketMQ counts as the system's (TopicValidator.SYSTEM_TOPIC_SET; a broker adds its cluster's and its
# own name): metrics label them ``is_system``.
SYSTEM_TOPICS = frozenset({AUTO_CREATE_TOPIC_KEY_TOPIC, SCHEDULE_TOPIC, "BenchmarkTest", TRANS_HALF_TOPIC,
                           "RMQ_SYS_TRACE_TOPIC", TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC,
                           OFFSET_MOVED_EVENT, "CHECKPOINT_TOPIC"})
SYSTEM_GROUP_PREFIX = "cid_rmq_sys_"  # (compared in lower case, as RocketMQ's MixAll.isSysConsumerGroup)


def is_system_topic(topic: str) -> bool:
    """A topic of the system's: RocketMQ's set, the broker's own logs, a cluster's reply topic."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX) or topic.endswith(_REPLY_SUFFIX)


def is_system_group(group: str) -> bool:
    return group.lower().startswith(SYSTEM_GROUP_PREFIX)


def is_lmq(name: str) -> bool:
    return name.startswith(LMQ_PREFIX)


def topic_allows_lmq(topic: str) -> bool:
    """Whether a message of ``topic`` may be dispatched to light queues (RocketMQ's MixAll.topicAllowsLMQ)."""
    return not topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX)) \
        and topic not in _NO_LMQ_TOPICS


# (beyond RocketMQ, whose upper-case transaction topics slip past its rmq_sys_ check: a half message is not
# dispatched, the committed one is)
_NO_LMQ_TOPICS = frozenset({SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})


def validate_topic(topic: str) -> None:
    """Raise ``InvalidNameError`` unless ``topic`` is a legal topic name."""
    problem = _topic_problem(topic) if isinstance(topic, str) else f"topic name must be a str, not {topic!r}"
    if problem:
        raise InvalidNameError(problem)


@functools.lru_cache(maxsize=4096)
def _topic_problem(topic: str) -> str | None:
    """What is wrong with a topic name (None: nothing); cached, as every send checks its topic."""
    if not topic:
        return "topic name is empty"
    if len(topic.encode("utf-8")) > TOPIC_MAX_LENGTH:
        return f"topic name is longer than {TOPIC_MAX_LENGTH} bytes: {topic[:40]!r}..."
    if not _VALID_NAME.match(topic):
        return f"topic name {topic!r} may only contain letters, digits, '%', '|', '_' and '-'"
    return None


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


def reply_topic(cluster: str) -> str:
    """Where a cluster's replies go (RocketMQ's ``MixAll.getReplyTopic``)."""
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group
