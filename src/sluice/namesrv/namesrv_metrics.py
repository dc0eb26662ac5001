"""A name server's metrics (beyond RocketMQ, whose name server exports none): its answer times as
``rocketmq_rpc_latency``, in the shape the broker's have, with ``node_type="namesrv"``."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from sluice.common.metrics import Families, parse_metrics_label, target_info
from sluice.remoting.rpc_latency import RpcLatency
from sluice.remoting.rpc_latency_family import rpc_latency_family


class NamesrvMetrics(Collector):
    def __init__(self, node_id: str, rpc_latency: RpcLatency, metrics_label: str = "") -> None:
        base = parse_metrics_label(metrics_label)
        base.update({"node_type": "namesrv", "node_id": node_id, "otel_scope_name": "namesrv-meter"})
        self.families = Families(base)
        self.rpc_latency = rpc_latency

    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return registry

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        rpc = rpc_latency_family(self.families, self.rpc_latency)
        if rpc.samples:
            yield rpc
        yield target_info()
