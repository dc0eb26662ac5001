"""Differential: bad requests — unknown topics, bad subscriptions, oversized messages, read-only and write-only
topics, out-of-range queues, illegal names, unknown request codes — get the same response codes from Sluice as from
Apache RocketMQ, whether they come from Sluice's client, the Java client, or a raw request."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sluice import Message, MessageQueue, Producer
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.errors import SluiceError
from sluice.common.message_codec import decode_records
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode
from tests.reference.conftest import System, run
from tests.reference.observe import assert_same, both

BIG = 4 * 1024 * 1024 + 1  # one byte over both brokers' default maxMessageSize


def send_header(topic: str, **over: Any) -> dict[str, str]:
    h = {"producerGroup": "bad-request-producers", "topic": topic, "defaultTopic": "TBW102",
         "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)),
         "flag": "0", "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
    return h | {k: str(v) for k, v in over.items()}


def pull_header(topic: str, group: str, **over: Any) -> dict[str, str]:
    h = {"consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
         "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
         "expressionType": "TAG"}
    return h | {k: str(v) for k, v in over.items()}


def requests(s: System) -> list[tuple[str, str, int, dict[str, str], bytes]]:
    """(what, to "broker" or "namesrv", request code, ext fields, body)."""
    t, wo, g = s.topic("t"), s.topic("write-only"), s.topic("g")
    none = s.topic("no-such-topic")
    return [
        ("route of an unknown topic", "namesrv", RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": none}, b""),
        ("send to an unknown topic, no default", "broker", RequestCode.SEND_MESSAGE,
         send_header(none, defaultTopic=s.topic("no-default")), b"x"),
        ("send an oversized body", "broker", RequestCode.SEND_MESSAGE, send_header(t), b"x" * BIG),
        ("send to a queue out of range", "broker", RequestCode.SEND_MESSAGE, send_header(t, queueId=99), b"x"),
        ("send to an illegal topic name", "broker", RequestCode.SEND_MESSAGE, send_header("bad topic!"), b"x"),
        ("send to a too long topic name", "broker", RequestCode.SEND_MESSAGE, send_header("t" * 128), b"x"),
        ("send to a system topic", "broker", RequestCode.SEND_MESSAGE, send_header("SCHEDULE_TOPIC_XXXX"), b"x"),
        ("pull an unknown topic", "broker", RequestCode.PULL_MESSAGE, pull_header(none, g), b""),
        ("pull a write-only topic", "broker", RequestCode.PULL_MESSAGE, pull_header(wo, g), b""),
        ("pull a queue out of range", "broker", RequestCode.PULL_MESSAGE, pull_header(t, g, queueId=99), b""),
        # SQL92 filters are on for both (conftest); the refusals RocketMQ misses are in test_property_filters.py
        ("pull with an SQL92 filter, nothing stored", "broker", RequestCode.PULL_MESSAGE,
         pull_header(t, g, subscription="a > 1", expressionType="SQL92"), b""),
        ("pull with an empty SQL92 filter", "broker", RequestCode.PULL_MESSAGE,
         pull_header(t, g, subscription="", expressionType="SQL92"), b""),
        ("query the offset of a group that never committed", "broker", RequestCode.QUERY_CONSUMER_OFFSET,
         {"consumerGroup": g, "topic": none, "queueId": "0"}, b""),
        ("create a topic named like a system topic", "broker", RequestCode.UPDATE_AND_CREATE_TOPIC,
         {"topic": "SCHEDULE_TOPIC_XXXX", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
          "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, b""),
        ("send back a message at a bad offset", "broker", RequestCode.CONSUMER_SEND_MSG_BACK,
         {"offset": str(1 << 40), "group": g, "delayLevel": "0", "originMsgId": "x", "originTopic": t,
          "unitMode": "false", "maxReconsumeTimes": "16"}, b""),
        ("view a message at a bad offset", "broker", RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(1 << 40)}, b""),
        ("an unknown request code", "broker", 9999, {}, b""),
        ("an unknown request code (name server)", "namesrv", 9999, {}, b""),
    ]


def test_bad_raw_requests_get_the_same_response_codes(systems):
    def scenario(s: System) -> list[tuple[str, int]]:
        s.create_topic(s.topic("t"), 4)
        s.create_topic(s.topic("write-only"), 4, perm=2)

        async def go() -> list[tuple[str, int]]:
            remoting = RemotingClient()
            api = MQClientAPI(remoting, [s.namesrv])
            out = []
            try:
                for what, to, code, ext, body in requests(s):
                    resp = await api.invoke(s.broker_addr if to == "broker" else s.namesrv, code, ext, body, 10_000)
                    out.append((what, resp.code))
            finally:
                await remoting.close()
            return out

        return run(go(), timeout=120)

    observed = assert_same(both(systems, scenario))
    assert all(code != 0 for what, code in observed if "never committed" not in what)  # every one refused


def test_a_read_only_topic_refuses_sends_on_sluice_only(systems):
    """A deliberate difference (docs/interop.md): RocketMQ's broker stores a send to a topic whose permission is
    read-only (only its clients keep away, through the route), Sluice's refuses it with NO_PERMISSION."""

    def scenario(s: System) -> int:
        ro = s.topic("read-only")
        s.create_topic(ro, 4, perm=4)
        return s.java_admin.call("raw", addr=s.broker_addr, code=RequestCode.SEND_MESSAGE, ext=send_header(ro),
                                 body="x")["code"]

    assert both(systems, scenario) == {"sluice": 16, "rocketmq": 0}


