"""Zero-filling the commit log ahead of its writer: the window, the fence that keeps zeros off records, close."""

from __future__ import annotations

import os
import threading
import time

from sluice.common.config import MessageStoreConfig
from sluice.store import MessageStore
from sluice.store.mapped_file import NO_FENCE, MappedFile
from sluice.store.warm_mapped_file import WarmMappedFileService

from .helpers import msg

CHUNK = 16 * 1024


def _config(store_config: MessageStoreConfig, **changes: object) -> MessageStoreConfig:
    settings: dict[str, object] = {"mapped_file_size_commit_log": 1 << 20, "warm_mapped_file_chunk": CHUNK,
                                   "warm_mapped_file_ahead": 8 * CHUNK}
    settings.update(changes)
    return store_config.replace(**settings)


def _allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def _wait_for(cond, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_window_past_the_write_position_is_zero_filled_and_follows_the_writer(store_config):
    with MessageStore(_config(store_config)) as store:
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
        time.sleep(0.2)  # nothing more once the window is full
        assert mf.warmed_position <= wrote + 9 * CHUNK
        assert mf.zero_fence == NO_FENCE


def test_a_disabled_warm_service_leaves_the_segment_sparse(store_config):
    with MessageStore(_config(store_config, warm_mapped_file_enable=False)) as store:
        store.put_message(msg(body=b"first"))
        time.sleep(0.2)
        mf = store.commit_log.queue.last()
        assert mf is not None and mf.warmed_position == 0
        assert _allocated(mf.path) < 4 * CHUNK


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


def test_puts_racing_the_fill_all_read_back_intact_and_recover_clean(store_config):
    cfg = _config(store_config, warm_mapped_file_chunk=4096, warm_mapped_file_ahead=8192)
    bodies = [f"m{i}-".encode() + os.urandom(40 + i % 3000) for i in range(600)]
    with MessageStore(cfg) as store:
        results = [store.put_message(msg(body=b)) for b in bodies]
        assert all(r.ok for r in results)
        for r, b in zip(results, bodies, strict=True):
            found = store.look_message_by_offset(r.wrote_offset)
            assert found is not None and found.body == b
    with MessageStore(cfg) as store:  # a clean scan over every record (CRCs checked on recovery)
        assert store.commit_log.max_offset == results[-1].wrote_offset + results[-1].wrote_bytes
        assert store.get_max_offset_in_queue("T", 0) == len(bodies)


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
