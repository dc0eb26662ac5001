"""The pieces of the metrics: answer times in RocketMQ's buckets, label values as RocketMQ spells them, families of
several servers on one endpoint."""

from __future__ import annotations

import time

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sluice.broker.broker_metrics_manager import version_desc
from sluice.broker.broker_stats import BrokerStats
from sluice.broker.processors.send_message_processor import metrics_message_type
from sluice.common.metrics import Families, Snapshot, collect, parse_metrics_label, target_info
from sluice.namesrv.namesrv_metrics import NamesrvMetrics
from sluice.proxy.proxy_metrics_manager import ProxyMetricsManager
from sluice.remoting import rpc_latency as rpc_module
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.rpc_latency import RpcLatency


def test_an_answer_lands_in_the_bucket_of_its_milliseconds_and_past_the_limit_in_one_overflow_series(monkeypatch):
    rpc = RpcLatency()
    now = 1000.0
    rpc.clock = lambda: now  # (the answer times, not the machine's speed)
    rpc.record(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, False, "success", now - 0.0005)  # 0.5 ms
    rpc.record(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, False, "success", now - 0.004)  # 4 ms
    rpc.record(RequestCode.PULL_MESSAGE, ResponseCode.PULL_NOT_FOUND, True, "success", now - 5)  # held 5 s
    rpc.record(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, True, "success", now)  # not a long-polling code
    send = rpc.series[(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, False, "success")]
    assert send[:10] == [2, 0, 1, 0, 0, 0, 0, 0, 0, 0] and 4 < send[-1] < 5
    pull = rpc.series[(RequestCode.PULL_MESSAGE, ResponseCode.PULL_NOT_FOUND, True, "success")]
    assert pull[9] == 1  # +Inf: past 3 s
    monkeypatch.setattr(rpc_module, "MAX_SERIES", 2)
    for code in (900, 901, 902):
        rpc.record(code, 0, False, "success", now)
    assert rpc.series[rpc_module.OVERFLOW][0] == 3 and len(rpc.series) == 3


def test_label_values_are_spelled_as_rocketmqs():
    assert rpc_module.request_code_desc(RequestCode.SEND_MESSAGE_V2) == "send_message_v2"
    assert rpc_module.response_code_desc(ResponseCode.PULL_NOT_FOUND) == "pull_not_found"
    assert rpc_module.request_code_desc(424242) == "424242"
    assert [version_desc(v) for v in (513, 409, 212, 213, 611, 612, 100)] == [
        "v5_5_0", "v4_9_8", "v4_0_0_snapshot", "v4_0_0", "v5_9_9", "higher_version", "100"]
    assert metrics_message_type({"TRAN_MSG": "true", "DELAY": "3"}) == "transaction"
    assert metrics_message_type({"TIMER_DELIVER_MS": "1", "__SHARDINGKEY": "k"}) == "delay"
    assert metrics_message_type({"__SHARDINGKEY": "k"}) == "fifo"
    assert metrics_message_type({"TRAN_MSG": "false"}) == "normal"
    assert parse_metrics_label("region:eu,zone:a") == {"region": "eu", "zone": "a"}
    assert parse_metrics_label("") == {}


def test_retry_and_dead_letter_topics_are_not_counted_as_messages_in_or_pulled_out():
    stats = BrokerStats()
    stats.record_topic_put("%RETRY%g", 1, 100)
    stats.record_topic_put("%DLQ%g", 1, 100)
    stats.record_group_get("%RETRY%g", "g", 1, 100)
    stats.record_group_get("%RETRY%g_t", "g", 1, 100, is_retry=True, label_topic="t")  # a POP retry read
    assert stats.messages_in == {}
    assert stats.messages_out == {("t", "g", True): [1.0, 100.0]}


