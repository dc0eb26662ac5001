"""Live consumers per group, their subscriptions, and membership-change notification (RocketMQ ConsumerManager)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sluice.broker.client_channel_info import ClientChannelInfo, monotonic_ms
from sluice.common.structs import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData
from sluice.remoting.connection import Connection

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    channels: dict[str, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted(self.channels)


# Called with (group, members still in it) whenever a group's membership or subscriptions change.
GroupChangeListener = Callable[[str, list[ClientChannelInfo]], None]


class ConsumerManager:
    def __init__(self, expire_ms: int, on_change: GroupChangeListener | None = None) -> None:
        self.expire_ms = expire_ms
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self.on_change = on_change

    def register_consumer(self, group: str, info: ClientChannelInfo, consume_type: ConsumeType,
                          message_model: MessageModel, consume_from_where: ConsumeFromWhere,
                          subscriptions: list[SubscriptionData]) -> bool:
        """Record a heartbeat; True (and listeners told) when members or subscriptions changed."""
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = ConsumerGroupInfo(group)
        g.consume_type, g.message_model, g.consume_from_where = consume_type, message_model, consume_from_where
        old = g.channels.get(info.client_id)
        members_changed = old is None or old.conn is not info.conn
        if old is not None and old.conn is info.conn:
            old.last_update = info.last_update
        else:
            g.channels[info.client_id] = info
        subs_changed = self._update_subscriptions(g, subscriptions, consume_type)
        if members_changed:
            log.info("consumer %s joined group %s (%d members)", info.client_id, group, len(g.channels))
        if members_changed or subs_changed:
            self._changed(g)
            return True
        return False

    @staticmethod
    def _update_subscriptions(g: ConsumerGroupInfo, subs: list[SubscriptionData], consume_type: ConsumeType) -> bool:
        if consume_type is ConsumeType.CONSUME_ACTIVELY and not subs:
            return False  # lite pull consumers heartbeat without subscriptions
        new = {s.topic: s for s in subs}
        changed = False
        for topic, s in new.items():
            old = g.subscriptions.get(topic)
            if old is None or old.sub_string != s.sub_string or s.sub_version > old.sub_version:
                changed = changed or old is None or old.sub_string != s.sub_string
                g.subscriptions[topic] = s
        for topic in [t for t in g.subscriptions if t not in new]:
            del g.subscriptions[topic]
            changed = True
        return changed

    def unregister_consumer(self, group: str, client_id: str, conn: Connection | None = None) -> None:
        """``client_id`` leaves ``group`` — only the registration made over ``conn`` when it is given."""
        g = self.groups.get(group)
        ch = g.channels.get(client_id) if g is not None else None
        if g is not None and ch is not None and (conn is None or ch.conn is conn):
            del g.channels[client_id]
            log.info("consumer %s left group %s", client_id, group)
            self._removed(g)

    def on_connection_closed(self, conn: Connection) -> None:
        for g in list(self.groups.values()):
            gone = [cid for cid, ch in g.channels.items() if ch.conn is conn]
            for cid in gone:
                del g.channels[cid]
                log.info("consumer %s of group %s disconnected", cid, g.group)
            if gone:
                self._removed(g)

    def scan_not_active(self, now: int | None = None) -> int:
        now = monotonic_ms() if now is None else now
        dropped = 0
        for g in list(self.groups.values()):
            gone = [cid for cid, ch in g.channels.items() if now - ch.last_update > self.expire_ms]
            for cid in gone:
                log.warning("consumer %s of group %s silent for %d ms: dropped", cid, g.group, self.expire_ms)
                g.channels[cid].conn.close()
                del g.channels[cid]
            if gone:
                dropped += len(gone)
                self._removed(g)
        return dropped

    def _removed(self, g: ConsumerGroupInfo) -> None:
        if not g.channels:
            del self.groups[g.group]
        self._changed(g)

    def _changed(self, g: ConsumerGroupInfo) -> None:
        if self.on_change is not None and g.channels:
            self.on_change(g.group, list(g.channels.values()))

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def consumer_ids(self, group: str) -> list[str]:
        g = self.groups.get(group)
        return g.client_ids() if g else []

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        g = self.groups.get(group)
        return g.subscriptions.get(topic) if g else None

    def groups_of_topic(self, topic: str) -> list[str]:
        return sorted(name for name, g in self.groups.items() if topic in g.subscriptions)
