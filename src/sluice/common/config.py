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
    # Index files are flushed this often (and when one fills up), with every consume queue, not every
    # consume-queue round: their hash slots are written at random, so each flush writes back (and the next
    # puts fault in again) up to the whole slot table. After a crash, recovery starts at most this far back.
    flush_interval_index: int = 10_000
    flush_consumer_offset_interval: int = 5_000
    # Commit-log appends of at least this many bytes are written with pwrite() instead of a copy into the
    # mapping (0: every append; -1: none). Faulting fresh pages of the sparse segment in through the
    # mapping makes the kernel read the holes ahead in bursts (here ~18 ms every 8 MiB); pwrite() does
    # not fault, but costs a system call, which small appends notice (docs/benchmarks.md).
    commit_log_pwrite_min_bytes: int = 8192
    # Zero-fill the commit log this far ahead of its writer, a chunk at a time, in the background (RocketMQ's
    # warmMappedFileEnable, which fills each new segment whole). Writing into blocks allocated beforehand
    # keeps block allocation out of the flushes (sync flush: fdatasync ~0.46 -> ~0.29 ms here) and the
    # kernel's readahead of holes out of the writer (a ~20 ms stall every 8 MiB); it costs a second write
    # of every byte, done ahead of time.
    warm_mapped_file_enable: bool = True
    warm_mapped_file_ahead: int = 64 * 1024 * 1024
    warm_mapped_file_chunk: int = 1024 * 1024
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
        if self.max_index_num < 2 or self.max_hash_slot_num < 1:
            raise ValueError("max_index_num must be at least 2 (entry 0 means none) and max_hash_slot_num at least 1")
        if self.warm_mapped_file_chunk < 4096 or self.warm_mapped_file_chunk % 4096:
            raise ValueError("warm_mapped_file_chunk must be a positive multiple of 4096 bytes")
        if self.warm_mapped_file_ahead < 2 * self.warm_mapped_file_chunk:
            raise ValueError("warm_mapped_file_ahead must be at least twice warm_mapped_file_chunk (fills start a "
                             "chunk past the writer)")
        if self.commit_log_pwrite_min_bytes < -1:
            raise ValueError("commit_log_pwrite_min_bytes must be -1 (never pwrite), 0 (always) or a byte count")

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


@dataclass(slots=True)
class RemotingConfig:
    """Bounds of one remoting endpoint (RocketMQ NettyServerConfig / NettyClientConfig)."""

    max_frame_size: int = 16 * 1024 * 1024
    # Writes above ``write_buffer_high`` pause the peer's reading (back-pressure); a peer that lets more than
    # ``write_buffer_max`` pile up is not reading at all and is disconnected.
    write_buffer_high: int = 4 * 1024 * 1024
    write_buffer_low: int = 1024 * 1024
    write_buffer_max: int = 64 * 1024 * 1024
    # Frames written in one event-loop iteration leave in one syscall at its end, but no more than this many
    # wait: past it they go at once, so the peer starts on the first answers while later ones are made.
    write_coalesce_frames: int = 8
    # Requests of one connection being processed at once; above this its reading pauses.
    max_inflight_requests: int = 65_536
    # A connection silent this long is closed (Java servers: 120 s).
    channel_max_idle_time_seconds: int = 120
    # Connections a server keeps open at once (never more than the open-file limit leaves room for); further
    # ones are closed as they come, with a warning, so that no client can take every file descriptor.
    max_connections: int = 10_000
    connect_timeout_millis: int = 3_000
    default_timeout_millis: int = 3_000


@dataclass(slots=True)
class NamesrvConfig:
    """Settings of a name server."""

    host: str = "127.0.0.1"
    port: int = 9876
    kv_config_path: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), ".sluice",
                                                                     "namesrv", "kvConfig.json"))
    # A broker not heard from for this long is dropped from every route (RocketMQ: 120 s).
    broker_channel_expired_time: int = 120_000
    scan_not_active_broker_interval: int = 10_000
    remoting: RemotingConfig = field(default_factory=RemotingConfig)


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


