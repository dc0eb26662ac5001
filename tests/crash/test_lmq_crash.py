"""Light queues through a broker SIGKILL: each acknowledged message is in every light queue it named, once, at the
offset written into it; the queues go on from there after the restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice import Message, Producer, PullConsumer
from sluice.client import _loop
from sluice.client.admin import Admin
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
