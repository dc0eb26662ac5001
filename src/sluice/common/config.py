"""Config objects with RocketMQ's defaults (snake_case of MessageStoreConfig's names).

Every bound the store honours lives here: sizes, intervals, timeouts, ratios and batch limits.
Times are in milliseconds unless the name says otherwise, as in RocketMQ.

They are msgspec Structs: ``sluice.common.config_loader`` turns a TOML table or keyword settings into one with
every type and range checked (``Annotated[int, Meta(ge=...)]`` below) and unknown keys refused. Built directly
in code, they are not checked.
"""

from __future__ import annotations

import enum
import os
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, field


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

    @classmethod
    def allowed(cls) -> str:
        return "sync or async (SYNC_FLUSH, ASYNC_FLUSH)"


# Constrained types: a value outside is refused when a config is loaded (the error names the allowed range).
NonNegative = Annotated[int, Meta(ge=0)]
Positive = Annotated[int, Meta(ge=1)]
Millis = Annotated[int, Meta(ge=1)]  # a time in milliseconds
Port = Annotated[int, Meta(ge=0, le=65535)]
Ratio = Annotated[float, Meta(ge=0.0, le=1.0)]
Percent = Annotated[int, Meta(ge=10, le=95)]  # RocketMQ keeps diskMaxUsedSpaceRatio within 10..95
QueueCount = Annotated[int, Meta(ge=1, le=1024)]
Permission = Annotated[int, Meta(ge=0, le=7)]  # PERM_READ 4 | PERM_WRITE 2 | PERM_INHERIT 1
NAME_PATTERN = r"^[%|a-zA-Z0-9_-]{1,127}$"
HOURS_PATTERN = r"^([01]?[0-9]|2[0-3])(;([01]?[0-9]|2[0-3]))*$"
Name = Annotated[str, Meta(pattern=NAME_PATTERN)]
Hours = Annotated[str, Meta(pattern=HOURS_PATTERN)]
METRICS_LABEL_PATTERN = r"^([A-Za-z_][A-Za-z0-9_]*:[^,:]+(,[A-Za-z_][A-Za-z0-9_]*:[^,:]+)*)?$"
MetricsLabels = Annotated[str, Meta(pattern=METRICS_LABEL_PATTERN)]
# What the patterns allow, in words (for the errors).
PATTERN_WORDS = {NAME_PATTERN: "1 to 127 letters, digits, '%', '|', '_' or '-'",
                 HOURS_PATTERN: "hours of the day from 0 to 23, separated by ';' (as \"04;16\")",
                 METRICS_LABEL_PATTERN: "label:value pairs separated by ',' (as \"region:eu,zone:a\"), label names "
                                        "of letters, digits and '_'"}


