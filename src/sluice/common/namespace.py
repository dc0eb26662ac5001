"""Namespaces: RocketMQ's NamespaceUtil. A namespace's topic or group ``orders`` is ``ns%orders`` on the broker, its
retry and dead-letter topics ``%RETRY%ns%group`` and ``%DLQ%ns%group``; system topics and groups are never wrapped.
The 4.x remoting clients wrap names themselves (``setNamespace``); the 5.x clients name the namespace beside each
resource (``Resource.resource_namespace``, the ``x-mq-namespace`` header) and the gRPC front wraps it.
"""

from __future__ import annotations

import re

from sluice.common.errors import InvalidNameError
from sluice.common.naming import DLQ_GROUP_TOPIC_PREFIX, LMQ_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_group

NAMESPACE_SEPARATOR = "%"
NAMESPACE_MAX_LENGTH = 64
_VALID_NAMESPACE = re.compile(r"[a-zA-Z0-9_-]+")
# RocketMQ 5.5's TopicValidator.SYSTEM_TOPIC_SET and prefixes, as NamespaceUtil.isSystemResource reads them (not
# Sluice's wider is_system_topic: a namespace's "orders_REPLY_TOPIC" is its own, as a Java client wraps it).
_SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
                            "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                            "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC",
                            "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC", "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC"})


def validate_namespace(namespace: str) -> None:
    """Raise ``InvalidNameError`` unless ``namespace`` may be one: letters, digits, '_' and '-' ('%' and '|' would
    make the wrapped names ambiguous), at most 64 characters."""
    if not isinstance(namespace, str) or not _VALID_NAMESPACE.fullmatch(namespace):
        raise InvalidNameError(f"namespace {str(namespace)[:80]!r} may only contain letters, digits, '_' and '-'")
    if len(namespace) > NAMESPACE_MAX_LENGTH:
        raise InvalidNameError(f"namespace {namespace[:40]!r}... is longer than {NAMESPACE_MAX_LENGTH} characters")
    if _system(namespace + NAMESPACE_SEPARATOR) or is_system_group(namespace + NAMESPACE_SEPARATOR):
        raise InvalidNameError(f"namespace {namespace!r} would make every name of it a system name")


def _system(resource: str) -> bool:
    """RocketMQ's NamespaceUtil.isSystemResource: never wrapped, never of a namespace."""
    return resource in _SYSTEM_TOPICS or resource.startswith(("rmq_sys_", "CID_RMQ_SYS_"))


def _split_prefix(resource: str) -> tuple[str, str]:
    """(``%RETRY%`` / ``%DLQ%`` / "", the rest)."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if resource.startswith(prefix):
            return prefix, resource[len(prefix):]
    return "", resource


def wrap(namespace: str | None, resource: str) -> str:
    """``resource`` of ``namespace`` as the broker names it (NamespaceUtil.wrapNamespace): unchanged without a
    namespace, for a system resource, a light queue (``%LMQ%...``: beyond RocketMQ, which wraps it into a name no
    light queue has), or when already wrapped."""
    if not namespace or not resource or _system(resource) or resource.startswith(LMQ_PREFIX):
        return resource
    prefix, rest = _split_prefix(resource)
    if rest.startswith(namespace + NAMESPACE_SEPARATOR):
        return resource
    return f"{prefix}{namespace}{NAMESPACE_SEPARATOR}{rest}"


def namespace_of(resource: str) -> str:
    """The namespace a broker-side name is of ("" when none: NamespaceUtil.getNamespaceFromResource)."""
    if not resource or _system(resource):
        return ""
    _, rest = _split_prefix(resource)
    i = rest.find(NAMESPACE_SEPARATOR)
    return rest[:i] if i > 0 else ""


def unwrap(resource: str, namespace: str | None = None) -> str:
    """``resource`` without its namespace (NamespaceUtil.withoutNamespace); with ``namespace``, only that one is
    taken off."""
    if not resource or _system(resource) or namespace == "":
        return resource
    prefix, rest = _split_prefix(resource)
    if namespace is not None and not rest.startswith(namespace + NAMESPACE_SEPARATOR):
        return resource
    i = rest.find(NAMESPACE_SEPARATOR)
    return f"{prefix}{rest[i + 1:]}" if i > 0 else resource
