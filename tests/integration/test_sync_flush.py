"""A SYNC_FLUSH broker answers SEND_OK only once the message's bytes are fsynced (group commit), for single
sends and batches sent concurrently by a real producer, and at once for WAIT=false."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from sluice import BrokerResponseError, ClientError, PullConsumer
from sluice.client.admin import Admin
from sluice.client.aio import Producer
from sluice.client.message import Message, SendStatus
from sluice.common.message import decode_message_id
from sluice.common.sysflag import PERM_READ
from sluice.remoting.codes import ResponseCode
from sluice.store import mapped_file as mapped_file_module

SYNC_DELAY = 0.02  # a slow disk: an answer sent before the fsync would be seen before it ends


class SlowSync:
    """os.fdatasync that takes ``SYNC_DELAY`` first, counting calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        self.real = os.fdatasync

    def __call__(self, fd: int) -> None:
        with self.lock:
            self.calls += 1
        threading.Event().wait(SYNC_DELAY)
        self.real(fd)


def test_every_send_ok_comes_after_its_bytes_are_fsynced(empty_cluster, monkeypatch: pytest.MonkeyPatch):
    broker = empty_cluster.start_broker("broker-a", store_flush_disk_type="SYNC_FLUSH")
    empty_cluster.create_topic("durable", 4)
    commit_log = broker.store.commit_log
    slow = SlowSync()
    monkeypatch.setattr(mapped_file_module.os, "fdatasync", slow)
    unflushed: list[str] = []

    def check(offset_msg_id: str) -> None:
        """At the moment the answer is in: the record at that commit-log offset lies below the flushed mark."""
        offset = decode_message_id(offset_msg_id)[1]
        size = commit_log.record_size_at(offset)
        if size is None or commit_log.flushed_where < offset + size:
            unflushed.append(offset_msg_id)

    async def scenario() -> list:
        async with Producer("sync-flush-producer", namesrv=empty_cluster.namesrv_addr) as producer:
            async def single(i: int):
                r = await producer.send(Message("durable", b"single-%d" % i))
                check(r.offset_msg_id)
                return r

            async def batch(i: int):
                r = await producer.send_batch([Message("durable", b"batch-%d-%d" % (i, j)) for j in range(8)])
                for oid in r.offset_msg_id.split(","):
                    check(oid)
                return r

            return await asyncio.gather(*(single(i) for i in range(40)), *(batch(i) for i in range(5)))

    calls_before = slow.calls
    results = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert unflushed == []
    assert 0 < slow.calls - calls_before < 45  # group commit: answers share fsyncs


def test_wait_false_send_is_answered_without_waiting_for_the_disk(empty_cluster, monkeypatch: pytest.MonkeyPatch):
    broker = empty_cluster.start_broker("broker-a", store_flush_disk_type="SYNC_FLUSH",
                                        store_sync_flush_timeout=200)
    empty_cluster.create_topic("eager", 1)
    hang = threading.Event()
    monkeypatch.setattr(mapped_file_module.os, "fdatasync", lambda fd: hang.wait(5))

    async def scenario() -> tuple:
        async with Producer("sync-flush-producer", namesrv=empty_cluster.namesrv_addr) as producer:
            eager = await producer.send(Message("eager", b"no wait", wait_store_msg_ok=False))
            waited = await producer.send(Message("eager", b"waits"))
            return eager, waited

    try:
        eager, waited = asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        hang.set()
    assert eager.status is SendStatus.SEND_OK
    assert waited.status is SendStatus.FLUSH_DISK_TIMEOUT  # answered by the timeout, the disk still busy
    assert broker.store.sync_flush


def test_a_broker_whose_fsync_failed_refuses_sends_routes_clients_away_and_still_serves_reads(
        empty_cluster, monkeypatch: pytest.MonkeyPatch):
    broker = empty_cluster.start_broker("broker-a", store_flush_disk_type="SYNC_FLUSH")
    empty_cluster.create_topic("fragile", 2)
    queue = broker.store.commit_log.queue
    real = os.fdatasync
    fail = {"armed": False}

    def fdatasync(fd: int) -> None:
        if fail["armed"] and any(mf._fd == fd for mf in queue.files):
            fail["armed"] = False
            raise OSError(5, "Input/output error (injected)")
        real(fd)

    monkeypatch.setattr(mapped_file_module.os, "fdatasync", fdatasync)

    async def go() -> None:
        async with Producer("fragile-pg", empty_cluster.namesrv_addr, retry_times_when_send_failed=0) as producer:
            ok = await producer.send(Message("fragile", b"before"))
            assert ok.status is SendStatus.SEND_OK
            fail["armed"] = True
            with pytest.raises(ClientError) as failed:  # the send waiting for the failed fsync
                await producer.send(Message("fragile", b"during"))
            cause = failed.value.__cause__
            assert isinstance(cause, BrokerResponseError) and cause.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "fsync" in cause.remark
            with pytest.raises(ClientError, match="accepts no writes"):  # every later one
                await producer.send(Message("fragile", b"after"))

        async with Admin(empty_cluster.namesrv_addr) as admin:  # registered read-only: clients route elsewhere
            deadline = asyncio.get_running_loop().time() + 60
            while (await admin.topic_route("fragile")).queue_datas[0].perm != PERM_READ:
                assert asyncio.get_running_loop().time() < deadline, "the route never turned read-only"
                await asyncio.sleep(0.05)

    asyncio.run(go())
    # The message whose fsync failed is stored but never served: it was never durable, and its send failed.
    assert sum(broker.store.get_max_offset_in_queue("fragile", q) for q in range(2)) == 1
    reader = PullConsumer("fragile-reader", namesrv=empty_cluster.namesrv_addr, consume_from="first")
    reader.subscribe("fragile")
    reader.start()
    try:
        got = []
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            got.extend(reader.poll(0.5))
    finally:
        reader.shutdown()
    assert [m.body for m in got] == [b"before"]
