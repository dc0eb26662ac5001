"""Request-reply with the Go remoting client (rocketmq-client-go v2.1.2's ``producer.Request`` and
``consumer.CreateReplyMessage``) on either side of Sluice's own, and Go to Go, through Sluice's broker."""

from __future__ import annotations

import asyncio

from sluice.aio import Producer
from sluice.client.message import Message
from sluice.common.message import MessageExt
from tests.integration.helpers import wait_until
from tests.integration.test_request_reply import _responder

COUNT = 3


def _replies_ok(records: list[dict[str, object]], prefix: str) -> None:
    assert records[-1] == {"event": "end", "reason": "complete"}, records[-3:]
    replies = [r for r in records if r.get("event") == "reply"]
    assert [r["body"] for r in replies] == [f"{prefix}-{i}".upper() for i in range(COUNT)]
    for r in replies:
        props = r["properties"]
        assert isinstance(props, dict)
        assert r["topic"] == "DefaultCluster_REPLY_TOPIC" and props["MSG_TYPE"] == "reply", r
        assert props["REPLY_TO_CLIENT"] and props["CORRELATION_ID"] and props["PUSH_REPLY_TIME"]


def test_a_go_requester_gets_the_replies_of_a_sluice_responder(sluice, go) -> None:
    topic, ns = "rr-go-to-sluice", sluice.namesrv
    sluice.create_topic(topic, 2)

    async def go_() -> list[dict[str, object]]:
        consumer, replier, _ = await _responder(ns, topic, "rr-sluice-responder")
        try:
            requester = go.start("requestreply", role="requester", namesrv=ns, topic=topic, group="rr-go-requester",
                                 count=COUNT, prefix="ping", timeout="90s")
            return await asyncio.to_thread(requester.wait, 100)
        finally:
            await consumer.shutdown()
            await replier.shutdown()

    _replies_ok(asyncio.run(go_()), "ping")


def test_a_sluice_requester_gets_the_replies_of_a_go_responder(sluice, go) -> None:
    topic, ns = "rr-sluice-to-go", sluice.namesrv
    sluice.create_topic(topic, 2)
    responder = go.start("requestreply", role="responder", namesrv=ns, topic=topic, group="rr-go-responder",
                         count=COUNT, timeout="90s")
    wait_until(lambda: bool(responder.records("started")) or responder.proc.poll() is not None, 60,
               "the Go responder to start")

    async def ask() -> list[MessageExt]:
        async with Producer("rr-sluice-requester", ns) as requester:
            return [await requester.request(Message(topic, f"hello-{i}".encode()), 60) for i in range(COUNT)]

    replies = asyncio.run(ask())
    assert [r.body for r in replies] == [f"HELLO-{i}".encode() for i in range(COUNT)]
    assert all(r.topic == "DefaultCluster_REPLY_TOPIC" and r.properties["MSG_TYPE"] == "reply" for r in replies)
    # (a reply whose send failed late, though delivered, is tried again with the request's redelivery, and then
    # finds this requester gone: the responder need not end by itself)
    wait_until(lambda: len({r["body"] for r in responder.records("replying")}) == COUNT, 30, "the responder's records")
    replied = responder.records("replying")
    assert {r["body"] for r in replied} == {f"hello-{i}" for i in range(COUNT)}
    # The request as the Go responder saw it: the broker's CLUSTER stamp, from which it named the reply topic.
    assert {r["reply_topic"] for r in replied} == {"DefaultCluster_REPLY_TOPIC"}
    assert all(r["properties"]["CLUSTER"] == "DefaultCluster" for r in replied)


def test_go_to_go_request_reply_through_sluice(sluice, go) -> None:
    topic, ns = "rr-go-to-go", sluice.namesrv
    sluice.create_topic(topic, 2)
    responder = go.start("requestreply", role="responder", namesrv=ns, topic=topic, group="rr-go-responder2",
                         count=COUNT, timeout="90s")
    requester = go.start("requestreply", role="requester", namesrv=ns, topic=topic, group="rr-go-requester2",
                         count=COUNT, prefix="go", timeout="90s")
    _replies_ok(requester.wait(100), "go")
    wait_until(lambda: {r["body"] for r in responder.records("replying")} == {f"go-{i}" for i in range(COUNT)}, 30,
               "the responder's record of each reply")