def test_the_servers_of_sluice_dev_share_one_endpoint_with_each_family_once():
    rpc_a, rpc_b = RpcLatency(), RpcLatency()
    rpc_a.record(RequestCode.HEART_BEAT, 0, False, "success", time.monotonic())
    rpc_b.record(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, False, "success", time.monotonic())
    metrics = collect([NamesrvMetrics("ns-a", rpc_a), NamesrvMetrics("ns-b", rpc_b), ProxyMetricsManager("front")])
    text = generate_latest(Snapshot(metrics)).decode()
    types = [line for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(types) == len(set(types)) == 3  # rpc latency, proxy up, target_info
    families = {f.name: f for f in text_string_to_metric_families(text)}
    counts = [s for s in families["rocketmq_rpc_latency_milliseconds"].samples if s.name.endswith("_count")]
    assert sorted(s.labels["node_id"] for s in counts) == ["ns-a", "ns-b"]
    assert families["rocketmq_proxy_up"].samples[0].labels["proxy_mode"] == "cluster"


def test_a_family_may_mix_label_sets_and_every_series_carries_the_base_labels():
    families = Families({"cluster": "c", "node_type": "broker"})
    counter = families.counter("rocketmq_messages_out_total", [({"topic": "t", "is_retry": "false"}, 2),
                                                               ({"topic": "t"}, 3), (None, 1)]).metric()
    assert [s.name for s in counter.samples] == ["rocketmq_messages_out_total"] * 3
    assert [s.labels for s in counter.samples] == [
        {"cluster": "c", "node_type": "broker", "topic": "t", "is_retry": "false"},
        {"cluster": "c", "node_type": "broker", "topic": "t"},
        {"cluster": "c", "node_type": "broker", "otel_metric_overflow": "true"}]
    row = [1.0, 0.0, 2.0, 30.5]
    histogram = families.histogram("h", "a histogram", (1, 5), [({}, row)])
    row[0] = 100  # (a copy was taken: the counters go on changing while the text is made)
    histogram = histogram.metric()
    assert [(s.name, s.labels.get("le"), s.value) for s in histogram.samples] == [
        ("h_bucket", "1.0", 1), ("h_bucket", "5.0", 1), ("h_bucket", "+Inf", 3), ("h_count", None, 3),
        ("h_sum", None, 30.5)]
    assert target_info().metric().samples[0].labels == {}


def test_the_grafana_dashboard_queries_only_families_the_docs_list():
    import json
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    dashboard = json.loads((docs / "grafana-sluice.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {re.sub(r"_bucket$", "", name) for e in exprs for name in re.findall(r"rocketmq_[a-z_]+", e)}
    documented = set(re.findall(r"`(rocketmq_[a-z_]+)`", (docs / "operations.md").read_text()))
    assert used and used <= documented, used - documented


def test_the_timer_wheel_counts_what_falls_due_in_each_span_in_one_pass():
    from sluice.store.timer_wheel import TimerWheel

    wheel = TimerWheel(1000, 3_600_000)
    for due, n in ((5_000, 2), (9_000, 1), (60_000, 4), (3_000_000, 1)):
        for i in range(n):
            wheel.add(due, i)
    assert wheel.waiting([0, 5_000, 10_000, 61_000, 3_600_000]) == [0, 3, 4, 1]
    assert wheel.waiting([9_000]) == [] and TimerWheel(1000, 60_000).waiting([0, 10]) == [0]


def test_a_group_that_popped_stays_a_pop_group_and_delayed_deliveries_count_in_again():
    stats = BrokerStats()
    stats.record_group_get("t", "pop-g", 2, 200, is_retry=False, label_topic="t")
    stats.record_group_get("t", "pull-g", 2, 200)
    assert stats.pop_groups == {"pop-g"}
    stats.record_delivered("%RETRY%g", 300)  # (RocketMQ's schedule service counts retry topics too)
    stats.record_delivered("t", 300)
    assert stats.messages_in[("%RETRY%g", "delay")][:2] == [1, 300] and stats.messages_in[("t", "delay")][0] == 1
