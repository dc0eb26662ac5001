"""The Prometheus endpoint against RocketMQ 5.5's (``metricsExporterType=PROM``): one scenario on both, then the
families, the label names of each series and the counts compared."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from sluice.aio import Producer, PullConsumer, PushConsumer
from sluice.client.message import ConsumeStatus, Message
from tests.reference.conftest import System, run
from tests.reference.observe import assert_same, both

# RocketMQ's families Sluice does not export, and why (docs/operations.md says the same); a counter's family is
# named without its ``_total``, as prometheus_client's parser names it:
NOT_EXPORTED = {
    # Per-topic timer counts and the delay histogram: Sluice's timer wheel does not keep them per topic.
    "rocketmq_timer_enqueue", "rocketmq_timer_dequeue", "rocketmq_timing_messages",
    "rocketmq_delay_message_latency_seconds",
    # POP: Sluice has no checkpoint merge buffer to scan.
    "rocketmq_pop_buffer_scan_time_consume_milliseconds",
    # How long creating a topic or group took.
    "rocketmq_topic_create_execution_time_milliseconds", "rocketmq_consumer_group_create_execution_time_milliseconds",
}
IGNORED_LABELS = {"le", "otel_metric_overflow"}


def scrape(url: str) -> dict[str, list[Any]]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


def observed(s: System, families: dict[str, list[Any]]) -> dict[str, Any]:
    """Family names, the label names of each family's series (those of this test's topics and groups, or with
    neither), and the counts the scenario makes."""
    mine = s.topic("")

    def named(labels: dict[str, str]) -> list[str]:
        return [labels[k] for k in ("topic", "consumer_group") if k in labels]

    def shapes(samples: list[Any], keep: Any) -> list[tuple[str, ...]]:
        return sorted({tuple(sorted(set(x.labels) - IGNORED_LABELS)) for x in samples if keep(x.labels)})

    # The label names of the series of this test's topics and groups, and of the series that name none (those
    # depend on what every test of the session sent the reference node: Sluice's must be among them).
    label_sets = {name: shapes(samples, lambda lb: any(v.startswith(mine) for v in named(lb)))
                  for name, samples in families.items()}
    unnamed_sets = {name: shapes(samples, lambda lb: not named(lb)) for name, samples in families.items()}

    def total(family: str, sample: str, **labels: str) -> float:
        return sum(x.value for x in families.get(family, []) if x.name == sample
                   and all(x.labels.get(k) == v for k, v in labels.items()))

    t, dlq_t = s.topic("t"), s.topic("dlq")
    return {
        "families": set(families),
        "labels": label_sets,
        "unnamed": unnamed_sets,
        "in_normal": total("rocketmq_messages_in", "rocketmq_messages_in_total", topic=t, message_type="normal"),
        "in_fifo": total("rocketmq_messages_in", "rocketmq_messages_in_total", topic=t, message_type="fifo"),
        "in_delay": total("rocketmq_messages_in", "rocketmq_messages_in_total", topic=t, message_type="delay"),
        "size_count": total("rocketmq_message_size", "rocketmq_message_size_count", topic=t),
        "lag": total("rocketmq_consumer_lag_messages", "rocketmq_consumer_lag_messages", topic=t,
                     consumer_group=s.topic("lag")),
        "dlq": total("rocketmq_send_to_dlq_messages", "rocketmq_send_to_dlq_messages_total", topic=dlq_t,
                     consumer_group=s.topic("dlq-g")),
        "consumers": total("rocketmq_consumer_connections", "rocketmq_consumer_connections",
                           consumer_group=s.topic("lag"), consume_mode="pull"),
    }


def test_the_metrics_are_named_labelled_and_counted_as_rocketmqs(systems: dict[str, System]) -> None:
    def scenario(s: System) -> dict[str, Any]:
        t, dlq_t = s.topic("t"), s.topic("dlq")
        s.create_topic(t, 4)
        s.create_topic(dlq_t, 1)

        async def go() -> dict[str, list[Any]]:
            got: set[bytes] = set()
            ok = PushConsumer(s.topic("ok"), s.namesrv, consume_from="first")
            ok.subscribe(t)
            ok.register_listener(lambda msgs: got.update(m.body for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)
            failing = PushConsumer(s.topic("dlq-g"), s.namesrv, consume_from="first", max_reconsume_times=0)
            failing.subscribe(dlq_t)
            failing.register_listener(lambda msgs: ConsumeStatus.RECONSUME_LATER)
            lag = PullConsumer(s.topic("lag"), s.namesrv, auto_commit=False, consume_from="first")
            lag.subscribe(t)
            async with Producer(s.topic("pg"), s.namesrv, auto_batch=False) as producer:
                for i in range(10):
                    await producer.send(Message(t, b"normal-%d" % i))
                for i in range(3):
                    await producer.send(Message(t, b"fifo-%d" % i), sharding_key="order-1")
                for i in range(2):
                    await producer.send(Message(t, b"delayed-%d" % i, delay_level=1))
                for i in range(2):
                    await producer.send(Message(dlq_t, b"poison-%d" % i))
                await ok.start()
                await failing.start()
                await lag.start()
                try:
                    polled: dict[int, int] = {}  # queue id → one past the last message polled from it (one broker)
                    async with asyncio.timeout(60):
                        while sum(polled.values()) < 15 or len(got) < 15:
                            for m in await lag.poll(0.5):
                                polled[m.queue_id] = max(polled.get(m.queue_id, 0), m.queue_offset + 1)
                    # Where polling got to, committed as offsets (a rebalance meanwhile does not change them), then
                    # read back: the lag gauge below counts from these (a queue without one reads no lag).
                    queues = sorted(await lag.fetch_queues(t))
                    await lag.commit({mq: polled[mq.queue_id] for mq in queues if mq.queue_id in polled})
                    committed = {mq.queue_id: await lag.committed(mq) for mq in queues}
                    assert len(queues) == 4 and all(committed.get(q) == end for q, end in polled.items()) \
                        and sum(committed.values()) == 15, f"{s.name}: polled to {polled}, committed {committed}"
                    for i in range(4):  # what the lag group never reads
                        await producer.send(Message(t, b"late-%d" % i))
                    deadline = time.monotonic() + 60
                    while True:  # (both brokers compute their gauges when scraped)
                        families = await asyncio.to_thread(scrape, s.metrics_url)
                        seen = observed(s, families)
                        if seen["lag"] == 4 and seen["dlq"] == 2 and seen["in_delay"] == 2 \
                                and seen["in_normal"] == 14 or time.monotonic() > deadline:
                            return families
                        await asyncio.sleep(0.5)
                finally:
                    await lag.shutdown()
                    await failing.shutdown()
                    await ok.shutdown()

        return observed(s, run(go(), timeout=180))

    seen = both(systems, scenario)
    sluice, rocketmq = seen["sluice"], seen["rocketmq"]
    assert sluice["families"] <= rocketmq["families"], sluice["families"] - rocketmq["families"]
    # (families of other tests' topics and groups only, e.g. transactions, are not this scenario's)
    relevant = {f for f in rocketmq["families"] if rocketmq["labels"][f] or rocketmq["unnamed"][f]}
    assert relevant - sluice["families"] <= NOT_EXPORTED, relevant - sluice["families"] - NOT_EXPORTED
    for family in sluice["families"]:
        if sluice["labels"][family] and rocketmq["labels"][family]:
            assert sluice["labels"][family] == rocketmq["labels"][family], family
        assert set(sluice["unnamed"][family]) <= set(rocketmq["unnamed"][family]), family
    assert any(sluice["labels"].values()) and any(sluice["unnamed"].values())
    for s in (sluice, rocketmq):
        del s["families"], s["labels"], s["unnamed"]
    # The lag: Sluice's must be the truth (4 sent after the commit, every queue's commit read back above). RocketMQ's
    # own gauge has stayed at 3, and once at 2, for the whole minute on loaded CI runs, so the reference is only held
    # to exporting the series with a count of the scenario's, not compared as equal.
    lags = {name: side.pop("lag") for name, side in seen.items()}
    assert_same(seen)
    assert lags["sluice"] == 4 and 1 <= lags["rocketmq"] <= 4, lags
    assert sluice == {"in_normal": 14, "in_fifo": 3, "in_delay": 2, "size_count": 19, "dlq": 2, "consumers": 1}
