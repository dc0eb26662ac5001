"""Message trace: a producer and consumers with ``enable_trace`` record each send and listener call in
RMQ_SYS_TRACE_TOPIC, in RocketMQ's trace format; ``sluice msg trace`` and ``Admin.message_trace`` read a message's
way back — its send, its transaction's end, each group's consumption with times and status."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sluice.aio import Producer, PushConsumer, TransactionProducer
from sluice.client.admin import Admin
from sluice.client.message import ConsumeStatus, Message
from sluice.client.trace import TRACE_TOPIC, TraceStep, TraceType, decode_trace_data
from sluice.client.transaction import LocalTransactionState
from sluice.common.message import MessageExt
from tests.conftest import Cluster
from tests.integration.test_cli import fails, ok, rows

TOPIC = "trace-orders"


async def steps_of(ns: str, msg_id: str, until: Any, timeout: float = 30) -> list[TraceStep]:
    """The message's trace steps, once ``until(steps)`` holds."""
    async with Admin(ns) as admin, asyncio.timeout(timeout):
        while True:
            if await admin.api.get_topic_route(TRACE_TOPIC) is not None:
                steps = await admin.message_trace(msg_id)
                if until(steps):
                    return steps
            await asyncio.sleep(0.1)


def consumer_of(ns: str, group: str, listener: Any, **settings: Any) -> PushConsumer:
    c = PushConsumer(group, ns, consume_from="first", enable_trace=True, trace_flush_interval_ms=50,
                     rebalance_interval=500, **settings)
    c.subscribe(TOPIC)
    c.register_listener(listener)
    return c


