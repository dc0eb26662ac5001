"""The broker's event loop never stalls: while topics are created, CommitLog segments roll and a backlog of due
delayed messages is delivered, the loop never works more than 20 ms at a stretch.

The broker runs in its own process (clients in this one would share its GIL) and measures itself: a timer that
notes how late it fires, and how much of that the loop's thread spent working (``eventLoopLagMaxMs`` and
``eventLoopBusyMaxMs`` of GET_BROKER_RUNTIME_INFO). The work is what the broker controls; the rest of the lateness
is the machine (on a busy 2-core machine the thread waits its turn for a CPU), bounded loosely so that a blocking
system call on the loop — an fsync, milliseconds to seconds — still fails the test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sluice.client.admin import Admin
from sluice.client.aio import Producer
from sluice.client.message import Message
from tests.broker_process import BrokerProcess
from tests.conftest import Cluster

CONFIG = """
[broker]
message_delay_level = "2s"

[store]
mapped_file_size_commit_log = 1048576
mapped_file_size_consume_queue = 120000
"""
DELAYED = 4000
MAX_BUSY_MS = 20.0
MAX_LAG_MS = 250.0  # (the machine's share: three test workers on two cores; a blocking fsync still fails it)


@contextmanager
def broker_process(namesrv: str, tmp_path: Path) -> Iterator[str]:
    """``sluice broker`` on the store in ``tmp_path``; yields its address, stops it with SIGTERM."""
    broker = BrokerProcess(namesrv, tmp_path, CONFIG, fixed_port=False)
    try:
        yield broker.start()
        assert broker.alive(), f"the broker died:\n{broker.log.read_text()[-3000:]}"
    finally:
        rc = broker.stop()
    assert rc == 0, f"the broker did not stop cleanly ({rc}):\n{broker.log.read_text()[-3000:]}"


async def send_delayed(namesrv: str) -> float:
    """``DELAYED`` messages due 2 s after they are stored; returns when the last one was acknowledged."""
    async with Admin(namesrv) as admin:
        await admin.create_topic("late", queues=4, wait=30)
    # (a generous send timeout: 4,000 sends on a loaded machine are the set-up, not what the test measures)
    async with Producer("lag-delayed-pg", namesrv, send_msg_timeout=15_000) as producer:
        sends = [producer.send_async(Message("late", b"d%d" % i, delay_level=1)) for i in range(DELAYED)]
        await asyncio.gather(*sends)
    return time.time()


async def load_and_measure(namesrv: str, broker: str) -> tuple[float, float, int]:
    """Topics created and segments rolled while the delayed backlog is delivered; the broker's worst loop lag
    (ms) and how many delayed messages reached their topic."""
    async with Admin(namesrv) as admin, Producer("lag-pg", namesrv) as producer:
        async def create_topics() -> None:
            for i in range(0, 200, 8):
                await asyncio.gather(*(admin.create_topic(f"lag-topic-{j}", queues=4, wait=0)
                                       for j in range(i, i + 8)))

        async def roll_segments() -> None:  # 8 MiB through 1 MiB segments
            body = b"x" * 1024
            for _ in range(8):
                await asyncio.gather(*(producer.send_async(Message("lag-fill", body)) for _ in range(1024)))

        async def delivered() -> int:
            return sum(q.messages for q in await admin.topic_status("late"))

        await admin.create_topic("lag-fill", queues=4, wait=30)
        await asyncio.gather(create_topics(), roll_segments())
        deadline = time.monotonic() + 60
        while (n := await delivered()) < DELAYED and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        info = await admin.broker_runtime_info(broker)
    # (the collector's pauses count in the lag, not in the busy stretch: see sluice.common.loop_lag)
    return float(info["eventLoopBusyMaxMs"]), float(info["eventLoopLagMaxMs"]), n


def test_the_broker_loop_never_stalls_while_topics_are_created_segments_roll_and_a_backlog_is_delivered(
        empty_cluster: Cluster, tmp_path: Path):
    namesrv = empty_cluster.namesrv_addr
    with broker_process(namesrv, tmp_path):
        last_sent = asyncio.run(send_delayed(namesrv))
    # Down while the messages come due: the restarted broker finds all of them due at once.
    while time.time() < last_sent + 2.5:
        time.sleep(0.1)
    with broker_process(namesrv, tmp_path) as broker:
        busy_ms, lag_ms, delivered = asyncio.run(load_and_measure(namesrv, broker))
    assert delivered == DELAYED
    assert busy_ms < MAX_BUSY_MS, f"the broker's event loop worked {busy_ms} ms at a stretch"
    assert lag_ms < MAX_LAG_MS, f"the broker's event loop stalled for {lag_ms} ms"
