"""The broker's event loop never stalls: while topics are created, CommitLog segments roll and a backlog of due
delayed messages is delivered, no callback holds the loop for more than 20 ms.

The broker runs in its own process (clients in this one would share its GIL) and measures itself: a timer that
notes how late it fires (``eventLoopLagMaxMs`` of GET_BROKER_RUNTIME_INFO).
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sluice.client.admin import Admin
from sluice.client.aio import Producer
from sluice.client.message import Message
from tests.conftest import Cluster

CONFIG = """
[broker]
message_delay_level = "2s"

[store]
mapped_file_size_commit_log = 1048576
mapped_file_size_consume_queue = 120000
"""
DELAYED = 4000
MAX_LAG_MS = 20.0


@contextmanager
def broker_process(namesrv: str, tmp_path: Path, run: int) -> Iterator[str]:
    """``sluice broker`` on the store in ``tmp_path``; yields its address, stops it with SIGTERM."""
    config = tmp_path / "broker.toml"
    config.write_text(CONFIG)
    log = tmp_path / f"broker-{run}.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", "broker", "--config", str(config),
                                 "--namesrv", namesrv, "--port", "0", "--store", str(tmp_path / "store")],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        ready = re.search(r"ready on (\S+)", proc.stdout.readline())
        assert ready, f"broker did not start:\n{log.read_text()[-3000:]}"
        yield ready.group(1)
        assert proc.poll() is None, f"the broker died ({proc.returncode}):\n{log.read_text()[-3000:]}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == 0, f"the broker did not stop cleanly ({proc.returncode}):\n{log.read_text()[-3000:]}"


async def send_delayed(namesrv: str) -> float:
    """``DELAYED`` messages due 2 s after they are stored; returns when the last one was acknowledged."""
    async with Admin(namesrv) as admin:
        await admin.create_topic("late", queues=4, wait=30)
    async with Producer("lag-delayed-pg", namesrv) as producer:
        sends = [producer.send_async(Message("late", b"d%d" % i, delay_level=1)) for i in range(DELAYED)]
        await asyncio.gather(*sends)
    return time.time()


async def load_and_measure(namesrv: str, broker: str) -> tuple[float, int]:
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
    return float(info["eventLoopLagMaxMs"]), n


def test_the_broker_loop_never_stalls_while_topics_are_created_segments_roll_and_a_backlog_is_delivered(
        empty_cluster: Cluster, tmp_path: Path):
    namesrv = empty_cluster.namesrv_addr
    with broker_process(namesrv, tmp_path, 1):
        last_sent = asyncio.run(send_delayed(namesrv))
    # Down while the messages come due: the restarted broker finds all of them due at once.
    while time.time() < last_sent + 2.5:
        time.sleep(0.1)
    with broker_process(namesrv, tmp_path, 2) as broker:
        lag_ms, delivered = asyncio.run(load_and_measure(namesrv, broker))
    assert delivered == DELAYED
    assert lag_ms < MAX_LAG_MS, f"the broker's event loop stalled for {lag_ms} ms"
