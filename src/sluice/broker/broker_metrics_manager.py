"""A broker's metrics as RocketMQ 5's exporter shows them on Prometheus (BrokerMetricsManager,
DefaultStoreMetricsManager, RemotingMetricsManager, ConsumerLagCalculator): the same names, units and labels, so
that dashboards and alerts built on RocketMQ's work on Sluice's.

Counters come from ``BrokerStats`` (kept by the request paths) and the remoting server's answer times; gauges are
read from the broker's tables when a scraper asks, on the broker's loop."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from sluice.broker.broker_stats import FINISH_LATENCY_BUCKETS, MESSAGE_SIZE_BUCKETS
from sluice.common.extra_info import pop_retry_topic
from sluice.common.metrics import Families, Family, Series, bool_label, parse_metrics_label, target_info
from sluice.common.naming import RETRY_GROUP_TOPIC_PREFIX, is_system_group, is_system_topic
from sluice.common.structs import ConsumeType, perm_readable, perm_writeable
from sluice.remoting.rpc_latency import RpcLatency
from sluice.remoting.rpc_latency_family import rpc_latency_family

if TYPE_CHECKING:
    from sluice.broker.broker_stats import BrokerStats
    from sluice.broker.consumer_manager import ConsumerManager
    from sluice.broker.pop.pop_buffer_merge_service import PopBufferMergeService
    from sluice.broker.pop.pop_revive_service import PopReviveService
    from sluice.broker.producer_manager import ProducerManager
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager
    from sluice.broker.timer_message_service import TimerMessageService
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

_CONSUME_MODES = {ConsumeType.CONSUME_ACTIVELY: "pull", ConsumeType.CONSUME_PASSIVELY: "push",
                  ConsumeType.CONSUME_POP: "pop"}
# RocketMQ's processors with a thread pool and its queue: Sluice serves every request on the event loop, so these
# queues are always empty (mqadmin brokerStatus says the same).
# The timer snapshot's bounds in seconds (RocketMQ's timerMetricsDist... default): messages due within each.
TIMER_BOUNDS_S = (5, 60, 300, 900, 3600, 14400, 28800, 86400)
PROCESSORS = ("send", "async_put", "pull", "ack", "query_message", "client_manager", "heartbeat", "lite_pull",
              "transaction", "consumer_manager", "admin", "reply")


class BrokerMetricsView(Protocol):
    """What the metrics read of a running broker (its replication and POP services are set up after it starts)."""

    @property
    def stats(self) -> BrokerStats: ...
    @property
    def store(self) -> MessageStore: ...
    @property
    def topic_config_manager(self) -> TopicConfigManager: ...
    @property
    def subscription_group_manager(self) -> SubscriptionGroupManager: ...
    @property
    def producer_manager(self) -> ProducerManager: ...
    @property
    def consumer_manager(self) -> ConsumerManager: ...
    @property
    def pop_revive(self) -> PopReviveService: ...
    @property
    def pop_buffer(self) -> PopBufferMergeService: ...
    @property
    def rpc_latency(self) -> RpcLatency: ...
    @property
    def timer_service(self) -> TimerMessageService: ...


log = logging.getLogger(__name__)

# MQVersion.Version's ordinals from V4_0_0_SNAPSHOT on: a SNAPSHOT and a release per x_y_z, 4_0_0 to 5_9_9.
_V4_FIRST = 212
_HIGHER = _V4_FIRST + 2 * 200


def version_desc(version: int) -> str:
    """MQVersion.getVersionDesc in lower case (``v5_5_0``) of the ordinal a client sends; older releases, whose
    ordinals follow no rule, by number."""
    if version >= _HIGHER:
        return "higher_version"
    if version < _V4_FIRST:
        return str(version)
    pair, snapshot = divmod(version - _V4_FIRST, 2)
    return f"v{4 + pair // 100}_{pair // 10 % 10}_{pair % 10}" + ("" if snapshot else "_snapshot")


class BrokerMetricsManager:
    """The broker's families, read at each scrape (a ``MetricsSource``)."""

    def __init__(self, config: BrokerConfig, broker: BrokerMetricsView) -> None:
        self.config = config
        self.broker = broker
        base = parse_metrics_label(config.metrics_label)
        base.update({"cluster": config.broker_cluster_name, "node_type": "broker", "node_id": config.broker_name,
                     "otel_scope_name": "broker-meter"})
        self.labels = Families(base)
        # The store's families carry the storage type and medium (DefaultStoreMetricsManager).
        self.store_labels = Families({**base, "storage_type": "local", "storage_medium": "disk"})

    def families(self) -> list[Family]:
        out: list[Family] = []
        for section in (self._stats_metrics, self._request_metrics, self._connection_metrics, self._lag_metrics,
                        self._transaction_metrics, self._rpc_metrics, self._store_metrics, self._timer_metrics,
                        self._pop_metrics):
            try:
                out.extend(section())
            except Exception:  # one section's failure (a state it did not expect) leaves the others' series
                log.exception("reading the broker's metrics (%s) failed", section.__name__)
        out.append(target_info())
        return out

    # == broker stats (initStatsMetrics) ===========================================================
    def _stats_metrics(self) -> Iterator[Family]:
        f, b = self.labels, self.broker
        yield f.gauge("rocketmq_processor_watermark",
                      (({"processor": p}, 0) for p in PROCESSORS))
        yield f.gauge("rocketmq_broker_permission", [({}, self.config.broker_permission)])
        yield f.gauge("rocketmq_topic_number", [({}, len(b.topic_config_manager.table))])
        yield f.gauge("rocketmq_consumer_group_number",
                      [({}, len(b.subscription_group_manager.table))])

    # == messages in and out (initRequestMetrics, initLagAndDlqMetrics' counter) ====================
    def _request_metrics(self) -> Iterator[Family]:
        """(the label dicts are made in the worker thread: a broker may count thousands of topics)"""
        f, stats = self.labels, self.broker.stats
        ins = list(stats.messages_in.items())
        yield f.counter("rocketmq_messages_in_total", [(k, row[0]) for k, row in ins], _in_labels)
        yield f.counter("rocketmq_throughput_in_total", [(k, row[1]) for k, row in ins], _in_labels)
        yield f.histogram("rocketmq_message_size", "Incoming messages size", MESSAGE_SIZE_BUCKETS,
                          [(k, row[2:]) for k, row in ins], _in_labels)
        outs = list(stats.messages_out.items())
        yield f.counter("rocketmq_messages_out_total", [(k, row[0]) for k, row in outs], _out_labels)
        yield f.counter("rocketmq_throughput_out_total", [(k, row[1]) for k, row in outs], _out_labels)
        yield f.counter("rocketmq_send_to_dlq_messages_total", [(k, row[0]) for k, row in list(stats.to_dlq.items())],
                        _dlq_labels)

    # == connections (initConnectionMetrics) ========================================================
    def _connection_metrics(self) -> Iterator[Family]:
        f, b = self.labels, self.broker
        producers: dict[tuple[str, int], int] = {}
        for channels in b.producer_manager.groups.values():
            for info in channels.values():
                key = (info.language, info.version)
                producers[key] = producers.get(key, 0) + 1
        yield f.gauge("rocketmq_producer_connections",
                      (({"language": lang.lower(), "version": version_desc(ver), "protocol_type": "remoting"}, n)
                       for (lang, ver), n in producers.items()))
        consumers: dict[tuple[str, str, int, str], int] = {}
        pop_groups = self._pop_groups()
        for group, group_info in list(b.consumer_manager.groups.items()):
            mode = "pop" if group in pop_groups else _CONSUME_MODES.get(group_info.consume_type, "push")
            for ch in group_info.channels.values():
                ckey = (group, ch.language, ch.version, mode)
                consumers[ckey] = consumers.get(ckey, 0) + 1
        yield f.gauge("rocketmq_consumer_connections",
                      (({"consumer_group": group, "language": lang.lower(), "version": version_desc(ver),
                         "consume_mode": mode, "protocol_type": "remoting",
                         "is_system": bool_label(is_system_group(group))}, n)
                       for (group, lang, ver, mode), n in consumers.items()))

    # == consumer lag (ConsumerLagCalculator) =======================================================
    def _pop_groups(self) -> set[str]:
        """The groups POP consumers read (a remoting client's heartbeat says PUSH or PULL only): those that popped
        since the broker started, or have pops open (from before a restart)."""
        revive = self.broker.pop_revive
        open_pops = {ck.group for ck in list(revive.checkpoints.values())} if revive is not None else set()
        return self.broker.stats.pop_groups | open_pops

    def _groups(self) -> Iterator[tuple[str, str, bool, str | None]]:
        """(group, topic, is_pop, POP retry topic) of each online group and topic it subscribes, as RocketMQ's
        processAllGroup walks them (useStaticSubscription off)."""
        b = self.broker
        topics = b.topic_config_manager.table
        perm = self.config.broker_permission
        pop_groups = self._pop_groups()
        for group in list(b.subscription_group_manager.table):
            info = b.consumer_manager.get(group)
            if info is None:
                continue
            for topic in list(info.subscriptions):
                if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    continue
                tc = topics.get(topic)
                if tc is None or not (perm_readable(tc.perm & perm) or perm_writeable(tc.perm & perm)):
                    continue
                retry = pop_retry_topic(topic, group)
                is_pop = group in pop_groups or retry in topics
                yield group, topic, is_pop, (retry if is_pop and retry in topics else None)

    def _inflight_pop(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        """(group, topic, queue) → (messages popped and not acknowledged, the earliest of their offsets)."""
        out: dict[tuple[str, str, int], tuple[int, int]] = {}
        revive = self.broker.pop_revive
        if revive is None:
            return out
        for ck in list(revive.checkpoints.values()):
            unacked = ck.unacked_offsets()
            if ck.revived or not unacked:
                continue
            key = (ck.group, ck.topic, ck.queue_id)
            n, first = out.get(key, (0, unacked[0]))
            out[key] = (n + len(unacked), min(first, unacked[0]))
        return out

    def _lag_metrics(self) -> Iterator[Family]:
        b = self.broker
        store, offsets, topics = b.store, b.store.consumer_offsets, b.topic_config_manager.table
        now = int(time.time() * 1000)
        pop_inflight = self._inflight_pop()
        pop_buffer = b.pop_buffer
        lag: list[Series] = []
        lag_latency: list[Series] = []
        inflight: list[Series] = []
        queueing: list[Series] = []
        ready: list[Series] = []

        def stamp(topic: str, qid: int, offset: int) -> int:
            if offset < 0:
                return 0
            ts = store.get_message_store_timestamp(topic, qid, offset)
            return ts if ts > 0 else 0

        def earliest(a: int, b_: int) -> int:
            return b_ if a == 0 else a if b_ == 0 else min(a, b_)

        limit, over = b.stats.limit, [0, 0, 0, 0, 0, 0]
        for group, topic, is_pop, retry in self._groups():
            sides = [(topic, False)] + ([(retry, True)] if is_pop and retry is not None else [])
            if is_pop and retry is None:
                sides.append(("", True))  # RocketMQ reports a POP group's retry side, empty before it exists
            for read_topic, is_retry in sides:
                labels = {"consumer_group": group, "topic": topic, "is_retry": bool_label(is_retry),
                          "is_system": bool_label(is_system_topic(topic) or is_system_group(group))}
                total_lag = total_inflight = total_ready = 0
                oldest_unconsumed = oldest_unpulled = 0
                tc = topics.get(read_topic)
                for qid in range(tc.write_queue_nums if tc is not None else 0):
                    max_off = max(0, store.get_max_offset_in_queue(read_topic, qid))
                    committed = offsets.query_offset(group, read_topic, qid)
                    if is_pop:
                        n_inflight, first = pop_inflight.get((group, read_topic, qid), (0, -1))
                        # (past the committed offset while pops of the queue are only in memory)
                        ahead = pop_buffer.pop_offset(group, read_topic, qid) if pop_buffer is not None else None
                        pulled = ahead if ahead is not None else committed if committed >= 0 else max_off
                        consumed = first if n_inflight else pulled
                        total_lag += max(0, max_off - pulled) + n_inflight
                        total_inflight += n_inflight
                        total_ready += max(0, max_off - pulled)
                        oldest_unconsumed = earliest(oldest_unconsumed, stamp(read_topic, qid, consumed))
                        oldest_unpulled = earliest(oldest_unpulled, stamp(read_topic, qid, pulled))
                        continue
                    consumed = committed if committed >= 0 else max_off
                    pulled = offsets.query_pull_offset(group, read_topic, qid)
                    total_lag += max(0, max_off - consumed)
                    oldest_unconsumed = earliest(oldest_unconsumed, stamp(read_topic, qid, consumed))
                    in_pull = pulled if pulled >= 0 else 0
                    total_inflight += max(0, in_pull - (committed if committed >= 0 else in_pull))
                    oldest_unpulled = earliest(oldest_unpulled, stamp(read_topic, qid, in_pull))
                    total_ready += max(0, max_off - (pulled if pulled >= 0 else max_off))
                lag_ms = now - oldest_unconsumed if oldest_unconsumed else 0
                queued_ms = now - oldest_unpulled if oldest_unpulled else 0
                if len(lag) >= limit:  # past the limit, the rest together in one series (lags summed, ages max)
                    over = [over[0] + total_lag, max(over[1], lag_ms), over[2] + total_inflight,
                            max(over[3], queued_ms), over[4] + total_ready, 1]
                    continue
                lag.append((labels, total_lag))
                lag_latency.append((labels, lag_ms))
                inflight.append((labels, total_inflight))
                queueing.append((labels, queued_ms))
                ready.append((labels, total_ready))
        if over[5]:
            for series, value in zip((lag, lag_latency, inflight, queueing, ready), over, strict=False):
                series.append((None, value))
        f = self.labels
        yield f.gauge("rocketmq_consumer_lag_messages", lag)
        yield f.gauge("rocketmq_consumer_lag_latency_milliseconds", lag_latency)
        yield f.gauge("rocketmq_consumer_inflight_messages", inflight)
        yield f.gauge("rocketmq_consumer_queueing_latency_milliseconds", queueing)
        yield f.gauge("rocketmq_consumer_ready_messages", ready)

    # == transactions (initTransactionMetrics) ======================================================
    def _transaction_metrics(self) -> Iterator[Family]:
        f, stats = self.labels, self.broker.stats
        yield f.counter("rocketmq_commit_messages_total", [(k, row[0]) for k, row in list(stats.commits.items())],
                        _topic_labels)
        yield f.counter("rocketmq_rollback_messages_total",
                        [(k, row[0]) for k, row in list(stats.rollbacks.items())], _topic_labels)
        yield f.histogram("rocketmq_finish_message_latency_milliseconds", "Transaction finish latency",
                          FINISH_LATENCY_BUCKETS, list(stats.finish_latency.items()), _topic_labels)
        yield f.gauge("rocketmq_half_messages", [(k, row[0]) for k, row in list(stats.half_messages.items())],
                      _topic_labels)

    # == remoting (RemotingMetricsManager) ==========================================================
    def _rpc_metrics(self) -> Iterator[Family]:
        yield rpc_latency_family(self.labels, self.broker.rpc_latency)

    # == timers (DefaultStoreMetricsManager's timer gauges) ===========================================
    def _timer_metrics(self) -> Iterator[Family]:
        timer = self.broker.timer_service
        if timer is None or not timer.enabled:
            return
        f, now = self.store_labels, int(time.time() * 1000)
        waiting, oldest_ms, due, behind_ms, snapshot = timer.behind(now, [b * 1000 for b in TIMER_BOUNDS_S])
        yield f.gauge("rocketmq_timer_enqueue_lag", [({}, waiting)])
        yield f.gauge("rocketmq_timer_enqueue_latency_milliseconds", [({}, oldest_ms)])
        yield f.gauge("rocketmq_timer_dequeue_lag", [({}, due)])
        yield f.gauge("rocketmq_timer_dequeue_latency_milliseconds", [({}, behind_ms)])
        yield f.gauge("rocketmq_timer_message_snapshot",
                      [({"timer_bound_s": str(b)}, n) for b, n in zip(TIMER_BOUNDS_S, snapshot, strict=True)])

    # == POP (PopMetricsManager's gauges) ============================================================
    def _pop_metrics(self) -> Iterator[Family]:
        revive = self.broker.pop_revive
        if revive is None:
            return
        f, now = self.labels, int(time.time() * 1000)
        checkpoints = list(revive.checkpoints.values())
        buffered = self.broker.pop_buffer.stats() if self.broker.pop_buffer is not None else {}
        yield f.gauge("rocketmq_pop_checkpoint_buffer_size", [({}, buffered.get("buffered_checkpoints", 0))])
        yield f.gauge("rocketmq_pop_offset_buffer_size", [({}, buffered.get("pending_offsets", 0))])
        # Per revive queue: how long its oldest checkpoint past its revive time has waited (lag), and how far the
        # queue's revive is behind now (latency); 0 when nothing is overdue.
        overdue: dict[int, int] = {}
        for ck in checkpoints:
            if not ck.revived and not ck.settled and ck.revive_time <= now:
                overdue[ck.revive_qid] = min(overdue.get(ck.revive_qid, now), ck.revive_time)
        lag = [({"queue_id": str(q)}, now - overdue[q] if q in overdue else 0) for q in range(revive.queue_num)]
        yield f.gauge("rocketmq_pop_revive_lag_milliseconds", lag)
        yield f.gauge("rocketmq_pop_revive_latency_milliseconds", lag)
        yield f.counter("rocketmq_pop_revive_in_message_total",
                        [(k, row[0]) for k, row in list(revive.revive_in.items())], _revive_in_labels)
        yield f.counter("rocketmq_pop_revive_out_message_total",
                        [(k, row[0]) for k, row in list(revive.revive_out.items())], _revive_out_labels)
        yield f.counter("rocketmq_pop_revive_retry_messages_total",
                        [(k, row[0]) for k, row in list(revive.revive_retry.items())], _revive_retry_labels)

    # == the store (DefaultStoreMetricsManager) =====================================================
    def _store_metrics(self) -> Iterator[Family]:
        f, store = self.store_labels, self.broker.store
        root = self.config.store.store_path_root_dir
        size: list[Series] = []
        if os.path.isdir(root):
            usage = shutil.disk_usage(root)
            if usage.total > 0:
                size.append(({}, usage.total - usage.free))
        yield f.gauge("rocketmq_storage_size_bytes", size)
        cl = store.commit_log
        yield f.gauge("rocketmq_storage_flush_behind_bytes",
                      [({}, max(0, cl.max_offset - cl.flushed_where))])
        yield f.gauge("rocketmq_storage_dispatch_behind_bytes",
                      [({}, max(0, cl.max_offset - store.dispatched_offset))])
        reserve: list[Series] = []
        first = cl.store_timestamp_at(store.get_min_phy_offset(), 8) if cl.max_offset > 0 else None
        if first:
            reserve.append(({}, max(0, int(time.time() * 1000) - first)))
        yield f.gauge("rocketmq_storage_message_reserve_time_milliseconds", reserve)



def _in_labels(key: tuple[str, str]) -> dict[str, str]:
    return {"topic": key[0], "message_type": key[1], "is_system": bool_label(is_system_topic(key[0]))}


def _out_labels(key: tuple[str, str, bool | None]) -> dict[str, str]:
    topic, group, is_retry = key
    labels = {"topic": topic, "consumer_group": group,
              "is_system": bool_label(is_system_topic(topic) or is_system_group(group))}
    if is_retry is not None:
        labels["is_retry"] = bool_label(is_retry)
    return labels


def _dlq_labels(key: tuple[str, str]) -> dict[str, str]:
    group, topic = key
    return {"consumer_group": group, "topic": topic,
            "is_system": bool_label(is_system_topic(topic) or is_system_group(group))}


def _revive_in_labels(key: tuple[str, str, str, str]) -> dict[str, str]:
    group, topic, kind, status = key
    return {"consumer_group": group, "topic": topic, "revive_message_type": kind, "put_status": status}


def _revive_out_labels(key: tuple[str, str, int, str]) -> dict[str, str]:
    group, topic, queue_id, kind = key
    return {"consumer_group": group, "topic": topic, "queue_id": str(queue_id), "revive_message_type": kind}


def _revive_retry_labels(key: tuple[str, str, str]) -> dict[str, str]:
    group, topic, status = key
    return {"consumer_group": group, "topic": topic, "put_status": status}


def _topic_labels(key: str) -> dict[str, str]:
    return {"topic": key}
