"""Files of state both servers keep (the broker's ``config/*.json``, the name server's kv config): JSON written
atomically with a ``.bak``, never silently reset; written off the event loop by ``ConfigWriter``; and
``fsync_dir``. The only module of ``common`` that touches the disk."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sluice.common.errors import StoreConfigError
from sluice.common.platform import fsync

log = logging.getLogger(__name__)


def fsync_dir(path: str) -> None:
    """Make a directory entry (a created, renamed or deleted file) durable."""
    if sys.platform == "win32":  # a directory cannot be opened to sync it: a rename is as durable as NTFS makes it
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def load_json(path: str) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file does not exist.

    A file that exists but does not parse raises ``StoreConfigError`` naming it: resetting offsets or
    topics to empty would lose data silently, so an operator must look (a ``.bak`` copy sits beside it).
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreConfigError(f"cannot read store config file {path}: {exc}") from exc
    if not text.strip():
        raise StoreConfigError(f"store config file {path} is empty; refusing to start with its data lost "
                               f"(previous version: {path}.bak)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StoreConfigError(f"store config file {path} is corrupt ({exc.msg} at line {exc.lineno} column "
                               f"{exc.colno}); refusing to start (previous version: {path}.bak)") from exc
    if not isinstance(data, dict):
        raise StoreConfigError(f"store config file {path} does not hold a JSON object")
    return data


def write_json_atomic(path: str, data: dict[str, Any], mode: int = 0o644) -> None:
    """Write via temp file + fsync + rename, keeping the previous version as ``path.bak``; both files get ``mode``
    (0o600 for secrets: created so, never readable by others for an instant)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    text = json.dumps(data, indent=2, sort_keys=True)
    tmp = path + ".tmp"
    _write_new(tmp, text.encode("utf-8"), mode)
    if os.path.exists(path):
        # Copy, never move: at every instant ``path`` holds a complete version.
        if mode == 0o644:
            shutil.copyfile(path, path + ".bak")
        else:
            with open(path, "rb") as f:
                _write_new(path + ".bak", f.read(), mode, sync=False)
    os.replace(tmp, path)
    fsync_dir(directory)


def _write_new(path: str, data: bytes, mode: int, sync: bool = True) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # (a leftover of a crash may have another mode: O_CREAT keeps an existing file's)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            fsync(fd)
    finally:
        os.close(fd)


class ConfigWriter:
    """Writes a config file off the caller's thread (the broker's event loop never waits on the disk): ``request``
    marks it changed and returns at once; a thread of its own writes the latest ``snapshot`` — a burst of changes
    (a topic per new consumer group, say) shares one write instead of one each. A failed write (a full disk) is
    logged and retried every ``retry_after`` seconds; the data stays in memory meanwhile.

    ``request`` returns a future done once a write begun after the call has ended, for the callers that answer
    only when the change is on disk (an admin's topic creation); ``flush`` writes now, in the caller's thread
    (shutdown, or a file its owner writes in a thread of its own: the thread starts at the first ``request``).
    """

    def __init__(self, path: str, snapshot: Callable[[], dict[str, Any]], retry_after: float = 1.0,
                 mode: int = 0o644) -> None:
        self.path = path
        self.mode = mode
        self.snapshot = snapshot
        self.retry_after = retry_after
        self.writes = 0  # (for tests and stats)
        self._cond = threading.Condition()
        self._waiting: list[Future[None]] = []
        self._dirty = False
        self._stopped = False
        self._failing = False
        self._thread: threading.Thread | None = None

    def request(self) -> Future[None]:
        fut: Future[None] = Future()
        with self._cond:
            if self._stopped:
                fut.set_result(None)  # written by the final flush of ``close``
                return fut
            self._dirty = True
            self._waiting.append(fut)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"sluice-config-{os.path.basename(self.path)}",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                self._dirty = False
                waiting, self._waiting = self._waiting, []
            error = self._write()
            for fut in waiting:
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)
            if error is not None:
                with self._cond:
                    self._dirty = True  # try again
                    self._cond.wait(self.retry_after)

    def _write(self) -> OSError | None:
        try:
            write_json_atomic(self.path, self.snapshot(), self.mode)
        except OSError as exc:
            if not self._failing:
                log.error("cannot write %s (%s): the change stays in memory and is written once that works",
                          self.path, exc)
            self._failing = True
            return exc
        if self._failing:
            log.info("%s written again", self.path)
        self._failing = False
        self.writes += 1
        return None

    def flush(self) -> OSError | None:
        """Write the current state now (in this thread); the error (logged) when it could not."""
        return self._write()

    def close(self) -> None:
        """Stop the thread, then write what changed since its last write."""
        with self._cond:
            self._stopped = True
            dirty, waiting = self._dirty, self._waiting
            self._waiting = []
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(10)
        error = self._write() if dirty or waiting else None
        for fut in waiting:
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)
