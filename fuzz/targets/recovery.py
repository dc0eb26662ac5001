"""CommitLog recovery: the fuzzed bytes are the commit log on disk (cut into segments of ``SEGMENT`` bytes,
the last one padded with zeros), left as after a crash; ``MessageStore.start`` recovers from them.

Property: start-up never fails on what the segments hold; the log it keeps is a prefix of the bytes on
disk made only of whole records (BLANK fillers closing segments) that pass ``check_record`` with their
body CRCs, zeros after it; every ConsumeQueue entry points at one of those records, of its topic, queue
and queue offset, and a pull serves exactly those records; the store takes a new message afterwards.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from sluice.common.config import MessageStoreConfig
from sluice.common.message import MessageExt, MessageExtBrokerInner
from sluice.common.message_codec import check_record, decode_record, decode_records
from sluice.store import MessageStore
from sluice.store.commit_log import tags_code_of
from sluice.store.consume_queue import BLANK_ENTRY_SIZE
from sluice.store.mapped_file import offset_to_file_name

from ._common import expect

SEGMENT = 4096
_base: str | None = None


def _root() -> str:
    """A store directory of this process, on tmpfs where there is one, emptied for each input."""
    global _base
    if _base is None:
        _base = tempfile.mkdtemp(prefix="sluice-fuzz-recovery-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        atexit.register(shutil.rmtree, _base, True)
    root = os.path.join(_base, "store")
    shutil.rmtree(root, ignore_errors=True)
    return root


def store_config(root: str) -> MessageStoreConfig:
    return MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=SEGMENT,
                              mapped_file_size_consume_queue=20 * 16, max_hash_slot_num=16, max_index_num=64,
                              warm_mapped_file_enable=False)


def _write_segments(root: str, data: bytes) -> None:
    directory = os.path.join(root, "commitlog")
    os.makedirs(directory)
    for start in range(0, len(data), SEGMENT):
        with open(os.path.join(directory, offset_to_file_name(start)), "wb") as f:
            f.write(data[start:start + SEGMENT].ljust(SEGMENT, b"\0"))


def _kept_records(store: MessageStore, disk: bytes) -> dict[int, MessageExt]:
    """Every record of the recovered log by offset, checked against the bytes that were on disk."""
    log = store.commit_log
    end = log.max_offset
    expect(log.min_offset == 0 and 0 <= end <= len(disk), f"recovered log [{log.min_offset}, {end}) is not on disk")
    records: dict[int, MessageExt] = {}
    pos = 0
    while pos < end:
        mf = log.queue.find_by_offset(pos)
        expect(mf is not None, f"no segment holds offset {pos} below the end {end}")
        assert mf is not None
        rel = pos - mf.file_from_offset
        size = check_record(mf.buf, rel, SEGMENT, True)  # raises on anything but a whole, intact record
        if size < 0:  # BLANK filler: the segment ends here
            pos = mf.file_from_offset + SEGMENT
            continue
        expect(size > 0, f"a zeroed record at {pos} inside the recovered log (end {end})")
        expect(bytes(mf.buf[rel:rel + size]) == disk[pos:pos + size], f"record at {pos} is not what was on disk")
        m = decode_record(mf.buf, rel)
        expect(m.commit_log_offset == pos, f"record at {pos} claims offset {m.commit_log_offset}")
        records[pos] = m
        pos += size
    expect(pos == end, f"the log ends at {end}, inside the record at {pos}")
    last = log.queue.last()
    if last is not None:
        expect(not any(last.buf[end - last.file_from_offset:]), "bytes left after the end of the log")
    return records


def _check_queues(store: MessageStore, records: dict[int, MessageExt]) -> None:
    for (topic, queue_id), cq in list(store.consume_queues.items()):
        for qoff in range(cq.min_offset, cq.max_offset):
            entry = cq.get_entry(qoff)
            if entry is None or entry[1] == BLANK_ENTRY_SIZE:
                continue
            phys, size, tag = entry
            m = records.get(phys)
            expect(m is not None and m.store_size == size, f"{topic}/{queue_id}@{qoff} points at no record ({phys})")
            assert m is not None
            expect((m.topic, m.queue_id, m.queue_offset, tags_code_of(m.tags)) == (topic, queue_id, qoff, tag),
                   f"{topic}/{queue_id}@{qoff} points at a record of {m.topic}/{m.queue_id}@{m.queue_offset}")
        if cq.max_offset > cq.min_offset:
            got = store.get_messages("g", topic, queue_id, cq.min_offset, 32)
            served = decode_records(b"".join(bytes(b) for b in got.buffers))
            got.release()
            expect(all(records.get(s.commit_log_offset) == s for s in served), f"{topic}/{queue_id}: a pull served "
                   "a record that is not in the recovered log")


def check(data: bytes) -> None:
    root = _root()
    _write_segments(root, data)
    store = MessageStore(store_config(root)).start()
    disk = data.ljust(-(-len(data) // SEGMENT) * SEGMENT, b"\0")  # what _write_segments put there: whole segments
    try:
        records = _kept_records(store, disk)
        _check_queues(store, records)
        end, next_qoff = store.commit_log.max_offset, store.get_max_offset_in_queue("FuzzTopic", 0)
        r = store.put_message(MessageExtBrokerInner("FuzzTopic", b"after recovery", 0))
        expect(r.ok and r.queue_offset == next_qoff and r.wrote_offset >= end,
               f"the recovered store does not take a message: {r}")
        m = store.look_message_by_offset(r.wrote_offset)
        expect(m is not None and m.body == b"after recovery", "the message put after recovery reads back wrong")
    finally:
        store.shutdown()
