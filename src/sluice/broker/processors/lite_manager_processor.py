"""The lite-topic admin requests (RocketMQ 5.5's LiteManagerProcessor; mqadmin's getBrokerLiteInfo,
getLiteTopicInfo, getLiteClientInfo, getLiteGroupInfo, triggerLiteDispatch): what the broker holds of its lite
topics, who reads one, what a client reads, how far a group lags, and a full dispatch on demand.

Answers are RocketMQ's JSON bodies, field for field. A group's lag over all its lite topics walks the offset
table (as RocketMQ does) off the event loop; its ``lagTimestampTopK`` is read from the store at each lite topic's
committed offset, where RocketMQ keeps an estimate fed by pops (the same answer once the group has popped).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from sluice.common import fastjson
from sluice.common.attributes import LITE_TOPIC_EXPIRATION
from sluice.common.errors import InvalidNameError
from sluice.common.hashing import select_by_hash
from sluice.common.lite import (
    lite_prefix,
    parent_and_lite,
    to_lmq_name,
    validate_lite_topic,
)
from sluice.common.structs import TopicConfig, TopicRouteData
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.headers.lite import (
    GetLiteClientInfoRequestHeader,
    GetLiteGroupInfoRequestHeader,
    GetLiteTopicInfoRequestHeader,
    GetParentTopicInfoRequestHeader,
    TriggerLiteDispatchRequestHeader,
)
from sluice.store.consumer_offset_manager import TOPIC_GROUP_SEPARATOR

if TYPE_CHECKING:
    from sluice.broker.consumer_order_info_manager import ConsumerOrderInfoManager
    from sluice.broker.lite.lite_event_dispatcher import LiteEventDispatcher
    from sluice.broker.lite.lite_subscription_registry import LiteSubscriptionRegistry
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

MAX_RETURN_COUNT = 10_000  # lite topics or lag entries in one answer (RocketMQ's)
STORE_TYPE = "default"  # (RocketMQ's storeType of a file-based store)

RouteOf = Callable[[str], Awaitable[TopicRouteData | None]]


class LiteManagerProcessor:
    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, registry: LiteSubscriptionRegistry, events: LiteEventDispatcher,
                 order_info: ConsumerOrderInfoManager, route_of: RouteOf) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.registry = registry
        self.events = events
        self.order_info = order_info
        self.route_of = route_of  # a topic's route as the name servers have it (None: unknown)

    # == GET_BROKER_LITE_INFO ========================================================================
    async def get_broker_lite_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        store = self.store
        current, cq_topics = await asyncio.to_thread(
            lambda: (store.lmq_queue_count(), store.consume_queue_topic_count()))
        body = {"storeType": STORE_TYPE, "maxLmqNum": self.config.store.max_lmq_consume_queue_num,
                "currentLmqNum": current, "liteSubscriptionCount": self.registry.active,
                "orderInfoCount": len(self.order_info.table), "cqTableSize": cq_topics,
                "offsetTableSize": len(store.consumer_offsets.offset_table),
                "eventMapSize": len(self.events.events), "topicMeta": self._topic_ttls(),
                "groupMeta": {t: sorted(g) for t, g in self._bound_groups().items()}}
        return _ok(req, body)

    # == GET_PARENT_TOPIC_INFO =======================================================================
    async def get_parent_topic_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetParentTopicInfoRequestHeader.decode(req.ext_fields)
        tc, refused = self._lite_parent(req, h.topic)
        if tc is None:
            return refused
        store = self.store
        count, lmqs = await asyncio.to_thread(
            lambda: (store.light_queue_count(lite_prefix(h.topic)), store.lmq_queue_count()))
        groups = self._bound_groups().get(h.topic)
        body = {"topic": h.topic, "ttl": LITE_TOPIC_EXPIRATION.value_of(tc.attributes),
                "groups": sorted(groups) if groups else None, "lmqNum": lmqs, "liteTopicCount": count}
        return _ok(req, body)

    # == GET_LITE_TOPIC_INFO =========================================================================
    async def get_lite_topic_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetLiteTopicInfoRequestHeader.decode(req.ext_fields)
        tc, refused = self._lite_parent(req, h.parent_topic)
        if tc is None:
            return refused
        lmq, refused = self._lmq(req, h.parent_topic, h.lite_topic)
        if lmq is None:
            return refused
        store = self.store

        def offsets() -> tuple[int, int, int]:
            end = store.get_max_offset_in_queue(lmq, 0)
            if end <= 0:
                return 0, 0, 0
            return max(0, store.get_min_offset_in_queue(lmq, 0)), end, \
                max(0, store.get_message_store_timestamp(lmq, 0, end - 1))

        low, high, last = await asyncio.to_thread(offsets)
        subscribers = [{"clientId": c, "group": g} for g, clients in sorted(self.registry.subscribers(lmq).items())
                       for c in clients]
        body = {"parentTopic": h.parent_topic, "liteTopic": h.lite_topic, "subscriber": subscribers,
                "topicOffset": {"minOffset": low, "maxOffset": high, "lastUpdateTimestamp": last},
                "shardingToBroker": await self._home_is_here(h.parent_topic, h.lite_topic)}
        return _ok(req, body)

    # == GET_LITE_CLIENT_INFO ========================================================================
    def get_lite_client_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetLiteClientInfoRequestHeader.decode(req.ext_fields)
        tc, refused = self._lite_parent(req, h.parent_topic)
        if tc is None:
            return refused
        cfg = self.groups.table.get(h.group)  # (a query creates no group, as find would)
        if cfg is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group [{h.group}] not exist.")
        if cfg.lite_bind_topic != h.parent_topic:
            return req.response(ResponseCode.INVALID_PARAMETER,
                                f"Subscription [{h.group}]-[{h.parent_topic}] not match.")
        sub = self.registry.clients.get(h.client_id)
        names: list[str] | None = None
        count, last = -1, -1  # (RocketMQ's: the client holds no lite subscription here)
        if sub is not None and sub.group == h.group:  # (another group's client is not shown: ACL named this one)
            count, last = len(sub.lmqs), self.events.last_access.get(h.client_id, -1)
            names = sorted(sub.lmqs)[:min(h.max_count, MAX_RETURN_COUNT)]  # (light-queue names, as RocketMQ's)
        body = {"parentTopic": h.parent_topic, "group": h.group, "clientId": h.client_id,
                "lastAccessTime": last, "lastConsumeTime": 0,
                "liteTopicCount": count, "liteTopicSet": names}
        return _ok(req, body)

    # == GET_LITE_GROUP_INFO =========================================================================
    async def get_lite_group_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetLiteGroupInfoRequestHeader.decode(req.ext_fields)
        cfg = self.groups.table.get(h.group)  # (a query creates no group, as find would)
        if cfg is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group [{h.group}] not exist.")
        parent = cfg.lite_bind_topic
        if not parent:
            return req.response(ResponseCode.INVALID_PARAMETER, f"Group [{h.group}] is not a LITE group.")
        body: dict[str, Any] = {"group": h.group, "parentTopic": parent, "liteTopic": h.lite_topic or None,
                                "earliestUnconsumedTimestamp": -1, "totalLagCount": 0}
        if not h.lite_topic:
            top_k = max(0, min(h.top_k, MAX_RETURN_COUNT))
            table = list(self.store.consumer_offsets.offset_table.items())  # (a copy on the loop; read off it)
            body.update(await asyncio.to_thread(
                lambda: self._group_lag(h.group, _lite_offsets(table, h.group, parent), top_k)))
            return _ok(req, body)
        lmq, refused = self._lmq(req, parent, h.lite_topic)
        if lmq is None:
            return refused
        store = self.store
        committed = store.consumer_offsets.query_offset(h.group, lmq, 0)

        def one() -> dict[str, Any]:
            end = store.get_max_offset_in_queue(lmq, 0)
            if end <= 0:
                return {"totalLagCount": -1, "earliestUnconsumedTimestamp": -1}
            if committed < 0:
                return {}
            last = store.get_message_store_timestamp(lmq, 0, committed - 1) if committed > 0 else 0
            return {"totalLagCount": end - committed,
                    "earliestUnconsumedTimestamp": store.get_message_store_timestamp(lmq, 0, committed),
                    "liteTopicOffsetWrapper": {"brokerOffset": end, "consumerOffset": committed, "pullOffset": 0,
                                               "lastTimestamp": last}}

        body.update(await asyncio.to_thread(one))
        return _ok(req, body)

    def _group_lag(self, group: str, offsets: list[tuple[str, int]], top_k: int) -> dict[str, Any]:
        """(a worker thread) The group's total lag, and the ``top_k`` lite topics with the most messages
        waiting and with the oldest (RocketMQ's LiteConsumerLagCalculator, over the store)."""
        store = self.store
        total = 0
        lagging: list[tuple[int, int, str]] = []  # (lag, earliest unconsumed store time, lite topic)
        for lmq, committed in offsets:
            if committed < 0:
                continue
            lag = max(0, store.get_max_offset_in_queue(lmq, 0) - committed)
            if lag > 0:
                total += lag
                pair = parent_and_lite(lmq)
                lagging.append((lag, store.get_message_store_timestamp(lmq, 0, committed), pair[1] if pair else lmq))
        by_count = heapq.nlargest(top_k, lagging, key=lambda e: e[0])
        by_time = sorted(heapq.nsmallest(top_k, (e for e in lagging if e[1] > 0), key=lambda e: e[1]),
                         key=lambda e: e[1])
        return {"totalLagCount": total,
                "earliestUnconsumedTimestamp": by_time[0][1] if by_time else -1,
                "lagCountTopK": [_lag_info(e) for e in by_count],
                "lagTimestampTopK": [_lag_info(e) for e in by_time]}

    # == TRIGGER_LITE_DISPATCH =======================================================================
    async def trigger_lite_dispatch(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = TriggerLiteDispatchRequestHeader.decode(req.ext_fields)
        cfg = self.groups.table.get(h.group)  # (a query creates no group, as find would)
        if cfg is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group [{h.group}] not exist.")
        if not cfg.lite_bind_topic:
            return req.response(ResponseCode.INVALID_PARAMETER, f"Group [{h.group}] is not a LITE group.")
        clients = [h.client_id] if h.client_id else self.registry.clients_of(h.group)
        offered = 0
        if h.group in self.registry.wildcard.get(cfg.lite_bind_topic, ()):  # (a wildcard group: by its parent)
            offered = await self.events.wildcard_dispatch(cfg.lite_bind_topic, h.group)
            clients = []
        for client_id in clients:
            sub = self.registry.clients.get(client_id)
            if sub is not None and sub.group == h.group:  # (a client of another group is not this group's)
                offered += self.events.full_dispatch(client_id)
                await asyncio.sleep(0)  # (a turn of the loop between clients: a group may have many)
        log.info("lite dispatch of group %s (%s) asked by %s: %d lite topic(s) offered", h.group,
                 h.client_id or "every client", conn.remote_addr, offered)
        return req.response(ResponseCode.SUCCESS)

    # == inside ======================================================================================
    def _lite_parent(self, req: RemotingCommand, topic: str) -> tuple[TopicConfig | None, RemotingCommand]:
        tc = self.topics.get(topic)
        if tc is None:
            return None, req.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic [{topic}] not exist.")
        if tc.message_type != "LITE":
            return None, req.response(ResponseCode.INVALID_PARAMETER, f"Topic [{topic}] type not match.")
        return tc, req.response(ResponseCode.SUCCESS)

    @staticmethod
    def _lmq(req: RemotingCommand, parent: str, lite_topic: str) -> tuple[str | None, RemotingCommand]:
        try:
            validate_lite_topic(lite_topic)
        except InvalidNameError as exc:
            return None, req.response(ResponseCode.INVALID_PARAMETER, f"lite topic {lite_topic[:80]!r}: {exc}")
        return to_lmq_name(parent, lite_topic), req.response(ResponseCode.SUCCESS)

    def _topic_ttls(self) -> dict[str, int]:
        return {name: LITE_TOPIC_EXPIRATION.value_of(tc.attributes) for name, tc in sorted(self.topics.table.items())
                if tc.message_type == "LITE"}

    def _bound_groups(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for name, cfg in self.groups.table.items():
            if cfg.lite_bind_topic:
                out.setdefault(cfg.lite_bind_topic, set()).add(name)
        return out

    async def _home_is_here(self, parent: str, lite_topic: str) -> bool:
        """Whether this broker is the one a producer sends ``lite_topic`` to (RocketMQ's LiteSharding: this broker
        when the parent's route is unknown)."""
        try:
            route = await self.route_of(parent)
        except Exception as exc:  # (no name server answers: as RocketMQ without a route)
            log.debug("route of %s: %s", parent, exc)
            route = None
        queues = route.publish_queues(parent) if route is not None else []
        if not queues:
            return True
        return select_by_hash(queues, lite_topic).broker_name == self.config.broker_name


def _lite_offsets(table: list[tuple[str, dict[int, int]]], group: str, parent: str) -> list[tuple[str, int]]:
    """The group's committed offsets in the lite topics of ``parent``, from a copy of the offset table."""
    suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
    prefix = lite_prefix(parent)
    out = []
    for key, queues in table:
        if key.endswith(suffix) and key.startswith(prefix):
            offset = queues.get(0)
            lmq = key[:-len(suffix)]
            if offset is not None and parent_and_lite(lmq) is not None:
                out.append((lmq, offset))
    return out


def _lag_info(entry: tuple[int, int, str]) -> dict[str, Any]:
    return {"liteTopic": entry[2], "lagCount": entry[0], "earliestUnconsumedTimestamp": entry[1]}


def _ok(req: RemotingCommand, body: dict[str, Any]) -> RemotingCommand:
    return req.response(ResponseCode.SUCCESS, None, body=fastjson.dumps(body))


__all__ = ["LiteManagerProcessor", "MAX_RETURN_COUNT"]
