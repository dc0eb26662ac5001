"""Lite topics (RocketMQ 5.5), the Java 5.x client's side by side: the same program (``java5lite/.../Lite.java``)
sends to three lite topics of a FIFO parent and its ``LitePushConsumer`` reads two of them, failing one message once,
through Apache RocketMQ 5.5's proxy and broker and through Sluice's gRPC front and broker. What the consumer is
handed — which messages, in which order per lite topic, which again and at which attempt — must be the same."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.client.admin import Admin
from sluice.proxy import messaging_service
from tests.conftest import Cluster
from tests.interop.java_clients import JavaBuild
from tests.interop.test_java_lite_topics import Program, java5lite  # noqa: F401  (the fixture)
from tests.reference.conftest import run, running
from tests.reference.rocketmq_node import RocketMQNode

PARENT = "ref-lite-chats"
GROUP = "ref-lite-readers"
SENT = (("chat-1", 10), ("chat-2", 10), ("chat-3", 5))


async def _lite_parent_and_group(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(PARENT, 4, attributes="+message.type=LITE,+lite.topic.expiration=60")
        await admin.update_group(GROUP, attributes=f"+lite.bind.topic={PARENT}", consumeMessageOrderly=True)


@pytest.fixture(scope="module")
def rocketmq_proxy(rocketmq: RocketMQNode) -> Iterator[str]:
    """RocketMQ's proxy beside the session's reference node (which keeps light queues), for this module only."""
    run(_lite_parent_and_group(running(rocketmq).namesrv))
    try:
        endpoint = rocketmq.start_proxy({})
    except RuntimeError as exc:
        pytest.fail(f"cannot start RocketMQ's proxy: {exc}", pytrace=False)
    try:
        yield endpoint
    finally:
        rocketmq.stop_proxy()


@pytest.fixture
def sluice_front(empty_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from sluice.proxy.messaging_service import serve, stop

    monkeypatch.setattr(messaging_service, "MAX_POLL_SECONDS", 3.0)  # (a consumer's close waits for its poll)
    empty_cluster.start_broker("broker-a", store_enable_lmq=True, store_enable_multi_dispatch=True)
    empty_cluster.loop.run(_lite_parent_and_group(empty_cluster.namesrv_addr))
    server, service, port = empty_cluster.loop.run(serve(empty_cluster.namesrv_addr, "127.0.0.1", 0))
    try:
        yield f"127.0.0.1:{port}"
    finally:
        empty_cluster.loop.run(stop(server, service))


def observe(build: JavaBuild, home: Path, endpoint: str) -> dict[str, Any]:
    """What the Java client sees: each lite topic's messages in the order handed out, the attempts of those
    handed out more than once, and the consumer's own summary."""
    sent = Program(build, home, endpoint, "produce", PARENT,
                   *(str(v) for lite, n in SENT for v in (lite, n))).wait()
    assert len(sent) == sum(n for _, n in SENT)
    consumer = Program(build, home, endpoint, "consume", PARENT, GROUP, "20", "60", "chat-1", "chat-2")
    consumer.wait()
    got = consumer.of("consumed")
    return {"order": {lite: [e["body"] for e in got if e["lite_topic"] == lite] for lite, _ in SENT},
            "attempts": sorted((e["body"], e["attempt"]) for e in got if e["attempt"] > 1),
            "topics": sorted({e["topic"] for e in got}),
            "summary": [e for e in consumer.events if e["event"] in ("subscribed", "done")]}


def test_a_lite_push_consumer_is_handed_the_same_messages_in_the_same_order(
        rocketmq_proxy: str, sluice_front: str, java5lite: JavaBuild, tmp_path: Path) -> None:  # noqa: F811
    theirs = observe(java5lite, tmp_path / "rocketmq", rocketmq_proxy)
    ours = observe(java5lite, tmp_path / "sluice", sluice_front)
    assert ours == theirs
    # (and what that is: each lite topic in order, the failed message again at attempt 2, before what follows)
    assert theirs["order"]["chat-1"] == [f"chat-1-{i}" for i in range(8)] + ["chat-1-7", "chat-1-8", "chat-1-9"]
    assert theirs["attempts"] == [("chat-1-7", 2), ("chat-2-7", 2)] and theirs["order"]["chat-3"] == []
