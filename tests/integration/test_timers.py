"""Timer messages: delivered at their time (never early, within the wheel's precision), through restarts; delay
levels from a producer; times the broker cannot take refused with a reason."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta

import pytest

from sluice import BrokerResponseError, ClientError, Message, MessageExt, Producer, PullConsumer
from sluice.common.naming import TIMER_TOPIC
from sluice.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from tests.conftest import Cluster
from tests.integration.helpers import wait_until

PRECISION = 100  # ms: quick tests; RocketMQ's default, 1 s, in the benchmark


def start(cluster: Cluster, **settings: object) -> None:
    cluster.start_broker("broker-a", store_timer_precision_ms=PRECISION, message_delay_level="1s 2s", **settings)
    cluster.create_topic("timed", 2)


def receive(namesrv: str, group: str, n: int, timeout: float = 60) -> list[tuple[float, MessageExt]]:
    """(arrival time, message) of the first ``n`` messages of topic ``timed``."""
    consumer = PullConsumer(group, namesrv=namesrv, consume_from="first", pull_batch_size=64)
    consumer.subscribe("timed")
    got: list[tuple[float, MessageExt]] = []
    with consumer:
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            got.extend((time.time(), m) for m in consumer.poll(0.1))
    return got


def test_messages_with_a_delay_or_a_time_arrive_then_and_not_before(empty_cluster: Cluster):
    start(empty_cluster)
    sent_at = time.time()
    at = datetime.fromtimestamp(sent_at + 1.5)
    with Producer("timer-pg", namesrv=empty_cluster.namesrv_addr) as p:
        p.send(Message("timed", b"delay", delay=timedelta(milliseconds=1200)))
        p.send(Message("timed", b"at", deliver_at=at))
        p.send(Message("timed", b"at-ms", deliver_at=int((sent_at + 0.8) * 1000)))
        p.send(Message("timed", b"past", deliver_at=int((sent_at - 60) * 1000)))
        p.send(Message("timed", b"plain"))
    got = {m.body: (t, m) for t, m in receive(empty_cluster.namesrv_addr, "timer-reader", 5)}
    assert set(got) == {b"delay", b"at", b"at-ms", b"past", b"plain"}
    due = {b"delay": sent_at + 1.2, b"at": sent_at + 1.5, b"at-ms": sent_at + 0.8}
    for body, when in due.items():
        arrived, m = got[body]
        assert arrived >= when - 0.05, (body, arrived - when)  # not early (50 ms for the clocks of two threads)
        assert arrived - when < 10, (body, arrived - when)
        assert int(m.properties["TIMER_OUT_MS"]) % PRECISION == 0
        assert int(m.properties["TIMER_OUT_MS"]) >= int(when * 1000) - 1
        assert m.properties["REAL_TOPIC"] == "timed" and "TIMER_DEQUEUE_MS" in m.properties
        assert m.topic == "timed"
    assert "TIMER_OUT_MS" not in got[b"past"][1].properties  # due already: stored as a plain message


def test_many_timers_arrive_in_due_order_none_early(empty_cluster: Cluster):
    start(empty_cluster)
    n = 600
    base = time.time() + 4  # (every one still ahead once sent, on a busy machine too)
    with Producer("timer-many-pg", namesrv=empty_cluster.namesrv_addr) as p:
        futures = [p.send_async(Message("timed", f"{i}".encode(), deliver_at=int((base + (i % 30) * 0.1) * 1000)))
                   for i in range(n)]
        for f in futures:
            f.result(30)
    got = receive(empty_cluster.namesrv_addr, "timer-many-reader", n)
    assert sorted(int(m.body) for _, m in got) == list(range(n))
    late = [t - (base + (int(m.body) % 30) * 0.1) for t, m in got]
    assert min(late) >= -0.05
    by_queue: dict[int, list[int]] = {}
    for _, m in got:
        by_queue.setdefault(m.queue_id, []).append(int(m.properties["TIMER_OUT_MS"]))
    assert all(v == sorted(v) for v in by_queue.values())  # each queue receives in due order


def test_timers_wait_through_a_broker_restart_and_arrive_once(empty_cluster: Cluster):
    start(empty_cluster)
    with Producer("timer-restart-pg", namesrv=empty_cluster.namesrv_addr) as p:
        for i in range(50):
            p.send(Message("timed", f"r{i}".encode(), delay=timedelta(seconds=3)))
    broker = empty_cluster.brokers[0]
    pending = empty_cluster.loop.run(_pending(broker))
    assert pending == 50
    again = empty_cluster.restart_broker(broker)
    assert empty_cluster.loop.run(_pending(again)) == 50
    got = receive(empty_cluster.namesrv_addr, "timer-restart-reader", 50)
    assert sorted(m.body for _, m in got) == sorted(f"r{i}".encode() for i in range(50))
    wait_until(lambda: empty_cluster.loop.run(_pending(again)) == 0, 30, "the wheel empty")
    total = sum(empty_cluster.loop.run(_queue_end(again, "timed", q)) for q in range(2))
    assert total == 50  # once each


async def _pending(broker: object) -> int:
    return broker.timer_service.wheel.pending  # type: ignore[attr-defined]


async def _queue_end(broker: object, topic: str, q: int) -> int:
    return broker.store.get_max_offset_in_queue(topic, q)  # type: ignore[attr-defined]


def test_a_delay_level_from_a_producer_is_delivered_after_its_delay(empty_cluster: Cluster):
    start(empty_cluster)
    with Producer("delay-pg", namesrv=empty_cluster.namesrv_addr) as p:
        sent = time.time()
        p.send(Message("timed", b"level-2", delay_level=2))
    [(arrived, m)] = receive(empty_cluster.namesrv_addr, "delay-reader", 1)
    assert m.body == b"level-2" and arrived - sent >= 1.95
    assert m.properties["DELAY"] == "2" and m.properties["REAL_TOPIC"] == "timed"


def test_times_the_broker_cannot_take_are_refused_and_nothing_is_stored(empty_cluster: Cluster):
    start(empty_cluster, store_timer_max_delay_sec=60)
    with Producer("timer-bad-pg", namesrv=empty_cluster.namesrv_addr, retry_times_when_send_failed=0) as p:
        with pytest.raises(BrokerResponseError) as exc:
            p.send(Message("timed", b"too far", delay=timedelta(minutes=2)))
    assert exc.value.code == ResponseCode.MESSAGE_ILLEGAL and "max delay 60000ms" in exc.value.remark
    code, remark = raw_send(empty_cluster, {"TIMER_DELAY_SEC": "soon"})
    assert code == ResponseCode.MESSAGE_ILLEGAL and "must be integers" in remark
    assert empty_cluster.loop.run(_queue_end(empty_cluster.brokers[0], TIMER_TOPIC, 0)) == 0
    with pytest.raises(ValueError, match="one of deliver_at, delay and delay_level"):
        Message("timed", b"x", delay=timedelta(seconds=1), delay_level=2)
    with pytest.raises(ValueError, match="positive timedelta"):
        Message("timed", b"x", delay=timedelta(seconds=-1))


def test_a_broker_without_the_timer_wheel_refuses_timer_messages(empty_cluster: Cluster):
    """SYSTEM_ERROR, as RocketMQ answers: a producer tries another broker, which may have the wheel on."""
    start(empty_cluster, store_timer_wheel_enable=False)
    with Producer("timer-off-pg", namesrv=empty_cluster.namesrv_addr, retry_times_when_send_failed=0) as p:
        with pytest.raises(ClientError) as exc:
            p.send(Message("timed", b"x", delay=timedelta(seconds=5)))
    assert isinstance(exc.value.__cause__, BrokerResponseError)
    assert exc.value.__cause__.code == ResponseCode.SYSTEM_ERROR
    assert "timer message is not enabled" in exc.value.__cause__.remark


@pytest.mark.parametrize("props, remark", [
    ({"TIMER_DELAY_MS": "²"}, "must be integers"),
    ({"TIMER_DELAY_SEC": "1_000"}, "must be integers"),
    ({"TIMER_DELIVER_MS": "99999999999999999999999"}, "must be integers"),
    ({"TIMER_DELAY_SEC": "10", "TIMER_DEL_UNIQKEY": "x"}, "not supported"),
])
def test_timer_properties_the_broker_cannot_read_are_refused(empty_cluster: Cluster, props: dict[str, str],
                                                             remark: str):
    start(empty_cluster)
    code, text = raw_send(empty_cluster, props)
    assert code == ResponseCode.MESSAGE_ILLEGAL and remark in text
    assert empty_cluster.loop.run(_queue_end(empty_cluster.brokers[0], TIMER_TOPIC, 0)) == 0


def test_a_transactional_message_with_an_impossible_timer_is_refused_when_sent(empty_cluster: Cluster):
    start(empty_cluster, store_timer_max_delay_sec=60)
    code, text = raw_send(empty_cluster, {"TIMER_DELAY_SEC": "120", "TRAN_MSG": "true", "PGROUP": "timer-tx-pg"})
    assert code == ResponseCode.MESSAGE_ILLEGAL and "max delay" in text
    assert empty_cluster.loop.run(_queue_end(empty_cluster.brokers[0], "RMQ_SYS_TRANS_HALF_TOPIC", 0)) == 0


def raw_send(cluster: Cluster, props: dict[str, str]) -> tuple[int, str]:
    """SEND_MESSAGE_V2 to topic ``timed`` with ``props`` as they are."""
    body_props = "\x02".join(f"{k}\x01{v}" for k, v in props.items())

    async def go() -> tuple[int, str]:
        client = RemotingClient()
        try:
            req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
                "a": "raw-pg", "b": "timed", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                "g": str(int(time.time() * 1000)), "h": "0", "i": body_props, "j": "0", "k": "false"}, b"raw")
            resp = await client.invoke(cluster.brokers[0].broker_addr, req, 5000)
            return resp.code, resp.remark or ""
        finally:
            await client.close()

    return asyncio.run(go())
