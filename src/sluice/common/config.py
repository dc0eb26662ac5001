"""Config objects with RocketMQ's defaults (snake_case of MessageStoreConfig's names).

Every bound the store honours lives here: sizes, intervals, timeouts, ratios and batch limits.
Times are in milliseconds unless the name says otherwise, as in RocketMQ.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from dataclasses import dataclass, field


class FlushDiskType(enum.Enum):
    """When a put is acknowledged relative to the fsync of its bytes."""

    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"

    @classmethod
    def parse(cls, value: str | FlushDiskType) -> FlushDiskType:
        if isinstance(value, FlushDiskType):
            return value
        v = value.strip().upper()
        if v in ("SYNC", "SYNC_FLUSH"):
            return cls.SYNC_FLUSH
        if v in ("ASYNC", "ASYNC_FLUSH"):
            return cls.ASYNC_FLUSH
        raise ValueError(f"flush disk type must be sync or async, not {value!r}")


def _default_store_root() -> str:
    return os.path.join(os.path.expanduser("~"), ".sluice", "store")


@dataclass(slots=True)
class MessageStoreConfig:
    """Settings of the message store (RocketMQ ``MessageStoreConfig``)."""

    store_path_root_dir: str = field(default_factory=_default_store_root)
    # CommitLog segment size (1 GiB) and ConsumeQueue file size (300,000 entries of 20 bytes).
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    # IndexFile geometry.
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    message_index_enable: bool = True
    # Limits on what is accepted.
    max_message_size: int = 1024 * 1024 * 4
    max_topic_length: int = 127
    max_properties_size: int = 32767
    # Flushing.
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    sync_flush_timeout: int = 5_000
    group_commit_max_wait: int = 10
    flush_interval_consume_queue: int = 1_000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    flush_consumer_offset_interval: int = 5_000
    # Retention and disk safety.
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"  # hours of day (";"-separated) when expired files are deleted
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    delete_files_batch_max: int = 10
    disk_max_used_space_ratio: int = 75  # percent: above this, expired files are deleted at any hour
    disk_space_clean_forcibly_ratio: float = 0.85  # above this, the oldest files go even if not expired
    disk_space_warning_level_ratio: float = 0.90  # above this, writes are refused
    # Reads.
    max_transfer_bytes_on_message_in_memory: int = 1024 * 256
    max_transfer_count_on_message_in_memory: int = 32
    max_filter_message_count: int = 16_000  # bytes of ConsumeQueue scanned per pull when filtering
    max_msgs_num_batch: int = 64  # index query result limit
    # Recovery.
    check_crc_on_recover: bool = True
    # Address written into each record's STOREHOST.
    store_host: str = "127.0.0.1:10911"

    def __post_init__(self) -> None:
        self.flush_disk_type = FlushDiskType.parse(self.flush_disk_type)
        if self.mapped_file_size_consume_queue % 20:
            raise ValueError("mapped_file_size_consume_queue must be a multiple of 20")
        if self.mapped_file_size_commit_log < 4096:
            raise ValueError("mapped_file_size_commit_log must be at least 4096 bytes")

    @property
    def store_path_commit_log(self) -> str:
        return os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def store_path_consume_queue(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def store_path_index(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def store_path_config(self) -> str:
        return os.path.join(self.store_path_root_dir, "config")

    def replace(self, **changes: object) -> MessageStoreConfig:
        return dataclasses.replace(self, **changes)
