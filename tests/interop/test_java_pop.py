"""The Java ``DefaultMQPushConsumer`` (RocketMQ 5.x client) pops from Sluice: with client rebalance off it asks
the broker for its queues (QUERY_ASSIGNMENT), pops the whole topic (queue id -1) when the broker says POP — by
its ``default_message_request_mode``, or for the group after RocketMQ's admin tool sent SET_MESSAGE_REQUEST_MODE
— acks what it consumed (ACK_MESSAGE) and hands back what it failed (CHANGE_MESSAGE_INVISIBLETIME, 10 s: the
client's first pop delay level), which the broker then puts back through the group's POP retry topic."""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice import Message, Producer
from sluice.broker.broker_controller import BrokerController
from sluice.common.extra_info import Receipt
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from tests.conftest import Cluster
from tests.integration.helpers import wait_until
from tests.interop.conftest import unsupported_requests
from tests.interop.java_clients import JavaAdmin, JavaBuild, JavaClients, JavaProcess

POP_CODES = (RequestCode.QUERY_ASSIGNMENT, RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE,
             RequestCode.CHANGE_MESSAGE_INVISIBLETIME, RequestCode.SET_MESSAGE_REQUEST_MODE)


@pytest.fixture
def java(java_build: JavaBuild, tmp_path: Path) -> Iterator[JavaClients]:
    """Java client programs, as ``tests/interop/conftest.py``'s but without its ``sluice`` broker: each test here
    starts the broker it needs."""
    clients = JavaClients(java_build, tmp_path / "java")
    try:
        yield clients
    finally:
        clients.close()
    for c in clients.started:  # a crash the test did not look at still fails it
        c.check_exit()


def answers_to_pop_requests(broker: BrokerController) -> Counter[tuple[str, int]]:
    """From now on, (request code name, response code) → how many: what the broker answered the consumer."""
    seen: Counter[tuple[str, int]] = Counter()
    for code in POP_CODES:
        inner = broker.dispatcher.handlers[int(code)]

        def handler(conn: Connection, req: RemotingCommand, inner: Any = inner, name: str = code.name) -> Any:
            result = inner(conn, req)
            if not inspect.isawaitable(result):
                seen[name, result.code] += 1
                return result

            async def answered() -> Any:
                resp = await result
                seen[name, resp.code] += 1
                return resp

            return answered()

        broker.dispatcher.handlers[int(code)] = handler
    return seen


