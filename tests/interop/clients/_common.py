"""Helpers shared by the C++-client scripts (run by the ``rocketmq==0.4.4`` virtualenv's Python, not Sluice's).

Every script writes one JSON object per line to ``--out`` (flushed at once, so a test can follow progress) and
ends by itself: when its work is done, when ``--stop-file`` appears, or at ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Callable


def parser(description: str, consumer: bool = False) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--namesrv", required=True, help="name server host:port")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--out", required=True, help="JSON-lines file of what was sent / received")
    p.add_argument("--access-key", default="", help="ACL: sign every request (set_session_credentials)")
    p.add_argument("--secret-key", default="")
    if consumer:
        p.add_argument("--expression", default="*", help="tag expression")
        p.add_argument("--expect", type=int, default=0, help="end once this many distinct bodies arrived (0: never)")
        p.add_argument("--linger", type=float, default=0.0, help="keep consuming this long after --expect is met")
        p.add_argument("--timeout", type=float, default=60.0, help="end after this many seconds whatever happens")
        p.add_argument("--stop-file", default="", help="end soon after this file appears")
        p.add_argument("--props", default="seq,mode,note,shard", help="user properties to report")
    return p


class Journal:
    """Thread-safe JSON-lines writer (consumer callbacks run on the C++ client's threads)."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, **record: object) -> None:
        line = json.dumps(record, ensure_ascii=False)
        with self._lock:
            self._f.write(line + "\n")
            self._f.flush()

    def close(self) -> None:
        with self._lock:
            self._f.close()


def text(value: object) -> str:
    """The wrapper hands back bytes for tags, keys, bodies and properties; None when unset."""
    if value is None:
        return ""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def received(msg: object, props: list[str]) -> dict:
    """What a consumer got, as a JSON-able dict."""
    return {
        "topic": msg.topic, "tags": text(msg.tags), "keys": text(msg.keys), "body": text(msg.body),
        "id": msg.id, "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
        "reconsume_times": msg.reconsume_times, "commit_log_offset": msg.commit_log_offset,
        "properties": {p: text(msg.get_property(p)) for p in props},
    }


def wait(deadline: float, stop_file: str, done: Callable[[], bool] = lambda: False) -> str:
    """Sleep until ``done()``, the stop file or the deadline; the reason."""
    while True:
        if done():
            return "complete"
        if stop_file and os.path.exists(stop_file):
            return "stopped"
        if time.monotonic() >= deadline:
            return "timeout"
        time.sleep(0.05)
