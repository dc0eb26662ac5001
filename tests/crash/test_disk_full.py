"""A broker on a small file system that fills up: it refuses writes with a clear status and keeps serving reads,
and every acknowledged message stays readable — it never dies writing into space the disk cannot back (SIGBUS).

The store lives on a loop-mounted ext4 image (tmpfs when loop devices are not available); mounting needs root,
and the test skips, naming the reason, where it cannot mount.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice import PullConsumer
from sluice.client.admin import Admin
from sluice.client.aio import Producer
from sluice.client.message import Message, SendStatus
from sluice.common.errors import ClientError
from tests.conftest import Cluster

pytestmark = pytest.mark.crash

FS_MB = 48
CONFIG = """
[store]
mapped_file_size_commit_log = 4194304
mapped_file_size_consume_queue = 200000
max_hash_slot_num = 2000
max_index_num = 8000
warm_mapped_file_ahead = 1048576
warm_mapped_file_chunk = 262144
disk_space_warning_level_ratio = 0.99    # the free-space checks of the write path decide, not the 10 s timer
disk_space_clean_forcibly_ratio = 0.99
"""


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A file system of ``FS_MB`` MiB mounted under ``tmp_path``: ext4 on a loop device, else tmpfs."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    image = tmp_path / "fs.img"
    mounted = False
    if shutil.which("mkfs.ext4") and shutil.which("mount"):
        with open(image, "wb") as f:
            f.truncate(FS_MB << 20)
        if _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image)).returncode == 0:
            mounted = _run("mount", "-o", "loop", str(image), str(mnt)).returncode == 0
    if not mounted:
        r = _run("mount", "-t", "tmpfs", "-o", f"size={FS_MB}m", "tmpfs", str(mnt))
        if r.returncode != 0:
            pytest.skip(f"cannot mount a small file system here (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        for _ in range(20):
            if _run("umount", str(mnt)).returncode == 0:
                break
            time.sleep(0.2)  # a closing process may still hold a file on it
        image.unlink(missing_ok=True)


def test_a_broker_on_a_full_disk_refuses_writes_keeps_serving_reads_and_loses_no_ack(empty_cluster: Cluster,
                                                                                      small_fs: Path,
                                                                                      tmp_path: Path):
    config = tmp_path / "broker.toml"
    config.write_text(CONFIG)
    log = tmp_path / "broker.log"
    with open(log, "w") as err:
        broker = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", "broker", "--config", str(config),
                                   "--namesrv", empty_cluster.namesrv_addr, "--port", "0", "--store",
                                   str(small_fs / "store")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=err, text=True)
    try:
        assert broker.stdout is not None
        ready = broker.stdout.readline()
        assert re.search(r"ready on (\S+)", ready), f"broker did not start: {ready!r}\n{log.read_text()}"
        acked, refusals = asyncio.run(_fill(empty_cluster.namesrv_addr))

        assert broker.poll() is None, f"the broker died ({broker.returncode}):\n{log.read_text()[-3000:]}"
        assert refusals and all("disk is full" in r for r in refusals), refusals[:3]
        assert len(acked) > 10_000  # it did fill the disk
        text = log.read_text()
        assert "no space left on the disk" in text and "Refusing writes" in text

        reader = PullConsumer("fill-reader", namesrv=empty_cluster.namesrv_addr, consume_from="first",
                              pull_batch_size=256)
        reader.subscribe("fill")
        reader.start()
        got: set[bytes] = set()
        try:
            deadline = time.monotonic() + 60
            while not acked <= got and time.monotonic() < deadline:
                got.update(m.body for m in reader.poll(0.5))
        finally:
            reader.shutdown()
        assert acked <= got, f"{len(acked - got)} acknowledged messages are missing"
        assert broker.poll() is None
    finally:
        if broker.poll() is None:
            broker.send_signal(signal.SIGTERM)
            try:
                broker.wait(30)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait(10)
        if broker.stdout is not None:
            broker.stdout.close()
    assert broker.returncode == 0, f"the broker did not stop cleanly ({broker.returncode}):\n{log.read_text()[-3000:]}"


async def _fill(namesrv: str) -> tuple[set[bytes], list[str]]:
    """Eight senders of 1 KiB messages until each has been refused three times in a row."""
    acked: set[bytes] = set()
    refusals: list[str] = []
    async with Admin(namesrv) as admin:
        await admin.create_topic("fill", queues=4, wait=30)
    async with Producer("fill-pg", namesrv, retry_times_when_send_failed=0, send_msg_timeout=10_000) as producer:

        async def sender(k: int) -> None:
            refused_in_a_row = 0
            i = 0
            while refused_in_a_row < 3:
                body = f"{k}-{i}-".encode().ljust(1024, b"x")
                i += 1
                try:
                    r = await producer.send(Message("fill", body))
                except ClientError as exc:
                    refused_in_a_row += 1
                    refusals.append(str(exc))
                    continue
                refused_in_a_row = 0
                if r.status is SendStatus.SEND_OK:
                    acked.add(body)

        await asyncio.wait_for(asyncio.gather(*(sender(k) for k in range(8))), 240)
    return acked, refusals
