"""OpenTelemetry across the queue: with ``enable_otel`` a send is a publish span whose W3C trace context travels in the
message (TRACE_CONTEXT), and the listener call that consumes it is a process span, its child — so an application's
spans on both sides make one trace. Checked with OpenTelemetry's SDK and an in-memory exporter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sluice.aio import Producer, PushConsumer
from sluice.client.message import ConsumeStatus, Message
from sluice.common.message import MessageExt
from tests.conftest import Cluster

TOPIC = "otel-orders"
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # (set once a process: OpenTelemetry allows no second one)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def by_name(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def until(cond: Any, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("listener_kind", ["thread", "coroutine"])
def test_the_listener_call_is_the_child_of_the_send_and_the_listeners_own_spans_join_the_trace(
        cluster: Cluster, spans: InMemorySpanExporter, listener_kind: str) -> None:
    cluster.create_topic(TOPIC, 2)
    ns = cluster.namesrv_addr
    tracer = trace.get_tracer("app")
    seen: list[MessageExt] = []

    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        with tracer.start_as_current_span("handle order"):
            seen.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    async def handle_async(msgs: list[MessageExt]) -> ConsumeStatus:
        return handle(msgs)

    async def go() -> str:
        consumer = PushConsumer(f"otel-{listener_kind}", ns, consume_from="first", enable_otel=True,
                                rebalance_interval=500)
        consumer.subscribe(TOPIC)
        consumer.register_listener(handle if listener_kind == "thread" else handle_async)
        async with consumer, Producer("otel-pg", ns, enable_otel=True) as producer:
            with tracer.start_as_current_span("checkout"):
                result = await producer.send(Message(TOPIC, b"order-1", tags="created", keys=["o-1"]))
            await until(lambda: seen and by_name(spans, "handle order"))
        return result.msg_id

    msg_id = asyncio.run(go())
    [checkout] = by_name(spans, "checkout")
    [publish] = by_name(spans, f"{TOPIC} publish")
    [process] = by_name(spans, f"{TOPIC} process")
    [handle_span] = by_name(spans, "handle order")
    assert publish.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    assert publish.parent.span_id == checkout.context.span_id
    assert process.parent.span_id == publish.context.span_id  # across the queue
    assert handle_span.parent.span_id == process.context.span_id  # the listener runs inside it
    assert len({s.context.trace_id for s in (checkout, publish, process, handle_span)}) == 1
    assert publish.attributes["messaging.destination.name"] == TOPIC
    assert publish.attributes["messaging.message.id"] == msg_id
    assert process.attributes["messaging.consumer.group.name"] == f"otel-{listener_kind}"
    assert process.attributes["messaging.rocketmq.consume_result"] == "CONSUME_SUCCESS"
    traceparent = seen[0].get_property("TRACE_CONTEXT")
    assert traceparent.startswith(f"00-{publish.context.trace_id:032x}-{publish.context.span_id:016x}-")


def test_a_failing_listener_call_is_an_error_span_and_async_sends_are_spans_too(
        cluster: Cluster, spans: InMemorySpanExporter) -> None:
    cluster.create_topic(TOPIC, 1)
    ns = cluster.namesrv_addr
    calls: list[int] = []

    def fail_first(msgs: list[MessageExt]) -> ConsumeStatus:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("payment service down")
        return ConsumeStatus.CONSUME_SUCCESS

    async def go() -> None:
        consumer = PushConsumer("otel-fails", ns, consume_from="first", enable_otel=True, rebalance_interval=500)
        consumer.subscribe(TOPIC)
        consumer.register_listener(fail_first)
        async with consumer, Producer("otel-async-pg", ns, enable_otel=True) as producer:
            msg = Message(TOPIC, b"order-2")
            await producer.send_async(msg)
            assert msg.trace_context is None  # (the caller's message is not changed)
            await until(lambda: len(by_name(spans, f"{TOPIC} process")) >= 2, 60)

    asyncio.run(go())
    [publish] = by_name(spans, f"{TOPIC} publish")
    first, second = sorted(by_name(spans, f"{TOPIC} process"), key=lambda s: s.start_time)[:2]
    assert first.status.status_code is StatusCode.ERROR and "payment service down" in first.status.description
    assert any(e.name == "exception" for e in first.events)
    assert second.status.status_code is not StatusCode.ERROR
    assert first.parent.span_id == second.parent.span_id == publish.context.span_id  # the retry too
    assert second.attributes["messaging.rocketmq.message.delivery_attempt"] == 2
