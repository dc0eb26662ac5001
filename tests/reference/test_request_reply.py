"""Differential: request-reply with Sluice's clients against Sluice and against Apache RocketMQ — the request as its
responder sees it, the reply as its requester gets it, and a reply nobody waits for, answered alike."""

from __future__ import annotations

import asyncio
from typing import Any

from sluice.aio import ConsumeStatus, Producer, PushConsumer, ReplyMessage, create_reply_message
from sluice.client.message import Message
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.common.message import MessageExt
from tests.integration.helpers import wait_until
from tests.reference.conftest import System
from tests.reference.observe import assert_same, both

# Per request (ids, the requester's client id, the times each side stamps).
PER_REQUEST = frozenset({"UNIQ_KEY", "CORRELATION_ID", "REPLY_TO_CLIENT", "ARRIVE_TIME", "PUSH_REPLY_TIME",
                         "CONSUME_START_TIME", "MAX_OFFSET", "MIN_OFFSET"})


def _seen(m: MessageExt) -> dict[str, Any]:
    return {"topic": m.topic, "body": m.body.decode(), "sys_flag": m.sys_flag, "reconsume_times": m.reconsume_times,
            "properties": {k: v for k, v in sorted(m.properties.items()) if k not in PER_REQUEST},
            "names": sorted(m.properties)}


def test_request_reply_of_sluices_clients_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("rr")
        s.create_topic(topic, 1)

        async def go() -> dict[str, Any]:
            requests: list[MessageExt] = []
            async with Producer(s.topic("replier"), s.namesrv) as replier:
                consumer = PushConsumer(s.topic("responder"), s.namesrv, consume_from="first",
                                        rebalance_interval=500)
                consumer.subscribe(topic)

                @consumer.listener
                async def answer(msgs: list[MessageExt]) -> ConsumeStatus:
                    for m in msgs:
                        requests.append(m)
                        await replier.send(create_reply_message(m, m.body.upper()))
                    return ConsumeStatus.CONSUME_SUCCESS

                async with consumer, Producer(s.topic("requester"), s.namesrv) as requester:
                    reply = await requester.request(Message(topic, b"ping", tags="rr", keys=["k-1"],
                                                            properties={"n": "1"}), 30)
                    orphan = ReplyMessage(reply.topic, b"late", correlation_id="c-1", reply_to_client="10.0.0.9@gone",
                                          ttl="3000")
                    try:
                        await replier.send(orphan)
                        refused: Any = None
                    except ClientError as exc:
                        cause: BaseException | None = exc
                        while cause is not None and not isinstance(cause, BrokerResponseError):
                            cause = cause.__cause__
                        refused = [cause.code, cause.remark] if isinstance(cause, BrokerResponseError) else repr(exc)
            return {"request": _seen(requests[0]), "reply": _seen(reply), "orphan": refused,
                    "matched": reply.properties["CORRELATION_ID"] == requests[0].properties["CORRELATION_ID"]}

        return asyncio.run(go())

    observed = assert_same(both(systems, scenario))
    assert observed["matched"] and observed["reply"]["body"] == "PING"


def test_go_request_reply_alike(systems, go):
    """rocketmq-client-go v2.1.2 on both sides (``producer.Request``, ``consumer.CreateReplyMessage``): the request
    as the Go responder sees it and the reply as the Go requester gets it."""
    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("gorr")
        s.create_topic(topic, 1)
        responder = go.start("requestreply", role="responder", namesrv=s.namesrv, topic=topic,
                             group=s.topic("go-responder"), count=2, timeout="150s")
        requester = go.start("requestreply", role="requester", namesrv=s.namesrv, topic=topic,
                             group=s.topic("go-requester"), count=2, prefix="ping", timeout="150s")
        try:
            records = requester.wait(160)
        except AssertionError as exc:
            raise AssertionError(f"against {s.name}: {exc}; the responder: {responder.records()[-5:]}") from None

        def seen(r: dict[str, Any]) -> dict[str, Any]:
            props = r["properties"]
            return {"body": r["body"], "topic": r.get("topic", r.get("reply_topic")).replace(topic, "<topic>"),
                    "properties": {k: v.replace(topic, "<topic>") for k, v in sorted(props.items())
                                   if k not in PER_REQUEST}, "names": sorted(props)}

        wait_until(lambda: len({r["body"] for r in responder.records("replying")}) == 2, 30,
                   f"the Go responder's record of each reply ({s.name})")
        first = {r["body"]: r for r in reversed(responder.records("replying"))}  # (one per request)
        return {"replies": [seen(r) for r in records if r["event"] == "reply"],
                "requests": sorted((seen(r) for r in first.values()), key=lambda r: r["body"]),
                "end": records[-1]}

    observed = assert_same(both(systems, scenario))
    assert [r["body"] for r in observed["replies"]] == ["PING-0", "PING-1"]