def test_clients_report_bad_sends_alike(systems):
    """Sluice's producer and the Java producer sending where they may not: a read-only topic, an oversized body."""

    def scenario(s: System) -> dict[str, Any]:
        ro = s.topic("read-only")
        s.create_topic(ro, 4, perm=4)
        seen: dict[str, Any] = {}
        with Producer(s.topic("p"), namesrv=s.namesrv, retry_times_when_send_failed=0) as producer:
            for what, msg in (("read-only", Message(ro, b"x")), ("oversized", Message(s.topic("t"), b"x" * BIG))):
                try:
                    producer.send(msg)
                    seen[what] = "sent"
                except SluiceError as exc:
                    seen[what] = type(exc).__name__
        records = s.java.run("produce", namesrv=s.namesrv, topic=ro, group=s.topic("jp"), mode="sync", count=1)
        seen["java read-only"] = [(r["event"], r.get("code")) for r in records if r["event"] != "end"]
        return seen

    observed = assert_same(both(systems, scenario))
    assert observed["read-only"] == "ClientError" and observed["oversized"] == "MessageFormatError"


@pytest.mark.parametrize("expression", ["TagA ||", "|| TagB", "TagA || || TagB", " ", "||", "|| "])
def test_odd_tag_expressions_are_read_alike(systems, expression):
    """Java's FilterAPI splits a TAG expression on "||" and drops empty parts; a pull with it reads the same."""

    def scenario(s: System) -> Any:
        topic = s.topic("t")
        s.create_topic(topic, 1)
        with Producer(s.topic("p"), namesrv=s.namesrv) as producer:
            for tag in ("TagA", "TagB", "TagC"):
                producer.send(Message(topic, tag.encode(), tags=tag))

        async def go() -> tuple[int, list[str]]:
            remoting = RemotingClient()
            api = MQClientAPI(remoting, [s.namesrv])
            try:
                mq = MessageQueue(topic, "broker-a", 0)
                while await api.get_max_offset(s.broker_addr, mq) < 3:  # RocketMQ fills its queues a moment later
                    await asyncio.sleep(0.02)
                resp = await api.invoke(s.broker_addr, RequestCode.PULL_MESSAGE,
                                        pull_header(topic, s.topic("g"), subscription=expression), b"", 10_000)
                return resp.code, [m.tags or "" for m in decode_records(bytes(resp.body))] if resp.body else []
            finally:
                await remoting.close()

        return run(go())

    assert_same(both(systems, scenario))
