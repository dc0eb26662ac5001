"""The C++ producer (``rocketmq==0.4.4``) sends to Sluice: every send mode, read back by Sluice's own consumers with
body, tags, keys and user properties intact; the CLI finds its messages by id and by key."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict

import pytest

from sluice import ConsumeStatus, MessageExt, PullConsumer, PushConsumer
from sluice.cli.main import main as sluice_cli
from sluice.client.message import RESERVED_PROPERTY_KEYS
from tests.integration.helpers import FAST, wait_until

COUNT = 60  # per mode; every 10th body is 6000 bytes (compressed by the client), batches of 10


def as_sent(m: MessageExt) -> dict:
    """A received message in the shape the producer script reports what it sent."""
    return {"body": m.body.decode("utf-8"), "tags": m.tags, "keys": " ".join(m.keys),
            "properties": {k: v for k, v in m.properties.items() if k not in RESERVED_PROPERTY_KEYS}}


def sent_messages(records: list[dict]) -> dict[str, dict]:
    return {r["body"]: {k: r[k] for k in ("body", "tags", "keys", "properties")} for r in records}


def push_consume(namesrv: str, group: str, topic: str, expect: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    lock = threading.Lock()
    consumer = PushConsumer(group, namesrv=namesrv, **FAST)
    consumer.subscribe(topic, "*")

    @consumer.listener
    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            got.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.start()
    try:
        wait_until(lambda: len({m.body for m in got}) >= expect, 30, f"{expect} messages at the push consumer")
    finally:
        consumer.shutdown()
    return got


def pull_consume(namesrv: str, group: str, topic: str, expect: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    consumer = PullConsumer(group, namesrv=namesrv, **FAST)
    consumer.subscribe(topic)
    consumer.start()
    try:
        deadline = time.monotonic() + 30
        while len({m.body for m in got}) < expect and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout=0.5))
    finally:
        consumer.shutdown()
    return got


@pytest.mark.parametrize("mode", ["sync", "async", "oneway", "orderly", "batch"])
def test_every_message_the_cpp_producer_sends_reaches_sluice_consumers_intact(sluice, cpp, mode):
    topic = f"cpp-send-{mode}"  # not created beforehand: the client sends through TBW102 and the broker creates it
    records = cpp.run("producer", namesrv=sluice.namesrv, topic=topic, group="cpp-producers", mode=mode, count=COUNT)
    sent = [r for r in records if r["event"] == "sent"]
    assert len(sent) == COUNT and records[-1] == {"event": "end", "reason": "complete"}
    if mode != "oneway":
        assert {r["status"] for r in sent} == {"OK"}
    expected = sent_messages(sent)

    for consume in (push_consume, pull_consume):
        got = consume(sluice.namesrv, f"sluice-{consume.__name__}-{mode}", topic, COUNT)
        assert {m.body.decode() for m in got} == set(expected), consume.__name__
        for m in got:
            assert as_sent(m) == expected[m.body.decode()], consume.__name__

    by_body = {m.body.decode(): m for m in got}
    if mode in ("sync", "async", "orderly"):  # the id the client returned is the id consumers see (its UNIQ_KEY)
        assert all(by_body[r["body"]].msg_id == r["msg_id"] for r in sent)
        assert len({r["msg_id"] for r in sent}) == COUNT
    if mode in ("sync", "async", "orderly", "batch"):  # the offset the client returned is where the message was stored
        offsets = {r["body"]: r["offset"] for r in sent}
        if mode == "batch":  # a batch reports its first message's offset
            for i in range(0, COUNT, 10):
                first = by_body[sent[i]["body"]]
                batch = [by_body[r["body"]] for r in sent[i:i + 10]]
                assert {m.queue_id for m in batch} == {first.queue_id}
                assert [m.queue_offset for m in batch] == list(range(first.queue_offset, first.queue_offset + 10))
                assert {offsets[r["body"]] for r in sent[i:i + 10]} == {first.queue_offset}
        else:
            assert all(by_body[b].queue_offset == off for b, off in offsets.items())
    if mode == "orderly":  # send_orderly(msg, key): one queue per key, in sending order
        per_key: dict[str, list[MessageExt]] = defaultdict(list)
        for r in sent:
            per_key[r["properties"]["shard"]].append(by_body[r["body"]])
        for msgs in per_key.values():
            assert len({m.queue_id for m in msgs}) == 1
            assert [m.queue_offset for m in msgs] == sorted(m.queue_offset for m in msgs)


def cli_json(capsys, *argv: str) -> list[dict]:
    capsys.readouterr()
    rc = sluice_cli(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, f"sluice {' '.join(argv)}: {err}"
    data = json.loads(out)
    return data if isinstance(data, list) else [data]


def test_sluice_cli_finds_cpp_producer_messages_by_id_and_by_key(sluice, cpp, capsys):
    topic = "cpp-lookup"
    records = cpp.run("producer", namesrv=sluice.namesrv, topic=topic, group="cpp-producers", mode="sync", count=20)
    sent = [r for r in records if r["event"] == "sent"]
    for r in (sent[3], sent[9]):  # sent[9] has a big, compressed body
        (by_id,) = cli_json(capsys, "msg", "get-by-id", r["msg_id"], "--topic", topic, "--namesrv", sluice.namesrv,
                            "--json")
        assert by_id["body"] == r["body"] and by_id["tags"] == r["tags"]
        key = r["keys"].split()[1]
        (by_key,) = cli_json(capsys, "msg", "get-by-key", topic, key, "--namesrv", sluice.namesrv, "--json")
        assert by_key["body"] == r["body"] and by_key["msgId"] == r["msg_id"]
        (by_offset_id,) = cli_json(capsys, "msg", "get-by-id", by_key["offsetMsgId"], "--namesrv", sluice.namesrv,
                                   "--json")
        assert by_offset_id["body"] == r["body"]
