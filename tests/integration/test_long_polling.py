"""Long polling: a held pull is answered as soon as a message lands, at its suspend timeout otherwise, and an
idle broker holding pulls does no work.

What ended each held pull is recorded in the broker (``Wakes``): the tests assert the arrival of the message
answered it, not its timer. Latencies are measured from just before the send to the receipt (an upper bound: it
includes the send's own round trip) and printed; the bound on them is loose on purpose (the suite runs on busy
machines), and still far below the suspend timeouts a timer-answered pull would take.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import struct
import threading
import time
from pathlib import Path

import pytest

from sluice import ConsumeStatus, Message, Producer, PushConsumer
from sluice.common.message_codec import decode_records
from sluice.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from sluice.remoting.codec import encode_command_bytes
from tests.integration.helpers import wait_until

# An arrival answers a held pull at once (a few ms on an idle machine); its timer would answer it only at the
# suspend timeout (15 s for the push consumer, 20 s for the raw pulls here).
LATENCY_LIMIT = 1.0
SENDS = 10
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4


# == raw protocol helpers =============================================================================
def pull_request(group: str, topic: str, queue_id: int, offset: int, suspend_ms: int,
                 sys_flag: int = FLAG_SUSPEND | FLAG_SUBSCRIPTION) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": str(sys_flag), "commitOffset": "-1",
        "suspendTimeoutMillis": str(suspend_ms), "subscription": "*", "subVersion": "0"})


def send_request(topic: str, queue_id: int, body: bytes) -> RemotingCommand:
    """SEND_MESSAGE_V2 as a Java producer writes it (one-letter keys)."""
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
        "a": "lp-raw-producers", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}, body)


def create_topic_request(topic: str, queues: int, perm: int = 6) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": str(perm), "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})




def assert_fast(latencies: list[float], what: str) -> None:
    shown = ", ".join(f"{x * 1000:.1f}" for x in latencies)
    print(f"{what}: {shown} ms")
    assert max(latencies) < LATENCY_LIMIT, f"{what}: a delivery took over {LATENCY_LIMIT} s ({shown} ms)"


class Wakes:
    """What ended each pull ``broker`` held, per topic: True when a message's arrival answered it, False when
    its timer did (recorded on the broker's loop)."""

    def __init__(self, broker) -> None:
        self.ends: list[tuple[str, bool]] = []
        service = broker.hold_service
        hold = service.hold

        def recording_hold(topic, queue_id, offset, timeout, wake, arrived=None):
            def woken(by_arrival: bool) -> None:
                self.ends.append((topic, by_arrival))
                wake(by_arrival)

            return hold(topic, queue_id, offset, timeout, woken, arrived)

        service.hold = recording_hold

    def of(self, topic: str) -> list[bool]:
        return [by_arrival for t, by_arrival in list(self.ends) if t == topic]


def held_queues(cluster, broker, topic: str) -> dict[int, int]:
    """Queue id → pulls ``broker`` holds on that queue of ``topic`` (read on the servers' loop)."""

    async def held() -> dict[int, int]:
        return broker.hold_service.held_queues(topic)

    return cluster.loop.run(held())


# == tests ============================================================================================
def test_waiting_push_consumer_gets_each_new_message_as_soon_as_it_lands(cluster):
    broker = cluster.brokers[0]
    wakes = Wakes(broker)
    received: dict[bytes, tuple[float, int]] = {}
    arrived = threading.Condition()

    with Producer("lp-producers", namesrv=cluster.namesrv_addr) as producer:
        producer.send(Message("lp-push", b"warm-up"))  # creates the topic (4 queues)
        consumer = PushConsumer("lp-push-consumers", namesrv=cluster.namesrv_addr, consume_from="first")
        consumer.subscribe("lp-push", "*")

        @consumer.listener
        def handle(msgs):
            now = time.time()
            with arrived:
                for m in msgs:
                    received[m.body] = (now, m.store_timestamp)
                arrived.notify_all()
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.start()
        try:
            with arrived:
                assert arrived.wait_for(lambda: b"warm-up" in received, 60)
            # Every queue of the topic and of the retry topic has a pull waiting in the broker.
            wait_until(lambda: broker.hold_service.count >= 5, 60, "the consumer's pulls to be held")

            latencies = []
            store_to_receipt = []
            for i in range(SENDS):
                body = b"m-%d" % i
                t0 = time.time()
                producer.send(Message("lp-push", body))
                with arrived:
                    assert arrived.wait_for(lambda body=body: body in received, 60), f"{body!r} never arrived"
                got_at, stored_at = received[body]
                latencies.append(got_at - t0)
                store_to_receipt.append(got_at - stored_at / 1000)
                # The consumer's next pull of that queue is held again before the next send.
                wait_until(lambda: all(held_queues(cluster, broker, "lp-push").get(q) for q in range(4)), 60,
                           "a held pull on every queue")
        finally:
            consumer.shutdown()

    # Each send was delivered by the held pull its arrival answered, not by a timer or a new pull.
    assert wakes.of("lp-push").count(True) == SENDS, wakes.of("lp-push")
    assert_fast(latencies, "send → push consumer's listener")
    # The store timestamp has millisecond resolution and the same clock: the same bound holds from it.
    assert statistics.median(store_to_receipt) < LATENCY_LIMIT


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_held_raw_pull_is_answered_as_soon_as_a_send_lands(empty_cluster, flush):
    broker = empty_cluster.start_broker("broker-a", store_flush_disk_type=flush)
    wakes = Wakes(broker)
    assert broker.store.sync_flush == (flush == "SYNC_FLUSH")  # sync: the wake-up comes after the fsync
    addr = broker.broker_addr
    topic = "lp-raw"

    async def scenario() -> tuple[list[float], list[RemotingCommand]]:
        client = RemotingClient()
        try:
            assert (await client.invoke(addr, create_topic_request(topic, 1))).code == ResponseCode.SUCCESS
            latencies, answers = [], []
            for i in range(SENDS):
                pull = asyncio.ensure_future(client.invoke(addr, pull_request("lp-raw-group", topic, 0, i, 20_000),
                                                           30_000))
                deadline = time.monotonic() + 60
                while broker.hold_service.count < 1:  # read across threads: an int, good enough to poll
                    assert time.monotonic() < deadline, "the pull was never held"
                    await asyncio.sleep(0.002)
                assert not pull.done(), "a pull past the end of the queue was answered without waiting"
                t0 = time.monotonic()
                sent = await client.invoke(addr, send_request(topic, 0, b"raw-%d" % i))
                assert sent.code == ResponseCode.SUCCESS, sent.remark
                answer = await asyncio.wait_for(pull, 30)
                latencies.append(time.monotonic() - t0)
                answers.append(answer)
            return latencies, answers
        finally:
            await client.close()

    latencies, answers = asyncio.run(scenario())
    for i, a in enumerate(answers):
        assert a.code == ResponseCode.SUCCESS, (a.code, a.remark)
        assert [m.body for m in decode_records(a.body)] == [b"raw-%d" % i]
        assert a.ext_fields["nextBeginOffset"] == str(i + 1)
    assert wakes.of(topic) == [True] * SENDS  # each answered by the send's arrival, none by its timer
    assert_fast(latencies, "send → held PULL_MESSAGE answered")


def test_message_sent_right_behind_a_pull_wakes_it(cluster):
    """A pull and a send in one TCP read: the pull finds nothing, the send is stored before the pull's task has
    registered its wait. The wait must still see the message (not sleep through the suspend timeout)."""
    addr = cluster.brokers[0].broker_addr
    host, port = addr.split(":")
    wakes = Wakes(cluster.brokers[0])

    async def create() -> None:
        client = RemotingClient()
        try:
            assert (await client.invoke(addr, create_topic_request("lp-race", 1))).code == ResponseCode.SUCCESS
        finally:
            await client.close()

    asyncio.run(create())
    for i in range(3):
        pull = pull_request("lp-race-group", "lp-race", 0, i, 20_000)
        send = send_request("lp-race", 0, b"race-%d" % i)
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            t0 = time.monotonic()
            sock.sendall(encode_command_bytes(pull) + encode_command_bytes(send))
            answers = {}
            while pull.opaque not in answers:
                length, word = struct.unpack(">II", sock.recv(8, socket.MSG_WAITALL))
                rest = sock.recv(length - 4, socket.MSG_WAITALL)
                header = json.loads(rest[:word & 0xFFFFFF])
                answers[header["opaque"]] = (time.monotonic() - t0, header, rest[word & 0xFFFFFF:])
        took, header, body = answers[pull.opaque]
        assert header["code"] == ResponseCode.SUCCESS, header
        assert [m.body for m in decode_records(body)] == [b"race-%d" % i]
        # Held or not (the send may land first), it was never left to its timer.
        assert all(wakes.of("lp-race")), "a held pull slept through a message that arrived as it was held"
        assert took < 10, f"the pull slept {took:.1f} s (of its 20 s suspend) through a message"


def test_held_pull_without_message_is_answered_pull_not_found_at_its_suspend_timeout(cluster):
    addr = cluster.brokers[0].broker_addr
    topic = "lp-timeout"
    wakes = Wakes(cluster.brokers[0])

    async def scenario() -> list[tuple[int, float, RemotingCommand]]:
        client = RemotingClient()
        try:
            assert (await client.invoke(addr, create_topic_request(topic, 2))).code == ResponseCode.SUCCESS
            assert (await client.invoke(addr, send_request(topic, 1, b"one"))).code == ResponseCode.SUCCESS

            async def timed(queue_id: int, offset: int, suspend_ms: int) -> tuple[int, float, RemotingCommand]:
                t0 = time.monotonic()
                resp = await client.invoke(addr, pull_request("lp-timeout-group", topic, queue_id, offset,
                                                              suspend_ms), 30_000)
                return suspend_ms, time.monotonic() - t0, resp

            # An empty queue at offset 0, and the end of a queue holding one message; two timeouts at once.
            return await asyncio.gather(timed(0, 0, 400), timed(1, 1, 800), timed(1, 1, 400))
        finally:
            await client.close()

    for suspend_ms, took, resp in asyncio.run(scenario()):
        assert resp.code == ResponseCode.PULL_NOT_FOUND, (resp.code, resp.remark)
        # Not before its own timeout; after it by no more than a busy machine's delay.
        assert suspend_ms / 1000 - 0.01 <= took < suspend_ms / 1000 + 10, (suspend_ms, took)
        e = resp.ext_fields
        assert {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"} <= set(e)
        assert e["nextBeginOffset"] in ("0", "1") and not resp.body
    assert wakes.of(topic) == [False] * 3  # each by its timer


def test_held_pull_of_a_client_that_disconnects_is_forgotten(cluster):
    broker = cluster.brokers[0]
    addr = broker.broker_addr

    async def scenario() -> None:
        client = RemotingClient()
        assert (await client.invoke(addr, create_topic_request("lp-gone", 2))).code == ResponseCode.SUCCESS
        pulls = [asyncio.ensure_future(client.invoke(addr, pull_request("lp-gone-group", "lp-gone", q, 0, 20_000),
                                                     30_000)) for q in range(2)]
        deadline = time.monotonic() + 60
        while broker.hold_service.count < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        await client.close()
        await asyncio.gather(*pulls, return_exceptions=True)

    asyncio.run(scenario())
    # Well before their 20 s suspend timeout: dropped with the connection.
    wait_until(lambda: broker.hold_service.count == 0, 10, "the held pulls to be dropped")


def test_stopping_the_broker_answers_its_held_pulls_at_once(cluster):
    broker = cluster.brokers[0]
    addr = broker.broker_addr

    async def scenario() -> list[tuple[float, RemotingCommand]]:
        client = RemotingClient()
        try:
            assert (await client.invoke(addr, create_topic_request("lp-stop", 2))).code == ResponseCode.SUCCESS

            async def timed(queue_id: int) -> tuple[float, RemotingCommand]:
                resp = await client.invoke(addr, pull_request("lp-stop-group", "lp-stop", queue_id, 0, 20_000),
                                           30_000)
                return time.monotonic(), resp

            pulls = [asyncio.ensure_future(timed(q)) for q in range(2)]
            deadline = time.monotonic() + 60
            while broker.hold_service.count < 2:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.005)
            t0 = time.monotonic()
            await asyncio.to_thread(cluster.stop_broker, broker)
            return [(t - t0, r) for t, r in await asyncio.wait_for(asyncio.gather(*pulls), 30)]
        finally:
            await client.close()

    for took, resp in asyncio.run(scenario()):
        # Answered by the stop, well before the pulls' 20 s suspend timeout.
        assert resp.code == ResponseCode.PULL_NOT_FOUND and took < 10, (resp.code, took)


IDLE_WINDOWS = 5
IDLE_CPU_SHARE = 0.05


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat (fields 14 and 15, in clock ticks)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_broker_holding_pulls_does_not_spin(empty_cluster, spawn_broker, tmp_path):
    config = tmp_path / "small-store.toml"
    config.write_text("[store]\nmapped_file_size_commit_log = 8388608\nmapped_file_size_consume_queue = 400000\n"
                      "max_hash_slot_num = 20000\nmax_index_num = 80000\n")
    proc = spawn_broker(empty_cluster.namesrv_addr, "broker-idle", "--config", str(config))
    addr = proc.addr
    topic, queues, groups = "lp-idle", 8, 4
    held_count = queues * groups

    async def scenario(consumer: PushConsumer, expect_held: int) -> tuple[float, float, int, list[RemotingCommand]]:
        client = RemotingClient()
        try:
            assert (await client.invoke(addr, create_topic_request(topic, queues))).code == ResponseCode.SUCCESS
            deadline = time.monotonic() + 60
            while not (await client.invoke(empty_cluster.namesrv_addr, RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))).body:
                assert time.monotonic() < deadline, f"{topic} never got a route"
                await asyncio.sleep(0.02)  # the broker registers the new topic with the name server at once
            await asyncio.to_thread(consumer.start)
            pulls = [asyncio.ensure_future(client.invoke(addr, pull_request(f"lp-idle-{g}", topic, q, 0, 20_000),
                                                         30_000))
                     for g in range(groups) for q in range(queues)]

            async def held() -> int:
                info = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
                return int(json.loads(info.body)["table"]["heldPulls"])

            deadline = time.monotonic() + 60
            while (n := await held()) < expect_held:
                assert time.monotonic() < deadline, f"only {n} of {expect_held} pulls are held"
                await asyncio.sleep(0.02)
            # One-second windows, the quietest counts: start-up work (first flushes, registration) may spill
            # into the first on a busy machine, while a broker spinning on its held pulls is busy in every one.
            quietest = None
            for _ in range(IDLE_WINDOWS):
                cpu0, t0 = _cpu_seconds(proc.proc.pid), time.monotonic()
                await asyncio.sleep(1.0)
                cpu1, t1 = _cpu_seconds(proc.proc.pid), time.monotonic()
                if quietest is None or (cpu1 - cpu0) / (t1 - t0) < quietest[0] / quietest[1]:
                    quietest = (cpu1 - cpu0, t1 - t0)
                if quietest[0] / quietest[1] < IDLE_CPU_SHARE:
                    break
            assert quietest is not None
            answered_while_idle = sum(p.done() for p in pulls)
            # Still held, and still alive: one message wakes the pull of every group on its queue.
            assert await held() == expect_held
            assert (await client.invoke(addr, send_request(topic, 3, b"wake"))).code == ResponseCode.SUCCESS
            woken = [r for r in await asyncio.wait_for(asyncio.gather(*pulls[3::queues]), 30)]
            for p in pulls:
                p.cancel()
            return quietest[0], quietest[1], answered_while_idle, woken
        finally:
            await client.close()

    # A push consumer re-pulls the moment a pull is answered: a broker that did not hold them would spin with it.
    consumer = PushConsumer("lp-idle-push", namesrv=empty_cluster.namesrv_addr, consume_from="first")
    consumer.subscribe(topic, "*")
    consumer.listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    consumer_pulls = queues + 1  # and the group's retry queue
    try:
        cpu, wall, answered, woken = asyncio.run(scenario(consumer, held_count + consumer_pulls))
    finally:
        consumer.shutdown()
    assert answered == 0, f"{answered} held pulls were answered while nothing was sent"
    assert cpu / wall < IDLE_CPU_SHARE, \
        f"the idle broker used {cpu / wall:.1%} of a core holding {held_count} pulls"
    assert [w.code for w in woken] == [ResponseCode.SUCCESS] * groups
