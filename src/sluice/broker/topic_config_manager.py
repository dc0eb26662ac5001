"""The broker's topics (``config/topics.json``): creation, auto-creation from TBW102, deletion."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from sluice.common.config import BrokerConfig
from sluice.common.config_manager import ConfigManager
from sluice.common.naming import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    OFFSET_MOVED_EVENT,
    SELF_TEST_TOPIC,
    is_lmq,
)
from sluice.common.structs import DataVersion, TopicConfig, perm_inherit
from sluice.common.sysflag import PERM_INHERIT, PERM_READ, PERM_WRITE

log = logging.getLogger(__name__)

SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC_KEY_TOPIC}

# Creates an internal topic (retry, dead-letter, schedule...) when first needed and makes it routable: (topic, queue
# numbers, perm) → its config (the broker's ``ensure_system_topic``).
EnsureSystemTopic = Callable[[str, int, int], TopicConfig]


def now_ms() -> int:
    return int(time.time() * 1000)


class TopicConfigManager(ConfigManager):
    """Topic configs of one broker, persisted atomically on every change."""

    malformed = "has a malformed topic table"

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        super().__init__(os.path.join(config.store.store_path_config, "topics.json"))

    def decode(self, data: dict[str, Any]) -> None:
        self.table = {name: TopicConfig.from_json(tc) for name, tc in (data.get("topicConfigTable") or {}).items()}
        self.data_version = DataVersion.from_json(data.get("dataVersion"))

    def encode(self) -> dict[str, Any]:
        return {"dataVersion": self.data_version.to_json(),
                "topicConfigTable": {n: tc.to_json() for n, tc in sorted(self.table.items())}}

    def load(self) -> None:
        """The topics of the file, and the system topics (persisted at once)."""
        super().load()
        c = self.config
        system = [TopicConfig(SELF_TEST_TOPIC, 1, 1), TopicConfig(OFFSET_MOVED_EVENT, 1, 1),
                  TopicConfig(c.broker_cluster_name, 16, 16, PERM_READ | PERM_WRITE),
                  TopicConfig(c.broker_name, 1, 1, PERM_READ | PERM_WRITE)]
        if c.auto_create_topic_enable:
            system.append(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, c.default_topic_queue_nums,
                                      c.default_topic_queue_nums, PERM_INHERIT | PERM_READ | PERM_WRITE))
        else:
            self.table.pop(AUTO_CREATE_TOPIC_KEY_TOPIC, None)
        if c.trace_topic_enable:  # (one queue, as RocketMQ: traces are read by key, not in order)
            system.append(TopicConfig(c.msg_trace_topic_name, 1, 1, PERM_READ | PERM_WRITE))
        for tc in system:
            self.table.setdefault(tc.topic_name, tc)
        self.data_version.next_version(now_ms())
        self.persist()

    def get(self, topic: str) -> TopicConfig | None:
        """The topic's config; a light queue's (one queue, read and write, never kept or registered) when the
        broker has them (RocketMQ's LmqTopicConfigManager)."""
        tc = self.table.get(topic)
        if tc is None and self.config.store.enable_lmq and is_lmq(topic):
            tc = TopicConfig(topic, 1, 1, PERM_READ | PERM_WRITE)
        return tc

    def update(self, tc: TopicConfig) -> TopicConfig | None:
        """Create or replace a topic; returns the previous config."""
        with self._lock:
            old = self.table.get(tc.topic_name)
            self.table = {**self.table, tc.topic_name: tc}
            self.data_version.next_version(now_ms())
        self.persist()
        log.info("topic %s %s: %d read / %d write queues, perm %d", tc.topic_name, "updated" if old else "created",
                 tc.read_queue_nums, tc.write_queue_nums, tc.perm)
        return old

    def delete(self, topic: str) -> bool:
        with self._lock:
            if topic not in self.table:
                return False
            table = dict(self.table)
            del table[topic]
            self.table = table
            self.data_version.next_version(now_ms())
        self.persist()
        log.info("topic %s deleted", topic)
        return True

    def create_in_send(self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None:
        """Auto-create ``topic`` from the template ``default_topic`` (RocketMQ createTopicInSendMessageMethod)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        template = self.table.get(default_topic)
        if template is None or not perm_inherit(template.perm):
            return None
        n = max(1, min(queue_nums, template.write_queue_nums))
        tc = TopicConfig(topic, n, n, template.perm & ~PERM_INHERIT)
        self.update(tc)
        return tc

    def create_system_topic(self, topic: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE) -> TopicConfig:
        """Retry / dead-letter / schedule topics: created on demand whatever the auto-create switch says."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(topic, queue_nums, queue_nums, perm)
        self.update(tc)
        return tc
