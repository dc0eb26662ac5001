"""Transactional messages against a real broker: commit, rollback, the check-back of undecided transactions, the
discard after the last check, restarts, and END_TRANSACTION requests that must change nothing."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from sluice import (
    LocalTransactionState,
    Message,
    MessageExt,
    MessageQueue,
    PullConsumer,
    TransactionProducer,
)
from sluice import aio as sluice_aio
from sluice.broker.broker_controller import BrokerController
from sluice.common.naming import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from sluice.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from tests.conftest import Cluster
from tests.integration.helpers import send_markers, wait_until

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
QUICK_CHECKS = {"transaction_timeout": 300, "transaction_check_interval": 200, "transaction_check_max": 3}


class Script:
    """A transaction listener that answers by the message body: ``execute`` and ``check`` map a body to an
    answer (or an exception); every call is counted."""

    def __init__(self, execute: dict[bytes, Any] | None = None, check: dict[bytes, Any] | None = None) -> None:
        self.execute = execute or {}
        self.check = check or {}
        self.executed: Counter[bytes] = Counter()
        self.checked: Counter[bytes] = Counter()
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        with self.lock:
            self.executed[msg.body] += 1
        return self._answer(self.execute.get(msg.body, COMMIT))

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checked[msg.body] += 1
        return self._answer(self.check.get(msg.body, UNKNOWN))

    @staticmethod
    def _answer(a: Any) -> LocalTransactionState:
        if isinstance(a, Exception):
            raise a
        return a


@pytest.fixture
def broker(empty_cluster: Cluster) -> Iterator[BrokerController]:
    b = empty_cluster.start_broker("broker-a", **QUICK_CHECKS)
    empty_cluster.create_topic("tx", 1)
    yield b


def everything_in(namesrv: str, topic: str, group: str, queues: int = 1) -> list[bytes]:
    """Every message a fresh consumer reads from ``topic`` up to markers sent now at the end of each queue."""
    markers = send_markers(namesrv, topic, queues)
    consumer = PullConsumer(group, namesrv=namesrv, consume_from="first")
    consumer.subscribe(topic)
    consumer.start()
    got: list[bytes] = []
    try:
        wait_until(lambda: got.extend(m.body for m in consumer.poll(0.2)) or markers <= set(got), 60,
                   "the markers at the end of the topic")
    finally:
        consumer.shutdown()
    return [b for b in got if b not in markers]


def queue_end(cluster: Cluster, topic: str) -> int:
    return cluster.loop.run(_queue_end(cluster.brokers[0], topic))


async def _queue_end(b: BrokerController, topic: str) -> int:
    return b.store.get_max_offset_in_queue(topic, 0)


def test_committed_messages_are_delivered_once_and_rolled_back_ones_never(empty_cluster: Cluster,
                                                                           broker: BrokerController):
    script = Script(execute={b"keep": COMMIT, b"drop": ROLLBACK})
    with TransactionProducer("tx-pg", script, namesrv=empty_cluster.namesrv_addr) as producer:
        kept = producer.send_message_in_transaction(Message("tx", b"keep"), arg=1)
        dropped = producer.send_message_in_transaction(Message("tx", b"drop"))
    assert kept.local_transaction_state is COMMIT and dropped.local_transaction_state is ROLLBACK
    assert kept.status.name == "SEND_OK" and kept.transaction_id == kept.msg_id
    assert everything_in(empty_cluster.namesrv_addr, "tx", "tx-reader-1") == [b"keep"]
    assert script.executed == Counter({b"keep": 1, b"drop": 1}) and not script.checked


def test_a_half_message_is_invisible_until_committed_and_keeps_its_properties(empty_cluster: Cluster,
                                                                                broker: BrokerController):
    release = threading.Event()

    class Slow(Script):
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            release.wait(30)
            return COMMIT

    result: list[Any] = []
    with TransactionProducer("tx-slow-pg", Slow(), namesrv=empty_cluster.namesrv_addr) as producer:
        t = threading.Thread(target=lambda: result.append(producer.send_message_in_transaction(
            Message("tx", b"pending", tags="T", keys="k1", properties={"color": "red"}))))
        t.start()
        wait_until(lambda: queue_end(empty_cluster, TRANS_HALF_TOPIC) == 1, 30, "the half message stored")
        assert everything_in(empty_cluster.namesrv_addr, "tx", "tx-reader-2") == []  # stored, not visible
        release.set()
        t.join(30)
    consumer = PullConsumer("tx-reader-3", namesrv=empty_cluster.namesrv_addr, consume_from="first")
    consumer.subscribe("tx")
    with consumer:
        got: list[MessageExt] = []
        wait_until(lambda: got.extend(m for m in consumer.poll(0.2) if m.body == b"pending") or got, 30,
                   "the committed message")
    m = got[0]
    assert (m.body, m.tags, m.keys, m.properties["color"]) == (b"pending", "T", ["k1"], "red")
    assert m.msg_id == result[0].msg_id and m.properties["PGROUP"] == "tx-slow-pg"
    # As RocketMQ delivers it: TRAN_MSG kept, where the half message was kept not
    assert m.properties["TRAN_MSG"] == "true" and "REAL_TOPIC" not in m.properties and "REAL_QID" not in m.properties
    assert m.sys_flag & 0xC == 0x8  # COMMIT


def test_an_undecided_transaction_is_checked_back_and_committed(empty_cluster: Cluster, broker: BrokerController):
    script = Script(execute={b"later": UNKNOWN, b"boom": RuntimeError("db down")},
                    check={b"later": COMMIT, b"boom": COMMIT})
    with TransactionProducer("tx-check-pg", script, namesrv=empty_cluster.namesrv_addr) as producer:
        r1 = producer.send_message_in_transaction(Message("tx", b"later"))
        r2 = producer.send_message_in_transaction(Message("tx", b"boom"))
        assert r1.local_transaction_state is UNKNOWN and r2.local_transaction_state is UNKNOWN
        wait_until(lambda: queue_end(empty_cluster, "tx") == 2, 30, "both committed by the check-back")
    assert sorted(everything_in(empty_cluster.namesrv_addr, "tx", "tx-reader-4")) == [b"boom", b"later"]
    assert script.checked[b"later"] >= 1 and script.checked[b"boom"] >= 1


def test_a_transaction_never_decided_is_discarded_after_the_last_check(empty_cluster: Cluster,
                                                                        broker: BrokerController):
    script = Script(execute={b"limbo": UNKNOWN})
    with TransactionProducer("tx-limbo-pg", script, namesrv=empty_cluster.namesrv_addr) as producer:
        result = producer.send_message_in_transaction(Message("tx", b"limbo"))
        wait_until(lambda: broker.transaction_service.discarded == 1, 30, "the transaction discarded")
        # Decided by the discard: a late commit changes nothing.
        code, remark = end_transaction(empty_cluster, broker, "tx-limbo-pg", result.queue_offset,
                                       _commit_log_offset(result.offset_msg_id), COMMIT)
    assert script.checked[b"limbo"] == QUICK_CHECKS["transaction_check_max"]
    assert code == ResponseCode.SYSTEM_ERROR and "already committed, rolled back or discarded" in remark
    assert everything_in(empty_cluster.namesrv_addr, "tx", "tx-reader-5") == []
    assert queue_end(empty_cluster, TRANS_CHECK_MAX_TIME_TOPIC) == 1


def test_end_transaction_requests_that_cannot_apply_are_refused_and_change_nothing(empty_cluster: Cluster,
                                                                                  broker: BrokerController):
    script = Script(execute={b"once": COMMIT})
    with TransactionProducer("tx-bad-pg", script, namesrv=empty_cluster.namesrv_addr) as producer:
        r = producer.send_message_in_transaction(Message("tx", b"once"))
    wait_until(lambda: queue_end(empty_cluster, "tx") == 1, 30, "the commit")
    offset = _commit_log_offset(r.offset_msg_id)
    ops, real = queue_end(empty_cluster, TRANS_OP_HALF_TOPIC), queue_end(empty_cluster, "tx")
    cases = [
        (("tx-bad-pg", r.queue_offset, offset, COMMIT), "already committed, rolled back or discarded"),
        (("tx-bad-pg", r.queue_offset, offset, ROLLBACK), "already committed, rolled back or discarded"),
        (("other-pg", r.queue_offset, offset, COMMIT), "The producer group wrong"),
        (("tx-bad-pg", r.queue_offset + 7, offset, COMMIT), "The transaction state table offset wrong"),
        (("tx-bad-pg", 0, 123_456_789, COMMIT), "Find prepared transaction message failed"),
    ]
    for args, remark in cases:
        code, got = end_transaction(empty_cluster, broker, *args)
        assert code == ResponseCode.SYSTEM_ERROR and remark in got, (args, got)
    code, got = end_transaction(empty_cluster, broker, "tx-bad-pg", r.queue_offset, offset, 5)
    assert code == ResponseCode.INVALID_PARAMETER and "commitOrRollback" in got
    code, got = raw_end_transaction(empty_cluster, broker, {"producerGroup": "tx-bad-pg"})
    assert code == ResponseCode.SYSTEM_ERROR and "tranStateTableOffset" in got
    assert (queue_end(empty_cluster, TRANS_OP_HALF_TOPIC), queue_end(empty_cluster, "tx")) == (ops, real)


def test_decisions_and_pending_transactions_survive_a_broker_restart(empty_cluster: Cluster,
                                                                    broker: BrokerController):
    script = Script(execute={b"done": COMMIT, b"open": UNKNOWN}, check={b"open": COMMIT, b"done": COMMIT})
    with TransactionProducer("tx-restart-pg", script, namesrv=empty_cluster.namesrv_addr,
                             poll_name_server_interval=200) as producer:
        script.check[b"open"] = UNKNOWN  # undecided until the broker comes back
        producer.send_message_in_transaction(Message("tx", b"done"))
        producer.send_message_in_transaction(Message("tx", b"open"))
        wait_until(lambda: script.checked[b"open"] >= 1, 30, "the open transaction checked")
        again = empty_cluster.restart_broker(broker)
        script.check[b"open"] = COMMIT
        wait_until(lambda: queue_end(empty_cluster, "tx") == 2, 60, "the open transaction committed after the restart")
    assert sorted(everything_in(empty_cluster.namesrv_addr, "tx", "tx-reader-6")) == [b"done", b"open"]
    assert script.checked[b"done"] == 0  # decided before the restart, never asked about
    assert again.transaction_service.live == {} or all(
        f in again.transaction_service.decided for f in again.transaction_service.live)


def test_a_commit_torn_off_by_a_crash_is_stored_again_at_restart(empty_cluster: Cluster):
    """A commit is one append: its op, then its message. A crash can tear the message off the log's tail and
    leave the op; the restarted broker stores the message again, once, and the transaction stays decided."""
    broker = empty_cluster.start_broker("broker-a", transaction_timeout=600_000)  # no check-back meanwhile
    empty_cluster.create_topic("tx", 1)
    script = Script(execute={b"torn": UNKNOWN})
    with TransactionProducer("tx-torn-pg", script, namesrv=empty_cluster.namesrv_addr) as producer:
        result = producer.send_message_in_transaction(Message("tx", b"torn"))

    async def tear() -> None:  # what a crash between the op and the message leaves at the log's end
        half = broker.store.look_message_by_offset(_commit_log_offset(result.offset_msg_id))
        assert half is not None
        assert broker.store.put([broker.transaction_service._op(half, "commit")]).ok

    empty_cluster.loop.run(tear())
    again = empty_cluster.restart_broker(broker)
    again = empty_cluster.restart_broker(again)  # a second restart restores nothing more
    assert everything_in(empty_cluster.namesrv_addr, "tx", "tx-reader-7") == [b"torn"]
    code, remark = end_transaction(empty_cluster, again, "tx-torn-pg", result.queue_offset,
                                   _commit_log_offset(result.offset_msg_id), COMMIT)
    assert code == ResponseCode.SYSTEM_ERROR and "already committed" in remark


def test_the_asyncio_producer_takes_coroutine_listeners(empty_cluster: Cluster, broker: BrokerController):
    class AsyncScript:
        def __init__(self) -> None:
            self.checked = 0

        async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            await asyncio.sleep(0)
            return UNKNOWN if arg == "ask me" else COMMIT

        async def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            self.checked += 1
            return COMMIT

    listener = AsyncScript()

    async def go() -> list[LocalTransactionState]:
        async with sluice_aio.TransactionProducer("tx-aio-pg", listener, empty_cluster.namesrv_addr) as p:
            states = [(await p.send_message_in_transaction(Message("tx", b"a"))).local_transaction_state,
                      (await p.send_message_in_transaction(Message("tx", b"b"), "ask me")).local_transaction_state]
            while queue_end(empty_cluster, "tx") < 2:
                await asyncio.sleep(0.05)
            return states

    assert asyncio.run(asyncio.wait_for(go(), 60)) == [COMMIT, UNKNOWN]
    assert listener.checked >= 1
    assert sorted(everything_in(empty_cluster.namesrv_addr, "tx", "tx-reader-8")) == [b"a", b"b"]


def test_a_listener_that_is_not_one_is_refused_and_a_delayed_message_cannot_be_transactional(
        empty_cluster: Cluster, broker: BrokerController):
    with pytest.raises(TypeError, match="needs the method execute_local_transaction"):
        TransactionProducer("tx-x-pg", object(), namesrv=empty_cluster.namesrv_addr)  # type: ignore[arg-type]
    with TransactionProducer("tx-d-pg", Script(), namesrv=empty_cluster.namesrv_addr) as producer:
        with pytest.raises(ValueError, match="delay level"):
            producer.send_message_in_transaction(Message("tx", b"x", delay_level=2))


def test_a_broker_that_rejects_transactions_says_so(empty_cluster: Cluster):
    empty_cluster.start_broker("broker-a", reject_transaction_message=True)
    empty_cluster.create_topic("tx", 1)
    with TransactionProducer("tx-r-pg", Script(), namesrv=empty_cluster.namesrv_addr,
                             retry_times_when_send_failed=0) as producer:
        with pytest.raises(Exception, match="sending transaction message is forbidden"):
            producer.send_message_in_transaction(Message("tx", b"x"))


# == raw END_TRANSACTION ===============================================================================
def end_transaction(cluster: Cluster, broker: BrokerController, group: str, queue_offset: int,
                    commit_log_offset: int, outcome: LocalTransactionState | int) -> tuple[int, str]:
    value = outcome.value if isinstance(outcome, LocalTransactionState) else outcome
    return raw_end_transaction(cluster, broker, {
        "producerGroup": group, "tranStateTableOffset": str(queue_offset), "commitLogOffset": str(commit_log_offset),
        "commitOrRollback": str(value), "fromTransactionCheck": "false", "msgId": "X", "transactionId": "X"})


def raw_end_transaction(cluster: Cluster, broker: BrokerController, header: dict[str, str]) -> tuple[int, str]:
    """END_TRANSACTION as a request that wants an answer (Java's producer sends it one-way)."""

    async def go() -> tuple[int, str]:
        client = RemotingClient()
        try:
            resp = await client.invoke(broker.broker_addr, RemotingCommand.request(RequestCode.END_TRANSACTION,
                                                                                  header), 5000)
            return resp.code, resp.remark or ""
        finally:
            await client.close()

    return asyncio.run(go())


def _commit_log_offset(offset_msg_id: str) -> int:
    return int(offset_msg_id[-16:], 16)


__all__ = ["MessageQueue"]
