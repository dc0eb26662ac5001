"""Differential: priority messages (RIP-80) against Sluice and against Apache RocketMQ — the queue a priority picks
on a PRIORITY topic and on a normal one, the order a POP consumer is handed a backlog in, the priority each message
keeps, and the refusals of topic and group attributes."""

from __future__ import annotations

import re
from typing import Any

from sluice import Message, Producer, SimpleConsumer
from sluice.client.admin import Admin
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.errors import BrokerResponseError
from sluice.remoting.client import RemotingClient
from tests.reference.conftest import System, run
from tests.reference.observe import assert_same, both

PRIORITIES = [0, 3, 1, 7, 2, 0, 3, 1, 2, 5]


def _pop_all(s: System, group: str, topic: str, n: int) -> list[list[Any]]:
    c = SimpleConsumer(group, namesrv=s.namesrv, consume_from_first=True)
    c.subscribe(topic)
    c.start()
    got: list[list[Any]] = []
    try:
        for _ in range(60):
            if len(got) >= n:
                break
            batch = c.receive(4, wait=1.0)  # (a few at a time: each pop starts again from the highest)
            for m in batch:
                got.append([m.body.decode(), m.queue_id, m.priority])
                c.ack(m)
    finally:
        c.shutdown()
    return got


def test_priority_messages_are_queued_and_popped_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic, plain = s.topic("prio"), s.topic("prio-plain")
        s.create_topic(topic, 4, message_type="PRIORITY")
        s.create_topic(plain, 4)
        with Producer(s.topic("pg"), namesrv=s.namesrv) as p:
            queues = [p.send(Message(topic, f"p{pr}-{i}".encode(), priority=pr)).queue.queue_id
                      for i, pr in enumerate(PRIORITIES)]
            plain_queues = [p.send(Message(plain, b"x", priority=pr)).queue.queue_id for pr in (2, 9)]
        return {"queues": queues, "plain queues": plain_queues,
                "popped": _pop_all(s, s.topic("g"), topic, len(PRIORITIES))}

    observed = assert_same(both(systems, scenario))
    assert observed["queues"] == [min(p, 3) for p in PRIORITIES]
    assert [q for _, q, _ in observed["popped"]] == sorted((min(p, 3) for p in PRIORITIES), reverse=True)


async def _refusal(coro: Any) -> Any:
    try:
        await coro
    except BrokerResponseError as exc:
        return [exc.code, exc.remark]
    return "allowed"


def test_topic_and_group_attributes_are_refused_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic, group = s.topic("attr"), s.topic("ag")

        async def go() -> dict[str, Any]:
            out: dict[str, Any] = {}
            remoting = RemotingClient()
            api = MQClientAPI(remoting, [s.namesrv])
            try:
                for name, attributes in (("not in set", "+message.type=URGENT"),
                                         ("delete on create", "-message.type"),
                                         ("unknown key", "+bogus=1"),
                                         ("no sign", "message.type=FIFO"),
                                         ("mixed", "+message.type=MIXED"),
                                         ("out of range", "+lite.topic.expiration=99999999"),
                                         ("priority", "+message.type=PRIORITY"),
                                         ("unchangeable", "+queue.type=SimpleCQ"),
                                         ("delete absent", "-cleanup.policy"),
                                         ("empty value", "+message.type="),
                                         ("reserve time", "+reserve.time=100")):
                    out[name] = await _refusal(api.create_topic(s.broker_addr, topic, 4, 4, 6, attributes=attributes))
                out["attributes"] = ((await api.get_topic_config(s.broker_addr, topic)) or {}).get("attributes")
            finally:
                await remoting.close()
            async with Admin(s.namesrv) as admin:
                for name, attributes in (("factor too high", "+priority.factor=101"),
                                         ("factor set", "+priority.factor=40")):
                    refusal = await _refusal(admin.update_group(group, attributes=attributes))
                    if isinstance(refusal, list):  # (RocketMQ's remark wraps the words in the exception's class
                        # and its top stack frame: it answers from its uncaught-exception handler)
                        refusal[1] = re.sub(r"^java\.lang\.\w+: |, org\.apache\.\S+$", "", refusal[1])
                    out[name] = refusal
                out["group attributes"] = ((await admin.group_config(group)) or {}).get("attributes")
            return out

        return run(go())

    observed = assert_same(both(systems, scenario))
    assert observed["priority"] == "allowed"
    assert observed["attributes"] == {"message.type": "PRIORITY", "reserve.time": "100"}
    assert observed["group attributes"] == {"priority.factor": "40"}