class _Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Common to every config object: ``replace`` (a copy with changes, checked by ``__post_init__``)."""

    def replace(self, **changes: Any) -> Any:
        fields = {f: getattr(self, f) for f in self.__struct_fields__}
        return type(self)(**{**fields, **changes})


# About ten times the slots of RocketMQ's defaults (1 s, 3 days): 125 MB of wheel at most.
MAX_TIMER_WHEEL_SLOTS = 5_200_000


def _default_store_root() -> str:
    return os.path.join(os.path.expanduser("~"), ".sluice", "store")


class MessageStoreConfig(_Config):
    """Settings of the message store (RocketMQ ``MessageStoreConfig``)."""

    store_path_root_dir: str = field(default_factory=_default_store_root)
    # CommitLog segment size (1 GiB) and ConsumeQueue file size (300,000 entries of 20 bytes).
    mapped_file_size_commit_log: Annotated[int, Meta(ge=4096, le=2**31 - 1)] = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: Annotated[int, Meta(ge=20, le=2**31 - 1, multiple_of=20)] = 300_000 * 20
    # IndexFile geometry.
    max_hash_slot_num: Positive = 5_000_000
    max_index_num: Annotated[int, Meta(ge=2)] = 5_000_000 * 4
    message_index_enable: bool = True
    # Limits on what is accepted.
    max_message_size: Annotated[int, Meta(ge=1, le=2**31 - 1)] = 1024 * 1024 * 4
    max_properties_size: Annotated[int, Meta(ge=1, le=32767)] = 32767
    # Light message queues (RocketMQ's enableLmq / enableMultiDispatch): a message whose INNER_MULTI_DISPATCH names
    # "%LMQ%a,%LMQ%b" is also entered in each of those queues (queue 0 of each, offsets of their own); at most
    # ``max_lmq_consume_queue_num`` of them on the broker (RocketMQ's default; Sluice always keeps to it), at most
    # ``max_lmq_dispatch`` named by one message. They share one store (<root>/lightqueue), nothing in memory per
    # queue: raise the limit for millions.
    enable_lmq: bool = False
    enable_multi_dispatch: bool = False
    max_lmq_consume_queue_num: Annotated[int, Meta(ge=1, le=100_000_000)] = 20_000
    max_lmq_dispatch: Annotated[int, Meta(ge=1, le=10_000)] = 256
    # The consume-queue files of light queues kept in files of their own (stores made before the shared store)
    # hold 1,000 entries each. Fixed once such light queues exist.
    lmq_mapped_file_size_consume_queue: Annotated[int, Meta(ge=20, le=2**31 - 1, multiple_of=20)] = 1_000 * 20
    # Flushing.
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: Millis = 500
    flush_commit_log_least_pages: NonNegative = 4
    flush_commit_log_thorough_interval: Millis = 10_000
    # A put waiting for its fsync (or a SYNC_MASTER's for its slaves) is answered FLUSH_DISK_TIMEOUT
    # (FLUSH_SLAVE_TIMEOUT) after this: 2.5 s rather than RocketMQ's 5 s, under the 3 s a RocketMQ client waits
    # for a send's answer, so that a slow disk shows as an answer and not as a client time-out.
    sync_flush_timeout: Millis = 2_500
    group_commit_max_wait: Millis = 10
    flush_interval_consume_queue: Millis = 1_000
    flush_consume_queue_least_pages: NonNegative = 2
    flush_consume_queue_thorough_interval: Millis = 60_000
    # Index files are flushed this often (and when one fills up), with every consume queue, not every
    # consume-queue round: their hash slots are written at random, so each flush writes back (and the next
    # puts fault in again) up to the whole slot table. After a crash, recovery starts at most this far back.
    flush_interval_index: Millis = 10_000
    flush_consumer_offset_interval: Millis = 5_000
    # Timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS): delivered at the first multiple of
    # ``timer_precision_ms`` at or after their time, at most ``timer_max_delay_sec`` ahead (RocketMQ's defaults:
    # 1 s and 3 days). The timer log keeps 40 bytes per waiting message on disk, in files of this size.
    timer_wheel_enable: bool = True
    timer_precision_ms: Annotated[int, Meta(ge=10, le=60_000)] = 1_000
    timer_max_delay_sec: Annotated[int, Meta(ge=1, le=90 * 86_400)] = 3 * 86_400
    mapped_file_size_timer_log: Annotated[int, Meta(ge=4000, le=2**31 - 40, multiple_of=40)] = 40 * 1024 * 1024
    # Commit-log appends of at least this many bytes are written with pwrite() instead of a copy into the
    # mapping (0: every append; -1: none). A copy into the mapping faults pages in while holding the GIL: a page
    # the disk is writing back (a slow disk, a stable-pages device) or the kernel's throttling of dirty pages
    # then stops every thread of the broker, its event loop too; pwrite() waits in the kernel with the GIL
    # released, at the cost of a system call per append (on the store thread, off the event loop).
    commit_log_pwrite_min_bytes: Annotated[int, Meta(ge=-1)] = 0
    # Zero-fill the commit log this far ahead of its writer, a chunk at a time, in the background (RocketMQ's
    # warmMappedFileEnable, which fills each new segment whole). Writing into blocks allocated beforehand
    # keeps block allocation out of the flushes (sync flush: fdatasync ~0.46 -> ~0.29 ms here) and the
    # kernel's readahead of holes out of the writer (a ~20 ms stall every 8 MiB); it costs a second write
    # of every byte, done ahead of time.
    warm_mapped_file_enable: bool = True
    warm_mapped_file_ahead: Positive = 64 * 1024 * 1024
    warm_mapped_file_chunk: Annotated[int, Meta(ge=4096, multiple_of=4096)] = 1024 * 1024
    # Retention and disk safety.
    file_reserved_time: NonNegative = 72  # hours
    # Hours of day (";"-separated) when expired files are deleted.
    delete_when: Hours = "04"
    clean_resource_interval: Millis = 10_000
    delete_commit_log_files_interval: NonNegative = 100
    delete_files_batch_max: Positive = 10
    disk_max_used_space_ratio: Percent = 75  # percent: above this, expired files are deleted at any hour
    disk_space_clean_forcibly_ratio: Ratio = 0.85  # above this, the oldest files go even if not expired
    disk_space_warning_level_ratio: Ratio = 0.90  # above this, writes are refused
    # Back-pressure (docs/store.md § Back-pressure). Event-loop callers hand their writes to one store thread
    # through a queue of at most ``send_thread_pool_queue_capacity`` requests (RocketMQ's send thread pool and
    # its queue); a send that waited there ``wait_time_ms_in_send_queue`` before its turn is answered SYSTEM_BUSY
    # [TIMEOUT_CLEAN_QUEUE] without being stored, and while one write has been running for longer than
    # ``os_page_cache_busy_timeout_ms`` (a disk that stalls) new sends are answered SYSTEM_BUSY [PC_SYNCHRONIZED]
    # at once (RocketMQ's osPageCacheBusyTimeOutMills, waitTimeMillsInSendQueue, brokerFastFailureEnable).
    os_page_cache_busy_timeout_ms: Millis = 1_000
    wait_time_ms_in_send_queue: Millis = 200
    send_thread_pool_queue_capacity: Positive = 10_000
    broker_fast_failure_enable: bool = True
    # Reads.
    max_transfer_bytes_on_message_in_memory: Positive = 1024 * 256
    max_transfer_count_on_message_in_memory: Positive = 32
    # Bytes of ConsumeQueue scanned per pull when filtering.
    max_filter_message_count: Annotated[int, Meta(ge=20)] = 16_000
    max_msgs_num_batch: Positive = 64  # index query result limit
    # Recovery.
    check_crc_on_recover: bool = True
    # Address written into each record's STOREHOST.
    store_host: str = "127.0.0.1:10911"

    def __post_init__(self) -> None:
        self.flush_disk_type = FlushDiskType.parse(self.flush_disk_type)
        if self.warm_mapped_file_ahead < 2 * self.warm_mapped_file_chunk:
            raise ValueError("warm_mapped_file_ahead must be at least twice warm_mapped_file_chunk (fills start a "
                             "chunk past the writer)")
        if self.disk_space_clean_forcibly_ratio > self.disk_space_warning_level_ratio:
            raise ValueError("disk_space_clean_forcibly_ratio must not be above disk_space_warning_level_ratio "
                             "(writes would stop before space is freed)")
        slots = 2 * (self.timer_max_delay_sec * 1000 // self.timer_precision_ms + 2)
        if slots > MAX_TIMER_WHEEL_SLOTS:
            raise ValueError(f"timer_max_delay_sec / timer_precision_ms make a timer wheel of {slots:,} slots "
                             f"(24 bytes each); at most {MAX_TIMER_WHEEL_SLOTS:,} are allowed: a coarser precision "
                             f"or a shorter maximum delay")

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

    @property
    def store_path_timer_log(self) -> str:
        return os.path.join(self.store_path_root_dir, "timerlog")



class RemotingConfig(_Config):
    """Bounds of one remoting endpoint (RocketMQ NettyServerConfig / NettyClientConfig)."""

    max_frame_size: Annotated[int, Meta(ge=1024, le=2**31 - 1)] = 16 * 1024 * 1024
    # Writes above ``write_buffer_high`` pause the peer's reading (back-pressure); a peer that lets more than
    # ``write_buffer_max`` pile up is not reading at all and is disconnected.
    write_buffer_high: Positive = 4 * 1024 * 1024
    write_buffer_low: NonNegative = 1024 * 1024
    write_buffer_max: Positive = 64 * 1024 * 1024
    # Frames written in one event-loop iteration leave in one syscall at its end, but no more than this many
    # wait: past it they go at once, so the peer starts on the first answers while later ones are made.
    write_coalesce_frames: Positive = 8
    # Requests of one connection being processed at once; above this its reading pauses.
    max_inflight_requests: Positive = 65_536
    # A connection silent this long is closed (Java servers: 120 s).
    channel_max_idle_time_seconds: Positive = 120
    # Connections a server keeps open at once (never more than the open-file limit leaves room for); further
    # ones are closed as they come, with a warning, so that no client can take every file descriptor.
    max_connections: Positive = 10_000
    connect_timeout_millis: Millis = 3_000
    default_timeout_millis: Millis = 3_000
    # After a failed connect, requests to that address fail at once until a wait drawn from [0, backoff]
    # has passed, the backoff doubling per failure in a row up to the max (Kafka's reconnect.backoff.ms and
    # reconnect.backoff.max.ms, with full jitter); 0 connects again at every request.
    reconnect_backoff_millis: NonNegative = 50
    reconnect_backoff_max_millis: NonNegative = 1_000

    def __post_init__(self) -> None:
        if not self.write_buffer_low <= self.write_buffer_high <= self.write_buffer_max:
            raise ValueError("the write buffer bounds must be write_buffer_low <= write_buffer_high <= "
                             "write_buffer_max")
        if self.reconnect_backoff_max_millis < self.reconnect_backoff_millis:
            raise ValueError("reconnect_backoff_max_millis must be at least reconnect_backoff_millis")


class AuthUser(_Config):
    """``init_authentication_user = { username = "...", password = "..." }``."""

    username: Annotated[str, Meta(min_length=1, max_length=256)]
    password: Annotated[str, Meta(min_length=1, max_length=1024)]

    def __repr__(self) -> str:
        return f"AuthUser(username={self.username!r}, password=***)"


class AuthCredentials(_Config):
    """``inner_client_authentication_credentials = { access_key = "...", secret_key = "..." }``."""

    access_key: Annotated[str, Meta(min_length=1, max_length=256)]
    secret_key: Annotated[str, Meta(min_length=1, max_length=1024)]

    def __repr__(self) -> str:
        return f"AuthCredentials(access_key={self.access_key!r}, secret_key=***)"


class MetricsSettings(_Config):
    """A server's Prometheus endpoint (docs/operations.md; RocketMQ's ``metrics*`` settings in snake_case):
    ``metrics_exporter_type`` ``PROM`` serves ``/metrics`` on ``metrics_prom_exporter_host`` (empty: the host the
    server listens on) and ``metrics_prom_exporter_port`` (0: any free port); ``metrics_label`` adds labels to
    every series (``"region:eu,zone:a"``)."""

    metrics_exporter_type: Literal["DISABLE", "PROM"] = "DISABLE"
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: Port = 5557
    metrics_label: MetricsLabels = ""


class TlsSettings(MetricsSettings):
    """TLS of a server's port and of its own client connections (docs/security.md; RocketMQ's ``tls.*`` settings in
    snake_case). ``tls_server_mode``: ``disabled``, ``permissive`` (TLS and plaintext on one port, RocketMQ's
    default) or ``enforcing``; without a certificate and key, a self-signed one is made at start (RocketMQ's test
    mode). ``tls_server_need_client_auth``: ``none``, ``optional`` or ``require`` (mutual TLS, against
    ``tls_server_trust_cert_path``). ``tls_enable`` makes the server's own connections (broker → name server,
    slave → master, proxy → broker) use TLS, checking the server's certificate only with ``tls_client_auth_server``
    (RocketMQ's default is not to)."""

    tls_server_mode: Literal["disabled", "permissive", "enforcing"] = "permissive"
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_server_key_password: str = ""
    tls_server_trust_cert_path: str = ""
    tls_server_need_client_auth: Literal["none", "optional", "require"] = "none"
    tls_enable: bool = False
    tls_client_cert_path: str = ""
    tls_client_key_path: str = ""
    tls_client_key_password: str = ""
    tls_client_trust_cert_path: str = ""
    tls_client_auth_server: bool = False


class AuthSettings(TlsSettings):
    """ACL 2.0 (docs/security.md; RocketMQ's AuthConfig in snake_case): off by default. With authentication on,
    every request must be signed by an enabled user; with authorization on, a Normal user needs a rule allowing
    what it asks. ``init_authentication_user`` is made a super user at first start, and so are the inner client
    credentials, which Sluice's own components sign with (broker → name server, slave → master, the proxy).
    A whitelist names request codes (``"10, 34"``, or gRPC message names) let through unchecked."""

    authentication_enabled: bool = False
    authorization_enabled: bool = False
    init_authentication_user: AuthUser | None = None
    inner_client_authentication_credentials: AuthCredentials | None = None
    authentication_whitelist: str = ""
    authorization_whitelist: str = ""


class NamesrvConfig(TlsSettings):
    """Settings of a name server."""

    host: str = "127.0.0.1"
    port: Port = 9876
    kv_config_path: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), ".sluice",
                                                                     "namesrv", "kvConfig.json"))
    # A broker not heard from for this long is dropped from every route (RocketMQ: 120 s).
    broker_channel_expired_time: Millis = 120_000
    scan_not_active_broker_interval: Millis = 10_000
    # With authentication on, the name server's writes (broker registration, KV config, topic deletion) must be
    # signed with the inner client credentials its brokers have; route queries stay open to anyone, as in
    # RocketMQ (whose name server has no ACL at all).
    authentication_enabled: bool = False
    inner_client_authentication_credentials: AuthCredentials | None = None
    remoting: RemotingConfig = field(default_factory=RemotingConfig)


