"""Counters of one broker (the start of RocketMQ's BrokerStatsManager) and its once-a-minute stats line."""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.broker.stats_item import GROUP_GET_NUMS, GROUP_GET_SIZE, TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, StatsTable
from sluice.common.naming import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, TIMER_TOPIC
from sluice.store.results import PutMessageResult

if TYPE_CHECKING:
    from sluice.store.message_store import MessageStore

log = logging.getLogger("sluice.broker.stats")

TPS_SAMPLES = 601
# RocketMQ's put-time buckets (StoreStatsService: [<=0ms] [0~10ms] ... [10s~]), their upper bounds in ms.
PUT_TIME_BUCKETS_MS = (0.0, 10.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 10000.0)
PUT_TIME_NAMES = ("[<=0ms]", "[0~10ms]", "[10~50ms]", "[50~100ms]", "[100~200ms]", "[200~500ms]", "[500ms~1s]",
                  "[1~2s]", "[2~3s]", "[3~4s]", "[4~5s]", "[5~10s]", "[10s~]")
PUT_LATENCY_SAMPLES = 65_536  # put latencies kept per stats interval (a ring: the newest win)

# The metrics' buckets (RocketMQ's views, BrokerMetricsManager.registerMetricsView): message size in bytes, and the
# time from a half message's birth to its commit in seconds.
MESSAGE_SIZE_BUCKETS = (1024.0, 4096.0, 512 * 1024.0, 1024 * 1024.0, 2 * 1024 * 1024.0, 4 * 1024 * 1024.0)
FINISH_LATENCY_BUCKETS = (5.0, 60.0, 600.0, 3600.0, 12 * 3600.0, 24 * 3600.0)
# Label sets per metric beyond which clients' topic and group names are counted together (RocketMQ's
# metricsOtelCardinalityLimit, 50,000, makes a scrape of 160 MB at its limit): a client cannot grow the metrics, or
# a scrape, without bound.
METRICS_CARDINALITY_LIMIT = 5_000
OVERFLOW = None  # the key of what is counted past the limit


def counter_slot(table: dict[Any, list[float]], key: object, width: int, limit: int) -> list[float]:
    """``table[key]``, made (``width`` zeros) while there is room; past ``limit`` keys, the overflow's."""
    row = table.get(key)
    if row is None:
        if len(table) >= limit:
            key = OVERFLOW
        row = table.setdefault(key, [0.0] * width)
    return row


def _countable(topic: str) -> bool:
    """RocketMQ leaves retry and dead-letter topics out of messages in and out."""
    return not topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and not topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


