"""Push consumers deliver what producers send: exactly once per clustering group, to everyone when broadcasting,
without loss across rebalances, and failed messages come back (retry topic) or land in the dead-letter queue."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from sluice import ConsumeOrderlyStatus, ConsumeStatus, Message, MessageExt, Producer, PullConsumer, PushConsumer
from sluice.client import _loop
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.naming import dlq_topic
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode
from sluice.remoting.command import RemotingCommand
from tests.integration.helpers import FAST, committed_to_end, send_markers, wait_until

PULL_BATCH = 32  # the consumers' pull_batch_size (default)




def wait_committed(cluster, group: str, topic: str, timeout: float = 60) -> None:
    """Wait until ``group`` has committed every queue of ``topic`` up to its end (asked over the wire)."""

    async def go() -> None:
        remoting = RemotingClient()
        api = MQClientAPI(remoting, [cluster.namesrv_addr])
        try:
            route = await api.get_topic_route(topic)
            assert route is not None
            while True:
                behind = 0
                for mq in route.subscribe_queues(topic):
                    addr = next(b.broker_addrs[0] for b in route.broker_datas if b.broker_name == mq.broker_name)
                    behind += await api.get_max_offset(addr, mq) - await api.query_consumer_offset(addr, group, mq)
                if behind == 0:
                    return
                await asyncio.sleep(0.05)
        finally:
            await remoting.close()

    cluster.loop.run(asyncio.wait_for(go(), timeout), timeout + 5)




class Recorder:
    """A listener that records every delivered body (thread-safe), per consumer."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.bodies: Counter[bytes] = Counter()
        self.by_consumer: dict[str, Counter[bytes]] = {}
        self.uniq: Counter[str] = Counter()

    def listener(self, name: str) -> Callable[[list[MessageExt]], ConsumeStatus]:
        mine: Counter[bytes] = Counter()
        self.by_consumer[name] = mine

        def handle(msgs: list[MessageExt]) -> ConsumeStatus:
            with self.lock:
                for m in msgs:
                    self.bodies[m.body] += 1
                    mine[m.body] += 1
                    self.uniq[m.uniq_key or ""] += 1
            if self.delay:
                time.sleep(self.delay)
            return ConsumeStatus.CONSUME_SUCCESS

        return handle

    def distinct(self) -> int:
        with self.lock:
            return len(self.bodies)


@contextmanager
def consumers(n: int, group: str, topic: str, recorder: Recorder, **settings) -> Iterator[list[PushConsumer]]:
    started: list[PushConsumer] = []
    try:
        for i in range(n):
            c = PushConsumer(group, **settings)
            c.subscribe(topic)
            c.register_listener(recorder.listener(f"c{i}"))
            c.start()
            started.append(c)
        yield started
    finally:
        for c in started:
            c.shutdown()


def allocation_settled(cs: list[PushConsumer], topic: str, queues: int) -> bool:
    """Every queue of ``topic`` held by exactly one of ``cs``."""
    held = [mq for c in cs for mq in c.aio.process_queues if mq.topic == topic]
    return len(held) == queues and len(set(held)) == queues


def send_mixed(producer: Producer, topic: str, n: int) -> list[bytes]:
    """``n`` messages, a quarter each by send, send_async, send_oneway and send_batch (batches of 50)."""
    bodies = [f"m-{i}".encode() for i in range(n)]
    q = n // 4
    futures = []
    for i, body in enumerate(bodies[:q]):
        producer.send(Message(topic, body, keys=[f"k{i}"]))
    for body in bodies[q:2 * q]:
        futures.append(producer.send_async(Message(topic, body)))
    for body in bodies[2 * q:3 * q]:
        producer.send_oneway(Message(topic, body))
    rest = bodies[3 * q:]
    for i in range(0, len(rest), 50):
        r = producer.send_batch([Message(topic, b) for b in rest[i:i + 50]])
        assert r.status.name == "SEND_OK"
    for f in futures:
        assert f.result(10).status.name == "SEND_OK"
    return bodies


