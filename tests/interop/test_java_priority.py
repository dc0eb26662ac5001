"""Priority messages with the Java client (RocketMQ 5.5.0's ``Message.setPriority``, RIP-80): on a PRIORITY topic
each goes to queue min(priority, queues - 1) as Sluice's broker answers, and a POP consumer is handed the backlog
highest priority first, each message with the priority it was sent with."""

from __future__ import annotations

from sluice import SimpleConsumer

PRIORITIES = [0, 3, 1, 7, 2, 0, 3, 1]


def test_the_java_producer_s_priorities_pick_queues_and_a_pop_takes_the_highest_first(sluice, java) -> None:
    topic, ns = "prio-java", sluice.namesrv
    sluice.create_topic(topic, 4, attributes="+message.type=PRIORITY")
    records = java.run("produce", timeout=120, namesrv=ns, topic=topic, group="prio-java-pg", mode="sync",
                       count=len(PRIORITIES), priorities=",".join(map(str, PRIORITIES)), prefix="prio")
    sent = [r for r in records if r.get("event") == "sent"]
    assert [r["status"] for r in sent] == ["SEND_OK"] * len(PRIORITIES), records
    assert [r["queue_id"] for r in sent] == [min(p, 3) for p in PRIORITIES]

    c = SimpleConsumer("prio-java-g", namesrv=ns, consume_from_first=True)
    c.subscribe(topic)
    c.start()
    got = []
    try:
        for _ in range(30):
            if len(got) >= len(PRIORITIES):
                break
            batch = c.receive(32, wait=1.0)
            for m in batch:
                got.append((m.queue_id, m.priority, m.body.decode()))
                c.ack(m)
    finally:
        c.shutdown()
    expected = sorted(((min(p, 3), p, f"prio-{i}") for i, p in enumerate(PRIORITIES)), key=lambda t: -t[0])
    assert [(q, p) for q, p, _ in got] == [(q, p) for q, p, _ in expected]
    assert [b.split("-")[:2] for _, _, b in got] == [b.split("-")[:2] for _, _, b in expected]
