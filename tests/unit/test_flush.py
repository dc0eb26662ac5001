"""Flushing: SYNC acks only after fsync, concurrent puts share fsyncs, a slow disk yields FLUSH_DISK_TIMEOUT."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable

import pytest

from sluice.common.config import MessageStoreConfig
from sluice.store import MessageStore, PutMessageStatus
from sluice.store import mapped_file as mapped_file_module
from sluice.store.index_file import IndexFile

from .helpers import msg


class CountingSync:
    """Wraps os.fdatasync to count calls and optionally slow them down: by ``delay`` seconds, or (``gate``) until
    the event is set — a disk that hangs as long as the test wants, however slow the machine."""

    def __init__(self, delay: float = 0.0, gate: threading.Event | None = None) -> None:
        self.calls = 0
        self.delay = delay
        self.gate = gate
        self.real = os.fdatasync

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.gate is not None:
            assert self.gate.wait(60), "the test never let the disk go on"
        self.real(fd)


def test_sync_put_returns_after_its_bytes_are_flushed(store_config: MessageStoreConfig):
    with MessageStore(store_config.replace(flush_disk_type="SYNC")) as store:
        for _ in range(20):
            r = store.put_message(msg(body=b"x" * 100))
            assert r.ok
            assert store.commit_log.flushed_where >= r.wrote_offset + r.wrote_bytes


def test_concurrent_sync_puts_share_fsyncs(store_config: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch):
    counter = CountingSync(delay=0.002)
    monkeypatch.setattr(mapped_file_module.os, "fdatasync", counter)
    with MessageStore(store_config.replace(flush_disk_type="SYNC", mapped_file_size_commit_log=1 << 20)) as store:
        results: list = []

        def writer(n: int) -> None:
            for i in range(25):
                results.append(store.put_message(msg(body=f"{n}-{i}".encode(), queue_id=n % 4)))

        before = counter.calls
        threads = [threading.Thread(target=writer, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 400 and all(r.ok for r in results)
        assert counter.calls - before < 400 / 2  # group commit: far fewer fsyncs than puts
        assert store.commit_log.flushed_where == store.commit_log.max_offset


def test_async_api_waits_for_group_commit(store_config: MessageStoreConfig):
    async def main(store: MessageStore) -> list:
        return await asyncio.gather(*(store.put_async([msg(body=str(i).encode())]) for i in range(64)))

    with MessageStore(store_config.replace(flush_disk_type="SYNC")) as store:
        results = asyncio.run(main(store))
        assert all(r.ok for r in results)
        assert sorted(r.queue_offset for r in results) == list(range(64))
        assert store.commit_log.flushed_where >= max(r.wrote_offset + r.wrote_bytes for r in results)


def test_slow_disk_yields_flush_disk_timeout(store_config: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch):
    with MessageStore(store_config.replace(flush_disk_type="SYNC", sync_flush_timeout=100)) as store:
        disk = threading.Event()  # the fsync hangs until the put has its answer
        monkeypatch.setattr(mapped_file_module.os, "fdatasync", CountingSync(gate=disk))
        try:
            r = store.put_message(msg())
        finally:
            disk.set()
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and "100 ms" in r.remark
        monkeypatch.undo()


def test_async_flush_acks_at_once_and_flushes_within_the_interval(store_config: MessageStoreConfig):
    with MessageStore(store_config.replace(flush_interval_commit_log=50, flush_commit_log_least_pages=0)) as store:
        r = store.put_message(msg(body=b"x" * 1000))
        assert r.ok
        deadline = time.monotonic() + 60
        while store.commit_log.flushed_where < r.wrote_offset + r.wrote_bytes and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.commit_log.flushed_where >= r.wrote_offset + r.wrote_bytes


def test_wait_false_does_not_wait_for_the_flush(store_config: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch):
    with MessageStore(store_config.replace(flush_disk_type="SYNC", sync_flush_timeout=100)) as store:
        monkeypatch.setattr(mapped_file_module.os, "fdatasync", CountingSync(delay=0.3))
        m = msg()
        m.properties["WAIT"] = "false"
        assert store.put_message(m).status is PutMessageStatus.PUT_OK
        monkeypatch.undo()


def _put_then_all(store: MessageStore, n: int, size: int = 0,
                  answered: Callable[[], None] | None = None) -> tuple[list, list]:
    """``put_then`` of ``n`` messages from one loop; (immediate results, results via callback), the
    callbacks checked to run on the loop's thread and each at most once. ``answered`` runs once all are answered.

    Then one more put, waited for: flushes run one after the other, so a flush still running (one that would
    answer a put twice) ends, and its answers reach the loop, before this put's."""
    async def main() -> tuple[list, list]:
        loop_thread = threading.get_ident()
        later: list = []
        all_done = asyncio.get_running_loop().create_future()
        last_done = asyncio.get_running_loop().create_future()

        def done(r) -> None:
            assert threading.get_ident() == loop_thread
            if r.ok and store.sync_flush:  # answered only once the flush covers it
                assert store.commit_log.flushed_where >= r.wrote_offset + r.wrote_bytes
            later.append(r)
            if len(later) + len(now) == n and not all_done.done():
                all_done.set_result(None)

        now: list = []
        calling = False

        def answer(_i: int, r) -> None:
            now.append(r) if calling else done(r)

        for i in range(n):
            calling = True
            store.put_then([[msg(body=str(i).encode().ljust(size))]], answer)
            calling = False
        if len(now) < n:
            await asyncio.wait_for(all_done, 60)
        if answered is not None:
            answered()
        store.put_then([[msg(body=b"last")]], lambda _i, r: last_done.set_result(r))
        await asyncio.wait_for(last_done, 60)
        return now, later

    return asyncio.run(main())


