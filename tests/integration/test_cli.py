"""``sluice topic|group|msg``: the operator commands against a real name server and broker(s).

Commands run in this process (``sluice.cli.main.main``) with captured output; one test runs ``sluice dev``
as a child process and drives it with the CLI as a user would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest

from sluice import MessageSelector
from sluice import PullConsumer as SyncPullConsumer
from sluice.aio import PullConsumer
from sluice.cli.main import main
from sluice.client.mq_client_api import MQClientAPI
from sluice.client.subscription import build_subscription
from sluice.common.errors import SluiceError
from sluice.proxy.protocol import SERVICE, pb
from sluice.remoting.client import RemotingClient
from tests.conftest import Cluster
from tests.integration.helpers import wait_until


def sluice(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``sluice argv...``; (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc, out, err = sluice(capsys, *argv)
    assert rc == 0, f"sluice {' '.join(argv)} failed ({rc}): {err}"
    return out


def fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run a command that must fail: exit code 1 and one readable line on stderr, no traceback."""
    rc, out, err = sluice(capsys, *argv)
    assert rc == 1, (rc, out, err)
    assert err.count("\n") == 1 and err.startswith("sluice: "), err
    assert "Traceback" not in err
    return err.strip()


def rows(out: str) -> list[list[str]]:
    """A printed table's rows (header first), split on runs of two or more spaces."""
    return [re.split(r"\s{2,}", line.strip()) for line in out.splitlines() if line.strip()]


def send(capsys: pytest.CaptureFixture[str], ns: str, topic: str, body: str, *extra: str) -> dict:
    out = ok(capsys, "msg", "send", topic, body, "--namesrv", ns, "--json", *extra)
    return json.loads(out.splitlines()[0])


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# == topics =========================================================================================
def test_topic_create_list_route_status_delete(cluster, capsys):
    ns = cluster.namesrv_addr
    broker = cluster.brokers[0]
    out = ok(capsys, "topic", "create", "cli-orders", "--queues", "4", "--namesrv", ns)
    assert "'cli-orders' created on broker-a" in out and "4 queues" in out and "RW" in out

    assert "cli-orders" in ok(capsys, "topic", "list", "--namesrv", ns).split()
    assert "cli-orders" in json.loads(ok(capsys, "topic", "list", "--json", "--namesrv", ns))

    table = rows(ok(capsys, "topic", "route", "cli-orders", "--namesrv", ns))
    assert table[0] == ["BROKER", "CLUSTER", "ID", "ADDRESS", "READ QUEUES", "WRITE QUEUES", "PERM"]
    assert table[1] == ["broker-a", "DefaultCluster", "0", broker.broker_addr, "4", "4", "RW-"]
    route = json.loads(ok(capsys, "topic", "route", "cli-orders", "--json", "--namesrv", ns))
    assert route["queueDatas"][0]["writeQueueNums"] == 4 and route["brokerDatas"][0]["brokerName"] == "broker-a"

    for i in range(6):
        send(capsys, ns, "cli-orders", f"m{i}")
    table = rows(ok(capsys, "topic", "status", "cli-orders", "--namesrv", ns))
    assert table[0] == ["BROKER", "QUEUE", "MIN OFFSET", "MAX OFFSET", "MESSAGES", "LAST UPDATE"]
    assert [r[1] for r in table[1:5]] == ["0", "1", "2", "3"]
    assert sum(int(r[3]) for r in table[1:5]) == 6
    assert table[-1] == ["total: 4 queues, 6 messages"]
    status = json.loads(ok(capsys, "topic", "status", "cli-orders", "--json", "--namesrv", ns))
    assert status["totalMessages"] == 6 and len(status["queues"]) == 4
    assert all(q["lastUpdateTimestamp"] > 0 for q in status["queues"] if q["maxOffset"] > 0)

    # Update: read-only, 2 queues.
    ok(capsys, "topic", "create", "cli-orders", "--queues", "2", "--perm", "R", "--namesrv", ns)
    assert rows(ok(capsys, "topic", "route", "cli-orders", "--namesrv", ns))[1][4:] == ["2", "2", "R--"]

    out = ok(capsys, "topic", "delete", "cli-orders", "--namesrv", ns)
    assert "'cli-orders' deleted from broker-a" in out
    assert "cli-orders" not in ok(capsys, "topic", "list", "--namesrv", ns).split()
    assert fails(capsys, "topic", "route", "cli-orders", "--namesrv", ns) == "sluice: no route for topic 'cli-orders'"
    assert "cli-orders" not in broker.topic_config_manager.table