def test_a_traced_message_shows_its_send_and_each_groups_consumption(empty_cluster: Cluster, capsys) -> None:
    cluster = empty_cluster
    cluster.start_broker("broker-a")
    cluster.create_topic(TOPIC, 2)
    ns, broker = cluster.namesrv_addr, cluster.brokers[0].broker_addr
    calls: dict[str, int] = {}

    def fails_once(msgs: list[MessageExt]) -> ConsumeStatus:
        n = calls[msgs[0].msg_id] = calls.get(msgs[0].msg_id, 0) + 1
        return ConsumeStatus.RECONSUME_LATER if n == 1 else ConsumeStatus.CONSUME_SUCCESS

    async def go() -> tuple[str, list[TraceStep]]:
        async with Producer("trace-pg", ns, enable_trace=True, trace_flush_interval_ms=50) as producer:
            result = await producer.send(Message(TOPIC, b"order-1", tags="created", keys=["order-1", "cust-9"]))
            async_result = await producer.send_async(Message(TOPIC, b"order-2", keys=["order-2"]))
        billing = consumer_of(ns, "trace-billing", lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
        audit = consumer_of(ns, "trace-audit", fails_once, suspend_current_queue_time_millis=100)
        await billing.start()
        await audit.start()
        try:
            def complete(steps: list[TraceStep]) -> bool:
                subs = [s for s in steps if s.kind == "sub" and s.status != "consuming"]
                return any(s.kind == "pub" for s in steps) and len(subs) == 3
            steps = await steps_of(ns, result.msg_id, complete, timeout=60)
            other = await steps_of(ns, async_result.msg_id, lambda st: any(s.kind == "pub" for s in st))
            assert [s.kind for s in other][0] == "pub" and other[0].keys == "order-2"
            return result.msg_id, steps
        finally:
            await billing.shutdown()
            await audit.shutdown()

    msg_id, steps = asyncio.run(go())
    pub = steps[0]
    assert (pub.kind, pub.group, pub.status, pub.topic, pub.tags, pub.keys, pub.store_host, pub.msg_type) == (
        "pub", "trace-pg", "success", TOPIC, "created", "order-1 cust-9", broker, "NORMAL")
    assert pub.offset_msg_id and pub.cost_ms is not None and pub.cost_ms >= 0
    subs = [s for s in steps if s.kind == "sub"]
    assert sorted((s.group, s.status, s.retry_times, s.return_type) for s in subs) == [
        ("trace-audit", "failed", 0, "FAILED"), ("trace-audit", "success", 1, "SUCCESS"),
        ("trace-billing", "success", 0, "SUCCESS")]
    assert all(s.timestamp >= pub.timestamp and s.client_host for s in subs)

    out = ok(capsys, "msg", "trace", msg_id, "--namesrv", ns)
    table = rows(out)
    assert table[0] == ["TYPE", "GROUP", "CLIENT HOST", "TIME", "COST", "STATUS", "DETAIL"]
    assert table[1][:2] == ["Pub", "trace-pg"] and table[1][5] == "success" and f"stored at {broker}" in table[1][6]
    assert sorted((r[0], r[1], r[5]) for r in table[2:5]) == [
        ("Sub", "trace-audit", "failed"), ("Sub", "trace-audit", "success"), ("Sub", "trace-billing", "success")]
    assert "consumed by 2 group(s): trace-audit, trace-billing" in out
    as_json = json.loads(ok(capsys, "msg", "trace", msg_id, "--namesrv", ns, "--json"))
    assert [s["kind"] for s in as_json].count("sub") == 3 and as_json[0]["storeHost"] == broker

    assert "no trace of message 0A0B0C" in fails(capsys, "msg", "trace", "0A0B0C", "--namesrv", ns)


def test_trace_records_are_rocketmqs_format_and_a_batch_records_each_message(empty_cluster: Cluster) -> None:
    cluster = empty_cluster
    cluster.start_broker("broker-a")
    cluster.create_topic(TOPIC, 2)
    ns = cluster.namesrv_addr

    async def go() -> tuple[list[str], list[MessageExt]]:
        async with Producer("trace-batch-pg", ns, enable_trace=True) as producer:
            batch = await producer.send_batch([Message(TOPIC, b"b%d" % i, keys=[f"bk{i}"]) for i in range(3)])
            assert producer.trace is not None
            await producer.trace.flush()
        async with Admin(ns) as admin:
            stored = [m for i in range(3) for m in await admin.messages_by_key(TRACE_TOPIC, batch.msg_ids[i])]
        return batch.msg_ids, stored

    ids, stored = asyncio.run(go())
    assert stored, "no trace message found by message id"
    body = stored[0].body.decode()
    lines = [line.split("\x01") for line in body.split("\x02") if line]
    pubs = {line[5]: line for line in lines}
    assert set(pubs) == set(ids)
    # Pub, time, region, group, topic, msg id, tags (Java's null), keys, store host, body length, cost, type,
    # offset id, success: 14 fields, as the Java client writes them.
    one = pubs[ids[1]]
    assert len(one) == 14 and one[0] == "Pub" and one[2] == "DefaultRegion" and one[3] == "trace-batch-pg"
    assert (one[4], one[6], one[7], one[9], one[11], one[13]) == (TOPIC, "null", "bk1", "2", "0", "true")
    assert set(stored[0].keys) >= {ids[1], "bk1"}
    assert [c.trace_type for c in decode_trace_data(body)] == [TraceType.PUB] * 3


def test_a_transaction_is_traced_with_its_half_message_and_its_end(empty_cluster: Cluster) -> None:
    cluster = empty_cluster
    cluster.start_broker("broker-a")
    cluster.create_topic(TOPIC, 2)
    ns = cluster.namesrv_addr

    class Commit:
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

    async def go() -> list[TraceStep]:
        async with TransactionProducer("trace-tx-pg", Commit(), ns, enable_trace=True,
                                       trace_flush_interval_ms=50) as producer:
            result = await producer.send_message_in_transaction(Message(TOPIC, b"tx", keys=["tx-1"]))
        return await steps_of(ns, result.msg_id, lambda st: len(st) >= 2)

    steps = asyncio.run(go())
    assert [(s.kind, s.msg_type, s.status) for s in steps] == [
        ("pub", "TRANS_HALF", "success"), ("end_transaction", "TRANS_COMMIT", "COMMIT_MESSAGE")]
    assert steps[1].keys == "tx-1" and not steps[1].from_transaction_check


def test_the_brokers_trace_switch_turned_off_at_run_time_stops_send_records_and_messages_say_so(
        empty_cluster: Cluster) -> None:
    cluster = empty_cluster
    cluster.start_broker("broker-a", trace_topic_enable=True)
    cluster.create_topic(TOPIC, 1)
    ns = cluster.namesrv_addr

    async def go() -> tuple[int, int, MessageExt, MessageExt]:
        async with Admin(ns) as admin, Producer("trace-off-pg", ns, enable_trace=True) as producer:
            assert producer.trace is not None
            loud = await producer.send(Message(TOPIC, b"loud"))
            await producer.trace.flush()
            before = sum(q.messages for q in await admin.topic_status(TRACE_TOPIC))
            await admin.update_broker_config("broker-a", "traceOn", "false")
            quiet = await producer.send(Message(TOPIC, b"quiet"))
            await producer.trace.flush()
            after = sum(q.messages for q in await admin.topic_status(TRACE_TOPIC))
            return before, after, (await admin.get_message(loud.msg_id, TOPIC))[0], \
                (await admin.get_message(quiet.msg_id, TOPIC))[0]

    before, after, loud, quiet = asyncio.run(go())
    assert before == after == 1  # the topic exists from the start (trace_topic_enable); the second send left none
    assert (loud.properties["TRACE_ON"], loud.properties["MSG_REGION"], loud.properties["CLUSTER"]) == (
        "true", "DefaultRegion", "DefaultCluster")
    assert quiet.properties["TRACE_ON"] == "false"


def test_auto_batched_sends_of_a_traced_producer_carry_the_region_a_java_consumers_trace_needs(
        empty_cluster: Cluster) -> None:
    """Brokers stamp MSG_REGION only on messages sent singly; a producer with trace on stamps its auto-batched
    ones itself, and a group name at the length limit still gets a (shortened) trace producer."""
    cluster = empty_cluster
    cluster.start_broker("broker-a")
    cluster.create_topic(TOPIC, 1)
    ns, group = cluster.namesrv_addr, "g" * 255

    async def go() -> list[MessageExt]:
        async with Producer(group, ns, enable_trace=True, batch_max_delay_ms=50) as producer:
            assert producer.trace is not None and len(producer.trace.group) <= 255
            first = await producer.send(Message(TOPIC, b"single"))
            results = await asyncio.gather(*(producer.send_async(Message(TOPIC, b"batched-%d" % i))
                                             for i in range(5)))
            assert len({r.queue_offset for r in results}) == 5
            await producer.trace.flush()
            async with Admin(ns) as admin:
                return [(await admin.get_message(r.msg_id, TOPIC))[0] for r in [first, *results]]

    for m in asyncio.run(go()):
        assert (m.properties["MSG_REGION"], m.properties["TRACE_ON"]) == ("DefaultRegion", "true"), m.body


@pytest.mark.parametrize("bad", ["a b", "x" * 200])
def test_a_bad_trace_topic_is_refused_naming_the_setting(bad: str) -> None:
    with pytest.raises(Exception, match="trace_topic"):
        Producer("pg", "127.0.0.1:9876", enable_trace=True, trace_topic=bad)
