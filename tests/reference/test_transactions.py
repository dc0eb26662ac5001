"""Differential: Sluice's TransactionProducer against Sluice and against Apache RocketMQ — the same local states,
the same messages delivered (properties and flags included), the same transactions checked back."""

from __future__ import annotations

import threading
from typing import Any

from sluice import LocalTransactionState, Message, MessageExt, PullConsumer, TransactionProducer
from tests.integration.helpers import send_markers, wait_until
from tests.reference.conftest import System
from tests.reference.observe import assert_same, both, sluice_message

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
EXECUTE = {"commit-0": COMMIT, "rollback-1": ROLLBACK, "check-commit-2": UNKNOWN, "check-rollback-3": UNKNOWN}
CHECK = {"check-commit-2": COMMIT, "check-rollback-3": ROLLBACK}


class Listener:
    def __init__(self) -> None:
        self.checked: set[str] = set()
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return EXECUTE[msg.body.decode()]

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        body = msg.body.decode()
        with self.lock:
            self.checked.add(body)
        return CHECK.get(body, UNKNOWN)


def test_transactions_of_sluices_producer_end_alike(systems):
    """Commit, rollback, and two undecided ones the check-back decides: one commit, one rollback."""

    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("tx")
        s.create_topic(topic, 1)
        listener = Listener()
        with TransactionProducer(s.topic("p"), listener, namesrv=s.namesrv, heartbeat_broker_interval=1000) as p:
            states = {body: p.send_message_in_transaction(
                Message(topic, body.encode(), tags="Tx", keys=[f"key-{body}"], properties={"n": body[-1]})
            ).local_transaction_state.name for body in EXECUTE}
            wait_until(lambda: listener.checked >= set(CHECK), 60, "both undecided transactions checked back")
            reader = PullConsumer(s.topic("wait"), namesrv=s.namesrv, consume_from="first")
            reader.subscribe(topic)
            seen: set[bytes] = set()
            with reader:
                wait_until(lambda: seen.update(m.body for m in reader.poll(0.2)) or b"check-commit-2" in seen, 60,
                           "the transaction committed by its check")
        markers = send_markers(s.namesrv, topic, 1, broker="broker-a")
        final = PullConsumer(s.topic("read"), namesrv=s.namesrv, consume_from="first")
        final.subscribe(topic)
        got: list[MessageExt] = []
        with final:
            wait_until(lambda: got.extend(final.poll(0.2)) or markers <= {m.body for m in got}, 60, "the marker")
        # RocketMQ writes its op messages in batches, every few seconds: until then a decided transaction may be
        # checked back too (and the producer answers it the same). Compared: the undecided ones were checked.
        return {"states": states, "checked": sorted(listener.checked & set(CHECK)), "all_checked": listener.checked,
                "delivered": [sluice_message(m) for m in got if m.body not in markers]}

    results = both(systems, scenario)
    # A deliberate difference (docs/interop.md): Sluice never checks back a transaction already decided.
    assert results["sluice"].pop("all_checked") == set(CHECK)
    results["rocketmq"].pop("all_checked")
    observed = assert_same(results)
    assert [m["body"] for m in observed["delivered"]] == ["commit-0", "check-commit-2"]
