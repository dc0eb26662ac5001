"""A name server's metrics (beyond RocketMQ, whose name server exports none): its answer times as
``rocketmq_rpc_latency``, in the shape the broker's have, with ``node_type="namesrv"``."""

from __future__ import annotations

from sluice.common.metrics import Families, Family, parse_metrics_label, target_info
from sluice.remoting.rpc_latency import RpcLatency
from sluice.remoting.rpc_latency_family import rpc_latency_family


class NamesrvMetrics:
    """A ``MetricsSource``."""

    def __init__(self, node_id: str, rpc_latency: RpcLatency, metrics_label: str = "") -> None:
        base = parse_metrics_label(metrics_label)
        base.update({"node_type": "namesrv", "node_id": node_id, "otel_scope_name": "namesrv-meter"})
        self.labels = Families(base)
        self.rpc_latency = rpc_latency

    def families(self) -> list[Family]:
        return [rpc_latency_family(self.labels, self.rpc_latency), target_info()]