def test_ordered_topic_gets_its_order_config(cluster, capsys):
    ns = cluster.namesrv_addr
    ok(capsys, "topic", "create", "cli-ordered", "--queues", "3", "--order", "--namesrv", ns)
    out = ok(capsys, "topic", "route", "cli-ordered", "--namesrv", ns)
    assert "order config: broker-a:3" in out
    ok(capsys, "topic", "delete", "cli-ordered", "--namesrv", ns)
    ok(capsys, "topic", "create", "cli-ordered", "--queues", "3", "--namesrv", ns)
    assert "order config" not in ok(capsys, "topic", "route", "cli-ordered", "--namesrv", ns)


def test_a_priority_topic_and_a_group_attribute_from_the_cli(cluster, capsys):
    ns = cluster.namesrv_addr
    out = ok(capsys, "topic", "create", "cli-prio", "--queues", "4", "--message-type", "PRIORITY", "--namesrv", ns)
    assert "message type PRIORITY" in out
    assert cluster.brokers[0].topic_config_manager.get("cli-prio").attributes == {"message.type": "PRIORITY"}
    err = fails(capsys, "topic", "update", "cli-prio", "--attributes", "+queue.type=BatchCQ", "--namesrv", ns)
    assert "attempt to update an unchangeable attribute. key: queue.type" in err
    ok(capsys, "group", "create", "cli-prio-g", "--attributes", "+priority.factor=30", "--namesrv", ns)
    assert cluster.brokers[0].subscription_group_manager.table["cli-prio-g"].priority_factor == 30
    err = fails(capsys, "group", "update", "cli-prio-g", "--attributes", "priority.factor=3", "--namesrv", ns)
    assert "add/alter attribute format is wrong: priority.factor" in err


def test_namespaced_topics_are_listed_by_the_name_their_clients_use_beside_their_namespace(cluster, capsys):
    ns = cluster.namesrv_addr
    for topic in ("tenant-a%orders", "tenant-b%orders", "plain-orders"):
        cluster.create_topic(topic, 1)
    assert {"tenant-a%orders", "plain-orders"} <= set(ok(capsys, "topic", "list", "--namesrv", ns).split())
    table = rows(ok(capsys, "topic", "list", "--by-namespace", "--namesrv", ns))
    assert table[0] == ["TOPIC", "NAMESPACE"]
    assert {("orders", "tenant-a"), ("orders", "tenant-b"), ("plain-orders", "-")} <= {tuple(r) for r in table[1:]}
    table = rows(ok(capsys, "topic", "list", "--namespace", "tenant-b", "--namesrv", ns))
    assert table[1:] == [["orders", "tenant-b"]]
    assert json.loads(ok(capsys, "topic", "list", "--namespace", "tenant-a", "--json", "--namesrv", ns)) == \
        ["tenant-a%orders"]  # (JSON: the broker's names)


