"""Shared pieces of the crash tests, and the writer / checker processes they start (and kill).

Run as a script (with the venv's python; the test modules import the helpers instead):

    crash_tool.py write STORE_DIR ACK_FILE ROUND THREADS [COUNT [QUEUES [FLAGS]]]
        Open the store (SYNC flush) and put messages from THREADS threads. After the store is open it
        appends ``started`` to ACK_FILE, then ``ack <queue_id> <queue_offset> <seq>`` for every message
        whose put returned PUT_OK. COUNT 0 (the default): put until killed. COUNT > 0: one thread puts
        COUNT messages (seq 0..COUNT-1, queue seq % QUEUES), then the process ends with ``os._exit(0)``
        and no shutdown (an unclean stop). FLAGS, comma-separated: ``clean`` shut down cleanly instead;
        ``noprops`` put the messages without properties.

    crash_tool.py check STORE_DIR EXPECT_ABNORMAL RESULT_FILE ACK_FILE...
        Open the store, run ``check_store`` against the acknowledgements in the ACK_FILEs, write the
        symptoms of known src bugs it met to RESULT_FILE (JSON), then end with ``os._exit`` without
        shutting the store down (so the next opener recovers again). Exit status 0 when every check
        passed, 1 (traceback on stderr) otherwise.

Message bodies and properties are a pure function of (round, seq), so any process can tell whether a
stored message is byte-exact: see ``payload``.
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from sluice.common.message import MessageExt
from sluice.common.message import MessageExtBrokerInner as Msg
from sluice.common.message_codec import check_record, decode_record, decode_records
from sluice.store import GetMessageStatus, MessageStore, PutMessageStatus

TOPIC = "CrashTopic"
GROUP = "crash-check"
QUEUES = 4
SEGMENT_SIZE = 64 * 1024
CQ_FILE_SIZE = 20 * 50
STORE_OPTIONS: dict[str, object] = {
    "flush_disk_type": "SYNC",
    "mapped_file_size_commit_log": SEGMENT_SIZE,
    "mapped_file_size_consume_queue": CQ_FILE_SIZE,
    "max_hash_slot_num": 64,
    "max_index_num": 512,
    "flush_interval_consume_queue": 60000,
}
BLANK_MAGIC = 0xCBD43194 - (1 << 32)  # as a signed big-endian int32
BLANK_ENTRY_SIZE = 0x7FFFFFFF
POS_BODY_LENGTH = 84
POS_BODY = 88
THREAD_SEQ_STRIDE = 1_000_000
_II = struct.Struct(">ii")
_I = struct.Struct(">i")


def open_store(store_dir: str | os.PathLike[str]) -> MessageStore:
    return MessageStore(store_path_root_dir=str(store_dir), **STORE_OPTIONS).start()


# == deterministic messages ==========================================================================
def payload(rnd: int, seq: int) -> tuple[bytes, dict[str, str]]:
    """Body and properties of message ``seq`` of writer round ``rnd``; bodies from 4 bytes to ~12 KB."""
    rng = random.Random(rnd * 1_000_000_007 + seq)
    n = rng.randint(3000, 12000) if rng.random() < 0.08 else rng.randint(0, 400)
    body = f"{rnd}:{seq}:".encode() + rng.randbytes(n)
    props = {"KEYS": f"k{rnd}_{seq} shared{seq % 5}", "UNIQ_KEY": uniq_key(rnd, seq), "TAGS": f"t{seq % 3}"}
    return body, props


def uniq_key(rnd: int, seq: int) -> str:
    return f"U-{rnd}-{seq}"


# == the writer =======================================================================================
def write_main(argv: list[str]) -> None:
    store_dir, ack_path, rnd, threads = argv[0], argv[1], int(argv[2]), int(argv[3])
    count = int(argv[4]) if len(argv) > 4 else 0
    queues = int(argv[5]) if len(argv) > 5 else QUEUES
    flags = set(argv[6].split(",")) if len(argv) > 6 else set()
    fd = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    store = open_store(store_dir)
    os.write(fd, b"started\n")

    def worker(k: int) -> None:
        try:
            rng = random.Random(rnd * 7919 + k)
            seq = k * THREAD_SEQ_STRIDE
            while not count or seq < count:
                if count:
                    n, qid = 1, seq % queues
                else:
                    n = rng.randint(2, 4) if rng.random() < 0.15 else 1
                    qid = rng.randrange(queues)
                msgs = []
                for s in range(seq, seq + n):
                    body, props = payload(rnd, s)
                    msgs.append(Msg(TOPIC, body, queue_id=qid, properties={} if "noprops" in flags else props))
                r = store.put(msgs) if n > 1 else store.put_message(msgs[0])
                if r.status is PutMessageStatus.PUT_OK:
                    # one write() per put: lines of concurrent threads never interleave
                    os.write(fd, "".join(f"ack {qid} {r.queue_offset + i} {seq + i}\n" for i in range(n)).encode())
                else:
                    sys.stderr.write(f"put of seq {seq} failed: {r.status} {r.remark}\n")
                seq += n
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(4)

    if count:
        worker(0)
        if "clean" in flags:
            store.shutdown()
        os._exit(0)
    for k in range(threads):
        threading.Thread(target=worker, args=(k,), daemon=True).start()
    time.sleep(60)  # the test kills us long before this
    sys.stderr.write("writer was not killed within 60 s\n")
    os._exit(3)


# == reading back acknowledgements ====================================================================
def read_acks(path: str | os.PathLike[str]) -> tuple[bool, list[tuple[int, int, int]]]:
    """(whether the writer got its store open, [(queue_id, queue_offset, seq)]) from an ack file.

    A line the writer was killed in the middle of (no newline yet) does not count.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return False, []
    lines = data.split(b"\n")[:-1]
    acks = []
    for line in lines:
        if line.startswith(b"ack "):
            qid, qoff, seq = (int(x) for x in line.split()[1:])
            acks.append((qid, qoff, seq))
    return b"started" in lines, acks