class ProxyConfig(TlsSettings):
    """Settings of ``sluice proxy``, the standalone gRPC front (``[proxy]``): its TLS (the port's, and with
    ``tls_enable`` that of its connections to the name servers and brokers), where the self-signed certificate of
    TLS's test mode is kept, and ACL 2.0 as its brokers have it: with authentication on, every RPC is checked
    against the users and ACLs copied from a master every ``auth_cache_refresh_seconds`` (RocketMQ's proxy: 60 s)
    with the inner client credentials, which also sign what the front sends to the brokers."""

    self_signed_dir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), ".sluice",
                                                                      "proxy", "tls"))
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    inner_client_authentication_credentials: AuthCredentials | None = None
    authentication_whitelist: str = ""
    authorization_whitelist: str = ""
    auth_cache_refresh_seconds: Annotated[float, Meta(ge=0.1, le=3600)] = 60.0


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
            raise ValueError(f"message_delay_level: delay level {item!r} must be a number followed by ms, s, m, h "
                             "or d")
    if not out:
        raise ValueError("message_delay_level lists no delay")
    return out


class BrokerRole(enum.Enum):
    """A broker's part in its group (RocketMQ BrokerRole): masters take writes; a SYNC_MASTER answers SEND_OK
    only once a slave has the bytes; a slave copies its master's log and serves reads."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @classmethod
    def parse(cls, value: str | BrokerRole) -> BrokerRole:
        if isinstance(value, BrokerRole):
            return value
        v = value.strip().upper().replace("-", "_")
        try:
            return cls(v)
        except ValueError:
            raise ValueError(f"broker role must be {cls.allowed()}, not {value!r}") from None

    @classmethod
    def allowed(cls) -> str:
        return "ASYNC_MASTER, SYNC_MASTER or SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


class BrokerConfig(AuthSettings):
    """Settings of a broker (RocketMQ BrokerConfig), with its store and remoting settings inside."""

    broker_name: Name = "broker-a"
    broker_cluster_name: Name = "DefaultCluster"
    broker_id: NonNegative = 0
    # Address clients are told to use (route, STOREHOST); ``listen_host`` is what the socket binds.
    broker_ip: str = "127.0.0.1"
    listen_host: str = "127.0.0.1"
    listen_port: Port = 10911
    # RocketMQ's fast (VIP) channel on listen_port - 2 (none when listen_port is 0): the port clients with
    # vipChannelEnabled send to, RocketMQ Dashboard's by default. The same requests but pulls and pops.
    fast_channel_enabled: bool = True
    namesrv_addr: str = ""  # "host:port;host:port"
    broker_permission: Permission = 6
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: QueueCount = 8
    register_name_server_period: Annotated[int, Meta(ge=100, le=60000)] = 30_000
    register_broker_timeout_mills: Millis = 6_000
    # Pulls: long polling holds a PULL_NOT_FOUND up to the client's suspend timeout.
    long_polling_enable: bool = True
    # (at most two minutes: a pull held longer would outlive any client's timeout)
    short_polling_time_mills: Annotated[int, Meta(ge=1, le=120_000)] = 1_000
    max_held_pulls: Positive = 100_000
    # Clients silent this long are dropped from their groups (RocketMQ: 120 s).
    channel_expired_timeout: Millis = 120_000
    client_scan_interval: Millis = 10_000
    rebalance_lock_max_live_time: Millis = 60_000
    notify_consumer_ids_changed_enable: bool = True
    # Retries: sent-back messages are redelivered after these delays; after max_reconsume_times → DLQ.
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    max_reconsume_times: NonNegative = 16
    retry_queue_nums: NonNegative = 1
    schedule_poll_interval: Millis = 100
    # POP (RocketMQ 5's consumption): checkpoints go to this many revive queues; a pop reads the group's retry
    # topic first this often (percent); at most this many pops wait for messages (per topic, in all); the request
    # mode QUERY_ASSIGNMENT reports for a topic and group no SET_MESSAGE_REQUEST_MODE named.
    revive_queue_num: Annotated[int, Meta(ge=1, le=64)] = 8
    pop_from_retry_probability: Annotated[int, Meta(ge=0, le=100)] = 20
    # Priority topics (RIP-80): the retry share of a priority-mode pop, and whether queue 0 is the lowest
    # priority (RocketMQ's popFromRetryProbabilityForPriority, priorityOrderAsc).
    pop_from_retry_probability_for_priority: Annotated[int, Meta(ge=0, le=100)] = 0
    priority_order_asc: bool = True
    # A topic of message.type MIXED (every type but priority and lite) may be made (enableMixedMessageType).
    enable_mixed_message_type: bool = False
    pop_polling_size: Positive = 1024
    max_pop_polling_size: Positive = 100_000
    # A pop's checkpoint stays in memory, its acks merged there, and is written to the revive log only if still
    # open after ``pop_ck_stay_buffer_time`` ms (or once ``pop_ck_max_buffer_size`` are buffered, pops refused at
    # twice that, or once a queue has more than ``pop_ck_offset_max_queue_size`` pops its group's offset waits on);
    # off: written at each pop, each ack written (RocketMQ's enablePopBufferMerge, off there; docs/client.md).
    enable_pop_buffer_merge: bool = True
    pop_ck_stay_buffer_time: Annotated[int, Meta(ge=100, le=3_600_000)] = 10_000
    pop_ck_max_buffer_size: Positive = 200_000
    pop_ck_offset_max_queue_size: Positive = 20_000
    # Lite topics (RocketMQ 5.5, docs/lite-topics.md; they need [store] enable_lmq and enable_multi_dispatch):
    # every ``lite_event_check_interval`` ms each reader's lite topics with messages it has not had are offered
    # to it again; every ``lite_ttl_check_interval`` ms the lite topics idle longer than their parent's
    # ``lite.topic.expiration`` (minutes; never less than ``min_lite_ttl`` ms) are deleted and their readers told;
    # a lite subscription not renewed within ``lite_subscription_check_timeout`` ms is dropped; at most
    # ``max_lite_subscription_count`` (client, lite topic) pairs. RocketMQ's names and defaults.
    lite_event_check_interval: Annotated[int, Meta(ge=100, le=3_600_000)] = 10_000
    lite_ttl_check_interval: Annotated[int, Meta(ge=100, le=86_400_000)] = 120_000
    min_lite_ttl: Annotated[int, Meta(ge=0, le=2**62)] = 15 * 60 * 1000
    lite_subscription_check_interval: Annotated[int, Meta(ge=100, le=86_400_000)] = 120_000
    lite_subscription_check_timeout: Annotated[int, Meta(ge=1_000, le=86_400_000)] = 180_000
    max_lite_subscription_count: Annotated[int, Meta(ge=1, le=100_000_000)] = 100_000
    default_message_request_mode: Literal["PULL", "POP"] = "PULL"
    # SQL92 property filters (MessageSelector.bySql, the key=value filter): off as in RocketMQ; when off, a
    # consumer that subscribes with one is refused (SYSTEM_ERROR at its start and at each pull).
    enable_property_filter: bool = False
    # Message trace (docs/trace.md): every stored single message is stamped with the region and the trace switch
    # (``MSG_REGION``, ``TRACE_ON``) and its cluster (``CLUSTER``), as RocketMQ's broker stamps them; clients with
    # trace on skip a message whose ``TRACE_ON`` is false. ``trace_topic_enable`` creates the trace topic at start
    # (for brokers that do not create topics on first use).
    region_id: Name = "DefaultRegion"
    trace_on: bool = True
    trace_topic_enable: bool = False
    msg_trace_topic_name: Name = "RMQ_SYS_TRACE_TOPIC"
    # Recall (RocketMQ 5.x): a producer may take back a timer message before it is due, with the recall handle its
    # send was answered with (off by default, as RocketMQ); also while the broker is read-only.
    recall_message_enable: bool = False
    allow_recall_when_broker_not_writeable: bool = True
    # Request-reply: a reply is pushed to its requester and also stored in <cluster>_REPLY_TOPIC (as RocketMQ).
    store_reply_message_enable: bool = True
    # Transactions: a half message undecided this long after it was sent is checked back with a producer of its
    # group, every ``transaction_check_interval``, at most ``transaction_check_max`` times; then it is discarded
    # (kept in TRANS_CHECK_MAX_TIME_TOPIC). ``reject_transaction_message`` refuses half messages.
    transaction_timeout: Millis = 6_000
    transaction_check_max: Positive = 15
    transaction_check_interval: Annotated[int, Meta(ge=100, le=86_400_000)] = 30_000
    reject_transaction_message: bool = False
    # The "[stats]" log line (puts/s, gets/s, put and flush latency, bytes behind flush); 0 turns it off.
    stats_log_interval: NonNegative = 60_000
    # Replication (docs/ha.md). A master listens for its slaves on ``ha_listen_port`` (0: listen_port + 1, as
    # RocketMQ; any free port when listen_port is 0 too; the name server tells slaves where); a slave copies
    # the log of ``ha_master_address`` (host:port of the master's HA port), or of the master the name server or
    # the controller names when that is empty.
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    ha_listen_port: Port = 0
    ha_master_address: str = ""
    ha_send_heartbeat_interval: Millis = 5_000
    ha_housekeeping_interval: Millis = 20_000
    ha_transfer_batch_size: Annotated[int, Meta(ge=4096, le=64 * 1024 * 1024)] = 32 * 1024
    # A slave further behind than this is not in sync: a SYNC_MASTER does not wait for it (SLAVE_NOT_AVAILABLE).
    ha_max_gap_not_in_sync: Positive = 256 * 1024 * 1024
    # Controller mode: a slave that has not caught up for this long leaves the in-sync replica set.
    ha_max_time_slave_not_catchup: Millis = 15_000
    # Pulls of messages no longer in memory are pointed at slave 1 (RocketMQ's slaveReadEnable, off by default).
    slave_read_enable: bool = False
    # Controller mode (docs/ha.md): the etcd endpoints that keep the group's master, epoch and in-sync replica
    # set ("host:port;host:port"; empty: no controller, roles as configured); a master keeps its lease this
    # long (it takes no write once it could not renew it in time).
    controller_etcd_endpoints: str = ""
    controller_lease_ttl: Annotated[int, Meta(ge=1_000, le=60_000)] = 3_000
    # For https:// etcd endpoints: etcd's CA (else the system's), and a client certificate where etcd runs with
    # --client-cert-auth.
    controller_etcd_tls_ca_path: str = ""
    controller_etcd_tls_cert_path: str = ""
    controller_etcd_tls_key_path: str = ""
    store: MessageStoreConfig = field(default_factory=MessageStoreConfig)
    remoting: RemotingConfig = field(default_factory=RemotingConfig)

    def __post_init__(self) -> None:
        parse_delay_levels(self.message_delay_level)
        self.broker_role = BrokerRole.parse(self.broker_role)

    @property
    def ha_port(self) -> int:
        """The port a master's HA service binds (0: any)."""
        if self.ha_listen_port:
            return self.ha_listen_port
        return self.listen_port + 1 if 0 < self.listen_port < 65535 else 0

    @property
    def fast_listen_port(self) -> int:
        """The fast channel's port (0: none), listen_port - 2 as RocketMQ's ``MixAll.brokerVIPChannel``."""
        return self.listen_port - 2 if self.listen_port > 2 else 0

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def delay_levels(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)


