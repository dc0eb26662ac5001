"""Differential: light message queues (LMQ, ``enableLmq`` + ``enableMultiDispatch`` on both) — a message naming
light queues in INNER_MULTI_DISPATCH is read from each of them, with the same offsets written into it
(INNER_MULTI_QUEUE_OFFSET) and the same properties left out, on Sluice and on Apache RocketMQ; a light queue nobody
named answers alike."""

from __future__ import annotations

from typing import Any

from sluice import Message, Producer
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.message_codec import decode_records
from sluice.common.structs import MessageQueue
from sluice.remoting.client import RemotingClient
from tests.reference.conftest import System, run
from tests.reference.observe import assert_same, both


def test_light_queues_are_dispatched_and_read_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("lmq-parent")
        s.create_topic(topic, 2)
        a, b, c = (f"%LMQ%{s.topic(n)}" for n in ("a", "b", "c"))
        with Producer(s.topic("pg"), namesrv=s.namesrv) as p:
            for body, names in (("to a and b", f"{a},{b}"), ("to b", b), ("to c and a", f"{c},{a}")):
                p.send(Message(topic, body.encode(), properties={"INNER_MULTI_DISPATCH": names}))

        async def read() -> dict[str, Any]:
            remoting = RemotingClient()
            api = MQClientAPI(remoting, [s.namesrv])
            out: dict[str, Any] = {}
            try:
                for label, lmq in (("a", a), ("b", b), ("c", c), ("never named", f"%LMQ%{s.topic('none')}")):
                    r = await api.pull_message(s.broker_addr, s.topic("g"), MessageQueue(lmq, "x", 0), 0, 32)
                    msgs = decode_records(r.body) if r.body else []
                    out[label] = {"status": r.status.name, "next": r.next_begin_offset, "max": r.max_offset,
                                  "messages": [[m.body.decode(), m.topic == topic, m.queue_id < 2,
                                                m.properties.get("INNER_MULTI_QUEUE_OFFSET"),
                                                m.properties.get("INNER_MULTI_DISPATCH", "").count(","),
                                                "WAIT" in m.properties] for m in msgs]}
            finally:
                await remoting.close()
            return out

        return run(read())

    observed = assert_same(both(systems, scenario))
    assert [m[0] for m in observed["a"]["messages"]] == ["to a and b", "to c and a"]
    assert [m[3] for m in observed["b"]["messages"]] == ["0,0", "1"]