def merge_acks(acked: dict[tuple[int, int], tuple[int, int]], rnd: int, acks: list[tuple[int, int, int]]) -> None:
    """Add round ``rnd``'s acks to ``acked`` ((queue_id, queue_offset) -> (round, seq))."""
    for qid, qoff, seq in acks:
        prev = acked.get((qid, qoff))
        assert prev is None, f"queue {qid} offset {qoff} acknowledged twice: {prev} and {(rnd, seq)}"
        acked[(qid, qoff)] = (rnd, seq)


# == an independent reader of the commit-log files =====================================================
@dataclass(frozen=True, slots=True)
class Record:
    phys: int
    size: int
    path: str  # segment file
    pos: int  # position in the segment file
    topic: str
    queue_id: int
    queue_offset: int
    body_len: int
    uniq_key: str | None


def segment_files(store_dir: str | os.PathLike[str]) -> list[str]:
    d = os.path.join(store_dir, "commitlog")
    return [os.path.join(d, n) for n in sorted(os.listdir(d)) if len(n) == 20 and n.isdigit()]


def walk_commit_log(store_dir: str | os.PathLike[str]) -> tuple[list[Record], int]:
    """Every record in the commit-log files, read straight from disk, and the offset where the data ends.

    Asserts the files hold nothing but intact records (CRC checked), BLANK fillers closing segments,
    and zeros after the end.
    """
    records: list[Record] = []
    end = 0
    files = segment_files(store_dir)
    for i, path in enumerate(files):
        base = int(os.path.basename(path))
        assert base == end, f"{path}: segment starts at {base}, the previous one ended at {end}"
        data = Path(path).read_bytes()
        assert len(data) == SEGMENT_SIZE, f"{path} is {len(data)} bytes"
        pos = 0
        while True:
            if pos + 8 > SEGMENT_SIZE:
                raise AssertionError(f"{path}: no room for a BLANK filler at {pos}")
            total, magic = _II.unpack_from(data, pos)
            if magic == BLANK_MAGIC:
                assert total == SEGMENT_SIZE - pos, f"{path}: BLANK of {total} bytes at {pos}"
                end = base + SEGMENT_SIZE
                break
            if total == 0 and magic == 0:
                assert i == len(files) - 1, f"{path}: data ends at {pos} but later segments exist"
                assert data[pos:] == bytes(SEGMENT_SIZE - pos), f"{path}: non-zero bytes after the end at {pos}"
                return records, base + pos
            size = check_record(data, pos, SEGMENT_SIZE, True)  # raises on anything but an intact record
            assert size > 0, f"{path}: unexpected record marker at {pos}"
            m = decode_record(data, pos)
            assert m.commit_log_offset == base + pos, f"{path}: record at {pos} says offset {m.commit_log_offset}"
            records.append(Record(base + pos, size, path, pos, m.topic, m.queue_id, m.queue_offset,
                                  _I.unpack_from(data, pos + POS_BODY_LENGTH)[0], m.uniq_key))
            pos += size
    return records, end