def test_clustering_group_of_three_consumes_each_message_exactly_once(cluster):
    topic, n = "delivery-clustering", 10_000
    cluster.create_topic(topic, 8)
    rec = Recorder()
    with consumers(3, "delivery-cg", topic, rec, namesrv=cluster.namesrv_addr, **FAST) as cs:
        wait_until(lambda: allocation_settled(cs, topic, 8), 60, "the three consumers to split the 8 queues")
        with Producer("delivery-pg", namesrv=cluster.namesrv_addr) as producer:
            bodies = send_mixed(producer, topic, n)
        wait_until(lambda: rec.distinct() >= n, 60, "every message to be consumed")
        # Consumers leaving hand their queues to the others: only committed messages are safe from coming again.
        wait_committed(cluster, "delivery-cg", topic)
        # Any duplicate would come before the end markers of the queues (and keep the commits from their ends).
        markers = send_markers(cluster.namesrv_addr, topic, 8)
        wait_until(lambda: markers <= set(rec.bodies), 60, "every queue's end marker to be consumed")
        wait_committed(cluster, "delivery-cg", topic)
    assert set(rec.bodies) == set(bodies) | markers
    dups = {b: k for b, k in rec.bodies.items() if k > 1}
    assert not dups, f"{len(dups)} messages consumed more than once, e.g. {list(dups.items())[:5]}"
    assert len(rec.uniq) == n + len(markers) and all(k == 1 for k in rec.uniq.values())
    assert all(rec.by_consumer[c] for c in rec.by_consumer), "every consumer got a share"


def test_broadcasting_consumers_each_get_every_message(cluster, tmp_path):
    topic, n = "delivery-broadcast", 3_000
    cluster.create_topic(topic, 8)
    recs = [Recorder() for _ in range(3)]
    started: list[PushConsumer] = []
    try:
        for i, rec in enumerate(recs):
            c = PushConsumer("delivery-bg", namesrv=cluster.namesrv_addr, message_model="broadcasting",
                             instance_name=f"bc-{i}", offset_store_dir=str(tmp_path / "offsets"), **FAST)
            c.subscribe(topic)
            c.register_listener(rec.listener(f"bc-{i}"))
            c.start()
            started.append(c)
        wait_until(lambda: all(len(c.aio.process_queues) == 8 for c in started), 60,
                   "each broadcasting consumer to hold all 8 queues")
        with Producer("delivery-pg", namesrv=cluster.namesrv_addr) as producer:
            bodies = send_mixed(producer, topic, n)
        wait_until(lambda: all(r.distinct() >= n for r in recs), 60, "every consumer to get every message")
    finally:
        for c in started:
            c.shutdown()
    for rec in recs:
        assert set(rec.bodies) == set(bodies)
        assert max(rec.bodies.values()) == 1
    # Each consumer kept its own offsets, locally: all of the topic's messages consumed.
    for i in range(3):
        [path] = (tmp_path / "offsets").glob(f"*@bc-{i}/delivery-bg/offsets.json")
        table = json.loads(path.read_text())["offsetTable"]
        assert sum(e["offset"] for e in table if e["topic"] == topic) == n


class Flow:
    """A producer thread sending ``m-<i>`` to ``topic`` as fast as it can until stopped."""

    def __init__(self, producer: Producer, topic: str, prefix: str = "m") -> None:
        self.producer, self.topic, self.prefix = producer, topic, prefix
        self.sent: list[bytes] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.run, name="flow", daemon=True)

    def run(self) -> None:
        try:
            i = 0
            while not self.stop.is_set():
                body = f"{self.prefix}-{i}".encode()
                self.producer.send(Message(self.topic, body))
                self.sent.append(body)
                i += 1
                if i % 20 == 0:
                    time.sleep(0.005)  # (pacing: a steady stream while the group changes, not a flood)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def __enter__(self) -> Flow:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        assert self.error is None, f"the producer failed: {self.error!r}"


