"""The broker's Prometheus endpoint, scraped during a run and read with prometheus_client's parser: names and labels
as RocketMQ 5's exporter shows them, and values that agree with what was sent and what the admin API says."""

from __future__ import annotations

import asyncio
import gzip
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from sluice.aio import Producer, PullConsumer
from sluice.broker.broker_controller import BrokerController
from sluice.client.admin import Admin
from sluice.client.message import Message
from sluice.common.message import MessageExt
from tests.conftest import Cluster

BASE_LABELS = {"cluster", "node_id", "node_type", "otel_scope_name"}


def scrape(url: str) -> dict[str, list[Sample]]:
    """Samples by sample name (``x_total``, ``x_bucket`` ...)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types)), "a family named twice"
    samples: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append(s)
    return samples


def value(samples: dict[str, list[Sample]], name: str, **labels: str) -> float:
    found = [s.value for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{name} {labels}: {found} among {samples.get(name)}"
    return found[0]


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture
def broker(empty_cluster: Cluster) -> BrokerController:
    return empty_cluster.start_broker("broker-a", metrics_exporter_type="PROM", metrics_prom_exporter_port=0,
                                      metrics_label="region:test")


def test_metrics_count_what_was_sent_and_the_lag_is_what_group_progress_says(empty_cluster: Cluster,
                                                                             broker: BrokerController) -> None:
    cluster = empty_cluster
    assert broker.metrics_exporter is not None
    url = broker.metrics_exporter.address
    cluster.create_topic("metrics-t", 4)
    ns = cluster.namesrv_addr

    async def run() -> tuple[dict[str, list[Sample]], int]:
        async with Producer("metrics-pg", ns, auto_batch=False) as producer:
            for i in range(20):
                await producer.send(Message("metrics-t", b"n" * 100 + str(i).encode()))
            for i in range(5):
                await producer.send(Message("metrics-t", b"f%d" % i), sharding_key="order-1")
            consumer = PullConsumer("metrics-lag", ns, auto_commit=False, consume_from="first")
            consumer.subscribe("metrics-t")
            await consumer.start()
            try:
                got = 0
                async with asyncio.timeout(30):
                    while got < 25:
                        got += len(await consumer.poll(1.0))
                await consumer.commit()
                for i in range(7):  # not committed by the group: its lag
                    await producer.send(Message("metrics-t", b"late%d" % i))
                async with Admin(ns) as admin:
                    async with asyncio.timeout(30):
                        while (await admin.group_progress("metrics-lag", "metrics-t")).total_lag != 7:
                            await asyncio.sleep(0.05)
                    samples = await asyncio.to_thread(scrape, url)
                    return samples, (await admin.group_progress("metrics-lag", "metrics-t")).total_lag
            finally:
                await consumer.shutdown()

    samples, progress_lag = asyncio.run(run())
    for name, series in samples.items():
        if name.startswith("rocketmq_"):
            for s in series:
                assert BASE_LABELS | {"region"} <= set(s.labels), (name, s.labels)
                assert s.labels["node_type"] == "broker" and s.labels["node_id"] == "broker-a"
                assert s.labels["cluster"] == "DefaultCluster" and s.labels["region"] == "test"
    # Messages in: every send, by message type (RocketMQ's TopicMessageType).
    assert value(samples, "rocketmq_messages_in_total", topic="metrics-t", message_type="normal") == 27
    assert value(samples, "rocketmq_messages_in_total", topic="metrics-t", message_type="fifo") == 5
    assert value(samples, "rocketmq_message_size_count", topic="metrics-t", message_type="normal") == 27
    assert value(samples, "rocketmq_throughput_in_total", topic="metrics-t", message_type="normal") > 27 * 100
    assert value(samples, "rocketmq_messages_in_total", topic="metrics-t", message_type="normal",
                 is_system="false") == 27
    # Out: what the pull consumer read (a pull's series has no is_retry label, as RocketMQ's).
    out = [s for s in samples["rocketmq_messages_out_total"] if s.labels.get("consumer_group") == "metrics-lag"]
    assert sum(s.value for s in out) >= 25 and all("is_retry" not in s.labels for s in out)
    # The lag: RocketMQ's five consumer gauges, the lag as the admin API reports it.
    assert progress_lag == 7
    lag = dict(topic="metrics-t", consumer_group="metrics-lag", is_retry="false", is_system="false")
    assert value(samples, "rocketmq_consumer_lag_messages", **lag) == 7
    inflight = value(samples, "rocketmq_consumer_inflight_messages", **lag)
    ready = value(samples, "rocketmq_consumer_ready_messages", **lag)
    assert inflight + ready == 7  # pulled and not committed, or not pulled yet
    assert value(samples, "rocketmq_consumer_lag_latency_milliseconds", **lag) > 0
    # Connections, tables, the store.
    assert value(samples, "rocketmq_consumer_connections", consumer_group="metrics-lag", consume_mode="pull",
                 language="python", protocol_type="remoting", is_system="false") == 1
    assert sum(s.value for s in samples["rocketmq_producer_connections"]) >= 1
    assert value(samples, "rocketmq_topic_number") == len(broker.topic_config_manager.table)
    assert value(samples, "rocketmq_broker_permission") == 6
    assert value(samples, "rocketmq_storage_size_bytes", storage_type="local", storage_medium="disk") > 0
    assert value(samples, "rocketmq_storage_dispatch_behind_bytes") >= 0
    # Every answer timed: the sends by request code, response code and result.
    sends = [s for s in samples["rocketmq_rpc_latency_milliseconds_count"]
             if s.labels["request_code"].startswith("send_message") and s.labels["response_code"] == "success"]
    assert sum(s.value for s in sends) == 32 and all(s.labels["result"] == "success" for s in sends)
    assert all(s.labels["protocol_type"] == "remoting" for s in sends)
    buckets = [s for s in samples["rocketmq_rpc_latency_milliseconds_bucket"]
               if s.labels["request_code"] == sends[0].labels["request_code"]
               and s.labels["response_code"] == "success" and s.labels["is_long_polling"] == "false"]
    assert [b.labels["le"] for b in buckets] == ["1.0", "3.0", "5.0", "7.0", "10.0", "100.0", "1000.0", "2000.0",
                                                 "3000.0", "+Inf"]
    assert value(samples, "target_info") == 1


def test_metric_label_sets_from_clients_are_bounded(empty_cluster: Cluster, broker: BrokerController) -> None:
    """Topics past the limit are counted together in one series (OpenTelemetry's overflow), so many topic names
    cannot grow the broker's memory or the scrape."""
    broker.stats.limit = 3
    empty_cluster.create_topic("bounded-a", 1)

    async def send() -> None:
        async with Producer("bounded-pg", empty_cluster.namesrv_addr, auto_batch=False) as producer:
            for i in range(6):
                await producer.send(Message(f"bounded-{i}", b"x"))  # (auto-created)

    asyncio.run(send())
    assert broker.metrics_exporter is not None
    samples = scrape(broker.metrics_exporter.address)
    series = samples["rocketmq_messages_in_total"]
    assert len(series) == 4
    overflow = [s for s in series if s.labels.get("otel_metric_overflow") == "true"]
    assert len(overflow) == 1 and overflow[0].value == 3 and "topic" not in overflow[0].labels
    assert sum(s.value for s in series) == 6


def test_the_endpoint_answers_metrics_only_and_closes_on_a_bad_request(broker: BrokerController) -> None:
    exporter = broker.metrics_exporter
    assert exporter is not None
    base = f"http://{exporter.host}:{exporter.port}"
    for path, code in (("/", 404), ("/other", 404)):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + path, timeout=10)
        assert err.value.code == code
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(base + "/metrics", data=b"x", method="POST"), timeout=10)
    assert err.value.code == 405
    req = urllib.request.Request(base + "/metrics", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        assert b"rocketmq_topic_number" in gzip.decompress(resp.read())
    with urllib.request.urlopen(base + "/metrics?name[]=rocketmq_topic_number", timeout=10) as resp:
        picked = resp.read().decode()
    assert [line for line in picked.splitlines() if line.startswith("# TYPE")] == \
        ["# TYPE rocketmq_topic_number gauge"]
    req = urllib.request.Request(base + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        assert resp.read().decode().endswith("# EOF\n")
    with urllib.request.urlopen(base + "/-/healthy", timeout=10) as resp:
        assert resp.read() == b"Exporter is healthy.\n"
    # A head past 8 KiB closes that connection; the endpoint goes on serving.
    with socket.create_connection((exporter.host, exporter.port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n")
        assert s.recv(100) == b""
    assert "rocketmq_topic_number" in scrape(base + "/metrics")


@pytest.mark.parametrize("merge", [False, True], ids=["written-at-once", "buffered"])
def test_a_pop_groups_lag_counts_what_is_popped_and_not_acknowledged(empty_cluster: Cluster, merge: bool) -> None:
    """RocketMQ's POP lag: messages not yet popped plus those popped and not acknowledged; still a POP group's once
    nothing is open. Checkpoints written at each pop: a revive record a pop and an ack; buffered (for longer than
    the test): none, the buffer's gauges counting them instead."""
    from sluice.client.aio.simple_consumer import SimpleConsumer

    cluster = empty_cluster
    broker = cluster.start_broker("broker-a", metrics_exporter_type="PROM", metrics_prom_exporter_port=0,
                                  metrics_label="region:test", enable_pop_buffer_merge=merge,
                                  pop_ck_stay_buffer_time=3_600_000)
    cluster.create_topic("metrics-pop", 1)
    ns = cluster.namesrv_addr
    assert broker.metrics_exporter is not None
    url = broker.metrics_exporter.address
    series = dict(topic="metrics-pop", consumer_group="metrics-pop-g", is_retry="false", is_system="false")

    def gauges() -> tuple[float, float, float]:
        samples = scrape(url)
        return tuple(value(samples, f"rocketmq_consumer_{g}_messages", **series)  # type: ignore[return-value]
                     for g in ("lag", "inflight", "ready"))

    async def run() -> list[tuple[float, float, float]]:
        seen = []
        popper = SimpleConsumer("metrics-pop-g", ns, consume_from_first=True, invisible_duration=60)
        popper.subscribe("metrics-pop")  # (its heartbeats say the group is online)
        await popper.start()
        try:
            async with Producer("metrics-pop-pg", ns, auto_batch=False) as producer:
                for i in range(5):
                    await producer.send(Message("metrics-pop", b"p%d" % i))
                got: list[MessageExt] = []
                async with asyncio.timeout(30):
                    while len(got) < 5:
                        got += await popper.receive(5)
                for m in got[:2]:
                    await popper.ack(m)
                await _until(lambda: gauges() == (3, 3, 0))  # 3 popped and not acknowledged
                seen.append((3, 3, 0))
                samples = scrape(url)
                buffered = [value(samples, f"rocketmq_pop_{g}_buffer_size") for g in ("checkpoint", "offset")]
                assert (min(buffered) >= 1) if merge else buffered == [0, 0]
                for i in range(4):
                    await producer.send(Message("metrics-pop", b"q%d" % i))
                await _until(lambda: gauges() == (7, 3, 4))
                seen.append((7, 3, 4))
                for m in got[2:]:
                    await popper.ack(m)
                await _until(lambda: gauges() == (4, 0, 4))  # nothing open: still a POP group's numbers
                seen.append((4, 0, 4))
                samples = scrape(url)
                assert [value(samples, f"rocketmq_pop_{g}_buffer_size") for g in ("checkpoint", "offset")] == [0, 0]
                pop = dict(consumer_group="metrics-pop-g", topic="metrics-pop")
                if merge:  # nothing written: merged and settled in memory
                    assert not [x for x in samples.get("rocketmq_pop_revive_in_message_total", [])
                                if x.labels.get("consumer_group") == "metrics-pop-g"]
                else:
                    written_cks = value(samples, "rocketmq_pop_revive_in_message_total", **pop,
                                        revive_message_type="CK", put_status="PUT_OK")
                    assert value(samples, "rocketmq_pop_revive_in_message_total", **pop, revive_message_type="ACK",
                                 put_status="PUT_OK") == 5  # one record an ack
                    assert 1 <= written_cks <= 5  # one record a pop of the queue
                    done: dict[str, float] = {}
                    for s in samples.get("rocketmq_pop_revive_out_message_total", []):
                        if s.labels.get("consumer_group") == "metrics-pop-g":  # (by revive queue: summed)
                            kind = s.labels["revive_message_type"]
                            done[kind] = done.get(kind, 0) + s.value
                    assert done == {"CK": written_cks, "ACK": 5}  # every checkpoint settled, every ack applied
            conns = [sample for sample in scrape(url).get("rocketmq_consumer_connections", [])
                     if sample.labels.get("consumer_group") == "metrics-pop-g"]
            assert [(c.labels["consume_mode"], c.value) for c in conns] == [("pop", 1)]
        finally:
            await popper.shutdown()
        return seen

    assert asyncio.run(run()) == [(3, 3, 0), (7, 3, 4), (4, 0, 4)]


async def _until(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, "the gauges never got there"
        await asyncio.sleep(0.3)


def test_undecided_half_messages_are_counted_by_topic_until_decided(empty_cluster: Cluster,
                                                                   broker: BrokerController) -> None:
    from sluice.aio import TransactionProducer
    from sluice.client.transaction import LocalTransactionState

    cluster = empty_cluster
    cluster.create_topic("metrics-tx", 1)
    assert broker.metrics_exporter is not None
    url = broker.metrics_exporter.address

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT if msg.body == b"now" else LocalTransactionState.UNKNOWN

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.UNKNOWN  # (left undecided)

    def counts() -> tuple[float, float]:
        samples = scrape(url)
        commits = [s.value for s in samples.get("rocketmq_commit_messages_total", [])
                   if s.labels.get("topic") == "metrics-tx"]
        return value(samples, "rocketmq_half_messages", topic="metrics-tx"), sum(commits)

    async def run() -> None:
        async with TransactionProducer("metrics-tx-pg", Listener(), cluster.namesrv_addr) as producer:
            for body in (b"later-1", b"later-2", b"now"):
                await producer.send_message_in_transaction(Message("metrics-tx", body))
            await _until(lambda: counts() == (2, 1))  # three half messages, one committed (END_TRANSACTION: oneway)

    asyncio.run(run())


def test_a_namespaces_topics_and_groups_are_labelled_as_their_clients_name_them(empty_cluster: Cluster,
                                                                               broker: BrokerController) -> None:
    """``tenant%orders`` on the broker is ``topic="orders", namespace="tenant"`` in the metrics (and a name
    outside any namespace has no namespace label)."""
    assert broker.metrics_exporter is not None
    url = broker.metrics_exporter.address
    empty_cluster.create_topic("tenant%orders", 2)
    empty_cluster.create_topic("orders", 2)

    async def send() -> None:
        async with Producer("shop", empty_cluster.namesrv_addr, namespace="tenant", auto_batch=False) as p:
            for _ in range(3):
                await p.send(Message("orders", b"x"))
        async with Producer("shop", empty_cluster.namesrv_addr, auto_batch=False) as p:
            await p.send(Message("orders", b"y"))

    asyncio.run(send())
    samples = scrape(url)
    assert value(samples, "rocketmq_messages_in_total", topic="orders", namespace="tenant") == 3
    plain = [s for s in samples["rocketmq_messages_in_total"] if s.labels.get("topic") == "orders"
             and "namespace" not in s.labels]
    assert [s.value for s in plain] == [1]
    assert not any("tenant%" in s.labels.get("topic", "") for ss in samples.values() for s in ss)
