"""Consumer offsets on the client: an in-memory table, and the local file store broadcasting consumers use.

An offset is "the next offset to consume" (last consumed + 1), -1 when unknown. A clustering consumer's
offsets live on the broker; its remote store keeps an ``OffsetTable`` and sends it every few seconds.
A broadcasting consumer keeps them in ``<base_dir>/<client_id>/<group>/offsets.json`` (as RocketMQ's
``LocalFileOffsetStore``, default base ``~/.rocketmq_offsets``).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sluice.common.errors import OffsetStoreError
from sluice.common.files import fsync_dir
from sluice.common.platform import fsync
from sluice.common.structs import MessageQueue

DEFAULT_LOCAL_OFFSET_DIR = os.path.join(os.path.expanduser("~"), ".rocketmq_offsets")
OFFSETS_FILE = "offsets.json"


class OffsetTable:
    """MessageQueue → offset, thread-safe."""

    def __init__(self, initial: dict[MessageQueue, int] | None = None) -> None:
        self._lock = threading.Lock()
        self._table: dict[MessageQueue, int] = dict(initial or {})

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """Set ``mq``'s offset; with ``increase_only`` a smaller offset than the current one is ignored
        (late acknowledgements of a consumer thread must not move the offset back)."""
        with self._lock:
            if increase_only:
                current = self._table.get(mq)
                if current is not None and offset <= current:
                    return
            self._table[mq] = offset

    def read(self, mq: MessageQueue) -> int:
        """``mq``'s offset, -1 when unknown."""
        return self._table.get(mq, -1)

    def remove(self, mq: MessageQueue) -> int:
        """Forget ``mq``; returns the offset it had (-1 when unknown)."""
        with self._lock:
            return self._table.pop(mq, -1)

    def snapshot(self, topic: str | None = None) -> dict[MessageQueue, int]:
        """A copy of the table, optionally only ``topic``'s queues."""
        with self._lock:
            if topic is None:
                return dict(self._table)
            return {mq: off for mq, off in self._table.items() if mq.topic == topic}

    def clear(self) -> None:
        """Forget every queue."""
        with self._lock:
            self._table.clear()

    def __contains__(self, mq: object) -> bool:
        return mq in self._table

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"OffsetTable({len(self._table)} queues)"


def _to_json(group: str, client_id: str, table: dict[MessageQueue, int]) -> dict[str, Any]:
    return {"clientId": client_id, "group": group,
            "offsetTable": [dict(mq.to_json(), offset=off) for mq, off in sorted(table.items())]}


def _from_json(path: Path, data: Any) -> dict[MessageQueue, int]:
    if not isinstance(data, dict) or not isinstance(data.get("offsetTable"), list):
        raise OffsetStoreError(f"offset file {path} has no 'offsetTable' list; move it away to start afresh")
    table: dict[MessageQueue, int] = {}
    for i, entry in enumerate(data["offsetTable"]):
        try:
            mq = MessageQueue.from_json(entry)
            offset = int(entry["offset"])
        except (KeyError, TypeError, ValueError) as exc:
            raise OffsetStoreError(f"offset file {path}: entry {i} is not a queue with an offset ({exc!r})") from exc
        table[mq] = offset
    return table


class LocalFileOffsetStore:
    """Offsets of a broadcasting consumer, in memory and in a local JSON file.

    ``load`` reads the file (or its ``.bak`` when the file is missing); a file that exists but cannot be
    parsed raises ``OffsetStoreError`` naming it, rather than silently restarting from a guessed offset.
    ``persist_all`` writes atomically (temp file, fsync, rename) and keeps the previous version as
    ``.bak``. Offsets of queues this consumer stops holding (``remove``) stay in the file, so a queue that
    comes back resumes where it was.
    """

    def __init__(self, group: str, client_id: str, base_dir: str | os.PathLike[str] | None = None) -> None:
        self.group = group
        self.client_id = client_id
        base = Path(base_dir) if base_dir is not None else Path(DEFAULT_LOCAL_OFFSET_DIR)
        self.path = base / client_id / group / OFFSETS_FILE
        self._table = OffsetTable()
        self._stored: dict[MessageQueue, int] = {}  # what the file holds
        self._file_lock = threading.Lock()

    @property
    def bak_path(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    def load(self) -> None:
        """Read the offsets file into memory (nothing to read is fine: every offset is then unknown)."""
        source = self.path if self.path.exists() else self.bak_path
        try:
            text = source.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            raise OffsetStoreError(f"cannot read offset file {source}: {exc}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OffsetStoreError(f"offset file {source} is corrupt ({exc.msg} at line {exc.lineno} column "
                                   f"{exc.colno}); the previous version may be in {self.bak_path}") from exc
        table = _from_json(source, data)
        with self._file_lock:
            self._stored = dict(table)
        for mq, off in table.items():
            self._table.update(mq, off)

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """Set ``mq``'s offset in memory (see ``OffsetTable.update``)."""
        self._table.update(mq, offset, increase_only)

    def read_offset(self, mq: MessageQueue) -> int:
        """``mq``'s offset: in memory, else as last loaded or persisted, else -1."""
        off = self._table.read(mq)
        if off >= 0:
            return off
        with self._file_lock:
            stored = self._stored.get(mq, -1)
        if stored >= 0:
            self._table.update(mq, stored, increase_only=True)
        return stored

    def remove(self, mq: MessageQueue) -> None:
        """Stop tracking ``mq`` in memory (its last persisted offset stays in the file)."""
        self._table.remove(mq)

    def offsets(self, topic: str | None = None) -> dict[MessageQueue, int]:
        """A copy of the in-memory offsets, optionally only ``topic``'s."""
        return self._table.snapshot(topic)

    def persist_all(self, mqs: Iterable[MessageQueue] | None = None) -> bool:
        """Write the in-memory offsets (only those of ``mqs`` when given) to the file, keeping the file's
        other entries. Returns False when nothing changed (no write)."""
        current = self._table.snapshot()
        if mqs is not None:
            wanted = set(mqs)
            current = {mq: off for mq, off in current.items() if mq in wanted}
        with self._file_lock:
            merged = dict(self._stored)
            merged.update(current)
            if merged == self._stored and self.path.exists():
                return False
            self._write(merged)
            self._stored = merged
            return True

    def persist(self, mq: MessageQueue) -> bool:
        """``persist_all`` for one queue."""
        return self.persist_all([mq])

    def _write(self, table: dict[MessageQueue, int]) -> None:
        directory = self.path.parent
        text = json.dumps(_to_json(self.group, self.client_id, table), indent=2)
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                fsync(f.fileno())
            if self.path.exists():
                # Copy, never move: at every instant the file holds a complete version.
                shutil.copyfile(self.path, self.bak_path)
            os.replace(tmp, self.path)
            try:
                fsync_dir(str(directory))
            except OSError:  # best effort, as it was: the file itself is synced, a directory may not open
                pass
        except OSError as exc:
            raise OffsetStoreError(f"cannot write offset file {self.path}: {exc}") from exc


__all__ = ["DEFAULT_LOCAL_OFFSET_DIR", "OFFSETS_FILE", "LocalFileOffsetStore", "OffsetTable"]
