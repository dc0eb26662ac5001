"""A broker killed with SIGKILL in the middle of transactions: a decision is never lost and never applied twice.

The broker runs as ``sluice broker`` in a child process on a fixed port (so that producers find it again at its
old address), with quick check-backs; the name server runs in this process.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sluice import LocalTransactionState, Message, MessageExt, PullConsumer, TransactionProducer
from sluice.client import _loop
from sluice.client.admin import Admin
from tests.broker_process import BrokerProcess
from tests.conftest import Cluster
from tests.integration.helpers import send_markers, wait_until

pytestmark = pytest.mark.crash

COMMIT, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.UNKNOWN
CONFIG = """
[broker]
transaction_timeout = 500
transaction_check_interval = 300
transaction_check_max = 1000    # checks count while no producer is online yet (as in RocketMQ): plenty of them
"""
FAST_HEARTBEAT = {"heartbeat_broker_interval": 200}  # producers are back on a restarted broker at once


@contextmanager
def broker_process(namesrv: str, root: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(namesrv, root, CONFIG)
    b.start()
    try:
        _loop.run(_create_topic(namesrv))
        yield b
    finally:
        b.stop()


async def _create_topic(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic("txk", queues=1, wait=30)


class Listener:
    """Answers by body; ``hold`` bodies wait in ``execute_local_transaction`` until released."""

    def __init__(self, execute: dict[bytes, LocalTransactionState], check: dict[bytes, LocalTransactionState]) -> None:
        self.execute = execute
        self.check = check
        self.checked: Counter[bytes] = Counter()
        self.executing = threading.Event()
        self.release = threading.Event()
        self.hold: set[bytes] = set()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        if msg.body in self.hold:
            self.executing.set()
            self.release.wait(60)
        return self.execute.get(msg.body, COMMIT)

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checked[msg.body] += 1
        return self.check.get(msg.body, UNKNOWN)


def wait_for(namesrv: str, body: bytes) -> None:
    """Until a consumer of topic txk gets ``body``."""
    consumer = PullConsumer(f"txk-wait-{body.decode()}", namesrv=namesrv, consume_from="first")
    consumer.subscribe("txk")
    with consumer:
        wait_until(lambda: any(m.body == body for m in consumer.poll(0.2)), 90, f"message {body!r}")


def bodies(namesrv: str, group: str) -> Counter[bytes]:
    """How often each message of topic txk reaches a fresh consumer, read up to a marker sent now."""
    markers = send_markers(namesrv, "txk", 1)
    consumer = PullConsumer(group, namesrv=namesrv, consume_from="first")
    consumer.subscribe("txk")
    got: list[bytes] = []
    with consumer:
        wait_until(lambda: got.extend(m.body for m in consumer.poll(0.2)) or markers <= set(got), 60,
                   "the marker at the end of the topic")
    return Counter(b for b in got if b not in markers)


def test_a_transaction_decided_after_a_broker_sigkill_is_applied_once(empty_cluster: Cluster, tmp_path: Path):
    namesrv = empty_cluster.namesrv_addr
    listener = Listener({b"across": COMMIT}, {b"across": COMMIT})
    listener.hold.add(b"across")
    with broker_process(namesrv, tmp_path) as broker, \
            TransactionProducer("txk-pg", listener, namesrv=namesrv, **FAST_HEARTBEAT) as producer:
        results: list[Any] = []
        t = threading.Thread(target=lambda: results.append(
            producer.send_message_in_transaction(Message("txk", b"across"))))
        t.start()
        assert listener.executing.wait(30), "the half message was never stored"
        broker.kill()  # the half message is stored; the decision is not made yet
        broker.start()
        listener.release.set()  # COMMIT, to a broker that has just come back (or, if that is lost, by the check)
        t.join(60)
        assert results and results[0].local_transaction_state is COMMIT
        wait_for(namesrv, b"across")
        assert bodies(namesrv, "txk-reader-final") == Counter({b"across": 1})


def test_a_decision_made_before_a_broker_sigkill_is_kept_and_never_checked_back(empty_cluster: Cluster,
                                                                                tmp_path: Path):
    namesrv = empty_cluster.namesrv_addr
    listener = Listener({b"decided": COMMIT, b"open": UNKNOWN}, {b"open": COMMIT, b"decided": COMMIT})
    with broker_process(namesrv, tmp_path) as broker, \
            TransactionProducer("txk-pg2", listener, namesrv=namesrv, **FAST_HEARTBEAT) as producer:
        producer.send_message_in_transaction(Message("txk", b"decided"))
        assert bodies(namesrv, "txk-before") == Counter({b"decided": 1})  # committed: in the log
        listener.check[b"open"] = UNKNOWN
        producer.send_message_in_transaction(Message("txk", b"open"))  # undecided, after it in the half queue
        broker.kill()
        broker.start()
        listener.check[b"open"] = COMMIT
        # "open" is committed by a check-back: the check rounds have walked past "decided" by then.
        wait_for(namesrv, b"open")
        assert bodies(namesrv, "txk-after") == Counter({b"decided": 1, b"open": 1})
    assert listener.checked[b"decided"] == 0