def test_two_brokers(cluster, capsys):
    ns = cluster.namesrv_addr
    cluster.start_broker("broker-b")
    out = ok(capsys, "topic", "create", "cli-wide", "--queues", "2", "--namesrv", ns)
    assert "broker-a" in out and "broker-b" in out
    table = rows(ok(capsys, "topic", "route", "cli-wide", "--namesrv", ns))
    assert [r[0] for r in table[1:]] == ["broker-a", "broker-b"]
    ids = [send(capsys, ns, "cli-wide", f"w{i}", "--keys", "wide-key") for i in range(8)]
    assert {r["brokerName"] for r in ids} == {"broker-a", "broker-b"}
    status = json.loads(ok(capsys, "topic", "status", "cli-wide", "--json", "--namesrv", ns))
    assert {(q["brokerName"], q["queueId"]) for q in status["queues"]} == {
        ("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)}
    assert status["totalMessages"] == 8
    found = json.loads(ok(capsys, "msg", "get-by-key", "cli-wide", "wide-key", "--json", "--namesrv", ns))
    assert sorted(m["body"] for m in found) == [f"w{i}" for i in range(8)]
    for r in (ids[0], ids[-1]):  # uniq ids resolve on whichever broker holds them
        got = json.loads(ok(capsys, "msg", "get-by-id", r["msgId"], "--topic", "cli-wide", "--json", "--namesrv", ns))
        assert [m["offsetMsgId"] for m in got] == [r["offsetMsgId"]]
    ok(capsys, "topic", "delete", "cli-wide", "--namesrv", ns)
    assert all("cli-wide" not in b.topic_config_manager.table for b in cluster.brokers)


# == messages =======================================================================================
def test_msg_send_and_get_by_offset_id_and_uniq_id(cluster, capsys):
    ns = cluster.namesrv_addr
    ok(capsys, "topic", "create", "cli-msgs", "--queues", "2", "--namesrv", ns)
    out = ok(capsys, "msg", "send", "cli-msgs", "hello sluice", "--tags", "paid", "--keys", "k-1 k-2",
             "--prop", "color=red", "--prop", "size=xl", "--namesrv", ns)
    header, line = out.splitlines()
    assert header.split()[:5] == ["MSG", "ID", "OFFSET", "MSG", "ID"]
    msg_id, offset_id, broker_name, queue, offset, status = line.split()
    assert broker_name == "broker-a" and queue in ("0", "1") and offset == "0" and status == "SEND_OK"
    assert len(msg_id) == 32 and len(offset_id) == 32

    for argv in (["msg", "get-by-id", offset_id], ["msg", "get-by-id", msg_id, "--topic", "cli-msgs"]):
        text = ok(capsys, *argv, "--namesrv", ns)
        fields = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in text.splitlines()[:11])
        assert fields["topic"] == "cli-msgs"
        assert fields["msg id"] == msg_id and fields["offset msg id"] == offset_id
        assert fields["tags"] == "paid" and fields["keys"] == "k-1 k-2"
        assert fields["queue"] == f"{queue} (queue offset 0)"
        assert fields["stored"].endswith(f"on {cluster.brokers[0].broker_addr}")
        assert "color=red" in text and "size=xl" in text and f"UNIQ_KEY={msg_id}" in text
        assert "12 bytes, UTF-8 text" in text and text.splitlines()[-1] == "hello sluice"

    data = json.loads(ok(capsys, "msg", "get-by-id", offset_id, "--json", "--namesrv", ns))
    assert len(data) == 1
    m = data[0]
    assert (m["msgId"], m["offsetMsgId"], m["body"], m["bodyEncoding"]) == (msg_id, offset_id, "hello sluice", "utf-8")
    assert m["properties"]["color"] == "red" and m["keys"] == ["k-1", "k-2"] and m["queueId"] == int(queue)
    assert ok(capsys, "msg", "get-by-id", msg_id, "--topic", "cli-msgs", "--body-only", "--namesrv", ns) == \
        "hello sluice"

    # A uniq id needs the topic; an unknown offset id is reported plainly.
    assert "--topic" in fails(capsys, "msg", "get-by-id", msg_id, "--namesrv", ns)
    missing = offset_id[:16] + "00000000000FFFFF"
    assert "no message with id" in fails(capsys, "msg", "get-by-id", missing, "--namesrv", ns)
    assert "no message with id" in fails(capsys, "msg", "get-by-id", "0" * 32, "--topic", "cli-msgs",
                                         "--namesrv", ns)


def test_msg_binary_and_compressed_bodies(cluster, capsys, monkeypatch):
    ns = cluster.namesrv_addr
    big = "x" * 6000  # over 4 KiB: the producer compresses it
    r = send(capsys, ns, "cli-bodies", big)
    got = json.loads(ok(capsys, "msg", "get-by-id", r["offsetMsgId"], "--json", "--namesrv", ns))[0]
    assert got["body"] == big and got["sysFlag"] & 1
    text = ok(capsys, "msg", "get-by-id", r["offsetMsgId"], "--namesrv", ns)
    assert "6000 bytes, UTF-8 text" in text and "more characters; --body-only prints it all" in text

    class Stdin:  # '-' reads the body from stdin
        buffer = __import__("io").BytesIO(b"\x00\x01\xfe\xff")

    monkeypatch.setattr(sys, "stdin", Stdin)
    r = send(capsys, ns, "cli-bodies", "-", "--keys", "bin")
    text = ok(capsys, "msg", "get-by-id", r["offsetMsgId"], "--namesrv", ns)
    assert "4 bytes, binary (hex)" in text and text.splitlines()[-1] == "00 01 fe ff"
    got = json.loads(ok(capsys, "msg", "get-by-id", r["offsetMsgId"], "--json", "--namesrv", ns))[0]
    assert (got["bodyEncoding"], got["body"]) == ("base64", "AAH+/w==")
    assert "<4 bytes binary>" in ok(capsys, "msg", "get-by-key", "cli-bodies", "bin", "--namesrv", ns)


def test_msg_get_by_key(cluster, capsys):
    ns = cluster.namesrv_addr
    ok(capsys, "topic", "create", "cli-keys", "--queues", "2", "--namesrv", ns)
    sent = [send(capsys, ns, "cli-keys", f"order {i}", "--keys", f"order-{i % 2} all", "--tags", "t") for i in range(5)]
    table = rows(ok(capsys, "msg", "get-by-key", "cli-keys", "order-1", "--namesrv", ns))
    assert table[0] == ["MSG ID", "OFFSET MSG ID", "STORE HOST", "QUEUE", "OFFSET", "STORED", "TAGS", "BODY"]
    assert [r[0] for r in table[1:]] == [sent[1]["msgId"], sent[3]["msgId"]]  # oldest first
    assert [r[-1] for r in table[1:]] == ["order 1", "order 3"]
    found = json.loads(ok(capsys, "msg", "get-by-key", "cli-keys", "all", "--json", "--namesrv", ns))
    assert [m["body"] for m in found] == [f"order {i}" for i in range(5)]
    assert len(json.loads(ok(capsys, "msg", "get-by-key", "cli-keys", "all", "--max", "2", "--json",
                             "--namesrv", ns))) == 2
    future = str(int(time.time() * 1000) + 3_600_000)
    assert json.loads(ok(capsys, "msg", "get-by-key", "cli-keys", "all", "--begin", future, "--json",
                         "--namesrv", ns)) == []
    assert json.loads(ok(capsys, "msg", "get-by-key", "cli-keys", "all", "--end", "2000-01-01", "--json",
                         "--namesrv", ns)) == []
    assert fails(capsys, "msg", "get-by-key", "cli-keys", "nope", "--namesrv", ns) == \
        "sluice: no message with key 'nope' in topic 'cli-keys'"


def test_msg_send_count_shows_progress(cluster, capsys):
    ns = cluster.namesrv_addr
    ok(capsys, "topic", "create", "cli-bulk", "--queues", "4", "--namesrv", ns)
    rc, out, err = sluice(capsys, "msg", "send", "cli-bulk", "bulk", "--count", "2000", "--namesrv", ns)
    assert rc == 0
    lines = out.splitlines()
    assert len(lines) == 2001 and all(line.endswith("SEND_OK") for line in lines[1:])
    assert "sent 2000 messages to 'cli-bulk'" in err
    rc, out, err = sluice(capsys, "msg", "send", "cli-bulk", "bulk", "--count", "500", "-q", "--namesrv", ns)
    assert rc == 0 and out == "" and "sent 500 messages" in err
    assert json.loads(ok(capsys, "topic", "status", "cli-bulk", "--json", "--namesrv", ns))["totalMessages"] == 2500


# == groups =========================================================================================
def test_group_list_and_progress_after_commit(cluster, capsys):
    ns = cluster.namesrv_addr
    ok(capsys, "topic", "create", "cli-progress", "--queues", "2", "--namesrv", ns)
    ok(capsys, "msg", "send", "cli-progress", "p", "--count", "6", "-q", "--namesrv", ns)

    async def consume(n: int) -> None:
        consumer = PullConsumer("cli-progress-group", ns, auto_commit=False, consume_from="first")
        consumer.subscribe("cli-progress")
        async with consumer:
            got = 0
            deadline = time.monotonic() + 20
            while got < n and time.monotonic() < deadline:
                got += len(await consumer.poll(timeout=1.0))
            assert got == n
            await consumer.commit()

    asyncio.run(consume(6))
    ok(capsys, "msg", "send", "cli-progress", "p", "--count", "4", "-q", "--namesrv", ns)

    progress = json.loads(ok(capsys, "group", "progress", "cli-progress-group", "--topic", "cli-progress",
                             "--json", "--namesrv", ns))
    assert progress["group"] == "cli-progress-group" and progress["totalLag"] == 4
    queues = progress["queues"]
    assert [(q["topic"], q["queueId"]) for q in queues] == [("cli-progress", 0), ("cli-progress", 1)]
    assert sum(q["brokerOffset"] for q in queues) == 10 and sum(q["consumerOffset"] for q in queues) == 6
    assert all(q["lag"] == q["brokerOffset"] - q["consumerOffset"] for q in queues)

    table = rows(ok(capsys, "group", "progress", "cli-progress-group", "--namesrv", ns))
    assert table[0] == ["TOPIC", "BROKER", "QUEUE", "BROKER OFFSET", "CONSUMER OFFSET", "LAG", "LAST CONSUMED"]
    mine = [r for r in table[1:-1] if r[0] == "cli-progress"]
    assert len(mine) == 2 and sum(int(r[5]) for r in mine) == 4
    assert table[-1][0].startswith("total lag: 4")

    table = rows(ok(capsys, "group", "list", "--namesrv", ns))
    assert table[0] == ["GROUP", "NAMESPACE", "ONLINE", "TYPE", "MODEL", "TOPICS", "BROKERS"]
    assert ["cli-progress-group", "-", "0"] == [r for r in table if r[0] == "cli-progress-group"][0][:3]
    groups = json.loads(ok(capsys, "group", "list", "--json", "--namesrv", ns))
    assert any(g["group"] == "cli-progress-group" and g["brokers"] == ["broker-a"] for g in groups)

    assert "has no committed offsets" in fails(capsys, "group", "progress", "no-such-group", "--namesrv", ns)


def test_group_list_shows_online_consumers(cluster, capsys):
    ns = cluster.namesrv_addr
    ok(capsys, "topic", "create", "cli-online", "--namesrv", ns)

    async def check() -> None:
        consumer = PullConsumer("cli-online-group", ns, consume_from="first")
        consumer.subscribe("cli-online")
        async with consumer:
            out = await asyncio.to_thread(ok, capsys, "group", "list", "--json", "--namesrv", ns)
            g = next(g for g in json.loads(out) if g["group"] == "cli-online-group")
            assert g["online"] == 1 and g["consumeType"] == "CONSUME_ACTIVELY"
            assert g["messageModel"] == "CLUSTERING" and "cli-online" in g["topics"]

    asyncio.run(check())


# == errors =========================================================================================
def test_errors_are_one_line(cluster, capsys):
    ns = cluster.namesrv_addr
    assert fails(capsys, "topic", "route", "nope", "--namesrv", ns) == "sluice: no route for topic 'nope'"
    assert fails(capsys, "topic", "status", "nope", "--namesrv", ns) == "sluice: no route for topic 'nope'"
    assert fails(capsys, "topic", "delete", "nope", "--namesrv", ns) == "sluice: no route for topic 'nope'"
    assert fails(capsys, "msg", "get-by-key", "nope", "k", "--namesrv", ns) == "sluice: no route for topic 'nope'"
    assert fails(capsys, "group", "progress", "g", "--topic", "nope", "--namesrv", ns) == \
        "sluice: no route for topic 'nope'"
    assert "permission" in fails(capsys, "topic", "create", "t", "--perm", "X", "--namesrv", ns)
    assert "topic name" in fails(capsys, "topic", "create", "bad topic", "--namesrv", ns)
    assert "no cluster 'nope'" in fails(capsys, "topic", "create", "t", "--cluster", "nope", "--namesrv", ns)
    assert "name=value" in fails(capsys, "msg", "send", "t", "b", "--prop", "novalue", "--namesrv", ns)
    assert "empty" in fails(capsys, "msg", "send", "t", "", "--namesrv", ns)


def test_no_broker_yet(empty_cluster, capsys):
    ns = empty_cluster.namesrv_addr
    assert fails(capsys, "topic", "create", "t", "--namesrv", ns) == \
        "sluice: no broker is registered with the name server"
    assert ok(capsys, "topic", "list", "--namesrv", ns) == ""
    assert json.loads(ok(capsys, "group", "list", "--json", "--namesrv", ns)) == []


def test_topic_list_by_cluster(cluster, capsys):
    ns = cluster.namesrv_addr
    ok(capsys, "topic", "create", "cli-in-cluster", "--cluster", "DefaultCluster", "--namesrv", ns)
    assert "cli-in-cluster" in ok(capsys, "topic", "list", "--cluster", "DefaultCluster", "--namesrv", ns).split()
    assert "no cluster 'other'" in fails(capsys, "topic", "list", "--cluster", "other", "--namesrv", ns)
    ok(capsys, "topic", "delete", "cli-in-cluster", "--cluster", "DefaultCluster", "--namesrv", ns)
    assert "cli-in-cluster" not in ok(capsys, "topic", "list", "--namesrv", ns).split()


def test_unreachable_name_server(capsys, monkeypatch):
    addr = f"127.0.0.1:{closed_port()}"
    expected = f"sluice: cannot connect to name server {addr}"
    for argv in (["topic", "list"], ["topic", "route", "t"], ["topic", "create", "t"], ["topic", "status", "t"],
                 ["group", "list"], ["group", "progress", "g"], ["msg", "send", "t", "body"],
                 ["msg", "get-by-id", "7F000001000027150000000000000000"], ["msg", "get-by-key", "t", "k"]):
        assert fails(capsys, *argv, "--namesrv", addr) == expected, argv
    monkeypatch.setenv("SLUICE_NAMESRV", addr)  # the default comes from the environment
    assert fails(capsys, "topic", "list") == expected


def test_errors_without_a_message_are_described(capsys, monkeypatch):
    """A bare exception (e.g. ``TimeoutError()``) prints its kind, the command and the name server, never
    an empty ``sluice: ``."""
    from sluice.client.admin import Admin

    addr = f"127.0.0.1:{closed_port()}"

    def raising(exc: BaseException):
        async def fn(*args, **kwargs):
            raise exc
        return fn

    monkeypatch.setattr(Admin, "list_topics", raising(TimeoutError()))
    assert fails(capsys, "topic", "list", "--namesrv", addr) == \
        f"sluice: topic list timed out talking to name server {addr}"
    monkeypatch.setenv("SLUICE_NAMESRV", addr)  # the name server the command used, wherever it came from
    assert fails(capsys, "topic", "list") == f"sluice: topic list timed out talking to name server {addr}"

    def timeout_with_cause(*args, **kwargs):
        try:
            raise OSError("network is unreachable")
        except OSError as cause:
            raise TimeoutError() from cause

    async def reset(*args, **kwargs):
        raise ConnectionResetError()

    monkeypatch.setattr(Admin, "list_groups", reset)
    assert fails(capsys, "group", "list", "--namesrv", addr) == \
        f"sluice: group list failed with ConnectionResetError talking to name server {addr}"
    monkeypatch.setattr("sluice.bench.client_bench.run_bench", timeout_with_cause)
    assert fails(capsys, "bench", "produce", "--namesrv", addr, "--count", "1") == \
        f"sluice: bench produce timed out (network is unreachable) talking to name server {addr}"


def test_debug_prints_the_traceback_too(capsys):
    addr = f"127.0.0.1:{closed_port()}"
    rc, out, err = sluice(capsys, "--debug", "topic", "list", "--namesrv", addr)
    assert rc == 1 and out == ""
    assert err.startswith("Traceback (most recent call last):\n") and "AdminError" in err
    assert err.splitlines()[-1] == f"sluice: cannot connect to name server {addr}"


@pytest.mark.parametrize("argv", [
    ["dev", "--flush", "fast"],
    ["broker", "--flush", "SYNC_FLUSH"],
    ["namesrv", "--log-level", "loud"],
    ["dev", "--log-level", "trace"],
    ["bench", "produce", "--mode", "batch"],
    ["bench", "produce", "--flush", "never"],
])
def test_options_with_fixed_values_refuse_others(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argv[-2]}: invalid choice: '{argv[-1]}' (choose from " in err


def test_dev_refuses_a_bad_value_from_its_config_file_instead_of_replacing_it(tmp_path: Path, capsys):
    path = tmp_path / "dev.toml"
    path.write_text("[broker]\nlisten_port = -5\n")
    rc, out, err = sluice(capsys, "dev", "--config", str(path), "--store", str(tmp_path / "store"))
    assert rc != 0 and "ready" not in out
    assert f"{path} [broker]: listen_port: an integer from 0 to 65535 is allowed, got -5" in err


def test_dev_with_acl_on_and_its_grpc_front_needs_the_inner_credentials_and_says_so(tmp_path: Path, capsys):
    path = tmp_path / "dev.toml"
    path.write_text("[broker]\nauthentication_enabled = true\n"
                    "init_authentication_user = { username = 'admin', password = 'pw' }\n")
    rc, out, err = sluice(capsys, "dev", "--config", str(path), "--store", str(tmp_path / "store"))
    assert rc != 0 and "ready" not in out
    assert f"{path} [broker]: authentication_enabled / authorization_enabled with the gRPC front need " \
           "inner_client_authentication_credentials" in err


def test_dev_filters_by_properties_unless_told_not_to_and_a_refusal_names_the_setting(tmp_path: Path,
                                                                                      server_loop) -> None:
    from sluice.cli.main import build_parser
    args = build_parser().parse_args(["dev", "--no-property-filter"])
    assert args.no_property_filter and not build_parser().parse_args(["dev"]).no_property_filter
    cluster = Cluster(tmp_path, server_loop)
    try:
        cluster.start_broker("broker-a")  # (property filters off: RocketMQ's default, and --no-property-filter's)
        selector = MessageSelector.by_key_value("region=eu")
        sub = build_subscription("kv-off", selector)

        async def check() -> None:
            remoting = RemotingClient()
            try:
                api = MQClientAPI(remoting, [cluster.namesrv_addr])
                await api.check_client_config(cluster.brokers[0].broker_addr, "kv-off-g", "c1", sub)
            finally:
                await remoting.close()

        with pytest.raises(SluiceError) as err:
            cluster.loop.run(check())
        assert "enable_property_filter = true" in str(err.value) and "key=value" in str(err.value)
    finally:
        cluster.close()


def test_dev_takes_its_ports_and_host_from_the_config_file_unless_a_flag_says_otherwise(tmp_path: Path):
    from sluice.cli.main import build_parser
    from sluice.cli.servers import broker_config, namesrv_config
    from sluice.common.config_loader import load_toml

    path = tmp_path / "dev.toml"
    path.write_text("[namesrv]\nport = 19876\nhost = '127.0.0.3'\n[broker]\nlisten_port = 20911\n")
    data = load_toml(str(path))
    args = build_parser().parse_args(["dev", "--config", str(path)])
    assert namesrv_config(args, data, str(path)).port == 19876
    assert namesrv_config(args, data, str(path)).host == "127.0.0.3"
    assert broker_config(args, data, str(path)).listen_port == 20911
    args = build_parser().parse_args(["dev", "--config", str(path), "--broker-port", "30911"])
    assert broker_config(args, data, str(path)).listen_port == 30911
    defaults = build_parser().parse_args(["dev"])
    assert (namesrv_config(defaults, {}, "flags").port, broker_config(defaults, {}, "flags").listen_port,
            broker_config(defaults, {}, "flags").listen_host) == (9876, 10911, "127.0.0.1")


def test_log_level_is_case_insensitive():
    from sluice.cli.main import build_parser

    assert build_parser().parse_args(["namesrv", "--log-level", "WARNING"]).log_level == "warning"


def test_admin_commands_show_client_warnings(tmp_path: Path):
    """Warnings logged by the client during an admin command reach stderr (here: the address answers with
    something that is not RocketMQ's protocol), before the one-line error."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    addr = f"127.0.0.1:{server.getsockname()[1]}"
    accepted: list[socket.socket] = []

    def speak_http() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                accepted.append(conn)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=speak_http, daemon=True)
    thread.start()
    try:
        done = subprocess.run([sys.executable, "-m", "sluice.cli.main", "topic", "list", "--namesrv", addr],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        server.close()
        for conn in accepted:
            conn.close()
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert any(line.startswith("sluice: WARNING: ") and "bytes exceeds" in line for line in lines), done.stderr
    assert lines[-1] == f"sluice: name server {addr} closed the connection without an answer (is it a name server?)"
    assert "Traceback" not in done.stderr


def test_namesrv_from_environment(cluster, capsys, monkeypatch):
    monkeypatch.setenv("SLUICE_NAMESRV", cluster.namesrv_addr)
    assert "TBW102" in ok(capsys, "topic", "list").split()


# == sluice dev, end to end ==========================================================================
def test_dev_server_driven_by_the_cli(tmp_path: Path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "dev.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", "dev", "--store", str(tmp_path / "store"),
                                 "--namesrv-port", "0", "--broker-port", "0", "--grpc-port", "0",
                                 "--metrics-port", "0", "--dashboard-port", "0"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    try:
        assert proc.stdout is not None
        banner = []
        while not banner or "Ctrl-C" not in banner[-1]:
            line = proc.stdout.readline()
            assert line, f"sluice dev did not start: {''.join(banner)}\n{log.read_text()}"
            banner.append(line)
        text = "".join(banner)
        ns = re.search(r"name server\s+(\S+)", text).group(1)
        broker = re.search(r"broker\s+(\S+)", text).group(1)
        grpc_port = int(re.search(r"gRPC\s+127\.0\.0\.1:(\d+) \(RocketMQ 5 clients; TLS permissive\)", text).group(1))

        def cli(*argv: str) -> str:
            done = subprocess.run([sys.executable, "-m", "sluice.cli.main", *argv, "--namesrv", ns],
                                  capture_output=True, text=True, env=env, timeout=60)
            assert done.returncode == 0, done.stderr
            return done.stdout

        sent = json.loads(cli("msg", "send", "dev-topic", "hello from the CLI", "--keys", "dev-key", "--json"))
        assert sent["brokerName"] == "broker-a" and sent["status"] == "SEND_OK"

        # Its dashboard (docs/dashboard.md) shows the topic the CLI made.
        dashboard = re.search(r"dashboard\s+(http://127\.0\.0\.1:\d+)", text).group(1)
        with urllib.request.urlopen(f"{dashboard}/topics", timeout=30) as page:
            assert page.status == 200 and "dev-topic" in page.read().decode()
        assert cli("msg", "get-by-id", sent["offsetMsgId"], "--body-only") == "hello from the CLI"
        shown = cli("msg", "get-by-id", sent["msgId"], "--topic", "dev-topic")
        assert f"on {broker}" in shown and shown.splitlines()[-1] == "hello from the CLI"
        assert sent["msgId"] in cli("msg", "get-by-key", "dev-topic", "dev-key")

        # A dev node filters by properties (RocketMQ's broker does not by default): key=value works at once.
        cli("msg", "send", "dev-topic", "for region eu", "--prop", "region=eu")
        with SyncPullConsumer("dev-kv", namesrv=ns, consume_from="first") as kv:
            kv.subscribe("dev-topic", MessageSelector.by_key_value("region=eu"))
            got: list[bytes] = []
            wait_until(lambda: got.extend(m.body for m in kv.poll(0.2)) or got, 30, "the key=value match")
        assert got == [b"for region eu"]

        # A RocketMQ 5 client with its defaults speaks TLS (HTTP/2 by ALPN) to the gRPC port, which made itself a
        # certificate at that first TLS client (RocketMQ's test mode); pinned, it is checked names and all.
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", grpc_port), 10) as raw, ctx.wrap_socket(raw) as tls:
            assert tls.selected_alpn_protocol() == "h2"
        made = (tmp_path / "store" / "tls" / "self-signed.pem").read_bytes()

        async def query_route() -> Any:
            creds = grpc.ssl_channel_credentials(root_certificates=made)
            async with grpc.aio.secure_channel(f"127.0.0.1:{grpc_port}", creds) as channel:
                call = channel.unary_unary(f"/{SERVICE}/QueryRoute",
                                           request_serializer=pb.QueryRouteRequest.SerializeToString,
                                           response_deserializer=pb.QueryRouteResponse.FromString)
                req = pb.QueryRouteRequest()
                req.topic.name = "dev-topic"
                return await call(req, timeout=10)

        route = asyncio.run(query_route())
        assert route.status.code == 20000 and route.message_queues, route.status

        # One Prometheus endpoint for the three servers, each family once, told apart by node_type.
        metrics_url = re.search(r"metrics\s+(http://127\.0\.0\.1:\d+/metrics) \(Prometheus\)", text).group(1)
        with urllib.request.urlopen(metrics_url, timeout=10) as resp:
            exposition = resp.read().decode()
        families = [line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE ")]
        assert len(families) == len(set(families))
        assert {'node_type="broker"', 'node_type="namesrv"', 'node_type="proxy"'} <= set(
            re.findall(r'node_type="\w+"', exposition))
        assert re.search(r'rocketmq_messages_in_total\{[^}]*topic="dev-topic"[^}]*\} 2\.0', exposition)
        assert re.search(r'rocketmq_rpc_latency_milliseconds_count\{[^}]*node_type="namesrv"', exposition)
        assert re.search(r'rocketmq_proxy_up\{[^}]*\} 1\.0', exposition)

        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        assert "Traceback" not in log.read_text() and "sluice: stopping" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
