"""The Java producer (``DefaultMQProducer``, RocketMQ 5.x) sends to Sluice in every mode; Sluice's own consumers read
every message back with body, tags, keys and user properties intact, at the ids and offsets the client was given."""

from __future__ import annotations

from collections import defaultdict

import pytest

from sluice import MessageExt
from tests.interop.test_cpp_producer import as_sent, pull_consume, push_consume, sent_messages

COUNT = 60  # per mode; every 10th body is 6000 bytes (compressed by the client), batches of 10


@pytest.mark.parametrize("mode", ["sync", "async", "oneway", "batch", "orderly"])
def test_every_message_the_java_producer_sends_reaches_sluice_consumers_intact(sluice, java, mode):
    topic = f"java-send-{mode}"  # not created beforehand: the client sends through TBW102 and the broker creates it
    records = java.run("produce", namesrv=sluice.namesrv, topic=topic, group="java-producers", mode=mode, count=COUNT)
    sent = [r for r in records if r["event"] == "sent"]
    assert len(sent) == COUNT and records[-1] == {"event": "end", "reason": "complete"}
    if mode != "oneway":
        assert {r["status"] for r in sent} == {"SEND_OK"}
        assert {r["broker"] for r in sent} == {"broker-a"}
    expected = sent_messages(sent)

    got: list[MessageExt] = []
    for consume in (push_consume, pull_consume):
        got = consume(sluice.namesrv, f"sluice-{consume.__name__}-{mode}", topic, COUNT)
        assert {m.body.decode() for m in got} == set(expected), consume.__name__
        for m in got:
            assert as_sent(m) == expected[m.body.decode()], consume.__name__

    by_body = {m.body.decode(): m for m in got}
    if mode == "oneway":
        return
    # the ids the client returned are the ones consumers see: UNIQ_KEY, and the broker's offset msg id
    assert all(by_body[r["body"]].msg_id == r["msg_id"] for r in sent)
    assert len({r["msg_id"] for r in sent}) == COUNT
    if mode != "batch":
        assert all(by_body[r["body"]].offset_msg_id == r["offset_msg_id"] for r in sent)
    # ... and the queue and offset it returned are where each message was stored
    assert all((by_body[r["body"]].queue_id, by_body[r["body"]].queue_offset) == (r["queue_id"], r["queue_offset"])
               for r in sent)
    if mode == "batch":  # one batch, one queue, consecutive offsets
        for i in range(0, COUNT, 10):
            batch = [by_body[r["body"]] for r in sent[i:i + 10]]
            assert len({m.queue_id for m in batch}) == 1
            assert [m.queue_offset for m in batch] == list(range(batch[0].queue_offset, batch[0].queue_offset + 10))
    if mode == "orderly":  # MessageQueueSelector: shard k goes to queue k % 4, in sending order
        per_shard: dict[str, list[MessageExt]] = defaultdict(list)
        for r in sent:
            per_shard[r["properties"]["shard"]].append(by_body[r["body"]])
        for shard, msgs in per_shard.items():
            assert {m.queue_id for m in msgs} == {int(shard) % 4}
            assert [m.queue_offset for m in msgs] == sorted(m.queue_offset for m in msgs)
