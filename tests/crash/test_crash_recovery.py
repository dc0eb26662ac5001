"""Crash recovery of the MessageStore: SIGKILLed writers, torn and corrupted records, corrupt config, locking.

The writer and checker processes are ``crash_tool.py`` (see its docstring). Set ``SLUICE_CRASH_SEED`` to
replay the kill schedule of a failed run of the SIGKILL test (the seed is printed).
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from sluice.common.errors import StoreConfigError, StoreLockedError
from sluice.common.message import MessageExtBrokerInner as Msg
from sluice.common.message_codec import decode_records
from sluice.store import GetMessageStatus, PutMessageStatus
from sluice.store.checkpoint import StoreCheckpoint
from tests.crash.crash_tool import (
    CQ_FILE_SIZE,
    GROUP,
    POS_BODY,
    QUEUES,
    SEGMENT_SIZE,
    THREAD_SEQ_STRIDE,
    TOPIC,
    Record,
    assert_message_is,
    check_store,
    flip_bit,
    merge_acks,
    open_store,
    patch_file,
    payload,
    read_acks,
    read_queue,
    segment_files,
    uniq_key,
    walk_commit_log,
)
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.crash

ROUNDS = 12


# == helpers ==============================================================================================
def _log(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    return path.read_text(errors="replace") if path.exists() else ""


def _wait_started(proc: subprocess.Popen[bytes], ack_file: Path, err_file: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ack_file.exists() and b"started\n" in ack_file.read_bytes():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.005)
    err = err_file.read_text(errors="replace") if err_file.exists() else ""
    pytest.fail(f"writer did not open the store (exit {proc.poll()}):\n{err}")


def _sigkill(proc: subprocess.Popen[bytes], err_file: Path) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    rc = proc.wait(timeout=30)
    err = err_file.read_text(errors="replace")
    assert rc == -signal.SIGKILL, f"writer ended by itself with {rc} before the kill:\n{err}"


def _write(spawn, tmp_path: Path, store_dir: Path, rnd: int, count: int, queues: int,
           flags: str = "") -> list[tuple[int, int, int]]:
    """Run a writer that puts ``count`` messages and stops uncleanly (flags: see crash_tool); returns its acks."""
    ack_file = tmp_path / f"acks-{rnd}.txt"
    p = spawn("write", store_dir, ack_file, rnd, 1, count, queues, flags or "-", log=f"writer-{rnd}.err")
    rc = p.wait(timeout=60)
    assert rc == 0, _log(tmp_path, f"writer-{rnd}.err")
    started, acks = read_acks(ack_file)
    assert started and [a[2] for a in acks] == list(range(count))
    return acks


def _acked_of(*rounds: tuple[int, list[tuple[int, int, int]]]) -> dict[tuple[int, int], tuple[int, int]]:
    acked: dict[tuple[int, int], tuple[int, int]] = {}
    for rnd, acks in rounds:
        merge_acks(acked, rnd, acks)
    return acked


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# == 1. SIGKILLed writers ===================================================================================
def test_acknowledged_messages_survive_sigkill(tmp_path, spawn):
    seed = int(os.environ.get("SLUICE_CRASH_SEED") or time.time_ns() % 2**32)
    print(f"SLUICE_CRASH_SEED={seed}")
    rng = random.Random(seed)
    store_dir = tmp_path / "store"
    acked: dict[tuple[int, int], tuple[int, int]] = {}
    ack_files: list[Path] = []
    rounds_with_acks = 0
    multi_thread_rounds = 0
    known_bugs: list[str] = []  # lost index entries or damaged properties: collected, then failed on
    for rnd in range(ROUNDS):
        threads = (1, 3, 4)[rnd % 3]
        ack_file = tmp_path / f"acks-{rnd}.txt"
        ack_files.append(ack_file)
        err_file = tmp_path / f"writer-{rnd}.err"
        writer = spawn("write", store_dir, ack_file, rnd, threads, log=err_file.name)
        if rnd % 4 == 3:
            delay = rng.uniform(0.05, 0.6)  # from spawn: may land in start-up or in recovery
        else:
            _wait_started(writer, ack_file, err_file)
            delay = rng.uniform(0.2, 0.8)
        time.sleep(delay)
        _sigkill(writer, err_file)
        started, acks = read_acks(ack_file)
        merge_acks(acked, rnd, acks)
        rounds_with_acks += bool(acks)
        multi_thread_rounds += len({seq // THREAD_SEQ_STRIDE for _, _, seq in acks}) > 1
        t0 = time.monotonic()
        known: list[str] = []
        if rnd % 2 == 0:  # check here, then shut down cleanly
            store = open_store(store_dir)
            try:
                assert store.abnormal_start or not started, f"round {rnd}: abnormal_start is False"
                check_store(store, acked, known=known)
            finally:
                store.shutdown()
        else:  # check in a process that leaves the store unclean again
            result = tmp_path / f"check-{rnd}.json"
            checker = spawn("check", store_dir, int(started), result, *ack_files, log=f"check-{rnd}.err")
            assert checker.wait(timeout=60) == 0, f"round {rnd}:\n{_log(tmp_path, f'check-{rnd}.err')}"
            known = json.loads(result.read_text())["known"]
        known_bugs += [f"round {rnd}: {k}" for k in known]
        print(f"round {rnd}: {threads} threads, killed after {delay:.2f}s, {len(acks)} acks "
              f"(total {len(acked)}), checked in {time.monotonic() - t0:.2f}s")
    # the rounds exercised what they are meant to
    assert rounds_with_acks >= ROUNDS // 2
    assert multi_thread_rounds >= 1, "no round had several writer threads acknowledging"
    assert len(segment_files(store_dir)) >= 3, "the commit log never rolled over to new segments"
    assert any(len(payload(r, s)[0]) > 3000 for r, s in acked.values()), "no large message was acknowledged"
    assert not known_bugs, "; ".join(list(dict.fromkeys(known_bugs))[:4])


# == 2, 3. a damaged last record ============================================================================
N_TAIL = 60


def _damaged_last_record(spawn, tmp_path: Path, damage) -> None:
    store_dir = tmp_path / "store"
    acks = _write(spawn, tmp_path, store_dir, 0, N_TAIL, 1)
    records, end = walk_commit_log(store_dir)
    assert [r.uniq_key for r in records] == [uniq_key(0, s) for s in range(N_TAIL)]
    last = records[-1]
    assert end == last.phys + last.size
    damage(last)

    store = open_store(store_dir)
    try:
        assert store.abnormal_start
        assert store.commit_log.max_offset == last.phys
        assert store.get_max_offset_in_queue(TOPIC, 0) == N_TAIL - 1
        msgs = read_queue(store, 0)
        assert sorted(msgs) == list(range(N_TAIL - 1))
        for i, m in msgs.items():
            assert_message_is(m, 0, i)
        acked = _acked_of((0, acks[:-1]))
        check_store(store, acked)
        # the next put takes the damaged record's place
        body, props = payload(1, 0)
        r = store.put_message(Msg(TOPIC, body, queue_id=0, properties=props))
        assert r.status is PutMessageStatus.PUT_OK
        assert (r.wrote_offset, r.queue_offset) == (last.phys, N_TAIL - 1)
        g = store.get_messages(GROUP, TOPIC, 0, N_TAIL - 1, 32)
        assert g.status is GetMessageStatus.FOUND and g.queue_offsets == [N_TAIL - 1]
        (m,) = decode_records(b"".join(g.buffers))
        g.release()
        assert_message_is(m, 1, 0)
        acked[(0, N_TAIL - 1)] = (1, 0)
        new_end = r.wrote_offset + r.wrote_bytes
    finally:
        store.shutdown()

    store = open_store(store_dir)
    try:
        assert not store.abnormal_start
        assert store.commit_log.max_offset == new_end
        assert store.get_max_offset_in_queue(TOPIC, 0) == N_TAIL
        check_store(store, acked)
    finally:
        store.shutdown()


def test_torn_last_record_is_truncated(tmp_path, spawn):
    def zero_second_half(rec: Record) -> None:
        cut = rec.size // 2
        patch_file(rec.path, rec.pos + cut, bytes(rec.size - cut))

    _damaged_last_record(spawn, tmp_path, zero_second_half)


def test_flipped_bit_in_last_record_is_truncated(tmp_path, spawn):
    def flip_body_bit(rec: Record) -> None:
        assert rec.body_len > 0
        flip_bit(rec.path, rec.pos + POS_BODY + rec.body_len // 2)

    _damaged_last_record(spawn, tmp_path, flip_body_bit)


# == 4. a corrupt record in the middle of the unflushed tail =================================================
def _corrupt(kind: str, rec: Record) -> None:
    if kind == "body_crc":
        flip_bit(rec.path, rec.pos + POS_BODY + rec.body_len // 3, bit=0)
    elif kind == "magic":
        patch_file(rec.path, rec.pos + 4, struct.pack(">I", 0x12345678))
    elif kind == "total_size":
        patch_file(rec.path, rec.pos, struct.pack(">i", rec.size + 8))
    elif kind == "phys_offset":
        patch_file(rec.path, rec.pos + 28, struct.pack(">q", rec.phys + 1))
    elif kind == "zeroed":
        patch_file(rec.path, rec.pos, bytes(rec.size))
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["body_crc", "magic", "total_size", "phys_offset", "zeroed"])
def test_consume_queue_never_points_past_commit_log(tmp_path, spawn, kind):
    store_dir = tmp_path / "store"
    first = _write(spawn, tmp_path, store_dir, 0, 40, QUEUES, "clean")
    safe_end = walk_commit_log(store_dir)[1]
    second = _write(spawn, tmp_path, store_dir, 1, 300, QUEUES)
    records, _ = walk_commit_log(store_dir)
    tail = [r for r in records if r.phys >= safe_end]
    victim = tail[len(tail) // 2]
    safe_point = StoreCheckpoint.load(str(store_dir / "checkpoint")).recover_from
    assert victim.phys >= safe_point
    segments = segment_files(store_dir)
    assert victim.path != segments[-1], "the victim should have later segments behind it"
    _corrupt(kind, victim)

    kept = [r for r in records if r.phys < victim.phys]
    dropped = [r for r in records if r.phys >= victim.phys]
    acked = _acked_of((0, first), (1, second))
    acked_kept = {k: v for k, v in acked.items() if uniq_key(*v) in {r.uniq_key for r in kept}}
    store = open_store(store_dir)
    try:
        assert store.abnormal_start
        cl = store.commit_log
        assert cl.max_offset == victim.phys
        assert segment_files(store_dir) == [s for s in segments if int(os.path.basename(s)) <= victim.phys]
        for q in range(QUEUES):
            mine = [r for r in kept if r.queue_id == q]
            assert store.get_max_offset_in_queue(TOPIC, q) == len(mine)
            cq = store.consume_queues[(TOPIC, q)]
            for i in range(cq.max_offset):
                phys, size, _ = cq.get_entry(i)
                assert phys + size <= victim.phys
            msgs = read_queue(store, q)  # contiguous from 0
            assert [m.uniq_key for _, m in sorted(msgs.items())] == [r.uniq_key for r in mine]
        check_store(store, acked_kept)
        for r in dropped:
            assert not store.query_message(TOPIC, r.uniq_key).messages, f"{r.uniq_key} is still found"
        # writing goes on at the cut, queue offsets go on where each queue ends now
        new_acks = []
        for q in range(QUEUES):
            body, props = payload(2, q)
            res = store.put_message(Msg(TOPIC, body, queue_id=q, properties=props))
            assert res.status is PutMessageStatus.PUT_OK
            assert res.queue_offset == len([r for r in kept if r.queue_id == q])
            if q == 0:
                assert res.wrote_offset == victim.phys
            new_acks.append((q, res.queue_offset, q))
        acked_kept.update(_acked_of((2, new_acks)))
        check_store(store, acked_kept)
    finally:
        store.shutdown()
    store = open_store(store_dir)
    try:
        assert not store.abnormal_start
        check_store(store, acked_kept)
    finally:
        store.shutdown()


# == 5. corrupt config JSON ===================================================================================
@pytest.mark.parametrize("garbage", [
    b'{"offsetTable": {"CrashTopic@crash-check": {"0": 3}',
    b"\x00\x00\x00\x00",
    b"",
    b"\xff\xfe\x00garbage",
    b"[1, 2, 3]",
    b'{"offsetTable": {"CrashTopic@crash-check": {"zero": 3}}}',
    b'{"offsetTable": null}',
], ids=["truncated", "zeros", "empty", "not-utf8", "not-an-object", "bad-queue-id", "null-table"])
def test_corrupt_config_json_refuses_to_open(tmp_path, garbage):
    store_dir = tmp_path / "store"
    store = open_store(store_dir)
    try:
        for i in range(5):
            body, props = payload(0, i)
            assert store.put_message(Msg(TOPIC, body, queue_id=0, properties=props)).ok
        store.consumer_offsets.commit_offset(GROUP, TOPIC, 0, 3)
    finally:
        store.shutdown()
    config_file = store_dir / "config" / "consumerOffset.json"
    good = config_file.read_bytes()
    config_file.write_bytes(garbage)
    before = _snapshot(store_dir)

    with pytest.raises(StoreConfigError) as exc_info:
        open_store(store_dir)
    assert str(config_file) in str(exc_info.value)
    assert config_file.read_bytes() == garbage
    assert _snapshot(store_dir) == before, "a refused open changed the store directory"

    # the refused open let go of the lock; with the file repaired everything is there
    config_file.write_bytes(good)
    store = open_store(store_dir)
    try:
        assert not store.abnormal_start
        assert store.consumer_offsets.query_offset(GROUP, TOPIC, 0) == 3
        check_store(store, {(0, i): (0, i) for i in range(5)})
    finally:
        store.shutdown()


# == 6. the store lock =======================================================================================
def test_second_open_is_refused_while_locked(tmp_path, spawn):
    store_dir = tmp_path / "store"
    store = open_store(store_dir)
    try:
        body, props = payload(0, 0)
        assert store.put_message(Msg(TOPIC, body, queue_id=0, properties=props)).ok
        with pytest.raises(StoreLockedError):
            open_store(store_dir)
        other = spawn("write", store_dir, tmp_path / "acks-1.txt", 1, 1, 1, 1, log="locked.err")
        assert other.wait(timeout=30) != 0
        assert "StoreLockedError" in _log(tmp_path, "locked.err")
        assert read_acks(tmp_path / "acks-1.txt") == (False, [])
        body, props = payload(0, 1)
        assert store.put_message(Msg(TOPIC, body, queue_id=0, properties=props)).ok
        check_store(store, {(0, 0): (0, 0), (0, 1): (0, 1)})
    finally:
        store.shutdown()

    # a writer process holds the store; its SIGKILL releases the lock
    ack_file = tmp_path / "acks-2.txt"
    writer = spawn("write", store_dir, ack_file, 2, 1, log="writer-2.err")
    _wait_started(writer, ack_file, tmp_path / "writer-2.err")
    with pytest.raises(StoreLockedError):
        open_store(store_dir)
    wait_until(lambda: bool(read_acks(ack_file)[1]), 60, "the writer's first acknowledged put")  # killed mid-stream
    _sigkill(writer, tmp_path / "writer-2.err")
    acked = _acked_of((0, [(0, 0, 0), (0, 1, 1)]), (2, read_acks(ack_file)[1]))
    store = open_store(store_dir)
    try:
        assert store.abnormal_start
        check_store(store, acked)
    finally:
        store.shutdown()


# == 7. a kill while a file is being created or truncated ==========================================================
@pytest.mark.parametrize("where", ["new-segment", "creating-leftover", "shrunk-segment", "new-cq-file"])
def test_store_opens_after_a_kill_while_sizing_a_file(tmp_path, spawn, where):
    """A kill between creating a file and sizing it, or inside truncate_tail, leaves a short last file."""
    store_dir = tmp_path / "store"
    n = CQ_FILE_SIZE // 20  # fills the queue's first consume-queue file exactly
    acks = _write(spawn, tmp_path, store_dir, 0, n, 1)
    _, end = walk_commit_log(store_dir)
    last_segment = segment_files(store_dir)[-1]
    base = int(os.path.basename(last_segment))
    next_segment = os.path.join(os.path.dirname(last_segment), f"{base + SEGMENT_SIZE:020d}")
    if where == "new-segment":  # killed between creating the next segment and sizing it
        open(next_segment, "wb").close()
    elif where == "creating-leftover":  # the same, where segments are sized under a temporary name
        open(next_segment + ".creating", "wb").close()
    elif where == "shrunk-segment":  # killed inside truncate_tail, between the shrink and the regrow
        os.truncate(last_segment, end - base)
    else:  # killed between creating the queue's next consume-queue file and sizing it
        open(store_dir / "consumequeue" / TOPIC / "0" / f"{CQ_FILE_SIZE:020d}", "wb").close()
    acked = _acked_of((0, acks))
    store = open_store(store_dir)
    try:
        assert store.commit_log.max_offset == end
        body, props = payload(1, 0)
        r = store.put_message(Msg(TOPIC, body, queue_id=0, properties=props))
        assert r.status is PutMessageStatus.PUT_OK and r.queue_offset == n
        acked[(0, n)] = (1, 0)
        check_store(store, acked)
    finally:
        store.shutdown()
    store = open_store(store_dir)
    try:
        check_store(store, acked)
    finally:
        store.shutdown()


# == regressions: index chains after a crash, torn topic bytes =============================================
def test_older_index_entries_survive_a_crash(tmp_path, spawn):
    store_dir = tmp_path / "store"
    first = _write(spawn, tmp_path, store_dir, 0, 20, QUEUES, "clean")  # indexed and cleanly flushed
    _write(spawn, tmp_path, store_dir, 1, 100, QUEUES)  # then an unclean stop
    store = open_store(store_dir)
    try:
        lost = [uniq_key(0, seq) for _, _, seq in first if not store.query_message(TOPIC, uniq_key(0, seq)).messages]
        assert not lost, f"{len(lost)} of {len(first)} messages from before the crash are gone from the index"
    finally:
        store.shutdown()


def test_torn_topic_of_last_record_is_truncated(tmp_path, spawn):
    store_dir = tmp_path / "store"
    n = 10
    _write(spawn, tmp_path, store_dir, 0, n, 1, "noprops")
    records, _ = walk_commit_log(store_dir)
    last = records[-1]
    torn_from = last.pos + POS_BODY + last.body_len + 1 + 4  # after the topic's first 4 bytes
    patch_file(last.path, torn_from, bytes(last.pos + last.size - torn_from))
    store = open_store(store_dir)
    try:
        assert store.commit_log.max_offset == last.phys
        assert list(store.consume_queues) == [(TOPIC, 0)]
        assert store.get_max_offset_in_queue(TOPIC, 0) == n - 1
    finally:
        store.shutdown()