def patch_file(path: str, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def flip_bit(path: str, pos: int, bit: int = 4) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ (1 << bit)]))


# == checks against an open store ========================================================================
def read_queue(store: MessageStore, queue_id: int, topic: str = TOPIC) -> dict[int, MessageExt]:
    """Every message of a queue via get_messages, asserting contiguous queue offsets and a clean end."""
    lo = store.get_min_offset_in_queue(topic, queue_id)
    hi = store.get_max_offset_in_queue(topic, queue_id)
    out: dict[int, MessageExt] = {}
    off = lo
    while off < hi:
        g = store.get_messages(GROUP, topic, queue_id, off, 32)
        assert g.status is GetMessageStatus.FOUND, f"queue {queue_id} offset {off}: {g.status}"
        assert g.queue_offsets == list(range(off, off + len(g.queue_offsets))), (
            f"queue {queue_id}: non-contiguous offsets {g.queue_offsets} from {off}")
        msgs = decode_records(b"".join(g.buffers))
        g.release()
        assert len(msgs) == len(g.queue_offsets)
        for qoff, m in zip(range(off, off + len(msgs)), msgs, strict=True):
            assert (m.topic, m.queue_id, m.queue_offset) == (topic, queue_id, qoff), (
                f"queue {queue_id} offset {qoff} holds {m.topic}/{m.queue_id}/{m.queue_offset}")
            out[qoff] = m
        assert g.next_begin_offset == off + len(msgs)
        off = g.next_begin_offset
    if hi == 0:
        ends = ((0, GetMessageStatus.NO_MESSAGE_IN_QUEUE), (1, GetMessageStatus.NO_MESSAGE_IN_QUEUE))
    else:
        ends = ((hi, GetMessageStatus.OFFSET_OVERFLOW_ONE), (hi + 1, GetMessageStatus.OFFSET_OVERFLOW_BADLY))
    for at, status in ends:
        g = store.get_messages(GROUP, topic, queue_id, at, 32)
        assert g.status is status and not g.buffers, f"queue {queue_id} read at {at} (max {hi}): {g.status}"
    return out


def origin_of(m: MessageExt) -> tuple[int, int]:
    """(round, seq) of a stored message, from its body (covered by the record's CRC, unlike properties)."""
    rnd, seq, _ = bytes(m.body).split(b":", 2)
    return int(rnd), int(seq)


def assert_message_is(m: MessageExt, rnd: int, seq: int) -> None:
    body, props = payload(rnd, seq)
    assert m.body == body, f"round {rnd} seq {seq}: body differs ({len(m.body)} vs {len(body)} bytes)"
    assert m.properties == props, f"round {rnd} seq {seq}: properties {m.properties!r}, sent {props!r}"


