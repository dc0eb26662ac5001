"""Which queue a message is sent to (RocketMQ's TopicPublishInfo, MQFaultStrategy and SelectMessageQueueByHash):
a topic's writable queues from its route (through TBW102's brokers while it has none), then by pinned queue,
sharding key, selector, or round robin past brokers that failed lately."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.client.message import Message
from sluice.common.backoff import RNG
from sluice.common.config import ClientConfig
from sluice.common.errors import ClientError
from sluice.common.hashing import select_by_hash
from sluice.common.naming import AUTO_CREATE_TOPIC_KEY_TOPIC
from sluice.common.structs import MessageQueue, TopicRouteData, perm_writeable
from sluice.remoting.errors import RemotingError

if TYPE_CHECKING:
    from sluice.client.latency_fault_tolerance import LatencyFaultTolerance
    from sluice.client.mq_client import MQClientInstance

log = logging.getLogger("sluice.client.aio.producer")  # the producer's log, where users look for it

DEFAULT_TOPIC_QUEUE_NUMS = 4

QueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


@dataclass(slots=True)
class TopicPublishInfo:
    queues: list[MessageQueue]
    via_default_topic: bool  # no route yet: sending through TBW102 makes the broker create the topic


class QueueRouter:
    """A producer's queues per topic, kept while the topic's route is the same object, and its choice of one."""

    def __init__(self, client: MQClientInstance, config: ClientConfig, faults: LatencyFaultTolerance) -> None:
        self.client = client
        self.config = config
        self.faults = faults
        self._rr = itertools.count(RNG.randrange(1 << 16))
        self._publish: dict[str, tuple[TopicRouteData | None, TopicPublishInfo]] = {}

    def cached(self, topic: str) -> TopicPublishInfo | None:
        """The queues of ``topic`` when they are known and its route has not changed since: a send can go now."""
        cached = self._publish.get(topic)
        route = self.client.routes.get(topic)
        if cached is None or route is None or cached[0] is not route:
            return None
        return cached[1]

    def forget(self, topic: str) -> None:
        """The broker says the topic does not exist: its queues are asked for again."""
        self._publish.pop(topic, None)

    def select(self, info: TopicPublishInfo, queue: MessageQueue | None, sharding_key: str | None,
               selector: QueueSelector | None = None, msg: Message | None = None, arg: Any = None,
               last_broker: str | None = None) -> MessageQueue:
        """The queue of one attempt: the one pinned, the sharding key's, the selector's, a lite topic's (by its
        name's hash, as the sharding key's), else round robin past the
        broker of the last failed attempt and (with ``send_latency_fault_enable``) brokers avoided lately."""
        if queue is not None:
            return queue
        if sharding_key is not None:
            return select_by_hash(info.queues, sharding_key)
        if selector is not None and msg is not None:
            return selector(list(info.queues), msg, arg)
        if msg is not None and msg.lite_topic is not None:  # a lite topic lives on one broker (as the gRPC front)
            return select_by_hash(info.queues, msg.lite_topic)
        queues = info.queues
        n = len(queues)
        start = next(self._rr)
        if self.config.send_latency_fault_enable:
            for i in range(n):
                mq = queues[(start + i) % n]
                if mq.broker_name != last_broker and self.faults.is_available(mq.broker_name):
                    return mq
        for i in range(n):
            mq = queues[(start + i) % n]
            if mq.broker_name != last_broker:
                return mq
        return queues[start % n]

    async def publish_info(self, topic: str) -> TopicPublishInfo:
        """The queues to send ``topic`` to; through TBW102's brokers while the topic has no route yet."""
        route = self.client.routes.get(topic)
        if route is None:
            route = await self.client.update_route(topic)
        cached = self._publish.get(topic)
        if cached is not None and cached[0] is route and route is not None:
            return cached[1]
        queues = route.publish_queues(topic) if route is not None else []
        if not queues and route is not None:
            # No master to write to (one failed and no slave has taken over yet, as far as this route knows):
            # ask again, at most once a second, so sends resume soon after a promotion, not at the next poll.
            fetch = self.client.refresh_route_soon(topic)
            if fetch is not None:
                try:
                    route = await asyncio.shield(fetch)
                except (ClientError, RemotingError) as exc:
                    log.info("route refresh of %s failed: %s", topic, exc)
                queues = route.publish_queues(topic) if route is not None else []
        if queues:
            self._forget_faults_of_new_masters(cached[0] if cached is not None else None, route)
            info = TopicPublishInfo(queues, False)
            self.client.publish_topics.add(topic)
        elif route is not None:
            # The topic exists but no master may be written to (read-only, or masters down). Going through
            # TBW102 here would auto-create it, writable, on other brokers (RocketMQ refuses likewise).
            raise ClientError(f"No route info of this topic: {topic} (it has no writable queue on a live master; "
                              f"perm {', '.join(f'{q.broker_name}={q.perm}' for q in route.queue_datas)})")
        else:
            default = self.client.routes.get(AUTO_CREATE_TOPIC_KEY_TOPIC) or await self.client.update_route(
                AUTO_CREATE_TOPIC_KEY_TOPIC)
            if default is None:
                raise ClientError(f"No route info of this topic: {topic} (create it, or enable topic auto-creation)")
            queues = [MessageQueue(topic, q.broker_name, i) for q in sorted(default.queue_datas,
                                                                           key=lambda q: q.broker_name)
                      if perm_writeable(q.perm) for i in range(min(DEFAULT_TOPIC_QUEUE_NUMS, q.read_queue_nums))]
            if not queues:
                raise ClientError(f"No route info of this topic: {topic}")
            info = TopicPublishInfo(queues, True)
            self.client.publish_topics.add(topic)
        self._publish[topic] = (route, info)
        return info

    def _forget_faults_of_new_masters(self, old: TopicRouteData | None, new: TopicRouteData | None) -> None:
        """A group whose master changed address (a slave promoted) is no longer avoided for its old master's
        failures."""
        if old is None or new is None:
            return
        before = {b.broker_name: b.master_addr for b in old.broker_datas}
        for b in new.broker_datas:
            if b.master_addr is not None and before.get(b.broker_name, b.master_addr) != b.master_addr:
                self.faults.forget(b.broker_name)


__all__ = ["DEFAULT_TOPIC_QUEUE_NUMS", "QueueRouter", "QueueSelector", "TopicPublishInfo", "select_by_hash"]