def test_consumers_joining_and_leaving_rebalance_without_loss(cluster):
    topic, group = "delivery-rebalance", "delivery-rebalance-cg"
    cluster.create_topic(topic, 8)
    rec = Recorder(delay=0.002)  # listeners take a moment: hand-overs meet messages in flight
    settings = dict(namesrv=cluster.namesrv_addr, **FAST)

    def consumer(name: str) -> PushConsumer:
        c = PushConsumer(group, **settings)
        c.subscribe(topic)
        c.register_listener(rec.listener(name))
        return c.start()

    def consumed_by(name: str, at_least: int = 200) -> bool:
        with rec.lock:
            return len(rec.by_consumer.get(name, ())) >= at_least

    c1 = consumer("c1")
    live = [c1]
    try:
        wait_until(lambda: allocation_settled(live, topic, 8), 60, "c1 to hold the 8 queues")
        with Producer("delivery-pg", namesrv=cluster.namesrv_addr) as producer:
            with Flow(producer, topic) as flow:
                # Each change of the group comes while messages flow, once the newest member is consuming.
                wait_until(lambda: consumed_by("c1"), 60, "c1 to consume while messages flow")
                live.append(c2 := consumer("c2"))
                wait_until(lambda: consumed_by("c2"), 60, "c2 to take queues over and consume")
                live.append(consumer("c3"))
                wait_until(lambda: consumed_by("c3"), 60, "c3 to take queues over and consume")
                live.remove(c2)
                c2.shutdown()
                wait_until(lambda: members(cluster, group) == 2 and allocation_settled(live, topic, 8), 60,
                           "c1 and c3 alone in the group, splitting the 8 queues")
            sent = list(flow.sent)
            settled_at = len(rec.bodies)
            # Sent once the group has settled: these must arrive exactly once.
            tail = [f"tail-{i}".encode() for i in range(500)]
            for body in tail:
                producer.send(Message(topic, body))
        wait_until(lambda: rec.distinct() >= len(sent) + len(tail), 60, "every message to be consumed")
        wait_committed(cluster, group, topic)  # see the exactly-once test
        markers = send_markers(cluster.namesrv_addr, topic, 8)
        wait_until(lambda: markers <= set(rec.bodies), 60, "every queue's end marker to be consumed")
        wait_committed(cluster, group, topic)
    finally:
        for c in live:
            c.shutdown()
    assert all(rec.bodies[b] == 1 for b in markers)
    lost = set(sent) - set(rec.bodies)
    assert not lost, f"{len(lost)} of {len(sent)} messages lost, e.g. {sorted(lost)[:5]}"
    assert all(rec.bodies[b] == 1 for b in tail), "messages sent after the group settled came twice"
    assert all(rec.by_consumer[n] for n in ("c1", "c2", "c3"))
    dups = sum(k - 1 for k in rec.bodies.values())
    print(f"sent {len(sent)}, settled at {settled_at}, duplicates {dups}")
    # Only messages consumed but not yet committed when a queue changed hands come again: at most about one
    # pull batch for each of the (at most 3 x 8) queue hand-overs.
    assert dups <= 3 * 8 * PULL_BATCH, f"{dups} duplicates for {len(sent)} messages"


def members(cluster, group: str) -> int:
    """How many consumers of ``group`` the broker knows."""

    async def count() -> int:
        return len(cluster.brokers[0].consumer_manager.consumer_ids(group))

    return cluster.loop.run(count())


FAST_DELAYS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms 900ms 1s"