def parse_delay_levels(spec: str) -> list[int]:
    """``"1s 5s 1m 2h"`` → delays in ms, level 1 first (RocketMQ ``messageDelayLevel``; ``ms`` also allowed)."""
    units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out = []
    for item in spec.split():
        for suffix in ("ms", "s", "m", "h", "d"):
            if item.endswith(suffix) and item[: -len(suffix)].isdigit():
                out.append(int(item[: -len(suffix)]) * units[suffix])
                break
        else:
            raise ValueError(f"delay level {item!r} must be a number followed by ms, s, m, h or d")
    if not out:
        raise ValueError("message_delay_level lists no delay")
    return out


@dataclass(slots=True)
class BrokerConfig:
    """Settings of a broker (RocketMQ BrokerConfig), with its store and remoting settings inside."""

    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    # Address clients are told to use (route, STOREHOST); ``listen_host`` is what the socket binds.
    broker_ip: str = "127.0.0.1"
    listen_host: str = "127.0.0.1"
    listen_port: int = 10911
    namesrv_addr: str = ""  # "host:port;host:port"
    broker_permission: int = 6
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    register_name_server_period: int = 30_000
    register_broker_timeout_mills: int = 6_000
    # Pulls: long polling holds a PULL_NOT_FOUND up to the client's suspend timeout.
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1_000
    max_held_pulls: int = 100_000
    # Clients silent this long are dropped from their groups (RocketMQ: 120 s).
    channel_expired_timeout: int = 120_000
    client_scan_interval: int = 10_000
    rebalance_lock_max_live_time: int = 60_000
    notify_consumer_ids_changed_enable: bool = True
    # Retries: sent-back messages are redelivered after these delays; after max_reconsume_times → DLQ.
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    max_reconsume_times: int = 16
    retry_queue_nums: int = 1
    schedule_poll_interval: int = 100
    # The "[stats]" log line (puts/s, gets/s, put and flush latency, bytes behind flush); 0 turns it off.
    stats_log_interval: int = 60_000
    store: MessageStoreConfig = field(default_factory=MessageStoreConfig)
    remoting: RemotingConfig = field(default_factory=RemotingConfig)

    def __post_init__(self) -> None:
        parse_delay_levels(self.message_delay_level)

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def delay_levels(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)


@dataclass(slots=True)
class ClientConfig:
    """Settings shared by producers and consumers (RocketMQ ClientConfig and the producer / consumer defaults)."""

    namesrv_addr: str = "127.0.0.1:9876"
    instance_name: str = "DEFAULT"
    poll_name_server_interval: int = 30_000
    heartbeat_broker_interval: int = 30_000
    persist_consumer_offset_interval: int = 5_000
    rebalance_interval: int = 20_000
    # Producer
    send_msg_timeout: int = 3_000
    retry_times_when_send_failed: int = 2
    retry_times_when_send_async_failed: int = 2
    max_message_size: int = 4 * 1024 * 1024
    compress_msg_body_over_howmuch: int = 4 * 1024
    compress_level: int = 5
    send_latency_fault_enable: bool = True
    max_inflight_async_sends: int = 10_000
    # Push / pull consumers
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1_000
    pull_threshold_size_for_queue: int = 100  # MiB
    consume_message_batch_max_size: int = 1
    consume_thread_nums: int = 20
    max_reconsume_times: int = 16
    suspend_current_queue_time_millis: int = 1_000
    broker_suspend_max_time_millis: int = 15_000
    consumer_timeout_millis_when_suspend: int = 30_000
    consumer_pull_timeout_millis: int = 10_000
    pull_time_delay_millis_when_exception: int = 3_000
    pull_time_delay_millis_when_flow_control: int = 50
    lock_retry_interval: int = 1_000
    rebalance_lock_interval: int = 20_000
    # Where broadcasting consumers keep their offsets.
    offset_store_dir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), ".sluice",
                                                                       "offsets"))
    remoting: RemotingConfig = field(default_factory=RemotingConfig)

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]
