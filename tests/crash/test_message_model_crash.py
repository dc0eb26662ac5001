"""What the message model keeps through a broker SIGKILL: a recall (the recalled timer message is never delivered
after the restart, its neighbour is), and priorities (a PRIORITY topic's type and each message's place: a POP after
the restart still hands out the highest first)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from sluice import Message, Producer, PullConsumer, SimpleConsumer
from sluice.client import _loop
from sluice.client.admin import Admin
from sluice.common.message import MessageExt
from tests.broker_process import BrokerProcess
from tests.conftest import Cluster
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.crash

CONFIG = """
[broker]
recall_message_enable = true

[store]
timer_precision_ms = 100
"""


async def _create_topics(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic("rc", queues=1, wait=30)
        await admin.create_topic("pc", queues=4, wait=30, message_type="PRIORITY")


def test_a_recall_and_priorities_survive_a_sigkill(empty_cluster: Cluster, tmp_path: Path) -> None:
    namesrv = empty_cluster.namesrv_addr
    broker = BrokerProcess(namesrv, tmp_path, CONFIG)
    broker.start()
    try:
        _loop.run(_create_topics(namesrv))
        with Producer("mm-pg", namesrv=namesrv) as p:
            # Due before the one kept: once that one is delivered, the recalled one's time has passed too.
            recalled = p.send(Message("rc", b"take me back", delay=timedelta(seconds=3)))
            p.send(Message("rc", b"keep me", delay=timedelta(seconds=4)))
            assert recalled.recall_handle is not None
            assert p.recall_message("rc", recalled.recall_handle) == recalled.msg_id
            queues = [p.send(Message("pc", f"p{pr}-{i}".encode(), priority=pr)).queue.queue_id
                      for i, pr in enumerate([0, 3, 1, 2])]
            assert queues == [0, 3, 1, 2]
            sent = time.time()
        broker.kill()
        # Down until both are due (what CI's load did once): after the restart they are read from the timer queue
        # with their time passed, and the recall still takes its message back.
        wait_until(lambda: time.time() > sent + 4.5, 10, "both timers due while the broker is down")
        broker.start()

        got: list[bytes] = []
        with PullConsumer("rc-reader", namesrv=namesrv, consume_from="first") as reader:
            reader.subscribe("rc")
            wait_until(lambda: got.extend(m.body for m in reader.poll(0.2)) or b"keep me" in got, 60,
                       "the kept timer message after the restart")
            for _ in range(3):  # (anything due with it would be here by now)
                got.extend(m.body for m in reader.poll(0.2))
        assert got == [b"keep me"]

        popped: list[MessageExt] = []
        with SimpleConsumer("pc-g", namesrv=namesrv, consume_from_first=True) as c:
            c.subscribe("pc")

            def more() -> bool:
                for m in c.receive(32, wait=1.0):
                    popped.append(m)
                    c.ack(m)
                return len(popped) >= 4

            wait_until(more, 60, "the priority backlog")
        assert [m.body for m in popped] == [b"p3-1", b"p2-3", b"p1-2", b"p0-0"]
    finally:
        broker.stop()
