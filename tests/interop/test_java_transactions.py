"""Java's ``TransactionMQProducer`` against Sluice: commits are delivered once, rollbacks never, and undecided
transactions (UNKNOWN, or a local transaction that throws) are checked back and end as the check says."""

from __future__ import annotations

from collections import Counter

from sluice import PullConsumer
from tests.integration.helpers import send_markers, wait_until

COUNT = 15  # three of each kind: commit, rollback, check-commit, check-rollback, throw


def consumed(namesrv: str, group: str, topic: str) -> Counter[str]:
    """What a fresh consumer reads of ``topic`` up to a marker sent now."""
    markers = {m.decode() for m in send_markers(namesrv, topic, 1)}
    consumer = PullConsumer(group, namesrv=namesrv, consume_from="first")
    consumer.subscribe(topic)
    got: list[str] = []
    with consumer:
        wait_until(lambda: got.extend(m.body.decode() for m in consumer.poll(0.2)) or markers <= set(got), 60,
                   "the marker at the end of the topic")
    return Counter(b for b in got if b not in markers)


def test_java_transactions_commit_roll_back_and_are_checked_back_by_sluice(sluice, java, tmp_path):
    topic = "java-tx"
    sluice.create_topic(topic, 1)
    stop = tmp_path / "stop"
    producer = java.start("transact", namesrv=sluice.namesrv, topic=topic, group="java-tx-pg", count=COUNT,
                          stop_file=stop, timeout=120)
    committed = {f"{k}-{i}" for i in range(COUNT) for k in ("commit", "check-commit", "throw")
                 if i % 5 == ("commit", "rollback", "check-commit", "check-rollback", "throw").index(k)}
    try:
        # The check-backs decide the undecided ones: every committed message arrives...
        waiter = PullConsumer("java-tx-wait", namesrv=sluice.namesrv, consume_from="first")
        waiter.subscribe(topic)
        seen: set[str] = set()
        with waiter:
            wait_until(lambda: seen.update(m.body.decode() for m in waiter.poll(0.2)) or committed <= seen, 90,
                       "every committed transaction's message")
        # ... and the rolled-back ones were checked (so their decision is in before the final read)
        wait_until(lambda: {r["body"] for r in producer.records("checked")} >= {
            f"check-rollback-{i}" for i in range(COUNT) if i % 5 == 3}, 60, "the check-rollback transactions checked")
    finally:
        stop.touch()
    records = producer.wait(60)
    sent = [r for r in records if r["event"] == "sent"]
    assert len(sent) == COUNT and {r["status"] for r in sent} == {"SEND_OK"}
    states = {r["body"]: r["local_state"] for r in sent}
    assert {b: s for b, s in states.items() if b.startswith(("commit", "rollback"))} == {
        b: ("COMMIT_MESSAGE" if b.startswith("commit") else "ROLLBACK_MESSAGE")
        for b in states if b.startswith(("commit", "rollback"))}
    assert all(states[b] == "UNKNOW" for b in states if b.startswith(("check-", "throw")))
    # Exactly the committed ones, each once; nothing decided in the producer was ever checked back.
    assert consumed(sluice.namesrv, "java-tx-final", topic) == Counter(committed)
    checked = Counter(r["body"] for r in records if r["event"] == "checked")
    assert not {b for b in checked if b.startswith(("commit-", "rollback-"))}
    assert {r["topic"] for r in records if r["event"] == "checked"} == {topic}
    assert all(r["transaction_id"] == next(s["msg_id"] for s in sent if s["body"] == r["body"])
               for r in records if r["event"] == "checked")
