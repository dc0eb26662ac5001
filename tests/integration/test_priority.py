"""Priority messages (RocketMQ 5.4, RIP-80): on a topic of message type PRIORITY a message's priority picks its
queue, and a POP consumer takes the highest priority first; a group's ``priority.factor`` turns that off; topic
and group attributes are checked and kept as RocketMQ checks and keeps them, across a restart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from sluice import Message, Producer, SimpleConsumer
from sluice.broker.pop import pop_message_processor
from sluice.client.admin import Admin
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.errors import BrokerResponseError, MessageFormatError
from sluice.common.message import MessageExt
from sluice.common.properties import PROPERTY_PRIORITY
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.headers import SendMessageRequestHeader
from tests.conftest import Cluster

PRIORITY_TOPIC = "+message.type=PRIORITY"


def _receive(c: SimpleConsumer, n: int, timeout: float = 30) -> list[MessageExt]:
    got: list[MessageExt] = []
    for _ in range(int(timeout)):
        if len(got) >= n:
            break
        batch = c.receive(32, wait=1.0)
        got += batch
        for m in batch:
            c.ack(m)
    return got


def _consumer(cluster: Cluster, group: str, topic: str) -> SimpleConsumer:
    c = SimpleConsumer(group, namesrv=cluster.namesrv_addr, consume_from_first=True)
    c.subscribe(topic)
    return c.start()


def _send_backlog(cluster: Cluster, topic: str, priorities: list[int]) -> list[int]:
    """One message per priority, in this order: the queue each was stored in."""
    with Producer("prio-pg", namesrv=cluster.namesrv_addr) as p:
        return [p.send(Message(topic, f"p{pr}-{i}".encode(), priority=pr)).queue.queue_id
                for i, pr in enumerate(priorities)]


def _api(cluster: Cluster) -> Iterator[MQClientAPI]:
    remoting = RemotingClient()
    try:
        yield MQClientAPI(remoting, [cluster.namesrv_addr])
    finally:
        cluster.loop.run(remoting.close())


@pytest.fixture
def api(cluster: Cluster) -> Iterator[MQClientAPI]:
    yield from _api(cluster)


PRIORITIES = [0, 3, 1, 7, 2, 0, 3, 1]
# Queue min(priority, 3); a pop takes queue 3 first, then 2, 1, 0, each in the order sent.
EXPECTED = [b"p3-1", b"p7-3", b"p3-6", b"p2-4", b"p1-2", b"p1-7", b"p0-0", b"p0-5"]


def test_a_pop_hands_out_the_highest_priority_first(cluster: Cluster) -> None:
    cluster.create_topic("prio-t", 4, attributes=PRIORITY_TOPIC)
    assert _send_backlog(cluster, "prio-t", PRIORITIES) == [min(p, 3) for p in PRIORITIES]
    c = _consumer(cluster, "prio-g", "prio-t")
    try:
        got = _receive(c, len(PRIORITIES))
    finally:
        c.shutdown()
    assert [m.body for m in got] == EXPECTED
    assert [m.priority for m in got] == [3, 7, 3, 2, 1, 1, 0, 0]  # (each keeps the priority it was sent with)


def test_a_group_with_priority_factor_0_reads_a_priority_topic_as_any_other(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.create_topic("prio-f", 4, attributes=PRIORITY_TOPIC)
    _send_backlog(cluster, "prio-f", PRIORITIES)

    async def factor_0() -> None:
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.update_group("prio-f0", attributes="+priority.factor=0")
            assert (await admin.group_config("prio-f0") or {})["attributes"] == {"priority.factor": "0"}

    cluster.loop.run(factor_0())
    # The pop's draw (0..99) picks the first queue when not in priority mode: 1 makes it queue 1.
    monkeypatch.setattr(pop_message_processor.random, "randrange", lambda n: 1)
    c = _consumer(cluster, "prio-f0", "prio-f")
    try:
        got = _receive(c, len(PRIORITIES))
    finally:
        c.shutdown()
    assert [m.body for m in got][:2] == [b"p1-2", b"p1-7"]  # queue 1 first, then 2, 3, 0
    assert sorted(m.body for m in got) == sorted(EXPECTED)


def test_without_the_priority_type_a_priority_is_only_a_queue_choice(cluster: Cluster) -> None:
    """RocketMQ routes by the message's properties, not the topic's type: a normal topic's queue is the priority's
    too; a normal topic's pops do not take it first."""
    cluster.create_topic("prio-n", 4)
    assert _send_backlog(cluster, "prio-n", [2, 9]) == [2, 3]


