"""JSON request and response bodies read into RocketMQ's structs: HEART_BEAT and the lock / unlock bodies at the
broker (``parse_json_body``), a data version at the name server, routes and cluster info at the client (all
three through ``fastjson.loads``).

Property: a body parses or raises its reader's documented error (``BadRequestError`` at the broker,
``ValueError`` from fastjson); a parsed value maps into structs (``from_json``) or raises ``KeyError``,
``TypeError`` or ``ValueError``, the errors each caller turns into a clear answer; what maps writes back
(``to_json``) to JSON that maps equal. The first byte picks the body.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.broker.processors.client_manage_processor import parse_json_body
from sluice.common import fastjson
from sluice.common.structs import ClusterInfo, DataVersion, HeartbeatData, MessageQueue, TopicRouteData
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import BadRequestError

from ._common import expect

_MAPPING_ERRORS = (KeyError, TypeError, ValueError)


def _lock_body(d: dict[str, Any]) -> list[MessageQueue]:
    return [MessageQueue.from_json(m) for m in d.get("mqSet") or []]


# (who reads the body, how the value maps, how the mapped value writes back)
_BODIES: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = [
    ("broker", HeartbeatData.from_json, lambda hb: hb.to_json()),
    ("broker", _lock_body, lambda mqs: {"mqSet": [m.to_json() for m in mqs]}),
    ("namesrv", DataVersion.from_json, lambda dv: dv.to_json()),
    ("client", TopicRouteData.from_json, lambda route: route.to_json()),
    ("client", ClusterInfo.from_json, lambda info: info.to_json()),
]


def check(data: bytes) -> None:
    if not data:
        return
    reader, from_json, to_json = _BODIES[data[0] % len(_BODIES)]
    body = data[1:]
    if reader == "broker":  # parse_json_body: JSON objects only
        try:
            value: Any = parse_json_body(RemotingCommand(0, body=body), "fuzzed")
        except BadRequestError:
            return
    else:
        try:
            value = fastjson.loads(body or b"null")
        except fastjson.FastjsonDecodeError:
            return
        if reader == "namesrv" and not isinstance(value, dict):  # QUERY_DATA_VERSION refuses it first
            return
    try:
        mapped = from_json(value)
    except _MAPPING_ERRORS:
        return
    again = from_json(fastjson.loads(fastjson.dumps(to_json(mapped))))
    expect(again == mapped, f"{mapped!r} does not survive to_json / from_json: {again!r}")
