"""Zero-filling the commit log ahead of its writer: the window, the fence that keeps zeros off records, close."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from sluice.common.config import MessageStoreConfig
from sluice.store import MessageStore
from sluice.store import mapped_file as mapped_file_module
from sluice.store.mapped_file import NO_FENCE, MappedFile
from sluice.store.warm_mapped_file import WarmMappedFileService

from .helpers import msg

CHUNK = 16 * 1024


def _config(store_config: MessageStoreConfig, **changes: object) -> MessageStoreConfig:
    settings: dict[str, object] = {"mapped_file_size_commit_log": 1 << 20, "warm_mapped_file_chunk": CHUNK,
                                   "warm_mapped_file_ahead": 8 * CHUNK}
    settings.update(changes)
    return store_config.replace(**settings)


@contextmanager
def _unwarmed_store(store_config: MessageStoreConfig) -> Iterator[tuple[MessageStore, MappedFile]]:
    """A store with the warm service off and one record written: the test drives fills (or the fence) itself."""
    with MessageStore(_config(store_config, warm_mapped_file_enable=False)) as store:
        store.put_message(msg(body=b"a" * 100))
        mf = store.commit_log.queue.last()
        assert mf is not None
        yield store, mf


def _allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def _wait_for(cond, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _count_full_windows(svc: WarmMappedFileService) -> list[int]:
    """Counts (in the returned one-item list) the service's looks that found its window full."""
    full = [0]
    warm = svc.warm_next_chunk

    def counted() -> bool:
        filled = warm()
        if not filled:
            full[0] += 1
        return filled

    svc.warm_next_chunk = counted  # type: ignore[method-assign]
    return full


def test_the_window_past_the_write_position_is_zero_filled_and_follows_the_writer(store_config):
    with MessageStore(_config(store_config)) as store:
        full = _count_full_windows(next(s for s in store._services if isinstance(s, WarmMappedFileService)))
        store.put_message(msg(body=b"first"))
        mf = store.commit_log.queue.last()
        assert mf is not None
        # The fill starts a whole chunk past the writer and stops ``ahead`` past it.
        _wait_for(lambda: mf.warmed_position >= 8 * CHUNK)
        assert mf.warmed_position <= mf.wrote_position + 8 * CHUNK + CHUNK
        assert _allocated(mf.path) >= 7 * CHUNK  # real blocks, not holes
        for _ in range(200):
            store.put_message(msg(body=b"y" * 1000))
        wrote = mf.wrote_position
        _wait_for(lambda: mf.warmed_position >= wrote + 7 * CHUNK)
        # Nothing more once the window is full: the service has since looked twice and found nothing to do.
        seen = full[0]
        _wait_for(lambda: full[0] >= seen + 2)
        assert mf.warmed_position <= wrote + 9 * CHUNK
        assert mf.zero_fence == NO_FENCE


def test_a_disabled_warm_service_writes_no_zeros_but_the_segment_space_is_reserved(store_config):
    with MessageStore(_config(store_config, warm_mapped_file_enable=False)) as store:
        store.put_message(msg(body=b"first"))
        mf = store.commit_log.queue.last()
        assert mf is not None and mf.warmed_position == 0
        assert not any(isinstance(s, WarmMappedFileService) for s in store._services)
        assert _allocated(mf.path) >= mf.file_size  # reserved when made: a full disk never faults a write


def test_an_append_that_reaches_a_chunk_being_filled_waits_for_the_fill(store_config):
    with MessageStore(_config(store_config, warm_mapped_file_enable=False)) as store:
        store.put_message(msg(body=b"first"))
        cl = store.commit_log
        mf = cl.queue.last()
        assert mf is not None
        with cl.put_lock:
            mf.zero_fence = mf.wrote_position + 100  # as the warm service would while filling from there
        done = threading.Event()

        def put() -> None:
            store.put_message(msg(body=b"z" * 500))
            done.set()

        t = threading.Thread(target=put)
        t.start()
        assert not done.wait(0.3), "the append ran into a range being zero-filled"
        with cl.zero_fill_done:
            mf.zero_fence = NO_FENCE
            cl.zero_fill_done.notify_all()
        assert done.wait(5)
        t.join()
        # An append well below a fence does not wait for it.
        with cl.put_lock:
            mf.zero_fence = mf.wrote_position + 64 * 1024
        assert store.put_message(msg(body=b"short")).ok
        with cl.zero_fill_done:
            mf.zero_fence = NO_FENCE


