"""Message trace across clients: the Java client's ``enableTrace`` and Sluice's ``enable_trace`` write one format to
RMQ_SYS_TRACE_TOPIC, so a message sent by one and consumed by the other has one complete trace, which Sluice's
``message_trace`` and the real ``mqadmin queryMsgTraceById`` both read."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from sluice.aio import Producer, PushConsumer
from sluice.client.admin import Admin
from sluice.client.message import ConsumeStatus, Message
from sluice.client.trace import TRACE_TOPIC, TraceStep
from tests.integration.helpers import wait_until
from tests.interop.java_clients import JavaBuild
from tests.interop.test_mqadmin import MqAdmin

COUNT = 5


def trace_of(ns: str, msg_id: str) -> list[TraceStep]:
    async def go() -> list[TraceStep]:
        async with Admin(ns) as admin:
            if await admin.api.get_topic_route(TRACE_TOPIC) is None:
                return []
            return await admin.message_trace(msg_id)
    return asyncio.run(go())


def query_trace(build: JavaBuild, tmp_path: Path, ns: str, msg_id: str) -> str:
    """What the real ``mqadmin queryMsgTraceById`` prints for the message."""
    mqadmin = MqAdmin(build, tmp_path / "mqadmin-home")
    try:
        return mqadmin("queryMsgTraceById", "-n", ns, "-i", msg_id)
    finally:
        mqadmin.close()


def complete(ns: str, msg_ids: list[str], producer_group: str, consumer_group: str) -> bool:
    for msg_id in msg_ids:
        steps = trace_of(ns, msg_id)
        pubs = [s for s in steps if s.kind == "pub" and s.group == producer_group and s.status == "success"]
        subs = [s for s in steps if s.kind == "sub" and s.group == consumer_group and s.status == "success"]
        if len(pubs) != 1 or len(subs) != 1:
            return False
    return True


def test_java_traced_sends_and_sluice_traced_consumption_make_one_trace_mqadmin_reads(
        sluice, java, java_build: JavaBuild, tmp_path: Path) -> None:
    topic, ns = "trace-java-to-sluice", sluice.namesrv
    sluice.create_topic(topic, 2)
    stop = tmp_path / "stop-producer"
    producer = java.start("produce", namesrv=ns, topic=topic, group="trace-java-pg", mode="sync", count=COUNT,
                          trace=True, stop_file=stop, timeout=120)  # (up while its trace records leave)
    wait_until(lambda: producer.records("sent-all"), 60, "the Java producer's sends")
    sent = producer.records("sent")
    ids = [r["msg_id"] for r in sent]
    assert len(ids) == COUNT

    async def consume() -> None:
        seen: set[str] = set()
        consumer = PushConsumer("trace-sluice-cg", ns, consume_from="first", enable_trace=True,
                                trace_flush_interval_ms=50, rebalance_interval=500)
        consumer.subscribe(topic)
        consumer.register_listener(lambda msgs: seen.update(m.msg_id for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)
        async with consumer:
            async with asyncio.timeout(60):
                while not seen >= set(ids):
                    await asyncio.sleep(0.05)
    asyncio.run(consume())
    try:
        wait_until(lambda: complete(ns, ids, "trace-java-pg", "trace-sluice-cg"), 60,
                   "a complete trace of each message: the Java Pub and the Sluice consumption")
    finally:
        stop.touch()
        producer.wait(60)
    pub = next(s for s in trace_of(ns, ids[0]) if s.kind == "pub")
    assert (pub.topic, pub.keys, pub.store_host, pub.msg_type) == (
        topic, f"{sent[0]['keys']}", sluice.broker.broker_addr, "NORMAL")

    out = query_trace(java_build, tmp_path, ns, ids[0])
    assert re.search(r"^Pub\s+trace-java-pg\s+\S+\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+\d+ms\s+success", out, re.M), out
    assert re.search(r"^Sub\s+trace-sluice-cg\s+\S+\s+\d{4}-.*\s+\d+ms\s+success", out, re.M), out


def test_sluice_traced_sends_and_java_traced_consumption_make_one_trace_mqadmin_reads(
        sluice, java, java_build: JavaBuild, tmp_path: Path) -> None:
    topic, ns = "trace-sluice-to-java", sluice.namesrv
    sluice.create_topic(topic, 2)
    stop = tmp_path / "stop"
    consumer = java.start("push-consume", namesrv=ns, topic=topic, group="trace-java-cg", trace=True,
                          consume_from="CONSUME_FROM_FIRST_OFFSET", expect=COUNT, stop_file=stop, timeout=90)

    async def produce() -> list[str]:
        async with Producer("trace-sluice-pg", ns, enable_trace=True, trace_flush_interval_ms=50) as producer:
            return [(await producer.send(Message(topic, b"traced-%d" % i, tags="TagT", keys=[f"tk-{i}"]))).msg_id
                    for i in range(COUNT)]
    ids = asyncio.run(produce())
    wait_until(lambda: {r["id"] for r in consumer.received()} >= set(ids), 60, "the Java consumer got them all")
    stop.touch()  # (its shutdown sends the trace records still waiting)
    consumer.wait(60)
    wait_until(lambda: complete(ns, ids, "trace-sluice-pg", "trace-java-cg"), 60,
               "a complete trace of each message: the Sluice Pub and the Java consumption")
    sub = next(s for s in trace_of(ns, ids[0]) if s.kind == "sub")
    assert (sub.retry_times, sub.return_type, sub.keys) == (0, "SUCCESS", "tk-0")

    out = query_trace(java_build, tmp_path, ns, ids[0])
    assert re.search(r"^Pub\s+trace-sluice-pg\s+\S+\s+\d{4}-.*\s+\d+ms\s+success", out, re.M), out
    assert re.search(r"^Sub\s+trace-java-cg\s+\S+\s+\d{4}-.*\s+\d+ms\s+success", out, re.M), out
