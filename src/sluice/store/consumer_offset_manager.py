"""Consumer offsets per ``topic@group`` and queue id, persisted in ``config/consumerOffset.json``."""

from __future__ import annotations

import os
from collections.abc import Collection
from concurrent.futures import Future
from typing import Any

from sluice.common.config_manager import ConfigManager

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager(ConfigManager):
    """The committed (next-to-consume) offset of each group on each queue."""

    malformed = "has a malformed offsetTable"

    def __init__(self, config_dir: str) -> None:
        self.offset_table: dict[str, dict[int, int]] = {}
        # Offsets an admin reset (RocketMQ 5's server-side reset): the queue's next pull answers OFFSET_MOVED to
        # them, and commits from clients that have not seen the reset yet are ignored until then. Not persisted.
        self.reset_offset_table: dict[str, dict[int, int]] = {}
        # Where each group's last pull ended (RocketMQ's pullOffsetTable): what was handed out and not yet
        # committed is in flight (the metrics). Not persisted.
        self.pull_offset_table: dict[str, dict[int, int]] = {}
        self._dirty = False
        super().__init__(os.path.join(config_dir, "consumerOffset.json"))

    def decode(self, data: dict[str, Any]) -> None:
        self.offset_table = {k: {int(q): int(o) for q, o in v.items()} for k, v in data.get("offsetTable", {}).items()}

    def encode(self) -> dict[str, Any]:
        return {"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self.offset_table.items()}}

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        with self._lock:
            self.offset_table.setdefault(key, {})[queue_id] = offset
            self._dirty = True

    def commit_pull_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.pull_offset_table.setdefault(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})[queue_id] = offset

    def query_pull_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Where the group's last pull of the queue ended, or -1."""
        return self.pull_offset_table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id, -1)

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
        self.remove_topics({topic})

    def remove_topics(self, topics: Collection[str]) -> None:
        """Forget every group's offsets of ``topics`` (one pass over the tables, however many)."""
        gone = set(topics)

        def kept(key: str) -> bool:
            return key.rpartition(TOPIC_GROUP_SEPARATOR)[0] not in gone

        with self._lock:  # new tables, not changed ones: the event loop may be reading them (a topic is deleted
            # on the store thread)
            self.offset_table = {k: v for k, v in self.offset_table.items() if kept(k)}
            self.reset_offset_table = {k: v for k, v in self.reset_offset_table.items() if kept(k)}
            # (a copy of the items: pulls add to this table, on the loop, without the lock)
            self.pull_offset_table = {k: v for k, v in list(self.pull_offset_table.items()) if kept(k)}
            self._dirty = True

    def remove_group(self, group: str) -> None:
        """Every offset ``group`` committed (DELETE_SUBSCRIPTIONGROUP with ``cleanOffset``); written at the next
        flush."""
        suffix = TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            self.offset_table = {k: v for k, v in self.offset_table.items() if not k.endswith(suffix)}
            self.reset_offset_table = {k: v for k, v in self.reset_offset_table.items() if not k.endswith(suffix)}
            self.pull_offset_table = {k: v for k, v in list(self.pull_offset_table.items())
                                      if not k.endswith(suffix)}
            self._dirty = True

    def persist(self, force: bool = False) -> Future[None]:
        """Write the offsets now, in this thread (the store's flush thread), if they changed (or ``force``): the
        future is done. A disk that would not take them: logged once, the future holds the error, and they are
        written at the next call."""
        done: Future[None] = Future()
        with self._lock:
            if not (self._dirty or force):
                done.set_result(None)
                return done
            self._dirty = False
        error = self.writer.flush()
        if error is None:
            done.set_result(None)
        else:
            with self._lock:
                self._dirty = True
            done.set_exception(error)
        return done
