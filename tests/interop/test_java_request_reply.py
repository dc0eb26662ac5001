"""Request-reply with the Java client (RocketMQ 5.5.0's ``DefaultMQProducer.request`` and
``MessageUtil.createReplyMessage``) on either side of Sluice's own, and Java to Java, through Sluice's broker."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sluice.aio import ConsumeStatus, Producer, PushConsumer, create_reply_message
from sluice.client.message import Message
from sluice.common.message import MessageExt
from tests.integration.helpers import wait_until

COUNT = 3
# How long the Java requester waits for each reply: the first one waits for the responder's first rebalance, pull
# and reply-route lookup too (a JVM's first steps, over 20 s on a loaded machine); the others return at their reply.
REQUEST_MS = 60_000


def _replies_ok(records: list[dict[str, object]]) -> None:
    replies = [r for r in records if r.get("event") in ("reply", "error")]
    assert [r.get("event") for r in replies] == ["reply"] * COUNT, replies
    assert [r["body"] for r in replies] == [f"PING {i}" for i in range(COUNT)]
    for r in replies:
        assert r["topic"] == "DefaultCluster_REPLY_TOPIC" and r["msg_type"] == "reply" and r["arrive_time"]


def test_a_java_requester_gets_the_replies_of_a_sluice_responder(sluice, java, tmp_path: Path) -> None:
    topic, ns = "rr-java-to-sluice", sluice.namesrv
    sluice.create_topic(topic, 2)

    async def go() -> list[dict[str, object]]:
        async with Producer("rr-sluice-replier", ns) as replier:
            consumer = PushConsumer("rr-sluice-responder", ns, consume_from="first", rebalance_interval=500)
            consumer.subscribe(topic)

            @consumer.listener
            async def answer(msgs: list[MessageExt]) -> ConsumeStatus:
                for m in msgs:
                    await replier.send(create_reply_message(m, m.body.upper()))
                return ConsumeStatus.CONSUME_SUCCESS

            async with consumer:
                requester = java.start("request-reply", namesrv=ns, topic=topic, group="rr-java-requester",
                                       role="request", count=COUNT, request_timeout_ms=REQUEST_MS, timeout=240)
                return await asyncio.to_thread(requester.wait, 270)

    _replies_ok(asyncio.run(go()))


def test_a_sluice_requester_gets_the_replies_of_a_java_responder(sluice, java, tmp_path: Path) -> None:
    topic, ns = "rr-sluice-to-java", sluice.namesrv
    sluice.create_topic(topic, 2)
    stop = tmp_path / "stop-responder"
    responder = java.start("request-reply", namesrv=ns, topic=topic, group="rr-java-responder", role="respond",
                           stop_file=stop, timeout=150)
    wait_until(lambda: responder.records("started"), 60, "the Java responder's start")

    async def go() -> list[MessageExt]:
        async with Producer("rr-sluice-requester", ns) as requester:
            # The first waits for the responder's first rebalance, pull and reply-route lookup too (a JVM's
            # first steps: slow on a loaded machine); the others for one round trip each.
            return [await requester.request(Message(topic, f"ping {i}".encode()), 90 if i == 0 else 30)
                    for i in range(COUNT)]
    try:
        replies = asyncio.run(go())
        # (the responder notes each answer after its send returned: the reply may be here first)
        wait_until(lambda: len(responder.records("replied")) >= COUNT, 60, "the Java responder's notes")
    finally:
        stop.touch()
        responder.wait(60)
    assert [r.body for r in replies] == [f"PING {i}".encode() for i in range(COUNT)]
    assert all(r.topic == "DefaultCluster_REPLY_TOPIC" and r.properties["MSG_TYPE"] == "reply" for r in replies)
    replied = responder.records("replied")
    assert [r["status"] for r in replied] == ["SEND_OK"] * COUNT
    assert {r["correlation_id"] for r in replied} == {r.properties["CORRELATION_ID"] for r in replies}


def test_java_requester_and_java_responder_through_sluice(sluice, java, tmp_path: Path) -> None:
    topic, ns = "rr-java-to-java", sluice.namesrv
    sluice.create_topic(topic, 2)
    stop = tmp_path / "stop-responder"
    responder = java.start("request-reply", namesrv=ns, topic=topic, group="rr-jj-responder", role="respond",
                           stop_file=stop, timeout=270)
    wait_until(lambda: responder.records("started"), 60, "the Java responder's start")
    try:
        records = java.start("request-reply", namesrv=ns, topic=topic, group="rr-jj-requester", role="request",
                             count=COUNT, request_timeout_ms=REQUEST_MS, timeout=240).wait(270)
    finally:
        stop.touch()
        responder.wait(60)
    _replies_ok(records)
