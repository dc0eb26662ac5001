"""Sluice's own clients in a namespace (``namespace="ns"``, RocketMQ's ClientConfig.namespace): the brokers know
their topics and groups as ``ns%name``, the caller names them and gets them back without it, and two namespaces
using the same names share nothing."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
import uvloop

from sluice.aio import (
    ConsumeStatus,
    LocalTransactionState,
    Producer,
    PullConsumer,
    PushConsumer,
    SimpleConsumer,
    TransactionProducer,
    create_reply_message,
)
from sluice.client.admin import Admin
from sluice.client.auth_admin import policy_entry
from sluice.client.message import Message
from sluice.client.request_reply import ReplyMessage
from sluice.common.config_loader import SettingError
from sluice.common.errors import ClientError
from sluice.common.message import MessageExt
from sluice.common.structs import MessageQueue
from tests.conftest import Cluster
from tests.integration.helpers import FAST
from tests.integration.test_acl import ROOT, acl_cluster  # noqa: F401 (the fixture)

FAST_DELAYS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms 900ms 1s"


async def _until(cond: Any, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_two_namespaces_share_topic_and_group_names_and_nothing_else(empty_cluster: Cluster) -> None:
    cluster = empty_cluster
    broker = cluster.start_broker("broker-a", message_delay_level=FAST_DELAYS)
    for tenant in ("tenant-a", "tenant-b"):
        cluster.create_topic(f"{tenant}%orders", 2)
    ns = cluster.namesrv_addr

    async def go() -> None:
        got: dict[str, list[MessageExt]] = {"tenant-a": [], "tenant-b": []}
        consumers = []
        for tenant in got:
            c = PushConsumer("billing", ns, namespace=tenant, **FAST)
            c.subscribe("orders")

            def listener(msgs: list[MessageExt], seen: list[MessageExt] = got[tenant]) -> ConsumeStatus:
                seen.extend(msgs)
                # The first delivery of each message fails: it comes back through the group's retry topic.
                return ConsumeStatus.CONSUME_SUCCESS if msgs[0].reconsume_times else ConsumeStatus.RECONSUME_LATER

            c.register_listener(listener)
            consumers.append(await c.start())
        try:
            counts = {"tenant-a": 3, "tenant-b": 2}
            for tenant, n in counts.items():
                async with Producer("shop", ns, namespace=tenant) as p:
                    for i in range(n):
                        r = await p.send(Message("orders", f"{tenant}-{i}".encode(), tags="t"))
                        assert r.queue.topic == "orders"  # the result names the topic as the caller does
                    batch = await p.send_batch([Message("orders", f"{tenant}-batch".encode())])
                    assert batch.queue.topic == "orders"
            await _until(lambda: all(len([m for m in got[t] if m.reconsume_times]) == counts[t] + 1 for t in counts),
                         60, "every message to come back once in each namespace")
        finally:
            for c in consumers:
                await c.shutdown()
        for tenant, seen in got.items():
            assert {m.topic for m in seen} == {"orders"}  # retried ones too: shown under the name the caller knows
            assert sorted(m.body for m in seen if m.reconsume_times) == \
                sorted([f"{tenant}-{i}".encode() for i in range(counts[tenant])] + [f"{tenant}-batch".encode()])
            assert all(m.body.startswith(tenant.encode()) for m in seen)

    uvloop.run(go())
    assert "orders" not in broker.topic_config_manager.table  # nothing outside the namespaces
    assert {"tenant-a%billing", "tenant-b%billing"} <= set(broker.subscription_group_manager.table)
    for tenant, n in (("tenant-a", 4), ("tenant-b", 3)):
        assert sum(broker.store.get_max_offset_in_queue(f"{tenant}%orders", q) for q in range(2)) == n
        assert broker.store.get_max_offset_in_queue(f"%RETRY%{tenant}%billing", 0) == n


def test_a_pull_consumer_in_a_namespace_gives_and_takes_queues_by_the_names_it_knows(cluster: Cluster) -> None:
    cluster.create_topic("ns-p%events", 2)
    ns = cluster.namesrv_addr

    async def go() -> None:
        async with Producer("pg", ns, namespace="ns-p") as p:
            for i in range(6):
                await p.send(Message("events", b"e%d" % i), queue=MessageQueue("events", "broker-a", i % 2))
        c = PullConsumer("readers", ns, namespace="ns-p", auto_commit=False)
        await c.start()
        try:
            queues = await c.fetch_queues("events")
            assert sorted(queues) == [MessageQueue("events", "broker-a", 0), MessageQueue("events", "broker-a", 1)]
            await c.assign(queues)
            assert c.assignment() == set(queues)
            for q in queues:
                await c.seek_to_begin(q)
            got: list[MessageExt] = []
            while len(got) < 6:
                got.extend(await c.poll(5))
            assert sorted(m.body for m in got) == [b"e%d" % i for i in range(6)]
            assert {m.topic for m in got} == {"events"}
            await c.commit({queues[0]: 2})
            assert await c.committed(queues[0]) == 2
            c.seek(queues[1], 2)
            again: list[MessageExt] = []
            while len(again) < 1:
                again.extend(await c.poll(5))
            assert {(m.queue_id, m.queue_offset) for m in again} == {(1, 2)}
        finally:
            await c.shutdown()

    uvloop.run(go())
    offsets = cluster.brokers[0].store.consumer_offsets
    assert offsets.query_offset("ns-p%readers", "ns-p%events", 0) == 2


def test_a_simple_consumer_in_a_namespace_receives_acks_and_nacks_under_its_names(cluster: Cluster) -> None:
    cluster.create_topic("ns-s%jobs", 1)
    ns = cluster.namesrv_addr

    async def go() -> None:
        async with Producer("pg", ns, namespace="ns-s") as p:
            for i in range(4):
                await p.send(Message("jobs", b"j%d" % i))
        async with SimpleConsumer("workers", ns, namespace="ns-s", consume_from_first=True,
                                  invisible_duration=30) as c:
            c.subscribe("jobs")
            got: list[MessageExt] = []
            while len(got) < 4:
                got.extend(await c.receive(16, wait=2))
            assert sorted(m.body for m in got) == [b"j0", b"j1", b"j2", b"j3"]
            assert {m.topic for m in got} == {"jobs"}
            await c.ack(got[0])
            await c.ack_many(got[1:3])
            await c.nack(got[3], delay=0.2)  # comes back at once, as a retry
            back: list[MessageExt] = []
            while not back:
                back.extend(await c.receive(16, wait=2))
            assert [(m.body, m.topic, m.reconsume_times) for m in back] == [(b"j3", "jobs", 1)]
            await c.ack(back[0])
            assert await c.receive(16, wait=0.5) == []  # (everything settled)

    uvloop.run(go())


def test_transactions_and_requests_in_a_namespace(empty_cluster: Cluster) -> None:
    cluster = empty_cluster
    cluster.start_broker("broker-a", transaction_timeout=300, transaction_check_interval=200,
                         transaction_check_max=5)
    cluster.create_topic("ns-t%tx", 1)
    cluster.create_topic("ns-t%rpc", 1)
    ns = cluster.namesrv_addr
    checked: list[MessageExt] = []

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            assert msg.topic == "tx"
            return LocalTransactionState.COMMIT if msg.body == b"commit" else LocalTransactionState.UNKNOWN

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            checked.append(msg)
            return LocalTransactionState.COMMIT

    async def go() -> None:
        c = PushConsumer("txc", ns, namespace="ns-t", consume_from="first")
        c.subscribe("tx")
        seen: list[MessageExt] = []
        c.register_listener(lambda msgs: seen.extend(msgs) or ConsumeStatus.CONSUME_SUCCESS)
        await c.start()
        replier = await Producer("replier", ns, namespace="ns-t").start()
        responder = PushConsumer("rpc-g", ns, namespace="ns-t", consume_from="first")
        responder.subscribe("rpc")

        @responder.listener
        async def answer(msgs: list[MessageExt]) -> ConsumeStatus:
            for m in msgs:
                await replier.send(create_reply_message(m, m.body.upper()))
            return ConsumeStatus.CONSUME_SUCCESS

        await responder.start()
        try:
            async with TransactionProducer("txp", Listener(), ns, namespace="ns-t") as tp:
                for body in (b"commit", b"checked"):
                    r = await tp.send_message_in_transaction(Message("tx", body))
                    assert r.queue.topic == "tx"
                # (the producer stays until the check's commit is in: it answers the check)
                await _until(lambda: len(seen) >= 2, 30, "both committed messages")
            assert {(m.topic, m.body) for m in checked} == {("tx", b"checked")}
            assert sorted((m.topic, m.body) for m in seen) == [("tx", b"checked"), ("tx", b"commit")]
            async with Producer("requester", ns, namespace="ns-t") as requester:
                reply = await requester.request(Message("rpc", b"ping"), 20)
            assert (reply.body, reply.topic) == (b"PING", "DefaultCluster_REPLY_TOPIC")
        finally:
            await responder.shutdown()
            await replier.shutdown()
            await c.shutdown()

    uvloop.run(go())
    assert cluster.brokers[0].store.get_max_offset_in_queue("DefaultCluster_REPLY_TOPIC", 0) == 1


@pytest.mark.parametrize("bad", ["a%b", "x" * 65, "rmq_sys_", "sp ace"])
def test_a_bad_namespace_is_refused_naming_the_setting(bad: str) -> None:
    with pytest.raises(SettingError, match="namespace"):
        Producer("pg", "127.0.0.1:9876", namespace=bad)
    with pytest.raises(SettingError, match="namespace"):
        PushConsumer("cg", "127.0.0.1:9876", namespace=bad)


def test_a_selector_sees_the_callers_names_and_its_choice_stays_in_the_namespace(cluster: Cluster) -> None:
    cluster.create_topic("ns1%orders", 2)
    cluster.create_topic("orders", 2)  # the same name outside any namespace
    seen: list[tuple[list[str], str]] = []

    def selector(mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        seen.append(([q.topic for q in mqs], msg.topic))
        return MessageQueue("orders", "broker-a", arg)  # the caller's own name for the topic

    async def go() -> tuple[Any, Any, str]:
        async with Producer("pg", cluster.namesrv_addr, namespace="ns1") as p:
            info = await p.publish_info("orders")
            return await p.send(Message("orders", b"x"), selector=selector, arg=1), info, p.sender.group

    r, info, group = uvloop.run(go())
    assert {t for ts, _ in seen for t in ts} == {"orders"} and seen[0][1] == "orders"
    assert r.queue == MessageQueue("orders", "broker-a", 1)
    store = cluster.brokers[0].store
    assert (store.get_max_offset_in_queue("ns1%orders", 1), store.get_max_offset_in_queue("orders", 1)) == (1, 0)
    assert {q.topic for q in info.queues} == {"orders"}  # publish_info names the queues as the caller does
    assert group == "ns1%pg"  # the send header's producer group, as the heartbeat's


def test_a_consumer_in_a_namespace_reads_a_light_queue_under_its_own_name(empty_cluster: Cluster) -> None:
    broker = empty_cluster.start_broker("broker-a", store_enable_lmq=True, store_enable_multi_dispatch=True)
    empty_cluster.create_topic("ns1%parent", 1)
    ns = empty_cluster.namesrv_addr

    async def go() -> list[bytes]:
        async with Producer("pg", ns, namespace="ns1") as p:
            await p.send(Message("parent", b"one", properties={"INNER_MULTI_DISPATCH": "%LMQ%s1"}))
        c = PullConsumer("reader", ns, namespace="ns1", consume_from="first")
        await c.assign([MessageQueue("%LMQ%s1", "broker-a", 0)])
        await c.start()
        got: list[bytes] = []
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while not got and loop.time() < deadline:
                got.extend(m.body for m in await c.poll(0.5))
        finally:
            await c.shutdown()
        return got

    assert uvloop.run(go()) == [b"one"]
    assert broker.store.get_max_offset_in_queue("%LMQ%s1", 0) == 1


def test_a_java_style_reply_to_a_namespaces_reply_topic_reaches_its_requester(cluster: Cluster) -> None:
    """A Java responder in a namespace sends its reply to ``ns%<cluster>_REPLY_TOPIC`` (it wraps every topic): the
    broker pushes it to the requester and keeps it in the cluster's reply topic."""
    cluster.create_topic("ns-j%rpc", 1)
    ns = cluster.namesrv_addr

    async def go() -> MessageExt:
        replier = await Producer("replier", ns).start()
        responder = PushConsumer("rpc-g", ns, namespace="ns-j", consume_from="first")
        responder.subscribe("rpc")

        @responder.listener
        async def answer(msgs: list[MessageExt]) -> ConsumeStatus:
            for m in msgs:
                reply = create_reply_message(m, m.body.upper())
                await replier.send(replace(reply, topic=f"ns-j%{reply.topic}"))
            return ConsumeStatus.CONSUME_SUCCESS

        await responder.start()
        try:
            async with Producer("requester", ns, namespace="ns-j") as requester:
                return await requester.request(Message("rpc", b"ping"), 20)
        finally:
            await responder.shutdown()
            await replier.shutdown()

    reply = uvloop.run(go())
    assert (reply.body, reply.topic) == (b"PING", "DefaultCluster_REPLY_TOPIC")
    assert cluster.brokers[0].store.get_max_offset_in_queue("DefaultCluster_REPLY_TOPIC", 0) == 1


