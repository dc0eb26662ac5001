"""Timer messages through a broker SIGKILL: every acknowledged one is delivered after the restart, once."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from sluice import Message, Producer, PullConsumer
from sluice.client import _loop
from sluice.client.admin import Admin
from tests.broker_process import BrokerProcess
from tests.conftest import Cluster
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.crash

CONFIG = """
[store]
timer_precision_ms = 100
"""


async def _create_topic(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic("tk", queues=2, wait=30)


def test_timers_acknowledged_before_a_sigkill_are_delivered_once_after_the_restart(empty_cluster: Cluster,
                                                                                   tmp_path: Path):
    namesrv = empty_cluster.namesrv_addr
    broker = BrokerProcess(namesrv, tmp_path, CONFIG)
    broker.start()
    try:
        _loop.run(_create_topic(namesrv))
        with Producer("tk-pg", namesrv=namesrv) as p:
            early = [p.send_async(Message("tk", f"early-{i}".encode(), delay=timedelta(milliseconds=300)))
                     for i in range(200)]
            late = [p.send_async(Message("tk", f"late-{i}".encode(), delay=timedelta(seconds=4)))
                    for i in range(300)]
            for f in early + late:
                assert f.result(30).status.name == "SEND_OK"
        reader = PullConsumer("tk-reader", namesrv=namesrv, consume_from="first", pull_batch_size=64)
        reader.subscribe("tk")
        got: Counter[bytes] = Counter()
        with reader:
            # The early ones delivered (and committed); the late ones still wait in the wheel when it dies.
            wait_until(lambda: got.update(m.body for m in reader.poll(0.1)) or
                       sum(1 for b in got if b.startswith(b"early")) == 200, 60, "the early timers")
            broker.kill()
            broker.start()
            wait_until(lambda: got.update(m.body for m in reader.poll(0.1)) or
                       sum(1 for b in got if b.startswith(b"late")) == 300, 90, "the late timers after the restart")
        final = PullConsumer("tk-final", namesrv=namesrv, consume_from="first", pull_batch_size=64)
        final.subscribe("tk")
        everything: Counter[bytes] = Counter()
        with final:
            wait_until(lambda: everything.update(m.body for m in final.poll(0.2)) or len(everything) == 500, 60,
                       "every timer message in a fresh read")
        assert set(everything) == {f"early-{i}".encode() for i in range(200)} | {
            f"late-{i}".encode() for i in range(300)}
        assert sum(n for b, n in everything.items() if b.startswith(b"late")) == 300  # the waiting ones: once each
    finally:
        broker.stop()