def test_a_slow_fill_racing_a_busy_writer_never_zeroes_a_record(store_config, monkeypatch):
    """Each fill lands 20 ms after its fence is set while a writer appends nonstop across segment rolls: every
    record reads back intact and a restart recovers them all (without the fence, hundreds are zeroed)."""
    real_fill = MappedFile.zero_fill

    def slow_fill(self: MappedFile, start: int, end: int) -> bool:
        time.sleep(0.02)
        return real_fill(self, start, end)

    monkeypatch.setattr(MappedFile, "zero_fill", slow_fill)
    cfg = _config(store_config, mapped_file_size_commit_log=256 * 1024, warm_mapped_file_chunk=4096,
                  warm_mapped_file_ahead=4 * 4096)
    results, bodies = [], []
    with MessageStore(cfg) as store:
        svc = next(s for s in store._services if isinstance(s, WarmMappedFileService))
        # 1.5 s of appends, and on a slow machine on until they rolled segments and met fills.
        deadline, cap = time.monotonic() + 1.5, time.monotonic() + 60
        i = 0
        while time.monotonic() < deadline or not (svc.filled_bytes > 0 and len(store.commit_log.queue.files) > 2):
            assert time.monotonic() < cap, "no segment roll met a fill"
            body = f"m{i}-".encode() + os.urandom(100 + i % 700)
            r = store.put_message(msg(body=body))
            assert r.ok
            results.append(r)
            bodies.append(body)
            i += 1
        assert svc.filled_bytes > 0 and len(store.commit_log.queue.files) > 2
        damaged = [r.wrote_offset for r, b in zip(results, bodies, strict=True)
                   if (m := store.look_message_by_offset(r.wrote_offset)) is None or m.body != b]
        assert not damaged, f"{len(damaged)} of {len(results)} records damaged"
    with MessageStore(cfg) as store:
        assert store.get_max_offset_in_queue("T", 0) == len(bodies)


def test_a_failed_fill_clears_its_fence_releases_the_writer_and_pauses_the_service(store_config, monkeypatch):
    with _unwarmed_store(store_config) as (store, mf):
        svc = WarmMappedFileService(store.commit_log, ahead=4 * CHUNK, chunk=CHUNK)
        entered, release = threading.Event(), threading.Event()

        def full_disk(self: MappedFile, start: int, end: int) -> bool:
            entered.set()
            release.wait(5)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(MappedFile, "zero_fill", full_disk)
        filler = threading.Thread(target=svc.run_once)
        filler.start()
        assert entered.wait(5) and mf.zero_fence != NO_FENCE
        done = threading.Event()
        writer = threading.Thread(target=lambda: (store.put_message(msg(body=b"b" * (2 * CHUNK))), done.set()))
        writer.start()
        assert not done.wait(0.2)  # it reaches the fenced chunk
        release.set()
        assert done.wait(5), "the writer is stuck after a failed fill"
        filler.join(5)
        writer.join(5)
        assert mf.zero_fence == NO_FENCE and mf.warmed_position == 0
        assert svc._paused_until > time.monotonic()
        svc.run_once()  # paused: no new fill
        assert mf.zero_fence == NO_FENCE