def test_reconsume_later_and_listener_errors_come_back_through_the_retry_topic(empty_cluster):
    cluster = empty_cluster
    cluster.start_broker("broker-a", message_delay_level=FAST_DELAYS)
    topic, group, n = "delivery-retry", "delivery-retry-cg", 100
    cluster.create_topic(topic, 4)
    lock = threading.Lock()
    first: dict[bytes, float] = {}
    again: dict[bytes, list[MessageExt]] = {}
    again_at: dict[bytes, float] = {}

    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        m = msgs[0]
        with lock:
            if m.reconsume_times == 0:
                assert m.body not in first, "a first delivery came twice"
                first[m.body] = time.monotonic()
            else:
                again.setdefault(m.body, []).append(m)
                again_at.setdefault(m.body, time.monotonic())
                return ConsumeStatus.CONSUME_SUCCESS
        if int(m.body.split(b"-")[1]) % 2:
            raise RuntimeError("this listener fails; the message must come back")
        return ConsumeStatus.RECONSUME_LATER

    c = PushConsumer(group, namesrv=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.register_listener(handle)
    c.start()
    try:
        with Producer("delivery-pg", namesrv=cluster.namesrv_addr) as producer:
            bodies = [f"r-{i}".encode() for i in range(n)]
            for b in bodies:
                producer.send(Message(topic, b, tags="t", keys=[b.decode()]))
        wait_until(lambda: len(again) >= n, 60, "every failed message to come back")
        # Everything pulled from the topic and the retry topic consumed: a second copy would have come by then.
        wait_until(lambda: committed_to_end(cluster, group, topic, 4) and
                   committed_to_end(cluster, group, f"%RETRY%{group}", 1), 60, "every offset committed")
    finally:
        c.shutdown()
    assert cluster.brokers[0].store.get_max_offset_in_queue(f"%RETRY%{group}", 0) == n  # each sent back once
    assert set(first) == set(again) == set(bodies)
    for body, copies in again.items():
        assert len(copies) == 1, f"{body!r} came back {len(copies)} times"
        m = copies[0]
        # Redelivered from %RETRY%<group>, shown under its own topic, with its tags and keys.
        assert m.topic == topic and m.reconsume_times == 1 and m.tags == "t" and m.keys == [body.decode()]
        assert m.properties.get("RETRY_TOPIC") == topic
        # Sent back with delay level 3 (300 ms here), not redelivered at once.
        assert again_at[body] - first[body] >= 0.25


def read_all(namesrv: str, topic: str, expected: int, timeout: float = 60) -> list[MessageExt]:
    """Every message of ``topic`` (read with an assigned PullConsumer) once ``expected`` are there."""
    reader = PullConsumer("delivery-reader", namesrv=namesrv, auto_commit=False, consume_from="first")
    reader.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                queues = reader.fetch_queues(topic)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        reader.assign(queues)
        for mq in queues:
            reader.seek(mq, 0)
        got: list[MessageExt] = []
        while len(got) < expected and time.monotonic() < deadline:
            got.extend(reader.poll(0.5))
        return got
    finally:
        reader.shutdown()


def test_messages_failing_max_reconsume_times_land_in_the_dead_letter_queue(empty_cluster):
    cluster = empty_cluster
    cluster.start_broker("broker-a", message_delay_level=FAST_DELAYS)
    topic, group, n, max_times = "delivery-dlq", "delivery-dlq-cg", 10, 2
    cluster.create_topic(topic, 2)
    lock = threading.Lock()
    deliveries: Counter[bytes] = Counter()
    times_seen: dict[bytes, list[int]] = {}

    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            for m in msgs:
                deliveries[m.body] += 1
                times_seen.setdefault(m.body, []).append(m.reconsume_times)
        return ConsumeStatus.RECONSUME_LATER

    c = PushConsumer(group, namesrv=cluster.namesrv_addr, max_reconsume_times=max_times, **FAST)
    c.subscribe(topic)
    c.register_listener(handle)
    c.start()
    try:
        with Producer("delivery-pg", namesrv=cluster.namesrv_addr) as producer:
            bodies = [f"d-{i}".encode() for i in range(n)]
            for b in bodies:
                producer.send(Message(topic, b, keys=[b.decode()]))
        dead = read_all(cluster.namesrv_addr, dlq_topic(group), n)
        # Nothing more may come after the dead-letter queue got them: everything pulled from the topic and the
        # retry topic is consumed, and each message went through the retry topic max_times times, no more.
        wait_until(lambda: committed_to_end(cluster, group, topic, 2) and
                   committed_to_end(cluster, group, f"%RETRY%{group}", 1), 60, "every offset committed")
    finally:
        c.shutdown()
    store = cluster.brokers[0].store
    assert store.get_max_offset_in_queue(f"%RETRY%{group}", 0) == n * max_times
    assert store.get_max_offset_in_queue(dlq_topic(group), 0) == n
    # The first delivery and max_times retries, then the dead-letter queue.
    assert {b: sorted(t) for b, t in times_seen.items()} == {b: list(range(max_times + 1)) for b in bodies}
    assert sorted(m.body for m in dead) == sorted(bodies)
    for m in dead:
        assert m.topic == dlq_topic(group)
        assert m.properties.get("RETRY_TOPIC") == topic
        assert m.keys == [m.body.decode()]


def committed_everything(cluster, group: str, topic: str, queues: int) -> bool:
    broker = cluster.brokers[0]

    async def check() -> bool:
        store = broker.store
        return all(store.consumer_offsets.query_offset(group, topic, q) == store.get_max_offset_in_queue(topic, q)
                   for q in range(queues))

    return cluster.loop.run(check())


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
def test_a_listener_answer_that_is_no_status_means_consume_again_with_one_log_line(empty_cluster, caplog, orderly):
    """A listener returning something else than its ConsumeStatus (here a string) must not stall its queue: the
    messages are consumed again, as after RECONSUME_LATER (orderly: a suspension), and one ERROR line says why."""
    cluster = empty_cluster
    cluster.start_broker("broker-a", message_delay_level=FAST_DELAYS)
    topic, group, n = f"no-status-{orderly}", f"no-status-cg-{orderly}", 10
    cluster.create_topic(topic, 2)
    lock = threading.Lock()
    calls: Counter[bytes] = Counter()

    def handle(msgs: list[MessageExt]) -> Any:
        with lock:
            first = calls[msgs[0].body] == 0
            calls.update(m.body for m in msgs)
        if first:
            return "ok"  # not a status
        return ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv=cluster.namesrv_addr, orderly=orderly,
                     **{**FAST, "suspend_current_queue_time_millis": 100})
    c.subscribe(topic)
    c.register_listener(handle)
    c.start()
    try:
        with Producer("no-status-pg", namesrv=cluster.namesrv_addr) as producer:
            bodies = [f"s-{i}".encode() for i in range(n)]
            for b in bodies:
                producer.send(Message(topic, b))
        wait_until(lambda: all(calls[b] >= 2 for b in bodies), 60, "every message consumed again")
        wait_until(lambda: committed_everything(cluster, group, topic, 2), 60, "every offset committed")
    finally:
        c.shutdown()
    lines = [r for r in caplog.records if "not a Consume" in r.getMessage()]
    assert lines and all(r.levelname == "ERROR" and "'ok'" in r.getMessage() for r in lines)
    assert len(lines) == n  # one per answer that was no status


