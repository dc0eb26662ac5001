"""The official RocketMQ 5 Python client (PyPI ``rocketmq-python-client``, gRPC) against Sluice's gRPC front:
its Producer (normal, FIFO message groups, delivery timestamps) and its SimpleConsumer (receive, ack, change of
invisible duration) through ``sluice.proxy`` in front of a real name server and broker.

The client lives in a venv of its own (``$XDG_CACHE_HOME/sluice-interop/venv-rocketmq-python-client-<version>``),
created on first use as the C++ client's is; the driver ``clients/rocketmq5_client.py`` runs in it as a child
process and reports what it did as JSON lines. A wheel pip cannot get skips these tests, unless
``$SLUICE_REQUIRE_CPP`` is set (CI): then they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sluice.client.mq_client_api import MQClientAPI
from sluice.proxy.messaging_service import serve, stop
from sluice.proxy.protocol import MESSAGES, pb
from sluice.remoting.client import RemotingClient
from tests.conftest import Cluster
from tests.integration.helpers import wait_until
from tests.interop.conftest import CLIENTS, WheelUnavailable, cpp_required, ensure_rocketmq_venv

REQUIREMENT = "rocketmq-python-client==5.1.2"


@pytest.fixture(scope="session")
def python5() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice-interop"
    venv = cache / ("venv-" + REQUIREMENT.replace("==", "-"))
    try:
        return ensure_rocketmq_venv(venv, REQUIREMENT, "import rocketmq.v5.producer")
    except WheelUnavailable as exc:
        if cpp_required():
            pytest.fail(f"{REQUIREMENT} could not be downloaded and $SLUICE_REQUIRE_CPP is set: {exc}",
                        pytrace=False)
        pytest.skip(f"{REQUIREMENT} could not be downloaded into {venv}: {exc}")
    except RuntimeError as exc:
        pytest.fail(f"cannot set up {REQUIREMENT}: {exc}", pytrace=False)


def run(python5: Path, tmp_path: Path, *args: str, timeout: float = 120) -> list[dict[str, Any]]:
    env = {**os.environ, "HOME": str(tmp_path)}  # the client writes its logs under $HOME/logs
    r = subprocess.run([str(python5), str(CLIENTS / "rocketmq5_client.py"), *args], capture_output=True, text=True,
                       timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"the client failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def test_the_official_producer_and_simple_consumer_send_receive_and_ack_through_the_grpc_front(
        cluster: Cluster, front: str, python5: Path, tmp_path: Path):
    cluster.create_topic("Grpc5", 4)
    sent = run(python5, tmp_path, front, "produce", "Grpc5", "20")
    assert [e["body"] for e in sent] == [f"m-{i}" for i in range(20)]
    assert len({e["message_id"] for e in sent}) == 20
    got = run(python5, tmp_path, front, "receive", "Grpc5", "grpc5-g", "20", "--timeout", "60")
    received = [e for e in got if e["event"] == "received"]
    assert Counter(e["body"] for e in received) == Counter(e["body"] for e in sent)
    by_body = {e["body"]: e for e in received}
    for e in sent:
        r = by_body[e["body"]]
        i = int(e["body"].split("-")[1])
        assert r["message_id"] == e["message_id"]  # the producer's own id, end to end
        assert (r["tag"], r["keys"], r["properties"], r["attempt"]) == ("t", [f"key-{i}"], {"index": str(i)}, 1)
    assert got[-1] == {"event": "done", "acked": 20}
    assert cluster.brokers[0].pop_revive.checkpoints == {}  # every message acknowledged


def test_a_message_group_keeps_one_queue_a_delivery_time_is_kept_and_a_nack_comes_back_as_a_new_attempt(
        cluster: Cluster, front: str, python5: Path, tmp_path: Path):
    cluster.create_topic("Grpc5b", 4)
    fifo = run(python5, tmp_path, front, "produce", "Grpc5b", "6", "--group", "order-1", "--prefix", "fifo")
    assert [e["offset"] for e in fifo] == list(range(6))  # one group, one queue, in order
    t0 = time.time()
    run(python5, tmp_path, front, "produce", "Grpc5b", "1", "--delay-s", "2", "--prefix", "later")
    got = run(python5, tmp_path, front, "receive", "Grpc5b", "grpc5-n", "7", "--nack-first", "--invisible", "10",
              "--timeout", "60")
    received = [e for e in got if e["event"] == "received"]
    attempts: dict[str, list[int]] = {}
    for e in received:
        attempts.setdefault(e["body"], []).append(e["attempt"])
    assert attempts == {b: [1, 2] for b in [*(f"fifo-{i}" for i in range(6)), "later-0"]}
    assert all(e["group"] == "order-1" for e in received if e["body"].startswith("fifo"))
    later = [e for e in received if e["body"] == "later-0"]
    assert later[0]["delivery"] >= int(t0 + 2) * 1000  # delivered no earlier than asked, and says when
    assert got[-1] == {"event": "done", "acked": 7}


def test_official_priority_messages_are_received_highest_priority_first(
        cluster: Cluster, front: str, python5: Path, tmp_path: Path):
    cluster.create_topic("Grpc5prio", 4, attributes="+message.type=PRIORITY")
    priorities = [0, 3, 1, 7, 2, 0]
    sent = run(python5, tmp_path, front, "produce", "Grpc5prio", str(len(priorities)), "--prefix", "p",
               "--priorities", ",".join(map(str, priorities)))
    assert [e["event"] for e in sent] == ["sent"] * len(priorities), sent
    got = run(python5, tmp_path, front, "receive", "Grpc5prio", "grpc5-prio-g", str(len(priorities)))
    received = [e for e in got if e["event"] == "received"]
    # Queue min(priority, 3) each; one receive takes queue 3 first, then 2, 1, 0, each in the order sent.
    assert [(e["body"], e["priority"]) for e in received] == [
        ("p-1", 3), ("p-3", 7), ("p-4", 2), ("p-2", 1), ("p-0", 0), ("p-5", 0)]


def test_two_namespaces_keep_apart_topics_and_groups_of_the_same_name(
        cluster: Cluster, front: str, python5: Path, tmp_path: Path):
    for ns in ("tenant-a", "tenant-b"):
        cluster.create_topic(f"{ns}%orders", 2)  # (the broker's name of each namespace's "orders")
    for ns, n in (("tenant-a", 3), ("tenant-b", 2)):
        sent = run(python5, tmp_path, "--namespace", ns, front, "produce", "orders", str(n), "--prefix", ns)
        assert [e["event"] for e in sent] == ["sent"] * n, sent
    broker = cluster.brokers[0]
    assert [sum(broker.store.get_max_offset_in_queue(f"{ns}%orders", q) for q in range(2))
            for ns in ("tenant-a", "tenant-b")] == [3, 2]
    for ns, n in (("tenant-a", 3), ("tenant-b", 2)):
        got = run(python5, tmp_path, "--namespace", ns, front, "receive", "orders", "billing", str(n))
        received = [e for e in got if e["event"] == "received"]
        assert sorted(e["body"] for e in received) == [f"{ns}-{i}" for i in range(n)]  # its own only
        assert {e["topic"] for e in received} == {"orders"}  # the name the client knows
    # each namespace's group is its own: ns%billing, with its own retry topic
    assert {"tenant-a%billing", "tenant-b%billing"} <= set(broker.subscription_group_manager.table)
    bad = run(python5, tmp_path, "--namespace", "no%pe", front, "produce", "orders", "1")
    assert [e["event"] for e in bad] == ["send-failed"], bad  # (refused BAD_REQUEST: test_grpc_front.py)


def test_sluices_description_of_the_protocol_matches_the_official_clients(python5: Path, tmp_path: Path):
    """Every field Sluice's front reads or writes has the official client's number, type and cardinality."""
    script = (
        "import importlib.util, json, os, sys, types\n"
        "root = os.path.dirname(importlib.util.find_spec('rocketmq').origin)\n"
        "for n, p in (('rocketmq', root), ('rocketmq.grpc_protocol', os.path.join(root, 'grpc_protocol'))):\n"
        "    m = types.ModuleType(n); m.__path__ = [p]; sys.modules[n] = m\n"
        "from rocketmq.grpc_protocol import definition_pb2, service_pb2\n"
        "out = {}\n"
        "for mod in (definition_pb2, service_pb2):\n"
        "    for name, d in mod.DESCRIPTOR.message_types_by_name.items():\n"
        "        out[name] = {f.name: [f.number, f.type, f.is_repeated] for f in d.fields}\n"
        "print(json.dumps(out))\n")
    r = subprocess.run([str(python5), "-c", script], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    official = json.loads(r.stdout)
    for name in MESSAGES:
        ours = {f.name: [f.number, f.type, f.is_repeated] for f in getattr(pb, name).DESCRIPTOR.fields}
        assert name in official, name
        for field, spec in ours.items():
            assert official[name].get(field) == spec, f"{name}.{field}: ours {spec}, theirs {official[name].get(field)}"


def test_official_transactions_commit_roll_back_and_an_open_one_is_checked_back_through_telemetry(
        empty_cluster: Cluster, python5: Path, tmp_path: Path):
    # A commit or rollback ends well within 3 s even on a loaded machine; the open one is checked back after it.
    empty_cluster.start_broker(transaction_timeout=3000, transaction_check_interval=300)
    empty_cluster.create_topic("Grpc5tx", 2)
    server, service, port = empty_cluster.loop.run(serve(empty_cluster.namesrv_addr, "127.0.0.1", 0))
    try:
        endpoint = f"127.0.0.1:{port}"
        events = run(python5, tmp_path, endpoint, "transact", "Grpc5tx", "--timeout", "60")
        sent = {e["body"]: e for e in events if e["event"] == "sent"}
        assert set(sent) == {"commit-0", "rollback-0", "open-0"} and all(e["transaction_id"] for e in sent.values())
        checked = [e for e in events if e["event"] == "checked"]
        assert [e["body"] for e in checked][:1] == ["open-0"]  # only the open one is asked about
        assert checked[0]["message_id"] == sent["open-0"]["message_id"]
        got = run(python5, tmp_path, endpoint, "receive", "Grpc5tx", "grpc5-tx", "2", "--timeout", "30")
        assert sorted(e["body"] for e in got if e["event"] == "received") == ["commit-0", "open-0"]
        more = run(python5, tmp_path, endpoint, "receive", "Grpc5tx", "grpc5-tx", "1", "--timeout", "6")
        assert [e for e in more if e["event"] == "received"] == []  # the rolled back one never comes
    finally:
        empty_cluster.loop.run(stop(server, service))


def test_the_official_push_consumer_gets_every_message_and_a_failed_one_again(
        cluster: Cluster, front: str, python5: Path, tmp_path: Path):
    cluster.create_topic("Grpc5push", 4)
    run(python5, tmp_path, front, "produce", "Grpc5push", "12", "--prefix", "p")
    events = run(python5, tmp_path, front, "push", "Grpc5push", "grpc5-push", "12", "--fail-suffix", "7",
                 "--timeout", "90", timeout=150)
    received = [e for e in events if e["event"] == "received"]
    attempts: dict[str, list[int]] = {}
    for e in received:
        attempts.setdefault(e["body"], []).append(e["attempt"])
    assert attempts == {f"p-{i}": ([1, 2] if i == 7 else [1]) for i in range(12)}
    assert events[-1] == {"event": "done", "consumed": 12}
    wait_until(lambda: not [ck for ck in cluster.brokers[0].pop_revive.checkpoints.values()
                            if ck.topic == "Grpc5push"], 30, "every delivery acknowledged")


def test_a_fifo_group_consumes_each_message_group_in_order_and_a_poison_message_goes_to_the_dlq(
        cluster: Cluster, front: str, python5: Path, tmp_path: Path):
    cluster.create_topic("Grpc5fifo", 2)
    broker = cluster.brokers[0]

    async def fifo_group() -> None:
        rc = RemotingClient()
        try:
            await MQClientAPI(rc, []).update_subscription_group(broker.broker_addr, {
                "groupName": "grpc5-fifo", "consumeMessageOrderly": True, "retryMaxTimes": 2})
        finally:
            await rc.close()

    cluster.loop.run(fifo_group())
    assert broker.subscription_group_manager.find("grpc5-fifo").consume_message_orderly
    for group in ("A", "B"):
        run(python5, tmp_path, front, "produce", "Grpc5fifo", "3", "--group", group, "--prefix", group)
    events = run(python5, tmp_path, front, "push", "Grpc5fifo", "grpc5-fifo", "5", "--poison", "A-1",
                 "--timeout", "90", timeout=150)
    received = [e for e in events if e["event"] == "received"]
    for group in ("A", "B"):  # in order within each message group; the poison one tried 3 times in a row
        bodies = [e["body"] for e in received if e["group"] == group]
        want = ["A-0", "A-1", "A-1", "A-1", "A-2"] if group == "A" else ["B-0", "B-1", "B-2"]
        assert bodies == want, bodies
    assert events[-1] == {"event": "done", "consumed": 5}
    dlq = broker.store.get_max_offset_in_queue("%DLQ%grpc5-fifo", 0)
    assert dlq == 1  # the poison message, forwarded by the client after its attempts


def test_the_grpc_benchmark_modes_send_and_read_back_through_the_front_and_mark_what_they_measured(
        cluster: Cluster, front: str, python5: Path, tmp_path: Path):
    """The driver's bench modes (bench/grpc_reference.py's Python load) keep working against Sluice's front."""
    cluster.create_topic("Grpc5bench", 4)
    sent = run(python5, tmp_path, front, "bench-send", "Grpc5bench", "4", "1")
    assert [e["event"] for e in sent] == ["start", "end", "result"]
    result = sent[-1]
    assert result["messages"] > 0 and result["errors"] == 0 and result["warmup"] == 500 and result["p50_ms"] > 0
    stored = result["messages"] + result["warmup"]
    assert sum(cluster.brokers[0].store.get_max_offset_in_queue("Grpc5bench", q) for q in range(4)) == stored
    got = run(python5, tmp_path, front, "bench-receive", "Grpc5bench", "grpc5-bench", "2", str(stored))
    assert [e["event"] for e in got] == ["start", "end", "result"]
    assert got[-1]["messages"] == stored and got[-1]["errors"] == 0