def test_put_then_answers_after_the_group_commit_on_the_callers_loop(store_config: MessageStoreConfig):
    with MessageStore(store_config.replace(flush_disk_type="SYNC")) as store:
        now, later = _put_then_all(store, 64)
        assert now == [] and len(later) == 64 and all(r.ok for r in later)
        assert sorted(r.queue_offset for r in later) == list(range(64))
        assert store.commit_log.flushed_where >= max(r.wrote_offset + r.wrote_bytes for r in later)


def test_put_then_answers_once_appended_under_async_flush(store_config: MessageStoreConfig):
    # The store thread appends, the loop hears it: never during the call, never waiting for a flush.
    with MessageStore(store_config) as store:
        now, later = _put_then_all(store, 8)
        assert now == [] and len(later) == 8 and all(r.ok for r in later)
        assert store.commit_log.flushed_where < max(r.wrote_offset + r.wrote_bytes for r in later)


def test_put_then_times_out_each_waiter_once_when_the_disk_hangs(store_config: MessageStoreConfig,
                                                                  monkeypatch: pytest.MonkeyPatch):
    with MessageStore(store_config.replace(flush_disk_type="SYNC", sync_flush_timeout=100)) as store:
        disk = threading.Event()  # hangs until every put has its answer: they all timed out while it hung
        monkeypatch.setattr(mapped_file_module.os, "fdatasync", CountingSync(gate=disk))
        try:
            # The hung flush ends while the loop still runs, and answers nobody a second time.
            now, later = _put_then_all(store, 5, answered=disk.set)
        finally:
            disk.set()
        assert now == [] and len(later) == 5
        assert all(r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and "100 ms" in r.remark for r in later)
        monkeypatch.undo()


def test_put_then_refusal_is_answered_at_once(store_config: MessageStoreConfig):
    with MessageStore(store_config.replace(flush_disk_type="SYNC", max_message_size=10)) as store:
        now, later = _put_then_all(store, 1, size=11)
        assert later == [] and now[0].status is PutMessageStatus.MESSAGE_ILLEGAL


def test_index_files_are_flushed_only_on_thorough_rounds(store_config: MessageStoreConfig):
    quiet = store_config.replace(flush_interval_consume_queue=600_000)  # rounds run by hand below
    with MessageStore(quiet) as store:
        safe_at_start = store.checkpoint.index_safe_offset
        for i in range(10):
            assert store.put_message(msg(keys=f"k{i}", uniq=f"U{i}")).ok
        index = store.index_service.files[-1]
        store.flush_logics_and_checkpoint(quiet.flush_consume_queue_least_pages)
        assert index.dirty
        assert store.checkpoint.index_safe_offset == safe_at_start
        store.flush_logics_and_checkpoint(0)
        assert not index.dirty
        assert store.checkpoint.index_safe_offset == store.dispatched_offset > safe_at_start