def check_store(store: MessageStore, acked: dict[tuple[int, int], tuple[int, int]], index_samples: int = 10,
                known: list[str] | None = None) -> dict[int, dict[int, MessageExt]]:
    """Check a freshly opened store; returns {queue_id: {queue_offset: message}}.

    * the commit-log files hold only intact records up to ``commit_log.max_offset`` and zeros after it;
    * every ConsumeQueue entry points to the intact record of that queue and offset, below the end, and
      every record in the log has its ConsumeQueue entry;
    * every stored message is byte-exact what some writer sent, no message is stored twice, and every
      acknowledged message is at the queue offset it was acknowledged with;
    * reading at a queue's max offset finds nothing; index lookups find acknowledged messages (a sample).

    With ``known`` given, symptoms of known src bugs / limits are recorded there instead of failing:
    an index lookup that finds nothing (``test_older_index_entries_survive_a_crash``), and an
    unacknowledged message whose properties differ from what was sent (a torn write inside the
    properties, which the body CRC does not cover). A wrong index hit or a damaged acknowledged message
    always fails.
    """
    root = store.config.store_path_root_dir
    records, end = walk_commit_log(root)
    cl = store.commit_log
    assert end == cl.max_offset, f"commit log data ends at {end} but max_offset is {cl.max_offset}"
    assert cl.min_offset == 0
    by_phys = {r.phys: r for r in records}
    referenced = set()
    for (topic, qid), cq in store.consume_queues.items():
        assert cq.min_offset == 0, f"{topic}/{qid}: min offset {cq.min_offset}"
        n = cq.max_offset
        for i in range(n):
            entry = cq.get_entry(i)
            assert entry is not None, f"{topic}/{qid}: no entry {i} below max offset {n}"
            phys, size, _tag = entry
            assert size != BLANK_ENTRY_SIZE, f"{topic}/{qid}: blank entry at {i}"
            assert 0 <= phys and phys + size <= end, f"{topic}/{qid} entry {i} -> [{phys}, {phys + size}) past {end}"
            view = cl.get_data(phys, size)
            assert view is not None and check_record(view, 0, size, True) == size, f"{topic}/{qid} entry {i}"
            del view
            rec = by_phys.get(phys)
            assert rec is not None, f"{topic}/{qid} entry {i} -> {phys}: no record starts there"
            assert (rec.size, rec.topic, rec.queue_id, rec.queue_offset) == (size, topic, qid, i), (
                f"{topic}/{qid} entry {i} -> {rec}")
            referenced.add(phys)
        assert cq.get_entry(n) is None, f"{topic}/{qid}: an entry past max offset {n}"
    missing = [r for r in records if r.phys not in referenced]
    assert not missing, f"{len(missing)} records have no consume-queue entry, first {missing[0]}"

    acked_at = {v: k for k, v in acked.items()}
    stored: dict[int, dict[int, MessageExt]] = {}
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    for topic, qid in store.consume_queues:
        assert topic == TOPIC
        msgs = read_queue(store, qid)
        stored[qid] = msgs
        for qoff, m in msgs.items():
            origin = origin_of(m)
            assert origin not in seen, f"round/seq {origin} stored twice: queue/offset {seen[origin]} and {(qid, qoff)}"
            seen[origin] = (qid, qoff)
            body, props = payload(*origin)
            assert m.body == body, f"queue {qid} offset {qoff}: body of round/seq {origin} differs"
            if m.properties != props:
                assert known is not None and origin not in acked_at, (
                    f"queue {qid} offset {qoff} (round/seq {origin}, commit log {m.commit_log_offset}): properties "
                    f"{m.properties!r}, sent {props!r}")
                known.append(f"recovery kept unacknowledged round/seq {origin} with damaged properties "
                             f"{m.properties!r} (torn write after the body: not covered by BODYCRC)")
    for (qid, qoff), (rnd, seq) in acked.items():
        m = stored.get(qid, {}).get(qoff)
        assert m is not None, (f"acknowledged round {rnd} seq {seq} at queue {qid} offset {qoff} is lost "
                               f"(queue max offset {store.get_max_offset_in_queue(TOPIC, qid)})")
        assert origin_of(m) == (rnd, seq), f"queue {qid} offset {qoff} holds {origin_of(m)}, acked {(rnd, seq)}"
    # some at random, and the last ones acknowledged in each round: their entries sat in the newest index
    # file when the next writer started appending to it
    sample = random.Random(len(acked)).sample(sorted(acked.items()), min(index_samples, len(acked)))
    by_round: dict[int, list[tuple[tuple[int, int], tuple[int, int]]]] = {}
    for item in acked.items():  # in acknowledgement order
        by_round.setdefault(item[1][0], []).append(item)
    sample += [item for items in by_round.values() for item in items[-5:]]
    for (qid, qoff), (rnd, seq) in dict(sample).items():
        found = store.query_message(TOPIC, uniq_key(rnd, seq))
        if not found.messages and known is not None:
            known.append(f"index lookup of acknowledged {uniq_key(rnd, seq)} found nothing")
            continue
        assert [(m.queue_id, m.queue_offset) for m in found.messages] == [(qid, qoff)], (
            f"index lookup of {uniq_key(rnd, seq)}: {[(m.queue_id, m.queue_offset) for m in found.messages]}")
        found.buffers.clear()
    return stored


def check_main(argv: list[str]) -> None:
    store_dir, expect_abnormal, result_file, ack_files = argv[0], argv[1], argv[2], argv[3:]
    acked: dict[tuple[int, int], tuple[int, int]] = {}
    for path in ack_files:
        rnd = int(Path(path).stem.rsplit("-", 1)[1])
        merge_acks(acked, rnd, read_acks(path)[1])
    try:
        store = open_store(store_dir)
        if expect_abnormal == "1":
            assert store.abnormal_start, "abnormal_start is False after a killed writer"
        known: list[str] = []
        check_store(store, acked, known=known)
        Path(result_file).write_text(json.dumps({"known": known}))
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)  # no shutdown: the next opener finds an unclean store


if __name__ == "__main__":
    {"write": write_main, "check": check_main}[sys.argv[1]](sys.argv[2:])
