"""The gRPC front's metrics, as RocketMQ's proxy in cluster mode exports them (ProxyMetricsManager):
``rocketmq_proxy_up``."""

from __future__ import annotations

from sluice.common.metrics import Families, Family, parse_metrics_label, target_info


class ProxyMetricsManager:
    """A ``MetricsSource``."""

    def __init__(self, node_id: str, cluster: str = "DefaultCluster", metrics_label: str = "") -> None:
        base = parse_metrics_label(metrics_label)
        base.update({"node_type": "proxy", "cluster": cluster, "node_id": node_id, "proxy_mode": "cluster",
                     "otel_scope_name": "broker-meter"})
        self.labels = Families(base)

    def families(self) -> list[Family]:
        return [self.labels.gauge("rocketmq_proxy_up", [({}, 1)]), target_info()]
