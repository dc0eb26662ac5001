"""Namespaces on the gRPC front: a 5.x client names the namespace beside each resource (``Resource.resource_namespace``)
and in the ``x-mq-namespace`` header; the front wraps every topic and group of a request into the broker's name
(``ns%orders``, sluice.common.namespace) before anything else reads it — authorization included, which so sees what
the broker stores — and splits the names of its answers back into namespace and name, as RocketMQ 5.0's proxy did.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

from sluice.common.errors import InvalidNameError
from sluice.common.namespace import namespace_of, unwrap, validate_namespace, wrap
from sluice.proxy.grpc_converter import Refused, status
from sluice.proxy.protocol import PACKAGE, pb
from sluice.proxy.stream_filter import filtered_stream

NAMESPACE_HEADER = "x-mq-namespace"
_RESOURCE = f"{PACKAGE}.Resource"
# Resources one request may carry (every RPC takes a handful; a settings command a topic list): the walk is bounded
# before anything else reads the request, authentication included.
MAX_RESOURCES = 1024


@functools.cache
def _resource_fields(full_name: str) -> tuple[tuple[str, bool, bool], ...]:
    """The fields of message type ``full_name`` that are or may hold a Resource: (name, is a Resource, repeated)."""
    return _fields_holding_resources(full_name, frozenset())


def _fields_holding_resources(full_name: str, visiting: frozenset[str]) -> tuple[tuple[str, bool, bool], ...]:
    descriptor = pb.Resource.DESCRIPTOR.file.pool.FindMessageTypeByName(full_name)
    out = []
    for f in descriptor.fields:
        if f.message_type is None or f.message_type.GetOptions().map_entry:
            continue
        inner = f.message_type.full_name
        if inner == _RESOURCE or (inner not in visiting and _fields_holding_resources(inner, visiting | {full_name})):
            repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == 3  # (LABEL_REPEATED)
            out.append((f.name, inner == _RESOURCE, bool(repeated)))
    return tuple(out)


def _resources(msg: Any, found: list[Any] | None = None) -> list[Any]:
    """Every Resource in ``msg``, however deep; ``Refused`` BAD_REQUEST past ``MAX_RESOURCES`` (counted before a
    repeated field is walked: a request of a million messages costs nothing)."""
    found = [] if found is None else found
    for name, is_resource, repeated in _resource_fields(msg.DESCRIPTOR.full_name):
        if repeated:
            values = getattr(msg, name)
            if len(values) + len(found) > MAX_RESOURCES:
                raise Refused("BAD_REQUEST", f"a request carries at most {MAX_RESOURCES} topics, groups and "
                                             f"messages, not {len(values)} {name}")
        elif msg.HasField(name):
            values = [getattr(msg, name)]
        else:
            continue
        for v in values:
            if is_resource:
                found.append(v)
            else:
                _resources(v, found)
    return found


def wrap_request(msg: Any, header_namespace: str) -> bool:
    """Give each resource of ``msg`` its broker name (its own namespace, else the header's); whether any had one.
    ``Refused`` BAD_REQUEST for a namespace that cannot be one."""
    named = False
    for r in _resources(msg):
        ns = r.resource_namespace or header_namespace
        if not ns:
            continue
        try:
            validate_namespace(ns)
        except InvalidNameError as exc:
            raise Refused("BAD_REQUEST", str(exc)) from None
        r.name = wrap(ns, r.name)
        r.resource_namespace = ""
        named = True
    return named


def split_response(msg: Any) -> None:
    """Each broker name in an answer as namespace and name (RocketMQ's GrpcConverter.buildResource)."""
    for r in _resources(msg):
        if not r.resource_namespace:
            ns = namespace_of(r.name)
            if ns:
                r.resource_namespace = ns
                r.name = unwrap(r.name)


def header_namespace(context: Any) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == NAMESPACE_HEADER:
            return str(value)
    return ""


def namespaced(fn: Any, response: Any, client_streams: bool, server_streams: bool) -> Any:
    """``fn`` (a servicer method, authorization included) served names wrapped, its answers split."""

    def refused(exc: Refused) -> Any:
        return response(status=status(exc.code, exc.text))

    if client_streams:
        async def namespaced_stream(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            header = header_namespace(context)
            named = bool(header)

            def wrapped(cmd: Any) -> Any:
                nonlocal named
                try:
                    named = wrap_request(cmd, header) or named
                except Refused as exc:  # (this command only: the stream, and what it registered, stay)
                    return refused(exc)
                return None

            def split(answer: Any) -> None:
                if named:
                    split_response(answer)

            async for item in filtered_stream(requests, context, fn, wrapped, "namespaced", split):
                yield item
        return namespaced_stream

    if server_streams:
        async def namespaced_server_stream(req: Any, context: Any) -> AsyncIterator[Any]:
            try:
                named = wrap_request(req, header_namespace(context))
            except Refused as exc:
                yield refused(exc)
                return
            async for item in fn(req, context):
                if named:
                    split_response(item)
                yield item
        return namespaced_server_stream

    async def namespaced_unary(req: Any, context: Any) -> Any:
        try:
            named = wrap_request(req, header_namespace(context))
        except Refused as exc:
            return refused(exc)
        out = await fn(req, context)
        if named:
            split_response(out)
        return out
    return namespaced_unary
