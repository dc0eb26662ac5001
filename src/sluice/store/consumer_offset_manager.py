"""Consumer offsets per ``topic@group`` and queue id, persisted in ``config/consumerOffset.json``."""

from __future__ import annotations

import logging
import os
import threading

from sluice.common.errors import StoreConfigError
from sluice.common.files import load_json, write_json_atomic

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    """The committed (next-to-consume) offset of each group on each queue."""

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self.offset_table: dict[str, dict[int, int]] = {}
        # Offsets an admin reset (RocketMQ 5's server-side reset): the queue's next pull answers OFFSET_MOVED to
        # them, and commits from clients that have not seen the reset yet are ignored until then. Not persisted.
        self.reset_offset_table: dict[str, dict[int, int]] = {}
        self._lock = threading.Lock()
        self._dirty = False
        self._failing = False

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

    def assign_reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """An admin moved the group to ``offset``: commit it, and hold it against stale commits until the
        queue's next pull tells the consumer."""
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        with self._lock:
            self.reset_offset_table.setdefault(key, {})[queue_id] = offset
            self.offset_table.setdefault(key, {})[queue_id] = offset
            self._dirty = True

    def has_offset_reset(self, group: str, topic: str, queue_id: int) -> bool:
        return queue_id in self.reset_offset_table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})

    def take_reset_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The pending reset offset of the queue, forgotten as it is handed out; None when there is none."""
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        with self._lock:
            pending = self.reset_offset_table.get(key)
            if not pending or queue_id not in pending:
                return None
            offset = pending.pop(queue_id)
            if not pending:
                del self.reset_offset_table[key]
            return offset

    def offset_table_json(self) -> dict[str, dict[str, int]]:
        """Every group's committed offsets, as consumerOffset.json holds them (a slave copies them)."""
        with self._lock:
            return {k: {str(q): o for q, o in v.items()} for k, v in self.offset_table.items()}

    def replace_offsets(self, table: dict[str, dict[int, int]]) -> None:
        """Take ``table`` as every group's committed offsets (a slave copying its master's), persisted at the next
        ``persist`` if it changed anything."""
        with self._lock:
            if table != self.offset_table:
                self.offset_table = table
                self._dirty = True

    def groups_of_topic(self, topic: str) -> set[str]:
        with self._lock:  # (a topic is deleted on the store thread)
            keys = list(self.offset_table)
        return {k.split(TOPIC_GROUP_SEPARATOR, 1)[1] for k in keys if k.startswith(topic + "@")}

    def remove_topic(self, topic: str) -> None:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        with self._lock:  # new tables, not changed ones: the event loop may be reading them (a topic is deleted
            # on the store thread)
            self.offset_table = {k: v for k, v in self.offset_table.items() if not k.startswith(prefix)}
            self.reset_offset_table = {k: v for k, v in self.reset_offset_table.items() if not k.startswith(prefix)}
            self._dirty = True

    def persist(self, force: bool = False) -> bool:
        """Write the offsets if they changed; False (logged once, retried at the next call) when the disk would
        not take them."""
        with self._lock:
            if not (self._dirty or force):
                return True
            snapshot = {k: {str(q): o for q, o in v.items()} for k, v in self.offset_table.items()}
            self._dirty = False
        try:
            write_json_atomic(self.path, {"offsetTable": snapshot})
        except OSError as exc:
            with self._lock:
                self._dirty = True
            if not self._failing:
                log.error("cannot write the consumer offsets to %s (%s): they stay in memory and are written once "
                          "that works", self.path, exc)
            self._failing = True
            return False
        if self._failing:
            log.info("consumer offsets written to %s again", self.path)
        self._failing = False
        return True
