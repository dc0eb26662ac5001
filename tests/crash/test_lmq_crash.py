"""Light queues through a broker SIGKILL: each acknowledged message is in every light queue it named, once, at the
offset written into it; the queues go on from there after the restart."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from sluice import LitePushConsumer, Message, OffsetOption, Producer, PullConsumer
from sluice.client import _loop
from sluice.client.admin import Admin
from sluice.common.lite import POLICY_MIN, to_lmq_name
from sluice.common.lmq_dispatch import lmq_entries
from sluice.common.structs import MessageQueue
from tests.broker_process import BrokerProcess
from tests.conftest import Cluster
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.crash

CONFIG = """
[store]
enable_lmq = true
enable_multi_dispatch = true
"""


async def _create_topic(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic("lq", queues=2, wait=30)


def _read(namesrv: str, lmq: str, n: int) -> list[tuple[bytes, int, int]]:
    got: list[tuple[bytes, int, int]] = []
    with PullConsumer(f"reader-{lmq[5:]}", namesrv=namesrv, consume_from="first", pull_batch_size=64) as c:
        c.assign([MessageQueue(lmq, "broker-a", 0)])
        wait_until(lambda: got.extend((m.body, m.queue_offset, dict(lmq_entries(m.topic, m.properties))[lmq])
                                      for m in c.poll(0.2)) or len(got) >= n, 60, f"{n} messages of {lmq}")
    return got


def test_light_queue_entries_acknowledged_before_a_sigkill_are_there_once_after_the_restart(
        empty_cluster: Cluster, tmp_path: Path) -> None:
    namesrv = empty_cluster.namesrv_addr
    broker = BrokerProcess(namesrv, tmp_path, CONFIG)
    broker.start()
    try:
        _loop.run(_create_topic(namesrv))
        with Producer("lq-pg", namesrv=namesrv) as p:
            futures = [p.send_async(Message("lq", f"m-{i}".encode(), properties={
                "INNER_MULTI_DISPATCH": "%LMQ%odd,%LMQ%all" if i % 2 else "%LMQ%all"})) for i in range(400)]
            for f in futures:
                assert f.result(30).status.name == "SEND_OK"
        broker.kill()
        broker.start()
        with Producer("lq-pg", namesrv=namesrv) as p:
            p.send(Message("lq", b"after", properties={"INNER_MULTI_DISPATCH": "%LMQ%all"}))
        every = _read(namesrv, "%LMQ%all", 401)
        odd = _read(namesrv, "%LMQ%odd", 200)
    finally:
        broker.stop()
    assert sorted(b for b, _, _ in every) == sorted([f"m-{i}".encode() for i in range(400)] + [b"after"])
    assert [o for _, o, _ in every] == list(range(401)) and all(o == w for _, o, w in every)
    assert every[-1][0] == b"after"
    assert sorted(b for b, _, _ in odd) == sorted(f"m-{i}".encode() for i in range(1, 400, 2))
    assert [o for _, o, _ in odd] == list(range(200)) and all(o == w for _, o, w in odd)


def test_a_lite_topics_committed_offset_and_its_messages_survive_a_sigkill(empty_cluster: Cluster,
                                                                          tmp_path: Path) -> None:
    """What a lite consumer acknowledged, once its group's offsets were persisted, is not handed out again after
    a SIGKILL; what it had not is, in order; the lite topic goes on at its offsets."""
    namesrv = empty_cluster.namesrv_addr
    broker = BrokerProcess(namesrv, tmp_path, CONFIG)
    broker.start()
    lmq = to_lmq_name("talks", "t1")

    async def lite_parent() -> None:
        async with Admin(namesrv) as admin:
            await admin.create_topic("talks", queues=2, wait=30, attributes="+message.type=LITE")
            await admin.update_group("talkers", attributes="+lite.bind.topic=talks")

    def consume(n: int, offset: OffsetOption | None) -> list[bytes]:
        got: list[bytes] = []
        lock = threading.Lock()

        def listener(m: Any) -> None:
            with lock:
                got.append(m.body)

        c = LitePushConsumer("talkers", namesrv=namesrv, bind_topic="talks")
        c.register_listener(listener)
        c.start()
        try:
            c.subscribe_lite("t1", offset=offset)
            wait_until(lambda: len(got) >= n, 60, f"{n} messages of lite topic t1")
        finally:
            c.shutdown()
        return got

    def persisted() -> int:
        path = tmp_path / "store" / "config" / "consumerOffset.json"
        table = json.loads(path.read_text()).get("offsetTable", {}) if path.exists() else {}
        return int(table.get(f"{lmq}@talkers", {}).get("0", -1))

    try:
        _loop.run(lite_parent())
        with Producer("talk-pg", namesrv=namesrv) as p:
            for i in range(20):
                p.send(Message("talks", f"a-{i}".encode(), lite_topic="t1"))
        assert consume(20, OffsetOption("POLICY", POLICY_MIN)) == [f"a-{i}".encode() for i in range(20)]
        wait_until(lambda: persisted() == 20, 30, "the group's offset in t1 persisted")
        with Producer("talk-pg", namesrv=namesrv) as p:
            for i in range(5):
                p.send(Message("talks", f"b-{i}".encode(), lite_topic="t1"))
        broker.kill()
        broker.start()
        with Producer("talk-pg", namesrv=namesrv) as p:
            p.send(Message("talks", b"after", lite_topic="t1"))
        assert consume(6, None) == [f"b-{i}".encode() for i in range(5)] + [b"after"]
    finally:
        broker.stop()