def refused(answers: Counter[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The answers that were neither SUCCESS nor a pop's POLLING_TIMEOUT (it found nothing in its poll time)."""
    return {(name, code): n for (name, code), n in answers.items() if code != ResponseCode.SUCCESS
            and (name, code) != ("POP_MESSAGE", ResponseCode.POLLING_TIMEOUT)}


def produce(namesrv: str, topic: str, n: int) -> dict[str, str]:
    """``n`` messages ``m-<i>``; body → message id."""
    with Producer("java-pop-producers", namesrv=namesrv) as producer:
        return {f"m-{i}": producer.send(Message(topic, f"m-{i}".encode(), tags="T")).msg_id for i in range(n)}


def open_checkpoints(cluster: Cluster, broker: BrokerController) -> int:
    async def count() -> int:
        return len(broker.pop_revive.checkpoints)

    return cluster.loop.run(count())


def held_pops(cluster: Cluster, broker: BrokerController, topic: str) -> int:
    async def count() -> int:
        return len(broker.pop_polling.held.get(topic, ()))

    return cluster.loop.run(count())


def drain(cluster: Cluster, consumer: JavaProcess, sent: dict[str, str], stop: Path) -> tuple[list[dict], list[dict]]:
    """Wait until the popping Java consumer consumed every message sent and the broker holds no open checkpoint
    (the client acks asynchronously), then stop it; the deliveries it consumed and those it failed."""
    wait_until(lambda: {r["body"] for r in consumer.received()} >= set(sent), 60,
               "every message consumed by the popping Java consumer")
    wait_until(lambda: open_checkpoints(cluster, cluster.brokers[0]) == 0, 30, "every pop checkpoint acknowledged")
    stop.touch()
    records = consumer.wait(30)
    assert records[-1] == {"event": "end", "reason": "stopped"}
    return consumer.received(), consumer.records("failed")


def check_popped(deliveries: list[dict], topic: str, sent: dict[str, str]) -> None:
    """Every delivery came by POP: with a receipt of this broker for the topic or its POP retry topic."""
    for r in deliveries:
        assert r["topic"] == topic and r["id"] == sent[r["body"]]
        receipt = Receipt.parse(r["pop_ck"])
        assert r["properties"]["POP_CK"] == r["pop_ck"]
        assert receipt.broker_name == "broker-a" and receipt.queue_offset == r["queue_offset"]
        assert receipt.retry == ("1" if r["reconsume_times"] else "0")  # %RETRY%<group>_<topic>: retry v1


def test_a_java_push_consumer_pops_when_the_broker_defaults_to_pop_and_failed_messages_come_back(
        empty_cluster: Cluster, java: JavaClients, tmp_path: Path) -> None:
    broker = empty_cluster.start_broker(default_message_request_mode="POP")
    topic, group = "java-pop", "java-pop-group"
    empty_cluster.create_topic(topic, 4)
    answers = answers_to_pop_requests(broker)
    sent = produce(empty_cluster.namesrv_addr, topic, 40)
    stop = tmp_path / "stop"
    consumer = java.start("pop-consume", namesrv=empty_cluster.namesrv_addr, topic=topic, group=group,
                          consume_from="CONSUME_FROM_FIRST_OFFSET", fail_once_suffix="7", stop_file=stop, timeout=120)
    received, failed = drain(empty_cluster, consumer, sent, stop)

    sevens = {b for b in sent if b.endswith("7")}
    assert sorted(r["body"] for r in received) == sorted(sent)  # each consumed once: acked, never popped again
    assert sorted(r["body"] for r in failed) == sorted(sevens)
    assert all(r["reconsume_times"] == 0 for r in failed)
    assert {r["body"]: r["reconsume_times"] for r in received if r["body"] in sevens} == dict.fromkeys(sevens, 1)
    assert all(r["reconsume_times"] == 0 for r in received if r["body"] not in sevens)
    check_popped(received + failed, topic, sent)
    assert {r["queue_id"] for r in received if r["body"] not in sevens} == {0, 1, 2, 3}  # queue -1: every queue
    popped_at = {r["body"]: Receipt.parse(r["pop_ck"]).pop_time for r in failed}
    for r in received:
        if r["body"] in sevens:  # back from %RETRY%<group>_<topic> no sooner than the client's 10 s
            assert Receipt.parse(r["pop_ck"]).pop_time >= popped_at[r["body"]] + 10_000
            assert r["properties"]["RETRY_TOPIC"] == topic
    assert broker.pop_revive.revived == len(sevens) and broker.pop_revive.dead == 0
    assert {name for name, _ in answers} >= {"QUERY_ASSIGNMENT", "POP_MESSAGE", "ACK_MESSAGE",
                                             "CHANGE_MESSAGE_INVISIBLETIME"}
    assert not refused(answers), f"the broker refused requests of the Java consumer: {refused(answers)}"
    assert answers["CHANGE_MESSAGE_INVISIBLETIME", ResponseCode.SUCCESS] == len(sevens)
    assert answers["ACK_MESSAGE", ResponseCode.SUCCESS] == len(sent)
    assert not unsupported_requests(empty_cluster)


def test_a_java_push_consumer_pops_once_the_admin_tool_sets_the_groups_request_mode_to_pop(
        cluster: Cluster, java: JavaClients, java_build: JavaBuild, tmp_path: Path) -> None:
    broker = cluster.brokers[0]
    topic, group = "java-pop-mode", "java-pop-mode-group"
    cluster.create_topic(topic, 4)
    admin = JavaAdmin(java_build, cluster.namesrv_addr, tmp_path / "java-admin")
    try:
        admin.call("setMessageRequestMode", topic=topic, group=group, mode="POP", popShareQueueNum=0)
    finally:
        admin.close()
    assert broker.request_modes.mode(topic, group) == "POP"
    assert broker.config.default_message_request_mode == "PULL"
    answers = answers_to_pop_requests(broker)
    stop = tmp_path / "stop"
    consumer = java.start("pop-consume", namesrv=cluster.namesrv_addr, topic=topic, group=group, stop_file=stop,
                          timeout=120)  # from the last offset: what is sent from now on
    wait_until(lambda: held_pops(cluster, broker, topic) > 0, 60, "the Java consumer's pop waiting for messages")
    sent = produce(cluster.namesrv_addr, topic, 40)
    received, failed = drain(cluster, consumer, sent, stop)

    assert sorted(r["body"] for r in received) == sorted(sent) and not failed
    assert all(r["reconsume_times"] == 0 for r in received)
    check_popped(received, topic, sent)
    assert {name for name, _ in answers} >= {"QUERY_ASSIGNMENT", "POP_MESSAGE", "ACK_MESSAGE"}
    assert not refused(answers), f"the broker refused requests of the Java consumer: {refused(answers)}"
    assert answers["ACK_MESSAGE", ResponseCode.SUCCESS] == len(sent)
    assert not unsupported_requests(cluster)
