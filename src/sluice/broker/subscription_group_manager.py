"""Consumer group configs (``config/subscriptionGroup.json``), auto-created on first use by default."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from sluice.common.attributes import GROUP_ATTRIBUTES, PRIORITY_FACTOR, LongRangeAttribute
from sluice.common.config import BrokerConfig
from sluice.common.config_manager import ConfigManager
from sluice.common.structs import DataVersion

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    # RocketMQ 5: a FIFO group (its gRPC consumers receive each message group in order).
    consume_message_orderly: bool = False
    # RocketMQ's group attributes (``priority.factor`` ...: sluice.common.attributes).
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def priority_factor(self) -> int:
        """The share (0..100) of this group's pops of a priority topic that take the highest priority first."""
        return PRIORITY_FACTOR.value_of(self.attributes)

    @property
    def lite_bind_topic(self) -> str | None:
        """The parent topic whose lite topics this group reads (``lite.bind.topic``), if it is a lite group."""
        return self.attributes.get("lite.bind.topic") or None

    @property
    def lite_exclusive(self) -> bool:
        """``lite.sub.model=Exclusive``: a lite topic's new reader takes it over from the group's others."""
        return self.attributes.get("lite.sub.model") == "Exclusive"

    def lite_flag(self, name: str) -> bool:
        """``lite.sub.reset.offset.exclusive`` / ``.unsubscribe`` (false when unset)."""
        return self.attributes.get(name, "").lower() == "true"

    def lite_number(self, name: str) -> int:
        """``lite.sub.client.quota`` / ``lite.sub.client.max.event.cnt``, their defaults when unset."""
        attribute = GROUP_ATTRIBUTES[name]
        assert isinstance(attribute, LongRangeAttribute)
        return attribute.value_of(self.attributes)

    def to_json(self) -> dict[str, Any]:
        return {"brokerId": self.broker_id, "consumeBroadcastEnable": self.consume_broadcast_enable,
                "consumeEnable": self.consume_enable, "consumeFromMinEnable": self.consume_from_min_enable,
                "groupName": self.group_name, "notifyConsumerIdsChangedEnable":
                    self.notify_consumer_ids_changed_enable, "retryMaxTimes": self.retry_max_times,
                "retryQueueNums": self.retry_queue_nums,
                "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
                "consumeMessageOrderly": self.consume_message_orderly, "attributes": dict(self.attributes)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionGroupConfig:
        return cls(str(d["groupName"]), bool(d.get("consumeEnable", True)), bool(d.get("consumeFromMinEnable", True)),
                   bool(d.get("consumeBroadcastEnable", True)), int(d.get("retryQueueNums", 1)),
                   int(d.get("retryMaxTimes", 16)), int(d.get("brokerId", 0)),
                   int(d.get("whichBrokerWhenConsumeSlowly", 1)), bool(d.get("notifyConsumerIdsChangedEnable", True)),
                   bool(d.get("consumeMessageOrderly", False)),
                   {str(k): str(v) for k, v in (d.get("attributes") or {}).items()})


class SubscriptionGroupManager(ConfigManager):
    malformed = "has a malformed group table"

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        super().__init__(os.path.join(config.store.store_path_config, "subscriptionGroup.json"))

    def decode(self, data: dict[str, Any]) -> None:
        self.table = {n: SubscriptionGroupConfig.from_json(g)
                      for n, g in (data.get("subscriptionGroupTable") or {}).items()}
        self.data_version = DataVersion.from_json(data.get("dataVersion"))

    def encode(self) -> dict[str, Any]:
        return {"dataVersion": self.data_version.to_json(),
                "subscriptionGroupTable": {n: g.to_json() for n, g in sorted(self.table.items())}}

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; auto-created (and persisted) when allowed."""
        g = self.table.get(group)
        if g is None and self.config.auto_create_subscription_group:
            g = SubscriptionGroupConfig(group, retry_queue_nums=self.config.retry_queue_nums,
                                        retry_max_times=self.config.max_reconsume_times)
            self.update(g)
        return g

    def update(self, g: SubscriptionGroupConfig) -> None:
        with self._lock:
            self.table = {**self.table, g.group_name: g}
            self.data_version.counter += 1
        self.persist()

    def delete(self, group: str) -> bool:
        with self._lock:
            if group not in self.table:
                return False
            self.table = {k: v for k, v in self.table.items() if k != group}
        self.persist()
        return True
