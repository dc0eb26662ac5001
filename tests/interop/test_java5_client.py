"""The official RocketMQ 5.x Java client (``org.apache.rocketmq:rocketmq-client-java``, gRPC) against Sluice's gRPC
front: its Producer, SimpleConsumer and PushConsumer. The program is ``java5/.../Grpc5.java``, a Maven project of its
own (that client shades gRPC and protobuf), built once per machine as the other Java programs are."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sluice.proxy import messaging_service
from tests.conftest import Cluster
from tests.interop.java_clients import CLIENT_JVM_OPTIONS, JavaBuild, java_build_for_tests

JAVA5_PROJECT = Path(__file__).parent / "java5"


@pytest.fixture(scope="session")
def java5() -> JavaBuild:
    return java_build_for_tests(JAVA5_PROJECT, "sluice-interop5.jar", "the Java 5.x client program")


@pytest.fixture(autouse=True)
def short_long_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The front's bound on a receive's long polling (20 s) lowered to 3 s, which its settings tell the clients: a
    push consumer's close waits until its receive in flight comes back, and no scenario here waits on a poll's end."""
    monkeypatch.setattr(messaging_service, "MAX_POLL_SECONDS", 3.0)


def run(java5: JavaBuild, tmp_path: Path, front: str, *steps: tuple[str, ...],
        timeout: float = 240, tls_default: bool = False) -> list[list[dict[str, Any]]]:
    """Run ``steps`` (each a mode and its arguments) one after the other in one JVM: the JSON lines of each step.
    ``tls_default``: the client's TLS setting left at its default (on); else it speaks plaintext."""
    args = [arg for i, step in enumerate(steps) for arg in ((["--"] if i else []) + list(step))]
    argv = ["java", *CLIENT_JVM_OPTIONS, f"-Duser.home={tmp_path}", "-cp", java5.classpath, "sluice.interop5.Grpc5",
            front, *args]
    env = {**os.environ, "GRPC5_TLS": "default" if tls_default else "off"}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    assert r.returncode == 0, f"the Java 5.x client failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    out: list[list[dict[str, Any]]] = []
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event["event"] == "step":
                out.append([])
            else:
                out[-1].append(event)
    assert len(out) == len(steps), r.stdout[-3000:]
    return out


def test_the_java_5_producer_simple_consumer_and_push_consumer_with_their_default_tls_through_the_grpc_front(
        cluster: Cluster, front: str, java5: JavaBuild, tmp_path: Path):
    cluster.create_topic("Java5", 4)
    sent, got, pushed = run(java5, tmp_path, front, ("produce", "Java5", "12"),
                            ("simple", "Java5", "java5-simple", "12", "60"),
                            ("push", "Java5", "java5-push", "12", "90"), tls_default=True)
    # With its defaults the client speaks TLS (enableSsl is true): the front's port took it as such.
    acceptor = cluster.front.front.acceptor
    assert acceptor.tls_connections >= 1 and acceptor.plain_connections == 0
    assert [e["body"] for e in sent] == [f"j-{i}" for i in range(12)]
    received = [e for e in got if e["event"] == "received"]
    assert Counter(e["body"] for e in received) == Counter(e["body"] for e in sent)
    ids = {e["body"]: e["message_id"] for e in sent}
    assert all(e["message_id"] == ids[e["body"]] and e["tag"] == "t" and e["attempt"] == 1 for e in received)
    assert got[-1] == {"event": "done", "acked": 12}
    attempts: dict[str, list[int]] = {}
    for e in pushed:
        if e["event"] == "received":
            attempts.setdefault(e["body"], []).append(e["attempt"])
    assert attempts == {f"j-{i}": ([1, 2] if i == 7 else [1]) for i in range(12)}  # a failed one comes back
    assert pushed[-1] == {"event": "done", "consumed": 12}


def test_a_java_5_fifo_producer_keeps_a_message_group_in_one_queue(cluster: Cluster, front: str, java5: JavaBuild,
                                                                   tmp_path: Path):
    cluster.create_topic("Java5fifo", 4)
    # The simple consumer acks what it receives: the queues' max offsets (what was stored where) stay as they were.
    _, got = run(java5, tmp_path, front, ("produce", "Java5fifo", "8", "order-7"),
                 ("simple", "Java5fifo", "java5-fifo", "8", "60"))  # (in plaintext, on the same port)
    assert cluster.front.front.acceptor.plain_connections >= 1
    store = cluster.brokers[0].store
    counts = [store.get_max_offset_in_queue("Java5fifo", q) for q in range(4)]
    assert sorted(counts) == [0, 0, 0, 8]
    assert all(e["group"] == "order-7" for e in got if e["event"] == "received")


def test_the_grpc_benchmark_client_sends_and_reads_back_through_the_front_and_marks_what_it_measured(
        cluster: Cluster, front: str, java5: JavaBuild, tmp_path: Path):
    """``Bench5`` (bench/grpc_reference.py's load generator) keeps working against Sluice's front: sync sends, then
    a simple and a push consumer reading all of them, each run marking its measured part."""
    cluster.create_topic("Bench5", 4)

    def bench(*args: str) -> dict[str, Any]:
        argv = ["java", *CLIENT_JVM_OPTIONS, f"-Duser.home={tmp_path}", "-cp", java5.classpath,
                "sluice.interop5.Bench5", front, *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f"Bench5 failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        assert [e["event"] for e in events] == ["start", "end", "result"], events
        return events[-1]

    sent = bench("sync", "Bench5", "4", "1")
    assert sent["messages"] > 0 and sent["errors"] == 0 and sent["warmup"] == 2000 and sent["p50_ms"] > 0
    stored = sent["messages"] + sent["warmup"]
    assert sum(cluster.brokers[0].store.get_max_offset_in_queue("Bench5", q) for q in range(4)) == stored
    got = bench("simple", "Bench5", "bench5-simple", "2", str(stored))
    assert got["messages"] == stored and got["errors"] == 0
    pushed = bench("push", "Bench5", "bench5-push", "4", str(stored))
    assert pushed["messages"] >= stored  # (a push consumer may see one twice: it counts deliveries)