def test_a_writer_that_had_to_wait_gets_half_the_window_of_room(store_config):
    with _unwarmed_store(store_config) as (store, mf):
        svc = WarmMappedFileService(store.commit_log, ahead=16 * CHUNK, chunk=CHUNK)
        assert svc.warm_next_chunk()
        assert mf.warmed_position == 3 * CHUNK  # filled from the chunk boundary past a chunk's gap
        mf.zero_overrun = True  # as ``CommitLog._wait_for_zero_fill`` leaves it
        assert svc.warm_next_chunk()
        assert mf.warmed_position >= mf.wrote_position + 8 * CHUNK and not mf.zero_overrun


def test_close_during_a_fill_waits_for_it(tmp_path, monkeypatch):
    mf = MappedFile(str(tmp_path / f"{0:020d}"), 1 << 20)
    real_pwrite = os.pwrite
    started, release = threading.Event(), threading.Event()

    def held_pwrite(fd: int, data: object, pos: int) -> int:
        started.set()
        release.wait(60)
        return real_pwrite(fd, data, pos)  # type: ignore[arg-type]

    monkeypatch.setattr(mapped_file_module.os, "pwrite", held_pwrite)
    filled: list[bool] = []
    t = threading.Thread(target=lambda: filled.append(mf.zero_fill(8192, 16384)))
    t.start()
    assert started.wait(60)
    closer = threading.Thread(target=mf.close)
    closer.start()
    closer.join(0.2)  # a close that does not wait returns meanwhile
    assert closer.is_alive(), "close returned during a fill"
    release.set()
    closer.join(60)
    t.join(60)
    assert filled == [True] and mf.zero_fill(0, 4096) is False


def test_small_segments_are_filled_with_a_smaller_chunk(store_config):
    cfg = store_config.replace(mapped_file_size_commit_log=64 * 1024)  # the default 1 MiB chunk would not fit
    with MessageStore(cfg) as store:
        svc = next(s for s in store._services if isinstance(s, WarmMappedFileService))
        assert svc.chunk == 8 * 1024 and svc.ahead >= 2 * svc.chunk
        store.put_message(msg(body=b"x" * 500))
        _wait_for(lambda: svc.filled_bytes > 0)


def test_the_window_must_hold_two_chunks(store_config):
    with pytest.raises(ValueError, match="twice"):
        store_config.replace(warm_mapped_file_chunk=CHUNK, warm_mapped_file_ahead=CHUNK).__post_init__()


def test_the_fill_never_starts_within_a_chunk_of_the_writer(tmp_path, monkeypatch):
    cfg = MessageStoreConfig(store_path_root_dir=str(tmp_path / "s"), mapped_file_size_commit_log=1 << 20,
                             warm_mapped_file_enable=False)
    with MessageStore(cfg) as store:
        store.put_message(msg(body=b"a" * 5000))
        cl = store.commit_log
        svc = WarmMappedFileService(cl, ahead=4 * CHUNK, chunk=CHUNK)
        mf = cl.queue.last()
        assert mf is not None
        fences: list[int] = []
        real_fill = MappedFile.zero_fill

        def spy(self: MappedFile, start: int, end: int) -> bool:
            fences.append(self.zero_fence)
            assert start >= self.wrote_position + CHUNK and end - start <= CHUNK
            return real_fill(self, start, end)

        monkeypatch.setattr(MappedFile, "zero_fill", spy)
        while svc.warm_next_chunk():
            pass
        assert fences and all(f >= 5000 + CHUNK for f in fences)
        assert mf.warmed_position >= 4 * CHUNK and mf.zero_fence == NO_FENCE


def test_zero_fill_after_close_does_nothing(tmp_path):
    path = str(tmp_path / f"{0:020d}")
    mf = MappedFile(path, 64 * 1024)
    mf.close()
    assert mf.zero_fill(0, 4096) is False


def test_truncating_the_tail_forgets_the_zero_filled_window(tmp_path):
    path = str(tmp_path / f"{0:020d}")
    mf = MappedFile(path, 64 * 1024)
    try:
        mf.append(b"x" * 100)
        assert mf.zero_fill(4096, 32 * 1024)
        mf.warmed_position = 32 * 1024
        mf.truncate_tail(50)
        assert mf.warmed_position == 50
    finally:
        mf.close()