def test_logics_safe_offset_moves_only_past_flushed_consume_queues(store_config: MessageStoreConfig):
    quiet = store_config.replace(flush_interval_consume_queue=600_000, flush_consume_queue_least_pages=2)
    with MessageStore(quiet) as store:
        safe_at_start = store.checkpoint.logics_safe_offset
        assert store.put_message(msg(queue_id=0)).ok  # one 20-byte entry: fewer dirty pages than the least
        store.flush_logics_and_checkpoint(quiet.flush_consume_queue_least_pages)
        cq = store.find_consume_queue("T", 0, create=False)
        assert cq is not None and cq.queue.flushed_where < cq.queue.max_offset
        assert store.checkpoint.logics_safe_offset == safe_at_start
        store.flush_logics_and_checkpoint(0)
        assert cq.queue.flushed_where == cq.queue.max_offset
        assert store.checkpoint.logics_safe_offset == store.dispatched_offset > safe_at_start


def test_a_full_index_file_is_flushed_by_the_flush_round_not_by_the_put(store_config: MessageStoreConfig,
                                                                         monkeypatch: pytest.MonkeyPatch):
    quiet = store_config.replace(flush_interval_consume_queue=600_000)  # rounds run by hand below
    with MessageStore(quiet) as store:
        flushed: list[str] = []
        real_flush = IndexFile.flush

        def recording_flush(f: IndexFile) -> None:
            if f.dirty:
                flushed.append(os.path.basename(f.path))
            real_flush(f)

        monkeypatch.setattr(IndexFile, "flush", recording_flush)
        for i in range(250):  # two keys each: 500 entries fill the first 400-entry file
            assert store.put_message(msg(keys=f"k{i}", uniq=f"U{i}")).ok
        files = store.index_service.files
        assert len(files) == 2 and flushed == []  # the put that filled it did not flush it
        store.flush_logics_and_checkpoint(quiet.flush_consume_queue_least_pages)
        assert flushed == [os.path.basename(files[0].path)] and files[1].dirty
        assert store.query_message("T", "k10").messages and store.query_message("T", "k240").messages


def test_index_files_and_every_consume_queue_are_flushed_every_flush_interval_index(
        store_config: MessageStoreConfig):
    cfg = store_config.replace(flush_interval_consume_queue=50, flush_interval_index=3_000,
                               flush_consume_queue_least_pages=2)
    with MessageStore(cfg) as store:
        cp = store.checkpoint
        safe_at_start = (cp.index_safe_offset, cp.logics_safe_offset)
        assert store.put_message(msg(keys="k", uniq="U1")).ok  # one consume-queue entry: under the least pages
        index = store.index_service.files[-1]
        cq = store.find_consume_queue("T", 0, create=False)
        assert cq is not None
        # What each round of the flush service left behind (recorded by the round itself, whatever the timing).
        rounds: list[tuple[int, bool, bool, tuple[int, int]]] = []
        flush_round = store.flush_logics_and_checkpoint

        def recorded(least_pages: int) -> None:
            flush_round(least_pages)
            rounds.append((least_pages, index.dirty, cq.queue.flushed_where < cq.queue.max_offset,
                           (cp.index_safe_offset, cp.logics_safe_offset)))

        store.flush_logics_and_checkpoint = recorded  # type: ignore[method-assign]
        deadline = time.monotonic() + 60
        while not any(least == 0 for least, *_ in rounds):
            assert time.monotonic() < deadline, "no thorough round"
            time.sleep(0.02)
        thorough = next(i for i, (least, *_) in enumerate(rounds) if least == 0)
        # The consume-queue rounds before it: none due for the index, none flushing the lone entry.
        assert thorough >= 1, "no ordinary round came before the index's"
        assert all(r[1:] == (True, True, safe_at_start) for r in rounds[:thorough]), rounds[:thorough]
        # The index's round flushed it, every consume queue, and moved the checkpoint past both.
        least, dirty, cq_behind, (index_safe, logics_safe) = rounds[thorough]
        assert not dirty and not cq_behind
        assert index_safe == logics_safe == store.dispatched_offset
