"""Shared fixtures: small store geometries so tests roll segments quickly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.common.config import MessageStoreConfig
from sluice.store import MessageStore


@pytest.fixture
def store_config(tmp_path: Path) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 100,
        max_hash_slot_num=64,
        max_index_num=400,
    )


@pytest.fixture
def store(store_config: MessageStoreConfig) -> Iterator[MessageStore]:
    s = MessageStore(store_config).start()
    try:
        yield s
    finally:
        s.shutdown()