def test_a_priority_that_is_not_a_non_negative_integer_is_refused(cluster: Cluster, api: MQClientAPI) -> None:
    cluster.create_topic("prio-bad", 4, attributes=PRIORITY_TOPIC)
    addr = cluster.brokers[0].broker_addr

    async def send(priority: str, extra: str = "") -> RemotingCommand:
        h = SendMessageRequestHeader("prio-bad-pg", "prio-bad", "TBW102", 4, 0, 0, 0, 0,
                                     f"{PROPERTY_PRIORITY}\x01{priority}{extra}")
        return await api.invoke(addr, RequestCode.SEND_MESSAGE_V2, h.encode_v2(), b"body")

    for bad in ("-1", "high", "2147483648", ""):
        resp = cluster.loop.run(send(bad))
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL, (bad, resp.code, resp.remark)
        assert "priority" in (resp.remark or "")
    # A FIFO message keeps its queue and loses the priority (RocketMQ: the types exclude each other).
    ok = cluster.loop.run(send("3", "\x02__SHARDINGKEY\x01k"))
    assert ok.code == ResponseCode.SUCCESS and ok.ext_fields["queueId"] == "0"
    c = _consumer(cluster, "prio-bad-g", "prio-bad")
    try:
        [m] = _receive(c, 1)
    finally:
        c.shutdown()
    assert m.priority is None and m.properties.get("__SHARDINGKEY") == "k"
    assert cluster.brokers[0].store.get_max_offset_in_queue("prio-bad", 3) == 0  # nothing stored half-way


def test_the_client_refuses_a_priority_with_another_type() -> None:
    for kw in ({"priority": -1}, {"priority": True}, {"priority": 1, "delay_level": 3}):
        with pytest.raises(MessageFormatError):
            Message("t", b"x", **kw)  # type: ignore[arg-type]
    with pytest.raises(MessageFormatError, match="sharding key"):
        Message("t", b"x", priority=1).wire_for_send("0" * 32, sharding_key="k")


@pytest.mark.parametrize(("attributes", "remark"), [
    ("+message.type=URGENT", "value is not in set"),
    ("-message.type", "only add attribute is supported while creating topic. key: message.type"),
    ("+bogus=1", "unsupported key: bogus"),
    ("message.type=FIFO", "add/alter attribute format is wrong: message.type"),
    ("+message.type=FIFO,+message.type=NORMAL", "key duplication: +message.type"),
    ("+cleanup.policy=COMPACTION", "cleanup.policy=COMPACTION is not supported by Sluice"),
    ("+lite.topic.expiration=99999999", "value is not in range(-1, 43200)"),
])
def test_topic_attributes_rocketmq_refuses_are_refused(cluster: Cluster, api: MQClientAPI, attributes: str,
                                                       remark: str) -> None:
    addr = cluster.brokers[0].broker_addr
    with pytest.raises(BrokerResponseError) as err:
        cluster.loop.run(api.create_topic(addr, "attr-t", 4, 4, 6, attributes=attributes))
    assert err.value.code == ResponseCode.SYSTEM_ERROR and remark in (err.value.remark or "")
    assert cluster.brokers[0].topic_config_manager.get("attr-t") is None  # nothing made half-way


def test_mixed_needs_the_broker_switch(cluster: Cluster, api: MQClientAPI) -> None:
    addr = cluster.brokers[0].broker_addr
    with pytest.raises(BrokerResponseError) as err:
        cluster.loop.run(api.create_topic(addr, "attr-m", 4, 4, 6, attributes="+message.type=MIXED"))
    assert (err.value.code, err.value.remark) == (ResponseCode.INVALID_PARAMETER,
                                                  "MIXED message type is not supported.")


def test_topic_attributes_change_as_rocketmq_changes_them_and_survive_a_restart(cluster: Cluster,
                                                                                api: MQClientAPI) -> None:
    broker = cluster.brokers[0]
    cluster.create_topic("attr-k", 4, attributes=PRIORITY_TOPIC)
    addr = broker.broker_addr
    cluster.loop.run(api.create_topic(addr, "attr-k", 4, 4, 6))  # (no attributes: they stay as they are)
    assert broker.topic_config_manager.get("attr-k").attributes == {"message.type": "PRIORITY"}
    with pytest.raises(BrokerResponseError, match="attempt to delete a nonexistent key: reserve.time"):
        cluster.loop.run(api.create_topic(addr, "attr-k", 4, 4, 6, attributes="-reserve.time"))
    with pytest.raises(BrokerResponseError, match="attempt to update an unchangeable attribute. key: queue.type"):
        cluster.loop.run(api.create_topic(addr, "attr-k", 4, 4, 6, attributes="+queue.type=SimpleCQ"))
    config = cluster.loop.run(api.get_topic_config(addr, "attr-k"))
    assert config is not None and config["attributes"] == {"message.type": "PRIORITY"}
    broker = cluster.restart_broker(broker)
    assert broker.topic_config_manager.get("attr-k").attributes == {"message.type": "PRIORITY"}
    assert _send_backlog(cluster, "attr-k", [1, 3]) == [1, 3]
    c = _consumer(cluster, "attr-k-g", "attr-k")
    try:
        assert [m.body for m in _receive(c, 2)] == [b"p3-1", b"p1-0"]
    finally:
        c.shutdown()
    cluster.loop.run(api.create_topic(broker.broker_addr, "attr-k", 4, 4, 6, attributes="-message.type"))
    assert broker.topic_config_manager.get("attr-k").attributes == {}


