"""``rocketmq_rpc_latency`` as RocketMQ's exporter shows it, from a server's ``RpcLatency`` (kept apart from it: the
client's connections import ``rpc_latency``, and the client never loads prometheus_client)."""

from __future__ import annotations

from sluice.common.metrics import Families, Family, bool_label
from sluice.remoting.rpc_latency import BUCKETS_MS, RpcLatency, request_code_desc, response_code_desc


def rpc_latency_family(families: Families, rpc: RpcLatency, protocol: str = "remoting") -> Family:
    """``rocketmq_rpc_latency`` of one server, from its answer times (copied now, labelled in the worker)."""

    def labels(key: tuple[int, int, bool, str]) -> dict[str, str] | None:
        code, response_code, held, result = key
        if code < 0:
            return None
        return {"protocol_type": protocol, "is_long_polling": bool_label(held),
                "request_code": request_code_desc(code), "response_code": response_code_desc(response_code),
                "result": result}

    return families.histogram("rocketmq_rpc_latency_milliseconds", "Rpc latency", BUCKETS_MS,
                              list(rpc.series.items()), labels)
