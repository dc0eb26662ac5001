"""The compiled SQL92 filters of the consumer groups, from their heartbeats (RocketMQ ConsumerFilterManager).

A heartbeat's SQL92 subscription is compiled once and kept per (topic, group) with its subscription version; a
pull that relies on the heartbeat (no subscription in the request, as the Java push consumer's) finds it here. An
expression that does not compile is not kept (RocketMQ logs it and the pulls meet FILTER_DATA_NOT_EXIST; the client
learned why at start, from CHECK_CLIENT_CONFIG). Unlike RocketMQ's, nothing is persisted and there is no bloom
filter: expressions are evaluated on each message's properties as the queue is read.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from sluice.common.errors import InvalidSubscriptionError
from sluice.common.structs import SubscriptionData
from sluice.filter import CompiledExpression, compile_expression, is_tag_type, prepare_sql92

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConsumerFilterData:
    topic: str
    group: str
    expression: str
    expression_type: str
    client_version: int
    compiled: CompiledExpression


class ConsumerFilterManager:
    def __init__(self, prepare: bool = False) -> None:
        self._by_group: dict[str, dict[str, ConsumerFilterData]] = {}
        if prepare:  # at start, not at the first subscription, which the event loop would wait for
            prepare_sql92()

    def register(self, group: str, subscriptions: Iterable[SubscriptionData]) -> None:
        """A heartbeat's subscriptions: SQL92 ones compiled (again only when the expression or type changed),
        every other topic's filter of the group dropped."""
        old = self._by_group.get(group, {})
        kept: dict[str, ConsumerFilterData] = {}
        for sub in subscriptions:
            if is_tag_type(sub.expression_type) or not sub.sub_string:
                continue
            prev = old.get(sub.topic)
            if prev is not None and sub.sub_version <= prev.client_version:
                kept[sub.topic] = prev  # an older or the same heartbeat: RocketMQ keeps what it has
                continue
            if prev is not None and (prev.expression, prev.expression_type) == (sub.sub_string, sub.expression_type):
                kept[sub.topic] = ConsumerFilterData(sub.topic, group, prev.expression, prev.expression_type,
                                                     sub.sub_version, prev.compiled)
                continue
            try:
                compiled = compile_expression(sub.expression_type, sub.sub_string)
            except InvalidSubscriptionError as exc:
                log.warning("group %s subscribes to %s with a filter that does not compile: %s", group, sub.topic,
                            str(exc).splitlines()[0])
                continue
            assert compiled is not None
            kept[sub.topic] = ConsumerFilterData(sub.topic, group, sub.sub_string, sub.expression_type,
                                                 sub.sub_version, compiled)
        if kept:
            self._by_group[group] = kept
        else:
            self._by_group.pop(group, None)

    def get(self, topic: str, group: str) -> ConsumerFilterData | None:
        filters = self._by_group.get(group)
        return filters.get(topic) if filters else None

    def of_group(self, group: str) -> dict[str, ConsumerFilterData]:
        """The group's filters by topic (the retry topic's pulls apply each message's original topic's)."""
        return self._by_group.get(group) or {}

    def retain(self, live_groups: Collection[str]) -> None:
        """Forget the filters of groups no longer online."""
        for group in [g for g in self._by_group if g not in live_groups]:
            del self._by_group[group]