def test_group_attributes_are_checked(cluster: Cluster) -> None:
    async def go() -> None:
        async with Admin(cluster.namesrv_addr) as admin:
            for bad, remark in (("+priority.factor=101", "value is not in range(0, 100)"),
                                ("+priority.factor=x", 'For input string: "x"'),
                                ("+lite.sub.model=Solo", "value is not in set")):
                with pytest.raises(BrokerResponseError, match=remark.replace("(", r"\(").replace(")", r"\)")):
                    await admin.update_group("attr-g", attributes=bad)
            await admin.update_group("attr-g", attributes="+priority.factor=40")
            await admin.update_group("attr-g", retryMaxTimes=3)  # (other changes keep the attributes)
            config = await admin.group_config("attr-g") or {}
            assert config["attributes"] == {"priority.factor": "40"} and config["retryMaxTimes"] == 3
            await admin.update_group("attr-g", attributes="-priority.factor")
            assert (await admin.group_config("attr-g") or {})["attributes"] == {}

    cluster.loop.run(asyncio.wait_for(go(), 60))
    assert cluster.brokers[0].subscription_group_manager.table["attr-g"].priority_factor == 100


def test_async_sends_keep_their_priorities(cluster: Cluster) -> None:
    """send_async batches what it can: never a priority message, which the broker routes only when sent alone."""
    cluster.create_topic("prio-async", 4, attributes=PRIORITY_TOPIC)
    with Producer("prio-async-pg", namesrv=cluster.namesrv_addr) as p:
        p.send(Message("prio-async", b"warm-up"))  # (the route known: later async sends could batch)
        futures = [p.send_async(Message("prio-async", f"a{i}".encode(), priority=pr))
                   for i, pr in enumerate([3, 0, 3, 1, 2, 0, 3, 2])]
        queues = [f.result(30).queue.queue_id for f in futures]
    assert queues == [3, 0, 3, 1, 2, 0, 3, 2]


def test_pops_arriving_together_each_take_the_highest_priority_waiting(cluster: Cluster, api: MQClientAPI) -> None:
    """A queue whose checkpoint another pop is writing is waited for, not passed over for a lower priority."""
    cluster.create_topic("prio-busy", 4, attributes=PRIORITY_TOPIC)
    with Producer("prio-busy-pg", namesrv=cluster.namesrv_addr) as p:
        for i in range(10):
            p.send(Message("prio-busy", f"hi{i}".encode(), priority=3))
        for i in range(10):
            p.send(Message("prio-busy", f"lo{i}".encode(), priority=0))
    broker = cluster.brokers[0]

    async def four_pops() -> list[list[int]]:
        pops = [api.pop_message(broker.broker_addr, "broker-a", "prio-busy-g", "prio-busy", "TAG", "*", 1, 60_000, 0)
                for _ in range(4)]
        return [[m.queue_id for m in ms] for ms in await asyncio.gather(*pops)]

    assert cluster.loop.run(asyncio.wait_for(four_pops(), 60)) == [[3]] * 4


def test_a_broker_that_gets_a_group_later_gets_its_attributes_too(cluster: Cluster) -> None:
    async def update(**kw: object) -> None:
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.update_group("attr-copy", **kw)  # type: ignore[arg-type]

    cluster.loop.run(update(attributes="+priority.factor=0", retryMaxTimes=5))
    b = cluster.start_broker("broker-b")
    cluster.loop.run(update(retryMaxTimes=3, attributes="+priority.factor=10"))
    for broker in (cluster.brokers[0], b):
        g = broker.subscription_group_manager.table["attr-copy"]
        assert (g.retry_max_times, g.attributes) == (3, {"priority.factor": "10"}), broker.config.broker_name


def test_oversized_and_unreadable_attribute_values_are_refused_cleanly(cluster: Cluster, api: MQClientAPI) -> None:
    addr = cluster.brokers[0].broker_addr

    async def group(attributes: dict[str, str]) -> RemotingCommand:
        body = json.dumps({"groupName": "attr-huge", "attributes": attributes}).encode()
        return await api.invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)

    huge = cluster.loop.run(group({"+priority.factor": "1" * 5000}))
    assert huge.code == ResponseCode.INVALID_PARAMETER and "more than 4096 characters" in (huge.remark or "")
    long_number = cluster.loop.run(group({"+priority.factor": "9" * 25}))
    assert (long_number.code, long_number.remark) == (ResponseCode.SYSTEM_ERROR, f'For input string: "{"9" * 25}"')
    assert "attr-huge" not in cluster.brokers[0].subscription_group_manager.table
    with pytest.raises(BrokerResponseError, match="Index 1 out of bounds for length 1"):  # (RocketMQ's words)
        cluster.loop.run(api.create_topic(addr, "attr-empty", 4, 4, 6, attributes="+message.type="))
    cluster.loop.run(api.create_topic(addr, "attr-lite", 4, 4, 6, attributes="+message.type=LITE"))
    assert cluster.brokers[0].topic_config_manager.get("attr-lite").message_type == "LITE"
    cluster.loop.run(api.create_topic(addr, "attr-reserve", 4, 4, 6, attributes="+reserve.time=100"))
    assert cluster.brokers[0].topic_config_manager.get("attr-reserve").attributes == {"reserve.time": "100"}
