"""``rocketmq_rpc_latency`` as RocketMQ's exporter shows it, from a server's ``RpcLatency`` (kept apart from it: the
client's connections import ``rpc_latency``, and the client never loads prometheus_client)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from sluice.common.metrics import Families, bool_label
from sluice.remoting.rpc_latency import BUCKETS_MS, RpcLatency, request_code_desc, response_code_desc


def rpc_latency_family(families: Families, rpc: RpcLatency, protocol: str = "remoting") -> Metric:
    """``rocketmq_rpc_latency`` of one server, from its answer times."""

    def series() -> Iterable[tuple[dict[str, str] | None, list[float]]]:
        for key, counts in list(rpc.series.items()):
            code, response_code, held, result = key
            if code < 0:
                yield None, counts
                continue
            yield {"protocol_type": protocol, "is_long_polling": bool_label(held),
                   "request_code": request_code_desc(code), "response_code": response_code_desc(response_code),
                   "result": result}, counts

    return families.histogram("rocketmq_rpc_latency_milliseconds", "Rpc latency", BUCKETS_MS, series())
