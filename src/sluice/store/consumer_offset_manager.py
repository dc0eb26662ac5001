"""Consumer offsets per ``topic@group`` and queue id, persisted in ``config/consumerOffset.json``."""

from __future__ import annotations

import os
import threading

from sluice.common.errors import StoreConfigError
from sluice.store.config_file import load_json, write_json_atomic

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    """The committed (next-to-consume) offset of each group on each queue."""

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self.offset_table: dict[str, dict[int, int]] = {}
        self._lock = threading.Lock()
        self._dirty = False

    def load(self) -> None:
        data = load_json(self.path)
        if data is None:
            return
        table = data.get("offsetTable", {})
        try:
            self.offset_table = {k: {int(q): int(o) for q, o in v.items()} for k, v in table.items()}
        except (AttributeError, TypeError, ValueError) as exc:
            raise StoreConfigError(f"store config file {self.path} has a malformed offsetTable: {exc}") from exc

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        with self._lock:
            self.offset_table.setdefault(key, {})[queue_id] = offset
            self._dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        return self.offset_table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id, -1)

    def groups_of_topic(self, topic: str) -> set[str]:
        return {k.split(TOPIC_GROUP_SEPARATOR, 1)[1] for k in self.offset_table if k.startswith(topic + "@")}

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            for k in [k for k in self.offset_table if k.startswith(topic + TOPIC_GROUP_SEPARATOR)]:
                del self.offset_table[k]
            self._dirty = True

    def persist(self, force: bool = False) -> None:
        with self._lock:
            if not (self._dirty or force):
                return
            snapshot = {k: {str(q): o for q, o in v.items()} for k, v in self.offset_table.items()}
            self._dirty = False
        write_json_atomic(self.path, {"offsetTable": snapshot})