class ClientConfig(_Config):
    """Settings shared by producers and consumers (RocketMQ ClientConfig and the producer / consumer defaults)."""

    namesrv_addr: str = "127.0.0.1:9876"
    instance_name: str = "DEFAULT"
    # RocketMQ's ClientConfig.namespace (docs/client.md § Namespaces): the brokers know this client's topics and
    # groups as ``namespace%name``; the names it is given and gives back are without it.
    namespace: Annotated[str, Meta(max_length=64)] = ""
    # Routes are refreshed this often; while no name server answers, sooner (backing off up to this) and sends
    # and pulls go on with the routes already known.
    poll_name_server_interval: Millis = 30_000
    heartbeat_broker_interval: Millis = 30_000
    persist_consumer_offset_interval: Millis = 5_000
    # A rebalance that fails or finds a topic without route or members is tried again sooner (backing off up to
    # this, with jitter).
    rebalance_interval: Millis = 20_000
    # Producer
    send_msg_timeout: Millis = 3_000
    retry_times_when_send_failed: NonNegative = 2
    retry_times_when_send_async_failed: NonNegative = 2
    max_message_size: Annotated[int, Meta(ge=1, le=2**31 - 1)] = 4 * 1024 * 1024
    compress_msg_body_over_howmuch: NonNegative = 4 * 1024
    compress_level: Annotated[int, Meta(ge=0, le=9)] = 5
    send_latency_fault_enable: bool = True
    max_inflight_async_sends: Positive = 10_000
    # Async single sends made in one turn of the event loop for the same topic (and pinned queue) leave as one
    # batch request, up to ``batch_max_bytes`` of records (RocketMQ 5's autoBatch, 32 KiB); the batch waits
    # ``batch_max_delay_ms`` more for company (0: it leaves when the turn ends).
    auto_batch: bool = True
    batch_max_bytes: Annotated[int, Meta(ge=1, le=4 * 1024 * 1024)] = 32 * 1024
    batch_max_delay_ms: Annotated[int, Meta(ge=0, le=1_000)] = 0
    # Message trace (docs/trace.md): with ``enable_trace`` a producer records each send and a push consumer each
    # listener call in ``trace_topic`` (RMQ_SYS_TRACE_TOPIC when empty), as the Java client's ``enableTrace``
    # does; a record waits at most ``trace_flush_interval_ms`` for others to share its trace message.
    enable_trace: bool = False
    trace_topic: Annotated[str, Meta(pattern=r"^([%|a-zA-Z0-9_-]{1,127})?$")] = ""
    trace_flush_interval_ms: Annotated[int, Meta(ge=10, le=60_000)] = 1_000
    # OpenTelemetry (docs/trace.md; needs ``sluice[otel]``): a publish span per send, whose W3C trace context
    # travels in the message (TRACE_CONTEXT), and a process span per listener call, its child.
    enable_otel: bool = False
    # Push / pull consumers
    pull_batch_size: Annotated[int, Meta(ge=1, le=1024)] = 32
    pull_threshold_for_queue: Positive = 1_000
    pull_threshold_size_for_queue: Positive = 100  # MiB
    consume_message_batch_max_size: Annotated[int, Meta(ge=1, le=1024)] = 1
    consume_thread_nums: Positive = 20
    # A concurrent push consumer's message whose listener has not returned after this long is sent back for a
    # later retry and leaves the queue's cache, so that the queue's offset moves on (RocketMQ's consumeTimeout,
    # 15 minutes; the listener call itself cannot be stopped and goes on).
    consume_timeout_millis: Millis = 15 * 60_000
    max_reconsume_times: NonNegative = 16
    suspend_current_queue_time_millis: Millis = 1_000
    broker_suspend_max_time_millis: Millis = 15_000
    consumer_timeout_millis_when_suspend: Millis = 30_000
    consumer_pull_timeout_millis: Millis = 10_000
    # The longest wait after failed pulls of a queue: the waits double from 100 ms per failure in a row, with
    # full jitter, up to this (RocketMQ waits this long every time).
    pull_time_delay_millis_when_exception: NonNegative = 3_000
    pull_time_delay_millis_when_flow_control: NonNegative = 50
    lock_retry_interval: Millis = 1_000
    rebalance_lock_interval: Millis = 20_000
    # Where broadcasting consumers keep their offsets.
    offset_store_dir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), ".sluice",
                                                                       "offsets"))
    remoting: RemotingConfig = field(default_factory=RemotingConfig)

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]