class BrokerStats:
    """Totals since start, plus put latencies of the current interval in a bounded ring."""

    __slots__ = ("put_msgs", "put_failures", "get_msgs", "_lat", "_lat_n", "_last_puts", "_last_gets", "_last_t",
                 "_samples", "_day", "today_morning", "yesterday_morning", "items", "messages_in", "messages_out",
                 "to_dlq", "commits", "rollbacks", "half_messages", "finish_latency", "limit", "pop_groups",
                 "put_bytes", "get_found",
                 "get_missed", "put_max_ms", "get_max_ms", "_put_times", "last_put_times", "_put_times_minute",
                 "timer_in", "timer_out", "replies_undelivered")

    def __init__(self) -> None:
        self.put_msgs = 0
        self.put_failures = 0
        self.replies_undelivered = 0  # replies whose requester was gone or did not take them (kept, not pushed)
        self.put_bytes = 0
        self.get_msgs = 0
        # RocketMQ's StoreStatsService figures: pulls that found messages and those that found none, the longest
        # put and read (ms), the puts' times in its buckets (the last full minute's, and the current one's).
        self.get_found = 0
        self.get_missed = 0
        self.put_max_ms = 0.0
        self.get_max_ms = 0.0
        self._put_times = [0] * (len(PUT_TIME_BUCKETS_MS) + 1)
        self.last_put_times: list[int] = [0] * (len(PUT_TIME_BUCKETS_MS) + 1)
        self._put_times_minute = int(time.monotonic() // 60)
        self.timer_in = 0  # messages put into the timer wheel's topic, and delivered from it
        self.timer_out = 0
        self._lat = np.zeros(PUT_LATENCY_SAMPLES, dtype=np.float64)
        self._lat_n = 0
        self._last_puts = 0
        self._last_gets = 0
        # (monotonic s, puts, gets) once a second, ten minutes of them: the TPS over 10 s, 1 min and 10 min.
        self._samples: deque[tuple[float, ...]] = deque(maxlen=TPS_SAMPLES)
        self._day = time.localtime().tm_yday
        # The totals (puts, gets) when today and yesterday began, as far as this process saw them.
        self.today_morning = (0, 0)
        self.yesterday_morning = (0, 0)
        self.items = StatsTable()  # per topic and group (VIEW_BROKER_STATS_DATA)
        # The metrics' counters (sluice.broker.broker_metrics_manager exports them), per label set:
        # (topic, message type) → [messages, bytes, size bucket counts..., size sum]
        self.messages_in: dict[tuple[str, str] | None, list[float]] = {}
        # (topic, group, is_retry: None for a pull) → [messages, bytes]
        self.messages_out: dict[tuple[str, str, bool | None] | None, list[float]] = {}
        self.to_dlq: dict[tuple[str, str] | None, list[float]] = {}  # (group, topic) → [messages]
        self.commits: dict[str | None, list[float]] = {}  # real topic → [messages]
        self.rollbacks: dict[str | None, list[float]] = {}
        self.half_messages: dict[str | None, list[float]] = {}  # real topic → [undecided half messages]
        self.finish_latency: dict[str | None, list[float]] = {}  # real topic → [bucket counts..., sum of seconds]
        self.limit = METRICS_CARDINALITY_LIMIT
        self.pop_groups: set[str] = set()  # groups POP consumers read (their lag is a POP group's; bounded)
        self._last_t = time.monotonic()

    def record_put(self, r: PutMessageResult, seconds: float | None = None) -> None:
        if r.ok:
            self.put_msgs += r.msg_num
        else:
            self.put_failures += 1
        if seconds is not None:
            self._lat[self._lat_n % PUT_LATENCY_SAMPLES] = seconds
            self._lat_n += 1
            ms = seconds * 1000
            if ms > self.put_max_ms:
                self.put_max_ms = ms
            self._put_times[bisect_left(PUT_TIME_BUCKETS_MS, ms) if ms > 0 else 0] += 1

    def record_get(self, n: int, seconds: float = 0.0) -> None:
        """A pull that read ``n`` messages (0: it found none) in ``seconds``."""
        self.get_msgs += n
        if n:
            self.get_found += 1
        else:
            self.get_missed += 1
        if seconds * 1000 > self.get_max_ms:
            self.get_max_ms = seconds * 1000

    def put_latency_ms(self, q: float) -> float:
        """The ``q`` quantile of the put latencies kept (ms; 0 when none)."""
        lat = self._lat[:min(self._lat_n, PUT_LATENCY_SAMPLES)]
        return float(np.quantile(lat, q)) * 1000 if lat.size else 0.0

    def record_topic_put(self, topic: str, msgs: int, size: int, message_type: str = "normal") -> None:
        now = int(time.time() * 1000)
        self.put_bytes += size
        if topic == TIMER_TOPIC:
            self.timer_in += msgs
        self.items.add(TOPIC_PUT_NUMS, topic, msgs, 1, now)
        self.items.add(TOPIC_PUT_SIZE, topic, size, 1, now)
        row = self.messages_in.get((topic, message_type))
        if row is None:
            if msgs <= 0 or not _countable(topic):
                return
            row = counter_slot(self.messages_in, (topic, message_type), len(MESSAGE_SIZE_BUCKETS) + 4, self.limit)
        row[0] += msgs
        row[1] += size
        each = size // msgs  # one observation per put, of its average (as RocketMQ records it)
        row[2 + bisect_left(MESSAGE_SIZE_BUCKETS, each)] += 1
        row[-1] += each

    def record_group_get(self, topic: str, group: str, msgs: int, size: int, is_retry: bool | None = None,
                         label_topic: str | None = None) -> None:
        """``is_retry``: None for a pull (RocketMQ labels only POP's reads with it, and with the topic popped,
        ``label_topic``, also for what came from its retry topic)."""
        key, now = f"{topic}@{group}", int(time.time() * 1000)
        self.items.add(GROUP_GET_NUMS, key, msgs, 1, now)
        self.items.add(GROUP_GET_SIZE, key, size, 1, now)
        if is_retry is not None and group not in self.pop_groups and len(self.pop_groups) < self.limit:
            self.pop_groups.add(group)
        if is_retry is not None or _countable(topic):
            row = counter_slot(self.messages_out, (label_topic or topic, group, is_retry), 2, self.limit)
            row[0] += msgs
            row[1] += size

    def record_delivered(self, topic: str, size: int) -> None:
        """A delayed or timer message delivered to its topic: counted as coming in (RocketMQ's schedule service
        counts it so, retry topics included)."""
        row = self.messages_in.get((topic, "delay"))
        if row is None:
            row = counter_slot(self.messages_in, (topic, "delay"), len(MESSAGE_SIZE_BUCKETS) + 4, self.limit)
        row[0] += 1
        row[1] += size
        row[2 + bisect_left(MESSAGE_SIZE_BUCKETS, size)] += 1
        row[-1] += size

    def record_timer_delivered(self, topic: str, size: int) -> None:
        """A timer message delivered to its topic (out of the timer wheel)."""
        self.timer_out += 1
        self.record_delivered(topic, size)

    def record_dlq(self, group: str, topic: str) -> None:
        """A message a consumer of ``group`` gave up on went to its dead-letter queue."""
        counter_slot(self.to_dlq, (group, topic), 1, self.limit)[0] += 1

    def record_half(self, topic: str, n: int) -> None:
        """``n`` more (or fewer) undecided half messages of ``topic`` (RocketMQ's TransactionMetrics counts)."""
        row = counter_slot(self.half_messages, topic, 1, self.limit)
        row[0] = max(0.0, row[0] + n)

    def record_end_transaction(self, topic: str, commit: bool, born_ms: int) -> None:
        """A half message of ``topic`` committed or rolled back; a commit's time since the half message's birth
        goes to the histogram in seconds (RocketMQ's EndTransactionProcessor)."""
        self.record_half(topic, -1)
        counter_slot(self.commits if commit else self.rollbacks, topic, 1, self.limit)[0] += 1
        if commit:
            seconds = max(0, int(time.time() * 1000) - born_ms) // 1000
            row = counter_slot(self.finish_latency, topic, len(FINISH_LATENCY_BUCKETS) + 2, self.limit)
            row[bisect_left(FINISH_LATENCY_BUCKETS, seconds)] += 1
            row[-1] += seconds

    def sample(self, now: float | None = None) -> None:
        """Called once a second: the TPS windows, the day's first totals, the per-topic and per-group items."""
        self.items.sample()
        now = time.monotonic() if now is None else now
        self._samples.append((now, self.put_msgs, self.get_msgs, self.get_found, self.get_missed, self.timer_in,
                              self.timer_out))
        minute = int(now // 60)
        if minute != self._put_times_minute:  # (RocketMQ shows the last full minute's)
            self._put_times_minute = minute
            self.last_put_times, self._put_times = self._put_times, [0] * len(self._put_times)
        day = time.localtime().tm_yday
        if day != self._day:
            self._day = day
            self.yesterday_morning = self.today_morning
            self.today_morning = (self.put_msgs, self.get_msgs)

    def tps(self, seconds: int) -> tuple[float, ...] | None:
        """Per second over the last ``seconds``: (messages put, messages read, pulls that found some, pulls that
        found none, messages into the timer wheel, out of it); None until that much has been sampled."""
        if len(self._samples) < 2:
            return None
        last = self._samples[-1]
        for first in self._samples:  # oldest first: the first sample at least ``seconds`` old
            if last[0] - first[0] <= seconds:
                if first[0] == self._samples[0][0] and last[0] - first[0] < seconds - 1:
                    return None
                dt = max(last[0] - first[0], 1e-9)
                return tuple((b - a) / dt for a, b in zip(first[1:], last[1:], strict=True))
        return None

    def snapshot(self, store: MessageStore) -> dict[str, float]:
        """The figures of the interval since the last snapshot, and resets the interval."""
        now = time.monotonic()
        dt = max(now - self._last_t, 1e-9)
        lat = self._lat[:min(self._lat_n, PUT_LATENCY_SAMPLES)] * 1000
        p50, p99, p999 = np.percentile(lat, [50, 99, 99.9]) if lat.size else (0.0, 0.0, 0.0)
        flushes, flush_mean, flush_max = store.flush_stats.take()
        cl = store.commit_log
        out = {"puts_per_s": (self.put_msgs - self._last_puts) / dt,
               "gets_per_s": (self.get_msgs - self._last_gets) / dt,
               "put_p50_ms": float(p50), "put_p99_ms": float(p99), "put_p999_ms": float(p999),
               "put_max_ms": float(lat.max()) if lat.size else 0.0, "put_failures": float(self.put_failures),
               "flushes": float(flushes), "flush_mean_ms": flush_mean * 1000, "flush_max_ms": flush_max * 1000,
               "behind_flush_bytes": float(cl.max_offset - cl.flushed_where),
               "behind_dispatch_bytes": float(max(0, cl.max_offset - store.dispatched_offset))}
        self._last_puts, self._last_gets, self._last_t, self._lat_n = self.put_msgs, self.get_msgs, now, 0
        return out


def format_stats_line(s: dict[str, float]) -> str:
    """One log line, RocketMQ-stats style."""
    return (f"[stats] puts {s['puts_per_s']:.1f}/s, gets {s['gets_per_s']:.1f}/s, put latency p50 "
            f"{s['put_p50_ms']:.3f} ms p99 {s['put_p99_ms']:.3f} ms p99.9 {s['put_p999_ms']:.3f} ms max "
            f"{s['put_max_ms']:.3f} ms, put failures {s['put_failures']:.0f}, flushes {s['flushes']:.0f} mean "
            f"{s['flush_mean_ms']:.3f} ms max {s['flush_max_ms']:.3f} ms, behind flush "
            f"{s['behind_flush_bytes']:.0f} B, behind dispatch {s['behind_dispatch_bytes']:.0f} B")