def test_a_caught_up_consumer_reset_back_never_commits_past_what_it_consumed_again(cluster):
    """A reset to the start of a queue the consumer had read to its end: it reads the queue again, and its commits
    follow what it consumes again, never the end it had reached before (which would skip the rest at a crash)."""
    topic, group, n = "reset-back", "reset-back-cg", 100
    cluster.create_topic(topic, 1)
    broker = cluster.brokers[0]
    committed = lambda: cluster.loop.run(_query_offset(broker, group, topic))  # noqa: E731
    seen: list[int] = []
    release = threading.Event()
    reset_done = threading.Event()

    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            if reset_done.is_set() and m.queue_offset >= 40:
                release.wait(30)  # busy at offset 40 of the second reading
            seen.append(m.queue_offset)
        return ConsumeStatus.CONSUME_SUCCESS

    # Small pulls: the consumer's cache runs empty between them, when it commits "one past the largest offset
    # it ever held" — which must be of the second reading, not the first.
    c = PushConsumer(group, namesrv=cluster.namesrv_addr, pull_batch_size=2, pull_threshold_for_queue=2, **FAST)
    c.subscribe(topic)
    c.register_listener(handle)
    c.start()
    try:
        with Producer("reset-back-pg", namesrv=cluster.namesrv_addr) as producer:
            for i in range(n):
                producer.send(Message(topic, f"b-{i}".encode()))
        wait_until(lambda: committed() == n, 60, "the consumer at the end of the queue")
        reset_done.set()
        reset = cluster.loop.run(_reset_offsets(broker, group, topic, timestamp=0))
        assert reset.code == 0
        with Producer("reset-back-pg", namesrv=cluster.namesrv_addr) as producer:
            producer.send(Message(topic, b"poke"))  # wakes the pull the broker holds: its answer tells of the reset
        wait_until(lambda: seen.count(39) == 2, 60, "the queue read again up to offset 40")
        wait_until(lambda: 0 < committed() <= 40, 60, "a commit of the second reading")
        assert committed() <= 40  # not 100: only what was consumed again counts
        release.set()
        wait_until(lambda: committed() == n + 1, 60, "the end reached again")
    finally:
        release.set()
        c.shutdown()


async def _query_offset(broker, group: str, topic: str) -> int:
    return broker.store.consumer_offsets.query_offset(group, topic, 0)


async def _reset_offsets(broker, group: str, topic: str, timestamp: int):
    remoting = RemotingClient()
    try:
        return await remoting.invoke(broker.broker_addr, RemotingCommand.request(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": topic, "group": group, "timestamp": str(timestamp),
                                                        "isForce": "true"}), 5000)
    finally:
        await remoting.close()


