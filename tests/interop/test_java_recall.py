"""Recall with the Java client (RocketMQ 5.5.0's ``SendResult.getRecallHandle`` and
``DefaultMQProducer.recallMessage``): the Java producer recalls its own timer message and one Sluice's producer sent
(the handles are one format); neither is ever delivered, the message sent beside them is."""

from __future__ import annotations

from datetime import timedelta

from sluice import Message, Producer, PullConsumer
from sluice.common.recall_handle import RecallHandle
from tests.integration.helpers import wait_until


def test_the_java_producer_recalls_its_timer_message_and_one_sluice_sent(sluice, java) -> None:
    topic, ns = "recall-java", sluice.namesrv
    sluice.create_topic(topic, 2)
    sluice.broker.config.recall_message_enable = True
    with Producer("recall-sluice-pg", namesrv=ns) as p:
        ours = p.send(Message(topic, b"sluice-recall-me", delay=timedelta(seconds=25)))  # (past a slow JVM)
    assert ours.recall_handle is not None
    records = java.run("recall", timeout=120, namesrv=ns, topic=topic, group="recall-java-pg", delay_ms=8000,
                       recall_handle=ours.recall_handle)
    sent = {r["body"]: r for r in records if r.get("event") == "sent"}
    handle = RecallHandle.decode(sent["java-recall-me"]["recall_handle"])
    assert (handle.topic, handle.broker_name, handle.message_id) == (topic, "broker-a",
                                                                     sent["java-recall-me"]["msg_id"])
    assert [r["msg_id"] for r in records if r.get("event") == "recalled"] == [sent["java-recall-me"]["msg_id"]]
    assert [r.get("msg_id") for r in records if r.get("event") in ("recalled-other", "error")] == [ours.msg_id]

    got: list[bytes] = []
    with PullConsumer("recall-java-reader", namesrv=ns, consume_from="first") as reader:
        reader.subscribe(topic)
        wait_until(lambda: got.extend(m.body for m in reader.poll(0.2)) or b"java-keep-me" in got, 60,
                   "the message sent beside the recalled ones")
        wait_until(lambda: got.extend(m.body for m in reader.poll(0.2)) or sluice.broker.timer_service.recalled >= 2,
                   90, "both recalls applied")
        for _ in range(3):
            got.extend(m.body for m in reader.poll(0.2))
    assert b"java-recall-me" not in got and b"sluice-recall-me" not in got
