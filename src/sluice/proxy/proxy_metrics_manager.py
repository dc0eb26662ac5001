"""The gRPC front's metrics, as RocketMQ's proxy in cluster mode exports them (ProxyMetricsManager):
``rocketmq_proxy_up``."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from sluice.common.metrics import Families, parse_metrics_label, target_info


class ProxyMetricsManager(Collector):
    def __init__(self, node_id: str, cluster: str = "DefaultCluster", metrics_label: str = "") -> None:
        base = parse_metrics_label(metrics_label)
        base.update({"node_type": "proxy", "cluster": cluster, "node_id": node_id, "proxy_mode": "cluster",
                     "otel_scope_name": "broker-meter"})
        self.families = Families(base)

    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return registry

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield self.families.gauge("rocketmq_proxy_up", [({}, 1)])
        yield target_info()