def test_an_orderly_consumer_reset_while_busy_never_runs_two_listener_calls_on_one_queue(cluster):
    topic, group = "reset-orderly", "reset-orderly-cg"
    cluster.create_topic(topic, 1)
    broker = cluster.brokers[0]
    lock = threading.Lock()
    active = [0]
    most = [0]
    got: list[int] = []
    release = threading.Event()
    started_blocking = threading.Event()

    def handle(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            if msgs[0].queue_offset == 5 and not release.is_set():
                started_blocking.set()
                release.wait(30)
            got.extend(m.queue_offset for m in msgs)
        finally:
            with lock:
                active[0] -= 1
        return ConsumeOrderlyStatus.SUCCESS

    c = PushConsumer(group, namesrv=cluster.namesrv_addr, orderly=True, **FAST)
    c.subscribe(topic)
    c.register_listener(handle)
    c.start()
    try:
        with Producer("reset-orderly-pg", namesrv=cluster.namesrv_addr) as producer:
            for i in range(10):
                producer.send(Message(topic, f"o-{i}".encode()))
        assert started_blocking.wait(60)
        (mq,) = [m for m in c.aio.process_queues if m.topic == topic]
        busy = c.aio.process_queues[mq]

        async def restart_state() -> tuple[bool, bool]:  # read on the consumer's loop: one consistent state
            return busy.dropped, c.aio.process_queues.get(mq) is busy

        assert cluster.loop.run(_reset_offsets(broker, group, topic, timestamp=0)).code == 0
        with Producer("reset-orderly-pg", namesrv=cluster.namesrv_addr) as producer:
            producer.send(Message(topic, b"poke"))
        wait_until(lambda: _loop.run(restart_state())[0], 60, "the reset reaching the consumer")
        # The queue starts afresh (a new process queue, pulled from the new offset) only once the listener call
        # in progress is over: while it runs, the dropped one stays in place and nothing pulls the queue.
        assert _loop.run(restart_state()) == (True, True), "the queue started afresh under a running listener"
        release.set()
        wait_until(lambda: 10 in got, 60, "the queue read again to its end")
    finally:
        release.set()
        c.shutdown()
    assert most[0] == 1
    assert got[:6] == [0, 1, 2, 3, 4, 5] and got[6:] == list(range(11))  # the second reading in order, from 0


def test_a_listener_that_never_returns_lets_its_message_come_back_and_its_queue_move_on(empty_cluster):
    """RocketMQ's consumeTimeout (here 300 ms): the message the listener holds goes back for a retry, and the
    queue's offset passes it while the listener call still hangs."""
    cluster = empty_cluster
    cluster.start_broker("broker-a", message_delay_level=FAST_DELAYS)
    topic, group = "delivery-hang", "delivery-hang-cg"
    cluster.create_topic(topic, 1)
    release = threading.Event()
    returned = threading.Event()
    lock = threading.Lock()
    seen: list[tuple[bytes, int]] = []

    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        m = msgs[0]
        with lock:
            seen.append((m.body, m.reconsume_times))
        if m.body == b"hang" and m.reconsume_times == 0:
            release.wait(60)  # a listener stuck (a dead lock, a call that never returns)
            returned.set()
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv=cluster.namesrv_addr, consume_timeout_millis=300, **FAST)
    c.subscribe(topic)
    c.register_listener(handle)
    c.start()
    try:
        with Producer("delivery-hang-pg", namesrv=cluster.namesrv_addr) as producer:
            for body in (b"before", b"hang", b"after-1", b"after-2"):
                producer.send(Message(topic, body))
        wait_until(lambda: (b"hang", 1) in seen, 30, "the held message to come back through the retry topic")
        wait_until(lambda: committed_to_end(cluster, group, topic, 1), 30, "the queue's offset past the held one")
        assert not returned.is_set()  # the first listener call has not returned: the queue moved on without it
        assert {b for b, _ in seen} == {b"before", b"hang", b"after-1", b"after-2"}
    finally:
        release.set()
        c.shutdown()


def test_a_listener_call_under_way_at_shutdown_finishes_and_its_messages_are_not_delivered_again(cluster):
    topic, group = "delivery-shutdown", "delivery-shutdown-cg"
    cluster.create_topic(topic, 1)
    with Producer("delivery-shutdown-pg", namesrv=cluster.namesrv_addr) as producer:
        producer.send(Message(topic, b"slow"))
    entered, seen = threading.Event(), []

    def slow(msgs: list[MessageExt]) -> ConsumeStatus:
        seen.extend(m.body for m in msgs)
        entered.set()
        time.sleep(1.0)  # (still running when shutdown begins)
        return ConsumeStatus.CONSUME_SUCCESS

    first = PushConsumer(group, namesrv=cluster.namesrv_addr, **FAST)
    first.subscribe(topic)
    first.register_listener(slow)
    first.start()
    assert entered.wait(60), "the listener was never called"
    first.shutdown()  # while the listener sleeps: its call finishes, and its message's offset is committed
    assert seen == [b"slow"]
    with Producer("delivery-shutdown-pg", namesrv=cluster.namesrv_addr) as producer:
        producer.send(Message(topic, b"after"))
    rec = Recorder()
    with consumers(1, group, topic, rec, namesrv=cluster.namesrv_addr, **FAST):  # (FAST: from the first)
        wait_until(lambda: b"after" in rec.bodies, 60, "the message sent after the restart")
    assert b"slow" not in rec.bodies, "a message consumed before the shutdown was delivered again"
