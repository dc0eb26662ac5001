"""Lite topics (RocketMQ 5.5) with the official Java 5.x client (``rocketmq-client-java`` 5.2.0: its Producer's
``setLiteTopic`` and its ``LitePushConsumer``) through Sluice's gRPC front: a consumer subscribed to some lite topics
of a parent gets exactly their messages, each lite topic in order, a failed one again; when another consumer of an
exclusive group takes a lite topic over, the client is told and drops it from its subscriptions. The program is
``java5lite/.../Lite.java``, built once per machine."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.client.admin import Admin
from sluice.proxy import messaging_service
from tests.conftest import Cluster
from tests.integration.helpers import wait_until
from tests.interop.java_clients import CLIENT_JVM_OPTIONS, JavaBuild, java_build_for_tests

PROJECT = Path(__file__).parent / "java5lite"
PARENT = "Conversations"
GROUP = "agents"


@pytest.fixture(scope="session")
def java5lite() -> JavaBuild:
    return java_build_for_tests(PROJECT, "sluice-interop5lite.jar", "the Java lite topic program")


@pytest.fixture(params=[True, False], ids=["fifo", "concurrent"])
def fifo(request: pytest.FixtureRequest) -> bool:
    """Whether the group is a FIFO group (the client consumes each lite topic in order) or not (concurrently)."""
    return bool(request.param)


@pytest.fixture
def lite_front(empty_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, fifo: bool) -> Iterator[str]:
    """A broker that keeps light queues, a LITE parent topic and a group bound to it, and the gRPC front."""
    from sluice.proxy.messaging_service import serve, stop

    monkeypatch.setattr(messaging_service, "MAX_POLL_SECONDS", 3.0)  # (a consumer's close waits for its poll)
    c = empty_cluster
    c.start_broker("broker-a", store_enable_lmq=True, store_enable_multi_dispatch=True)
    c.create_topic(PARENT, 4, attributes="+message.type=LITE,+lite.topic.expiration=60")

    async def group() -> None:
        async with Admin(c.namesrv_addr) as admin:
            await admin.update_group(GROUP, attributes=f"+lite.bind.topic={PARENT}", consumeMessageOrderly=fifo)

    c.loop.run(group())
    server, service, port = c.loop.run(serve(c.namesrv_addr, "127.0.0.1", 0))
    c.front = service
    try:
        yield f"127.0.0.1:{port}"
    finally:
        c.loop.run(stop(server, service))


class Program:
    """One run of the Java program; its JSON lines as they come."""

    def __init__(self, java5lite: JavaBuild, tmp_path: Path, front: str, *args: str) -> None:
        argv = ["java", *CLIENT_JVM_OPTIONS, f"-Duser.home={tmp_path}", "-cp", java5lite.classpath,
                "sluice.interop5lite.Lite", front, *args]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL)
        self.events: list[dict[str, Any]] = []
        self.err: list[str] = []
        self._threads = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=lambda: self.err.extend(self.proc.stderr or ()), daemon=True)]
        for t in self._threads:
            t.start()

    def _read(self) -> None:
        for line in self.proc.stdout or ():
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def wait(self, timeout: float = 180) -> list[dict[str, Any]]:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise
        for t in self._threads:
            t.join(10)
        assert code == 0, f"the Java lite program failed ({code}):\n{''.join(self.err)[-3000:]}"
        return self.events

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# The FIFO group's run is tests/reference/test_lite_topics.py's Sluice side (compared with RocketMQ's there).
@pytest.mark.parametrize("fifo", [False], ids=["concurrent"])
def test_a_java_lite_push_consumer_gets_its_lite_topics_in_order_and_nothing_else(
        lite_front: str, java5lite: JavaBuild, tmp_path: Path, fifo: bool) -> None:
    sent = Program(java5lite, tmp_path, lite_front, "produce", PARENT, "chat-1", "10", "chat-2", "10", "chat-3",
                   "5").wait()
    assert [e["body"] for e in sent] == [f"{lite}-{i}" for lite, n in (("chat-1", 10), ("chat-2", 10), ("chat-3", 5))
                                         for i in range(n)]
    # (within 45 s: a failed message comes back after its first retry delay, 1 s, not its invisible time's 60)
    consumer = Program(java5lite, tmp_path, lite_front, "consume", PARENT, GROUP, "20", "45", "chat-1", "chat-2")
    events = consumer.wait()
    assert consumer.of("subscribed")[0]["lite_topics"] == 2
    assert consumer.of("done")[0]["consumed"] == 20, json.dumps(events)
    got = consumer.of("consumed")
    assert {e["lite_topic"] for e in got} == {"chat-1", "chat-2"} and {e["topic"] for e in got} == {PARENT}
    for lite in ("chat-1", "chat-2"):
        bodies = [e["body"] for e in got if e["lite_topic"] == lite]
        if fifo:  # in order; the one that failed comes again, before what follows it
            assert bodies == [f"{lite}-{i}" for i in range(8)] + [f"{lite}-7", f"{lite}-8", f"{lite}-9"], bodies
        else:
            assert sorted(bodies) == sorted([f"{lite}-{i}" for i in range(10)] + [f"{lite}-7"]), bodies
        again = [e["attempt"] for e in got if e["body"] == f"{lite}-7"]
        assert again == [1, 2]
    assert len(events) >= 22


@pytest.mark.parametrize("fifo", [False], ids=["concurrent"])
def test_a_java_lite_push_consumer_is_told_when_another_takes_its_lite_topic_over(
        lite_front: str, java5lite: JavaBuild, tmp_path: Path, empty_cluster: Cluster) -> None:
    async def exclusive() -> None:
        async with Admin(empty_cluster.namesrv_addr) as admin:
            await admin.update_group(GROUP, attributes="+lite.sub.model=Exclusive")

    empty_cluster.loop.run(exclusive())
    Program(java5lite, tmp_path, lite_front, "produce", PARENT, "shared-chat", "1").wait()
    first = Program(java5lite, tmp_path, lite_front, "unsubscribe", PARENT, GROUP, "shared-chat", "90")
    try:
        wait_until(lambda: first.of("subscribed"), 90, "the first Java consumer's subscription")
        # A second consumer of the group subscribes to the same lite topic: it takes it over, the first is told.
        second = Program(java5lite, tmp_path, lite_front, "consume", PARENT, GROUP, "0", "10", "shared-chat").wait()
        assert [e for e in second if e["event"] == "subscribed"] == [{"event": "subscribed", "lite_topics": 1}]
        first.wait(120)
    finally:
        first.kill()
    assert first.of("done") == [{"event": "done", "lite_topics": 0}]
