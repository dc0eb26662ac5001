"""Recovery of the index after a power loss: header, slots and entries on disk from different moments."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from sluice.common.config import MessageStoreConfig
from sluice.store import MessageStore

SETTINGS = {"mapped_file_size_commit_log": 1 << 20, "mapped_file_size_consume_queue": 20 * 1000,
            "max_hash_slot_num": 64, "max_index_num": 4000, "flush_interval_consume_queue": 600_000,
            "flush_interval_index": 600_000}

WRITER = textwrap.dedent("""
    import os, sys
    from sluice.common.config import MessageStoreConfig
    from sluice.common.message import MessageExtBrokerInner
    from sluice.store import MessageStore

    def put(s, i):
        m = MessageExtBrokerInner("T", b"m%d" % i, properties={"KEYS": "k%d" % i}, born_host="10.0.0.1:5000")
        assert s.put_message(m).ok

    s = MessageStore(MessageStoreConfig(store_path_root_dir=sys.argv[1], **eval(sys.argv[3]))).start()
    for i in range(60):
        put(s, i)
    s.commit_log.queue.flush()
    s.flush_logics_and_checkpoint(0)  # a complete flush: the index is durable up to here
    for i in range(60, 120):
        put(s, i)
        if i == 80:
            header = bytes(s.index_service.files[-1].mf.buf[:40])
    s.commit_log.queue.flush()  # the later messages are durable, their index entries may not be
    open(sys.argv[2], "wb").write(header)
    os._exit(0)  # no clean shutdown
""")


def test_every_key_is_found_once_after_a_power_loss_left_an_older_index_header(tmp_path: Path):
    root, header_file = tmp_path / "store", tmp_path / "header"
    subprocess.run([sys.executable, "-c", WRITER, str(root), str(header_file), repr(SETTINGS)], check=True,
                   timeout=60)
    index_path = next((root / "index").iterdir())
    with open(index_path, "r+b") as f:  # the header page on disk is the one written back after message 80
        f.write(header_file.read_bytes())
    store = MessageStore(MessageStoreConfig(store_path_root_dir=str(root), **SETTINGS)).start()  # type: ignore[arg-type]
    try:
        assert store.abnormal_start
        found = {i: [m.body for m in store.query_message("T", f"k{i}").messages] for i in range(120)}
    finally:
        store.shutdown()
    assert {i: bodies for i, bodies in found.items() if bodies != [b"m%d" % i]} == {}