def test_a_reply_to_a_namespaces_reply_topic_needs_pub_on_the_clusters_reply_topic(
        acl_cluster: Cluster) -> None:  # noqa: F811
    ns = acl_cluster.namesrv_addr

    async def setup() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            await admin.create_user("nora", "nora-secret")
            await admin.create_acl("User:nora", [policy_entry("Namespace:ns1", "Pub")])
            await admin.create_user("dan", "dan-secret")
            await admin.create_acl("User:dan", [policy_entry("Topic:*", "Pub"),
                                                policy_entry("Topic:DefaultCluster_REPLY_TOPIC", "Pub", "Deny")])
            await admin.create_user("rita", "rita-secret")
            await admin.create_acl("User:rita", [policy_entry("Namespace:ns1", "Pub"),
                                                 policy_entry("Topic:DefaultCluster_REPLY_TOPIC", "Pub")])

    async def reply(creds: tuple[str, str], topic: str) -> str:
        msg = ReplyMessage(topic, b"forged", correlation_id="c", reply_to_client="10.0.0.9@gone", ttl="1000")
        async with Producer("rr-pg", ns, credentials=creds, retry_times_when_send_failed=0) as p:
            try:
                await p.send(msg)
                return "stored"
            except ClientError as exc:
                return str(exc)

    asyncio.run(setup())
    store = acl_cluster.brokers[0].store
    outcomes = {who: asyncio.run(reply(creds, topic)) for who, creds, topic in (
        ("nora", ("nora", "nora-secret"), "ns1%DefaultCluster_REPLY_TOPIC"),
        ("dan", ("dan", "dan-secret"), "zz%DefaultCluster_REPLY_TOPIC"),
        ("rita", ("rita", "rita-secret"), "ns1%DefaultCluster_REPLY_TOPIC"))}
    assert "no permission" in outcomes["nora"] and "no permission" in outcomes["dan"], outcomes
    # Allowed, stored, and then not pushed: no such requester (SYSTEM_ERROR, as RocketMQ answers it).
    assert "channel of <10.0.0.9@gone> not found" in outcomes["rita"], outcomes
    assert store.get_max_offset_in_queue("DefaultCluster_REPLY_TOPIC", 0) == 1  # rita's alone
