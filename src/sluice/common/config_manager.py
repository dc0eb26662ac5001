"""ConfigManager (RocketMQ's): a table a server keeps in one JSON file of its own (the broker's ``config/*.json``,
the name server's kv config). ``load`` reads it at start (a file that does not parse, or does not hold what
``decode`` expects, is an error naming it: never silently reset); ``persist`` has ``encode``'s snapshot written
atomically with a ``.bak``, off the caller's thread (``ConfigWriter``); ``close`` writes what changed since."""

from __future__ import annotations

import abc
import threading
from concurrent.futures import Future
from typing import Any

from sluice.common.errors import StoreConfigError
from sluice.common.files import ConfigWriter, load_json


class ConfigManager(abc.ABC):
    # What the error says of a file that parses but that ``decode`` cannot take ("store config file <path> ...").
    malformed = "is malformed"
    # The file's permissions (0o600 for one holding secrets).
    file_mode = 0o644

    def __init__(self, path: str, retry_after: float = 1.0) -> None:
        self.path = path
        self._lock = threading.Lock()  # held by changes to the table and by ``encode``
        self.writer = ConfigWriter(path, self._snapshot, retry_after, self.file_mode)

    @abc.abstractmethod
    def encode(self) -> dict[str, Any]:
        """The file's JSON object, made of the table (under ``_lock``, in the writer's thread)."""

    @abc.abstractmethod
    def decode(self, data: dict[str, Any]) -> None:
        """Take the table from the file's JSON object (``KeyError``, ``TypeError``, ``ValueError`` or
        ``AttributeError`` for one it cannot take: ``load`` names the file)."""

    def load(self) -> None:
        """Read the file, if there is one."""
        data = load_json(self.path)
        if data is None:
            return
        try:
            self.decode(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreConfigError(f"store config file {self.path} {self.malformed}: {exc}") from exc

    def _snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self.encode()

    def persist(self) -> Future[None]:
        """Have the table written, off this thread; the future is done once it is on disk."""
        return self.writer.request()

    def close(self) -> None:
        """Stop the writer, writing what changed since its last write."""
        self.writer.close()
