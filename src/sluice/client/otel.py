"""OpenTelemetry across the queue (``enable_otel=True``; the optional dependency ``pip install 'sluice[otel]'``).

A producer sends each message inside a PRODUCER span (``<topic> publish``) and carries that span's W3C trace
context (``traceparent``) in the message's ``TRACE_CONTEXT`` property — the property RocketMQ 5's gRPC clients and
proxy carry their ``trace_context`` in, so traces span Sluice's clients and theirs alike. A push consumer runs each
listener call inside a CONSUMER span (``<topic> process``) whose parent is the message's trace context (a call on
several messages links to each), so an application's own spans in the listener join the producer's trace.

Attributes follow OpenTelemetry's messaging conventions (``messaging.system = rocketmq``, destination, message
id, tag, keys, consumer group). Without ``opentelemetry-api`` installed the setting is refused at the client's
construction, naming the package.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sluice.client.message import PROPERTY_TRACE_CONTEXT, Message, SendResult
from sluice.common.errors import ClientError
from sluice.common.message import MessageExt

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover (the optional dependency is missing)
    trace = None  # type: ignore[assignment]

SCOPE = "sluice"


def check_available() -> None:
    """Raise when ``enable_otel`` cannot work here."""
    if trace is None:
        raise ClientError("enable_otel needs OpenTelemetry's API: pip install 'sluice[otel]' (opentelemetry-api)")


class Instrumentation:
    """The spans of one client."""

    def __init__(self, group: str) -> None:
        check_available()
        self.group = group
        self.tracer = trace.get_tracer(SCOPE)
        self.propagator = TraceContextTextMapPropagator()

    # == producer ====================================================================================
    def start_publish(self, msg: Message) -> tuple[Any, str | None]:
        """A PRODUCER span for sending ``msg`` (a child of the current span) and the ``traceparent`` to carry."""
        attrs: dict[str, Any] = {"messaging.system": "rocketmq", "messaging.operation.type": "publish",
                                 "messaging.destination.name": msg.topic, "messaging.rocketmq.client_group":
                                 self.group, "messaging.message.body.size": len(msg.body)}
        if msg.tags:
            attrs["messaging.rocketmq.message.tag"] = msg.tags
        keys = msg.key_list()
        if keys:
            attrs["messaging.rocketmq.message.keys"] = keys
        span = self.tracer.start_span(f"{msg.topic} publish", kind=SpanKind.PRODUCER, attributes=attrs)
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, context=trace.set_span_in_context(span))
        return span, carrier.get("traceparent")

    @staticmethod
    def end_publish(span: Any, result: SendResult | None, error: BaseException | None) -> None:
        if result is not None:
            span.set_attribute("messaging.message.id", result.msg_id)
            span.set_attribute("messaging.destination.partition.id", str(result.queue.queue_id))
            if result.status.name != "SEND_OK":
                span.set_status(Status(StatusCode.ERROR, result.status.name))
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()

    # == consumer ====================================================================================
    def _parent(self, msg: MessageExt) -> Any:
        tp = msg.get_property(PROPERTY_TRACE_CONTEXT)
        return self.propagator.extract({"traceparent": tp}) if tp else None

    def start_process(self, msgs: Sequence[MessageExt]) -> Any:
        """A CONSUMER span for a listener call on ``msgs``: the child of the message's trace context (of one
        message), else linked to each message's."""
        first = msgs[0]
        attrs: dict[str, Any] = {"messaging.system": "rocketmq", "messaging.operation.type": "process",
                                 "messaging.destination.name": first.topic, "messaging.consumer.group.name":
                                 self.group, "messaging.batch.message_count": len(msgs)}
        parent = None
        links: list[Any] = []
        if len(msgs) == 1:
            parent = self._parent(first)
            attrs["messaging.message.id"] = first.msg_id
            attrs["messaging.rocketmq.message.delivery_attempt"] = first.reconsume_times + 1
            if first.tags:
                attrs["messaging.rocketmq.message.tag"] = first.tags
        else:
            for m in msgs:
                ctx = self._parent(m)
                sc = trace.get_current_span(ctx).get_span_context() if ctx is not None else None
                if sc is not None and sc.is_valid:
                    links.append(Link(sc))
        return self.tracer.start_span(f"{first.topic} process", context=parent, kind=SpanKind.CONSUMER,
                                      attributes=attrs, links=links)

    @staticmethod
    def end_process(span: Any, ok: bool, error: BaseException | None, outcome: str) -> None:
        span.set_attribute("messaging.rocketmq.consume_result", outcome)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        elif not ok:
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end()

    @staticmethod
    async def await_in_span(span: Any, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """``await fn(*args)`` with ``span`` current."""
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return await fn(*args)
        finally:
            otel_context.detach(token)

    @staticmethod
    def in_span(span: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` made to run with ``span`` current (on another thread too: the context goes with it)."""
        ctx = contextvars.copy_context()
        token_ctx = trace.set_span_in_context(span)

        def run(*args: Any) -> Any:
            token = otel_context.attach(token_ctx)
            try:
                return fn(*args)
            finally:
                otel_context.detach(token)
        return lambda *args: ctx.run(run, *args)
