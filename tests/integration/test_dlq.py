"""``sluice dlq``: a group's dead letters listed, and re-sent at a rate, once each, also across an interruption."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sluice.aio import Producer, PullConsumer, PushConsumer
from sluice.client.admin import Admin
from sluice.client.message import ConsumeStatus, Message
from tests.conftest import Cluster
from tests.integration.test_cli import fails, ok

TOPIC, GROUP, COUNT = "dlq-orders", "dlq-billing", 1000


def dead_letters_in(cluster: Cluster, topic: str, group: str, count: int) -> None:
    """``count`` messages sent to ``topic`` that ``group`` gives up on at once (no retries): into its DLQ."""

    async def go() -> None:
        consumer = PushConsumer(group, cluster.namesrv_addr, consume_from="first", max_reconsume_times=0)
        consumer.subscribe(topic)
        consumer.register_listener(lambda msgs: ConsumeStatus.RECONSUME_LATER)
        await consumer.start()
        try:
            async with Producer("dlq-pg", cluster.namesrv_addr) as producer:
                await asyncio.gather(*(producer.send(Message(topic, b"order-%04d" % i, keys=[f"k{i}"],
                                                             properties={"region": "eu"}))
                                       for i in range(count)))
            async with Admin(cluster.namesrv_addr) as admin, asyncio.timeout(120):
                while True:
                    try:
                        if sum(q.messages for q in await admin.topic_status(f"%DLQ%{group}")) >= count:
                            return
                    except Exception:  # (the DLQ topic appears with the first dead letter)
                        pass
                    await asyncio.sleep(0.1)
        finally:
            await consumer.shutdown()

    asyncio.run(go())


def test_dead_letters_are_listed_and_resent_once_each_at_the_rate_across_an_interruption(
        empty_cluster: Cluster, tmp_path: Path, capsys) -> None:
    cluster = empty_cluster
    cluster.start_broker("broker-a")
    cluster.create_topic(TOPIC, 4)
    dead_letters_in(cluster, TOPIC, GROUP, COUNT)
    ns = cluster.namesrv_addr

    listed = json.loads(ok(capsys, "dlq", "list", GROUP, "--namesrv", ns, "--json"))
    assert [(s["topic"], s["messages"], s["maxFailures"]) for s in listed] == [(TOPIC, COUNT, 1)]  # one delivery
    assert listed[0]["firstTimestamp"] <= listed[0]["lastTimestamp"]
    each = json.loads(ok(capsys, "dlq", "list", GROUP, "--namesrv", ns, "--messages", "--json"))
    assert len(each) == COUNT and {e["originalTopic"] for e in each} == {TOPIC}

    # Re-sent at 200 a second, interrupted partway (Ctrl-C), then resumed by the same command.
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "sluice.cli.main", "dlq", "resend", GROUP, "--all", "--rate", "200",
            "--namesrv", ns, "--state", str(state)]
    record = state / f"{GROUP}.resent.jsonl"
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 60
        while not record.exists() or len(record.read_text().splitlines()) < 300:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=10)
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "Traceback" not in err
    first = len(record.read_text().splitlines())
    assert 300 <= first < COUNT
    times = [json.loads(line)["at"] for line in record.read_text().splitlines()]
    assert (len(times) - 1) / max((times[-1] - times[0]) / 1000, 1e-3) <= 200 * 1.1  # the rate held

    resumed = json.loads(ok(capsys, "dlq", "resend", GROUP, "--all", "--namesrv", ns, "--state", str(state),
                            "--json"))
    assert resumed["resent"] == COUNT - first and not resumed["interrupted"]
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(lines) == COUNT and len({r["position"] for r in lines}) == COUNT
    assert {r["topic"] for r in lines} == {f"%RETRY%{GROUP}"}
    # Once more: nothing new to send; another selection (its own cursor) finds them all in the record.
    assert json.loads(ok(capsys, "dlq", "resend", GROUP, "--all", "--namesrv", ns, "--state", str(state),
                         "--json"))["resent"] == 0
    again = json.loads(ok(capsys, "dlq", "resend", GROUP, "--since", "0", "--namesrv", ns, "--state", str(state),
                          "--json"))
    assert (again["resent"], again["skipped"]) == (0, COUNT)
    one = json.loads(ok(capsys, "dlq", "resend", GROUP, "--msg-id", lines[5]["dlqMsgId"], "--namesrv", ns,
                        "--state", str(state), "--json"))
    assert (one["resent"], one["skipped"]) == (0, 1)  # re-sent already: found, not sent twice

    # The group, healthy now, gets each once, as a message of its original topic with what its producer set.
    got: list[tuple[str, bytes, str | None, str | None]] = []

    async def consume() -> None:
        consumer = PushConsumer(GROUP, ns, consume_from="first")
        consumer.subscribe(TOPIC)
        consumer.register_listener(lambda msgs: got.extend((m.topic, m.body, m.properties.get("region"),
                                                            m.properties.get("DLQ_ORIGIN_MESSAGE_ID"))
                                                           for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)
        await consumer.start()
        try:
            async with Admin(ns) as admin, asyncio.timeout(120):
                while len(got) < COUNT or (await admin.group_progress(GROUP, f"%RETRY%{GROUP}")).total_lag:
                    await asyncio.sleep(0.1)
        finally:
            await consumer.shutdown()

    asyncio.run(consume())
    assert len(got) == COUNT
    assert sorted(b for _, b, _, _ in got) == [b"order-%04d" % i for i in range(COUNT)]
    assert {(t, r) for t, _, r, _ in got} == {(TOPIC, "eu")} and all(o for *_, o in got)


def test_a_resend_of_an_id_that_is_not_a_dead_letter_says_so_and_a_compressed_one_goes_out_whole(
        empty_cluster: Cluster, tmp_path: Path, capsys):
    cluster = empty_cluster
    cluster.start_broker("broker-a")
    cluster.create_topic("dlq-few", 1)
    dead_letters_in(cluster, "dlq-few", "dlq-few-g", 2)
    cluster.create_topic("dlq-big", 1)
    big = bytes(range(256)) * 40  # 10 KiB: the producer compresses it, and the dead letter keeps it compressed

    async def big_dead_letter() -> None:
        consumer = PushConsumer("dlq-big-g", cluster.namesrv_addr, consume_from="first", max_reconsume_times=0)
        consumer.subscribe("dlq-big")
        consumer.register_listener(lambda msgs: ConsumeStatus.RECONSUME_LATER)
        await consumer.start()
        try:
            async with Producer("dlq-big-pg", cluster.namesrv_addr) as producer:
                await producer.send(Message("dlq-big", big))
            async with Admin(cluster.namesrv_addr) as admin, asyncio.timeout(60):
                while True:
                    try:
                        if sum(q.messages for q in await admin.topic_status("%DLQ%dlq-big-g")):
                            return
                    except Exception:
                        pass
                    await asyncio.sleep(0.1)
        finally:
            await consumer.shutdown()

    asyncio.run(big_dead_letter())
    cluster.create_topic("dlq-big-out", 1)
    sent = json.loads(ok(capsys, "dlq", "resend", "dlq-big-g", "--all", "--to-topic", "dlq-big-out", "--namesrv",
                         cluster.namesrv_addr, "--state", str(tmp_path), "--json"))
    assert (sent["resent"], sent["failed"]) == (1, 0)

    async def read_back() -> bytes:
        consumer = PullConsumer("dlq-big-reader", cluster.namesrv_addr, consume_from="first")
        consumer.subscribe("dlq-big-out")
        await consumer.start()
        try:
            async with asyncio.timeout(30):
                while True:
                    msgs = await consumer.poll(1.0)
                    if msgs:
                        return bytes(msgs[0].body)
        finally:
            await consumer.shutdown()

    assert asyncio.run(read_back()) == big
    err = fails(capsys, "dlq", "resend", "dlq-few-g", "--msg-id", "NOSUCHID", "--namesrv", cluster.namesrv_addr,
                "--state", str(tmp_path))
    assert err == "sluice: no dead letter of group 'dlq-few-g' has the id(s) NOSUCHID"
    assert fails(capsys, "dlq", "list", "never-failed-g", "--namesrv", cluster.namesrv_addr) == \
        "sluice: consumer group 'never-failed-g' has no dead letters (no topic %DLQ%never-failed-g)"


def test_deleting_a_group_keeps_its_dead_letters_unless_asked(empty_cluster: Cluster, capsys) -> None:
    cluster = empty_cluster
    cluster.start_broker("broker-a")
    cluster.create_topic("dlq-del-t", 1)
    dead_letters_in(cluster, "dlq-del-t", "dlq-del-g", 3)
    ns = cluster.namesrv_addr
    said = ok(capsys, "group", "delete", "dlq-del-g", "--namesrv", ns)
    assert "kept %DLQ%dlq-del-g (3 dead letter(s))" in said
    assert [s["messages"] for s in json.loads(ok(capsys, "dlq", "list", "dlq-del-g", "--namesrv", ns,
                                                  "--json"))] == [3]
    said = ok(capsys, "group", "delete", "dlq-del-g", "--delete-dead-letters", "--namesrv", ns)
    assert "deleted %DLQ%dlq-del-g with its 3 dead letter(s)" in said
    assert "has no dead letters" in fails(capsys, "dlq", "list", "dlq-del-g", "--namesrv", ns)
