"""The operator's verbs named after mqadmin's, against a real broker: status, settings, replication, connections,
group creation, update, deletion, offsets skipped and cloned, a topic's permission, messages read without a group."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import sluice
from sluice import ConsumeStatus
from tests.conftest import Cluster
from tests.integration.test_cli import fails, ok


def test_a_brokers_status_and_settings_are_read_and_a_runtime_setting_changed(cluster: Cluster, capsys):
    ns = cluster.namesrv_addr
    status = json.loads(ok(capsys, "cluster", "broker-status", "broker-a", "--namesrv", ns, "--json"))
    assert status["brokerActive"] == "true" and "putTps" in status
    config = json.loads(ok(capsys, "cluster", "broker-config", "broker-a", "--namesrv", ns, "--json"))
    assert config["brokerName"] == "broker-a"
    assert "fileReservedTime = 48 on broker-a" in ok(capsys, "cluster", "broker-config-set", "broker-a",
                                                      "fileReservedTime", "48", "--namesrv", ns)
    assert json.loads(ok(capsys, "cluster", "broker-config", "broker-a", "--namesrv", ns, "--json"))[
        "fileReservedTime"] == "48"
    ok(capsys, "cluster", "broker-config-set", "broker-a", "fileReservedTime", "72", "--namesrv", ns)  # (shared)
    err = fails(capsys, "cluster", "broker-config-set", "broker-a", "listenPort", "1", "--namesrv", ns)
    assert "listenPort cannot be changed while the broker runs" in err
    assert "no broker named 'broker-z'" in fails(capsys, "cluster", "broker-status", "broker-z", "--namesrv", ns)
    ha = json.loads(ok(capsys, "cluster", "ha-status", "--namesrv", ns, "--json"))
    assert ha["broker-a"]["master"] is True and ha["broker-a"]["haConnectionInfo"] == []
    # Its master terms as its epoch file holds them, the last one open (Long.MAX_VALUE, as RocketMQ's).
    broker = cluster.brokers[0]
    epochs = json.loads(ok(capsys, "cluster", "epochs", "--namesrv", ns, "--json"))[broker.broker_addr]
    assert (epochs["brokerName"], epochs["brokerId"]) == ("broker-a", 0)
    assert [(e["epoch"], e["startOffset"]) for e in epochs["epochList"]] == [tuple(e) for e in broker.epochs.entries]
    assert epochs["epochList"][-1]["endOffset"] == (1 << 63) - 1 and epochs["maxOffset"] >= 0
    table = ok(capsys, "cluster", "epochs", "broker-a", "--namesrv", ns)
    assert str(broker.epochs.last_epoch) in table and "(open)" in table


def test_a_groups_connections_are_listed_and_the_group_deleted(cluster: Cluster, capsys):
    ns = cluster.namesrv_addr
    cluster.create_topic("ops-cli-t", 2)
    with sluice.Producer("ops-cli-pg", namesrv=ns) as producer:
        producer.send(sluice.Message("ops-cli-t", b"x"))
        consumer = sluice.PushConsumer("ops-cli-g", namesrv=ns, consume_from="first")
        consumer.subscribe("ops-cli-t")
        consumer.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
        consumer.start()
        try:
            conns = json.loads(ok(capsys, "group", "connections", "ops-cli-g", "--namesrv", ns, "--json"))
            assert [c["clientId"] for c in conns["connections"]] == [consumer.aio.client.client_id]
            assert "ops-cli-t" in conns["subscriptions"] and conns["messageModel"] == "CLUSTERING"
            producers = json.loads(ok(capsys, "producer", "connections", "ops-cli-pg", "--namesrv", ns, "--json"))
            assert len(producers) == 1 and producers[0]["broker"] == "broker-a"
            assert producers[0]["language"] == "PYTHON"
        finally:
            consumer.shutdown()
    topics = json.loads(ok(capsys, "topic", "list", "--namesrv", ns, "--json"))
    assert "%RETRY%ops-cli-g" in topics
    assert "deleted group ops-cli-g on broker-a" in ok(capsys, "group", "delete", "ops-cli-g", "--namesrv", ns)
    groups = json.loads(ok(capsys, "group", "list", "--namesrv", ns, "--json"))
    assert "ops-cli-g" not in {g["name"] for g in groups}
    assert "%RETRY%ops-cli-g" not in json.loads(ok(capsys, "topic", "list", "--namesrv", ns, "--json"))


def test_a_groups_offsets_are_reset_to_the_earliest_and_the_latest(cluster: Cluster, capsys):
    ns = cluster.namesrv_addr
    cluster.create_topic("ops-reset-t", 2)
    with sluice.Producer("ops-reset-pg", namesrv=ns) as producer:
        for i in range(6):
            producer.send(sluice.Message("ops-reset-t", b"m%d" % i))
    ok(capsys, "group", "delete", "ops-reset-g", "--namesrv", ns)  # (no such group yet: nothing to delete)
    consumer = sluice.PushConsumer("ops-reset-g", namesrv=ns, consume_from="first")  # (creates the group)
    consumer.subscribe("ops-reset-t")
    consumer.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    consumer.start()
    consumer.shutdown()
    latest = json.loads(ok(capsys, "group", "reset-offset", "ops-reset-g", "ops-reset-t", "--to", "latest",
                           "--namesrv", ns, "--json"))
    assert sum(latest.values()) == 6 and len(latest) == 2
    assert json.loads(ok(capsys, "group", "progress", "ops-reset-g", "--topic", "ops-reset-t", "--namesrv", ns,
                         "--json"))["totalLag"] == 0
    earliest = json.loads(ok(capsys, "group", "reset-offset", "ops-reset-g", "ops-reset-t", "--to", "earliest",
                             "--namesrv", ns, "--json"))
    assert set(earliest.values()) == {0}
    assert json.loads(ok(capsys, "group", "progress", "ops-reset-g", "--topic", "ops-reset-t", "--namesrv", ns,
                         "--json"))["totalLag"] == 6
    assert "time 'yesterday'" in fails(capsys, "group", "reset-offset", "ops-reset-g", "ops-reset-t", "--to",
                                       "yesterday", "--namesrv", ns)
    one = json.loads(ok(capsys, "group", "reset-offset", "ops-reset-g", "ops-reset-t", "--offset", "2", "--queue",
                        "1", "--namesrv", ns, "--json"))
    assert one == {"broker-a@ops-reset-t@1": 2}
    queues = json.loads(ok(capsys, "group", "progress", "ops-reset-g", "--topic", "ops-reset-t", "--namesrv", ns,
                           "--json"))["queues"]
    assert {q["queueId"]: q["consumerOffset"] for q in queues} == {0: 0, 1: 2}
    assert "not in consume queue range" in fails(capsys, "group", "reset-offset", "ops-reset-g", "ops-reset-t",
                                                 "--offset", "99", "--queue", "0", "--namesrv", ns)
    assert "--offset needs the queue" in fails(capsys, "group", "reset-offset", "ops-reset-g", "ops-reset-t",
                                               "--offset", "1", "--namesrv", ns)


def test_a_groups_settings_are_created_updated_skipped_and_cloned(cluster: Cluster, capsys):
    ns = cluster.namesrv_addr
    cluster.create_topic("ops-grp-t", 2)
    created = json.loads(ok(capsys, "group", "create", "ops-grp-g", "--retry-max-times", "3", "--namesrv", ns,
                            "--json"))
    assert (created["retryMaxTimes"], created["consumeEnable"], created["retryQueueNums"]) == (3, True, 1)
    updated = json.loads(ok(capsys, "group", "update", "ops-grp-g", "--consume-enable", "false", "--namesrv", ns,
                            "--json"))
    assert (updated["retryMaxTimes"], updated["consumeEnable"]) == (3, False)  # the others kept
    assert "no group 'ops-none'" in fails(capsys, "group", "update", "ops-none", "--orderly", "true", "--namesrv", ns)
    ok(capsys, "group", "update", "ops-grp-g", "--consume-enable", "true", "--namesrv", ns)

    with sluice.Producer("ops-grp-pg", namesrv=ns) as producer:
        for i in range(8):
            producer.send(sluice.Message("ops-grp-t", b"m%d" % i))
    consumer = sluice.PushConsumer("ops-grp-g", namesrv=ns, consume_from="first")
    consumer.subscribe("ops-grp-t")
    consumer.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    consumer.start()
    consumer.shutdown()  # (commits what it consumed: maybe all, maybe not yet)
    ok(capsys, "group", "reset-offset", "ops-grp-g", "ops-grp-t", "--to", "earliest", "--namesrv", ns)
    skipped = json.loads(ok(capsys, "group", "skip", "ops-grp-g", "ops-grp-t", "--namesrv", ns, "--json"))
    assert sum(skipped.values()) == 8
    assert json.loads(ok(capsys, "group", "progress", "ops-grp-g", "--topic", "ops-grp-t", "--namesrv", ns,
                         "--json"))["totalLag"] == 0

    cloned = json.loads(ok(capsys, "group", "clone", "ops-grp-g", "ops-grp-copy", "ops-grp-t", "--namesrv", ns,
                           "--json"))
    assert sum(cloned.values()) == 8 and len(cloned) == 2
    copy = json.loads(ok(capsys, "group", "progress", "ops-grp-copy", "--topic", "ops-grp-t", "--namesrv", ns,
                         "--json"))
    assert copy["totalLag"] == 0 and sum(q["consumerOffset"] for q in copy["queues"]) == 8


def test_a_topics_permission_is_changed_and_its_messages_read_without_a_group(cluster: Cluster, capsys):
    ns = cluster.namesrv_addr
    cluster.create_topic("ops-read-t", 2)
    with sluice.Producer("ops-read-pg", namesrv=ns) as producer:
        sent = [producer.send(sluice.Message("ops-read-t", b"body-%d" % i, tags="T", keys=[f"k{i}"]))
                for i in range(6)]
    first = sent[0]
    shown = json.loads(ok(capsys, "msg", "get-by-offset", "ops-read-t", "--broker", "broker-a", "--queue",
                          str(first.queue.queue_id), "--offset", str(first.queue_offset), "--namesrv", ns, "--json"))
    assert (shown["msgId"], shown["body"]) == (first.msg_id, "body-0")
    err = fails(capsys, "msg", "get-by-offset", "ops-read-t", "--broker", "broker-a", "--queue", "0", "--offset",
                "99", "--namesrv", ns)
    assert "no message at offset 99 of ops-read-t queue 0 on broker-a" in err

    lines = ok(capsys, "msg", "consume", "ops-read-t", "--namesrv", ns, "--json").splitlines()
    assert sorted(json.loads(line)["body"] for line in lines) == [f"body-{i}" for i in range(6)]
    two = ok(capsys, "msg", "consume", "ops-read-t", "--count", "2", "--namesrv", ns).splitlines()
    assert two[0].split()[:3] == ["STORE", "HOST", "QUEUE"] and len(two) == 3
    assert ok(capsys, "msg", "consume", "ops-read-t", "--from", "latest", "--namesrv", ns, "--json") == ""
    q0 = [json.loads(line) for line in ok(capsys, "msg", "consume", "ops-read-t", "--queue", "0", "--offset", "1",
                                          "--namesrv", ns, "--json").splitlines()]
    assert all(m["queueId"] == 0 and m["queueOffset"] >= 1 for m in q0)
    assert len(q0) == sum(1 for r in sent if r.queue.queue_id == 0) - 1

    assert "permission 4 on broker-a" in ok(capsys, "topic", "update-perm", "ops-read-t", "--perm", "R",
                                             "--namesrv", ns)
    route = json.loads(ok(capsys, "topic", "route", "ops-read-t", "--namesrv", ns, "--json"))
    assert {q["perm"] for q in route["queueDatas"]} == {4}
    readable = ok(capsys, "msg", "consume", "ops-read-t", "--namesrv", ns, "--json").splitlines()
    assert len(readable) == 6  # (a read-only topic is read as before)


def test_consume_follow_prints_messages_as_they_are_sent_until_interrupted(cluster: Cluster):
    ns = cluster.namesrv_addr
    cluster.create_topic("ops-follow-t", 2)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", "msg", "consume", "ops-follow-t", "--from",
                             "latest", "--follow", "--json", "--namesrv", ns], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        got: list[str] = []
        with sluice.Producer("ops-follow-pg", namesrv=ns) as producer:
            deadline = time.monotonic() + 60
            i = 0
            # (sent until the reader shows one: it starts at the end of the queues as it finds them)
            while not got and time.monotonic() < deadline:
                producer.send(sluice.Message("ops-follow-t", b"live-%d" % i))
                i += 1
                ready, _, _ = select.select([proc.stdout], [], [], 0.5)
                if ready:
                    got.append(json.loads(proc.stdout.readline())["body"])
            assert got and got[0].startswith("live-"), proc.stderr.read() if proc.poll() is not None else got
            producer.send(sluice.Message("ops-follow-t", b"after"))
            while "after" not in got and time.monotonic() < deadline:
                got.append(json.loads(proc.stdout.readline())["body"])
        assert "after" in got
        assert proc.poll() is None  # still following
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert proc.returncode in (0, 130)
