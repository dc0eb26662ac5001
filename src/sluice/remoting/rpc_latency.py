"""The time a server takes to answer each request (RocketMQ's ``rocketmq_rpc_latency``), counted by request code,
response code, long polling and result into fixed buckets, to be exported by a metrics collector.

Counting is a dict lookup and a few additions per answer; the exposition format is the exporter's business."""

from __future__ import annotations

import time
from bisect import bisect_left

from sluice.remoting.codes import RequestCode, ResponseCode

# RocketMQ's view of the histogram (RemotingMetricsManager.getMetricsView), in milliseconds.
BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)
# Request codes a server parks until there is something to say (RocketMQ's "suspended" requests).
LONG_POLLING_CODES = frozenset({RequestCode.PULL_MESSAGE, RequestCode.POP_MESSAGE, RequestCode.NOTIFICATION,
                                RequestCode.LITE_PULL_MESSAGE})
# Series beyond this many are counted together in one (as OpenTelemetry does past its cardinality limit): request
# and response codes come from clients.
MAX_SERIES = 2000
OVERFLOW = (-1, -1, False, "overflow")

RESULT_SUCCESS = "success"
RESULT_ONEWAY = "oneway"
RESULT_WRITE_CHANNEL_FAILED = "write_channel_failed"

_REQUEST_NAMES = {int(c): c.name.lower() for c in RequestCode}
_RESPONSE_NAMES = {int(c): c.name.lower() for c in ResponseCode}


def request_code_desc(code: int) -> str:
    """A request code's label value: its RocketMQ constant's name in lower case, else the number."""
    return _REQUEST_NAMES.get(code, str(code))


def response_code_desc(code: int) -> str:
    return _RESPONSE_NAMES.get(code, str(code))


class RpcLatency:
    """Per (request code, response code, long polling, result): counts per bucket (the last is +Inf, not
    cumulative) and the sum of milliseconds."""

    __slots__ = ("series", "clock")

    def __init__(self) -> None:
        self.series: dict[tuple[int, int, bool, str], list[float]] = {}
        self.clock = time.monotonic

    def record(self, code: int, response_code: int, held: bool, result: str, since: float) -> None:
        """One answer to a request read at ``since`` (time.monotonic())."""
        ms = (self.clock() - since) * 1000
        key = (code, response_code, held and code in LONG_POLLING_CODES, result)
        counts = self.series.get(key)
        if counts is None:
            if len(self.series) >= MAX_SERIES:
                key = OVERFLOW
            counts = self.series.setdefault(key, [0.0] * (len(BUCKETS_MS) + 2))
        counts[bisect_left(BUCKETS_MS, ms)] += 1
        counts[-1] += ms
