"""A failed fsync is never acknowledged later: the store turns read-only, fails the waiting puts, counts no later
flush, writes the checkpoint no more, and the next start recovers from the log as after a crash.

Failures are injected at the OS boundary: ``os.fdatasync`` fails with EIO for the commit log's files (once, and
succeeds after, as Linux does once it has dropped the dirty pages)."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable

import pytest

from sluice.common.config import FlushDiskType, MessageStoreConfig
from sluice.store import MessageStore, PutMessageStatus
from sluice.store import mapped_file as mapped_file_module

from .helpers import msg, read_queue


class FailOnce:
    """``os.fdatasync`` that fails once with EIO for the files ``target(fd)`` picks, then behaves."""

    def __init__(self, target: Callable[[int], bool]) -> None:
        self.target = target
        self.real = os.fdatasync
        self.armed = False
        self.failed = 0

    def __call__(self, fd: int) -> None:
        if self.armed and self.target(fd):
            self.armed = False
            self.failed += 1
            raise OSError(errno.EIO, "Input/output error (injected)")
        self.real(fd)


def commit_log_fds(store: MessageStore) -> Callable[[int], bool]:
    return lambda fd: any(mf._fd == fd for mf in store.commit_log.queue.files)


@pytest.mark.parametrize("flush", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH])
def test_after_a_failed_commit_log_fsync_nothing_is_acknowledged_and_the_store_is_read_only(
        store_config: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch, caplog, flush):
    store = MessageStore(store_config.replace(flush_disk_type=flush, flush_interval_commit_log=10,
                                              flush_commit_log_least_pages=0)).start()
    fdatasync = FailOnce(commit_log_fds(store))
    monkeypatch.setattr(mapped_file_module.os, "fdatasync", fdatasync)
    try:
        assert store.put_message(msg(body=b"before")).ok
        store.commit_log.queue.flush()
        flushed_before = store.commit_log.flushed_where
        checkpoint_before = open(store.checkpoint.path, "rb").read()

        fdatasync.armed = True
        r = store.put_message(msg(body=b"during"))
        if flush is FlushDiskType.SYNC_FLUSH:  # the waiting put fails: its bytes are not durable
            assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "flushed" in r.remark
        else:  # acknowledged at once (async), but the next flush round fails
            assert r.ok
            end = time.monotonic() + 10
            while not store.write_failure and time.monotonic() < end:
                time.sleep(0.01)
        assert fdatasync.failed == 1 and store.write_failure

        later = store.put_message(msg(body=b"after"))  # refused, with the reason
        assert later.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "accepts no writes" in later.remark
        store.commit_log.queue.flush()  # fdatasync would succeed now: it must count for nothing
        assert store.commit_log.flushed_where == flushed_before
        store.flush_logics_and_checkpoint(0)
        assert open(store.checkpoint.path, "rb").read() == checkpoint_before
        # Reads go on; under SYNC_FLUSH they never show the message whose fsync failed (it was not durable, its
        # send failed), under ASYNC_FLUSH they showed it before the flush did.
        seen = [b"before"] if flush is FlushDiskType.SYNC_FLUSH else [b"before", b"during"]
        assert [m.body for m in read_queue(store, "T", 0, 0)] == seen
        # (the flush thread says so right after it turned the store read-only: waited for, not assumed done)
        end = time.monotonic() + 10
        while not [r for r in caplog.records if r.levelname == "CRITICAL"] and time.monotonic() < end:
            time.sleep(0.01)
        critical = [r for r in caplog.records if r.levelname == "CRITICAL"]
        assert len(critical) == 1 and "READ-ONLY" in critical[0].getMessage()
    finally:
        store.shutdown()
    assert os.path.exists(os.path.join(store_config.store_path_root_dir, "abort"))  # the next start recovers

    monkeypatch.setattr(mapped_file_module.os, "fdatasync", fdatasync.real)
    with MessageStore(store_config) as again:
        assert again.abnormal_start and not again.write_failure
        assert [m.body for m in read_queue(again, "T", 0, 0)] == [b"before", b"during"]  # CRCs checked, kept
        assert again.put_message(msg(body=b"next")).ok


def test_a_failed_consume_queue_fsync_also_turns_the_store_read_only(store_config: MessageStoreConfig,
                                                                      monkeypatch: pytest.MonkeyPatch):
    with MessageStore(store_config) as store:
        assert store.put_message(msg()).ok
        cq = store.find_consume_queue("T", 0)
        fdatasync = FailOnce(lambda fd: any(mf._fd == fd for mf in cq.queue.files))
        monkeypatch.setattr(mapped_file_module.os, "fdatasync", fdatasync)
        fdatasync.armed = True
        with pytest.raises(OSError):
            store.flush_logics_and_checkpoint(0)
        assert store.write_failure and "consume queues" in store.write_failure
        assert store.put_message(msg()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
