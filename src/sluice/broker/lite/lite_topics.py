"""The broker's lite topics put together: the subscription registry, the event dispatcher, the held lite pops,
the lifecycle, and the processors of POP_LITE_MESSAGE, LITE_SUBSCRIPTION_CTL and the lite admin requests, given
only what they use of the broker (its store, topic and group tables, order state, pops and the name servers'
routes)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from sluice.broker.lite.lite_event_dispatcher import LiteEventDispatcher
from sluice.broker.lite.lite_lifecycle_manager import LiteLifecycleManager, LiteStore
from sluice.broker.lite.lite_subscription_registry import LiteGroupSettings, LiteSubscriptionRegistry
from sluice.broker.pop.pop_lite_message_processor import PopLiteMessageProcessor
from sluice.broker.pop.pop_long_polling_service import PopLongPollingService
from sluice.broker.processors.lite_manager_processor import LiteManagerProcessor, RouteOf
from sluice.broker.processors.lite_subscription_ctl_processor import LiteSubscriptionCtlProcessor
from sluice.common.lite import POLICY_MAX, OffsetOption, is_lite_queue, lite_prefix
from sluice.remoting.codes import RequestCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.headers import NotifyUnsubscribeLiteRequestHeader

if TYPE_CHECKING:
    from sluice.broker.consumer_order_info_manager import ConsumerOrderInfoManager
    from sluice.broker.pop.pop_message_processor import PopMessageProcessor
    from sluice.broker.pop.pop_revive_service import PopReviveService
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

DEFAULT_MAX_EVENTS = 400  # lite.sub.client.max.event.cnt's default


class LiteTopics:
    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, order_info: ConsumerOrderInfoManager, pop: PopMessageProcessor,
                 pop_revive: PopReviveService, route_of: RouteOf) -> None:
        self.store = store
        self.groups = groups
        self.order_info = order_info
        self.polling = PopLongPollingService(config.max_pop_polling_size, config.pop_polling_size)
        self.registry = LiteSubscriptionRegistry(config.max_lite_subscription_count, self._group_settings,
                                                 self._reset_offset, _notify_unsubscribe)
        self.events = LiteEventDispatcher(
            self.registry, self._max_events, self.backlog, self._wake,
            lambda parent: store.light_queue_names(lite_prefix(parent)))
        lite_store = LiteStore(store.light_queue_names,
                               lambda lmq: store.get_max_offset_in_queue(lmq, 0),
                               lambda lmq, off: store.get_message_store_timestamp(lmq, 0, off),
                               lambda lmqs: store.on_store_thread(lambda: store.delete_topics(lmqs)),
                               store.idle_light_queues, store.note_light_queue_last, store.next_light_queue_name,
                               store.file_light_queue_names)
        self.lifecycle = LiteLifecycleManager(
            config, lite_store, topics.get, self.registry, self.events, order_info.remove_topics,
            lambda: [name for name, tc in topics.table.items() if tc.message_type == "LITE"])
        self.processors = (PopLiteMessageProcessor(config, topics, groups, pop, pop_revive, self.events,
                                                   self.polling),
                           LiteSubscriptionCtlProcessor(self.registry, groups),
                           LiteManagerProcessor(config, store, topics, groups, self.registry, self.events, order_info,
                                                route_of))

    def start(self) -> None:
        self.store.arrival_listeners.append(self.on_arrival)
        self.lifecycle.start()

    async def stop(self) -> None:
        if self.on_arrival in self.store.arrival_listeners:
            self.store.arrival_listeners.remove(self.on_arrival)
        self.polling.wake_all()
        self.events.close()
        await self.lifecycle.stop()

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        if is_lite_queue(topic):
            self.events.dispatch(topic)

    def settled(self, lmq: str, group: str) -> None:
        """A lite topic's message was acknowledged or came back: offered again when there is more."""
        if self.backlog(group, lmq):
            self.events.dispatch(lmq, group)

    def invisible_until(self, lmq: str, group: str, until_ms: int) -> None:
        """A lite topic's message in flight comes back at ``until_ms`` (its invisible time changed): offered then."""
        loop = asyncio.get_running_loop()
        self.events.offer_again_at(lmq, group, loop.time() + max(0, until_ms - time.time() * 1000) / 1000)

    def bind_topic(self, group: str) -> str | None:
        cfg = self.groups.find(group)
        return None if cfg is None else cfg.lite_bind_topic

    def backlog(self, group: str, lmq: str) -> bool:
        """Whether ``group`` has messages of ``lmq`` it has not consumed."""
        end = self.store.get_max_offset_in_queue(lmq, 0)
        return end > 0 and self.store.consumer_offsets.query_offset(group, lmq, 0) < end

    def connection_closed(self, conn: Connection) -> None:
        self.registry.connection_closed(conn)

    # == inside ======================================================================================
    def _group_settings(self, group: str) -> LiteGroupSettings:
        cfg = self.groups.find(group)
        if cfg is None:
            return LiteGroupSettings()
        return LiteGroupSettings(cfg.lite_exclusive, cfg.lite_flag("lite.sub.reset.offset.exclusive"),
                                 cfg.lite_flag("lite.sub.reset.offset.unsubscribe"),
                                 "lite.sub.wildcard" in cfg.attributes)  # (present: RocketMQ's test)

    def _max_events(self, group: str) -> int:
        cfg = self.groups.find(group)
        return DEFAULT_MAX_EVENTS if cfg is None else cfg.lite_number("lite.sub.client.max.event.cnt")

    def _wake(self, client_id: str) -> None:
        self.polling.notify_message_arriving(client_id, 0, -1)

    def _reset_offset(self, lmq: str, group: str, option: OffsetOption) -> None:
        """A subscription's offset option (RocketMQ's resetOffset): the group reads ``lmq`` from there on."""
        offsets = self.store.consumer_offsets
        current = offsets.query_offset(group, lmq, 0)
        end = self.store.get_max_offset_in_queue(lmq, 0)
        target: int | None = None
        if option.type == "POLICY":
            target = end if option.value == POLICY_MAX else self.store.get_min_offset_in_queue(lmq, 0)
        elif option.type == "OFFSET":
            target = max(0, min(option.value, end))
        elif option.type == "TAIL_N" and current >= 0:
            target = max(0, current - max(0, option.value))
        if target is not None and target != current:
            offsets.commit_offset(group, lmq, 0, target)
            self.order_info.forget((lmq, group, 0))


def _notify_unsubscribe(conn: Connection, client_id: str, group: str, lite_topic: str) -> None:
    header = NotifyUnsubscribeLiteRequestHeader(lite_topic, group, client_id)
    conn.write(RemotingCommand.request(RequestCode.NOTIFY_UNSUBSCRIBE_LITE, header.encode(), oneway=True))


__all__ = ["LiteTopics"]
