"""Store config JSON files (``config/*.json``): written atomically with a ``.bak``, never silently reset."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from sluice.common.errors import StoreConfigError
from sluice.store.mapped_file import fsync_dir


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


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """Write via temp file + fsync + rename, keeping the previous version as ``path.bak``."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    text = json.dumps(data, indent=2, sort_keys=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(path):
        # Copy, never move: at every instant ``path`` holds a complete version.
        shutil.copyfile(path, path + ".bak")
    os.replace(tmp, path)
    fsync_dir(directory)
