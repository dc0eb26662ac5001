"""``sluice bench store``: the message store on its own, one JSON line per case.

Cases: append of 128-byte messages one at a time and in batches of 32 (ASYNC flush); SYNC flush with
32 concurrent writers (asyncio tasks, as the broker runs them); sequential read of a 1M-message queue.
Every message carries TAGS and a 32-hex UNIQ_KEY property, as clients send them, so the index is built.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from sluice.common.config import MessageStoreConfig
from sluice.common.message import MessageExtBrokerInner
from sluice.store import GetMessageStatus, MessageStore

CASES = ("append_single_async", "append_batch_async", "append_sync_concurrent", "read_sequential")


@dataclass
class BenchOptions:
    count: int = 200_000
    read_count: int = 1_000_000
    size: int = 128
    batch: int = 32
    writers: int = 32
    directory: str | None = None
    cases: tuple[str, ...] = CASES
    index: bool = True


class Progress:
    """One line on stderr every couple of seconds while a case runs."""

    def __init__(self, case: str, total: int, out: TextIO = sys.stderr) -> None:
        self.case, self.total, self.out = case, total, out
        self.start = self.last = time.perf_counter()

    def update(self, done: int) -> None:
        now = time.perf_counter()
        if now - self.last >= 2.0:
            self.last = now
            rate = done / (now - self.start)
            self.out.write(f"  {self.case}: {done:,}/{self.total:,} ({rate:,.0f} msgs/s)\n")
            self.out.flush()


def _messages(n: int, size: int, index: bool, start: int = 0) -> list[MessageExtBrokerInner]:
    body = os.urandom(size)
    out = []
    for i in range(start, start + n):
        props = {"TAGS": "TagA", "WAIT": "true"}
        if index:
            props["UNIQ_KEY"] = f"7F0000010F2C00000000{i:012X}"
        out.append(MessageExtBrokerInner("BenchTopic", body, queue_id=i % 4, properties=props,
                                         born_host="127.0.0.1:50000", born_timestamp=1_700_000_000_000))
    return out


def _store(root: str, **overrides: object) -> MessageStore:
    cfg = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 * 1024 * 1024,
                             max_hash_slot_num=500_000, max_index_num=2_000_000)
    return MessageStore(cfg.replace(**overrides)).start()


def _result(case: str, n: int, elapsed: float, size: int, **extra: object) -> dict[str, object]:
    return {"case": case, "messages": n, "seconds": round(elapsed, 3), "msgs_per_s": round(n / elapsed),
            "mb_per_s": round(n * size / elapsed / 1e6, 1), **extra}


def _timed_puts(case: str, put: Callable[[object], object], units: Sequence[object], per_unit: int,
                total: int) -> float:
    """Call ``put`` on each unit (a message or a batch), showing progress; returns the seconds taken."""
    p = Progress(case, total)
    t0 = time.perf_counter()
    for i, unit in enumerate(units):
        if not put(unit).ok:  # type: ignore[attr-defined]
            raise RuntimeError(f"{case}: put failed")
        if i & 0x3FF == 0:
            p.update(i * per_unit)
    return time.perf_counter() - t0


def bench_append_single(root: str, o: BenchOptions) -> dict[str, object]:
    msgs = _messages(o.count, o.size, o.index)
    store = _store(root, flush_disk_type="ASYNC")
    elapsed = _timed_puts("append_single_async", store.put_message, msgs, 1, o.count)  # type: ignore[arg-type]
    store.shutdown()
    return _result("append_single_async", o.count, elapsed, o.size, flush="ASYNC")


def bench_append_batch(root: str, o: BenchOptions) -> dict[str, object]:
    msgs = _messages(o.count, o.size, o.index)
    # A batch goes to one queue, as SEND_BATCH_MESSAGE does.
    for i, m in enumerate(msgs):
        m.queue_id = (i // o.batch) % 4
    batches = [msgs[i : i + o.batch] for i in range(0, len(msgs), o.batch)]
    store = _store(root, flush_disk_type="ASYNC")
    elapsed = _timed_puts("append_batch_async", store.put, batches, o.batch, o.count)  # type: ignore[arg-type]
    store.shutdown()
    return _result("append_batch_async", o.count, elapsed, o.size, flush="ASYNC", batch=o.batch)


def bench_append_sync(root: str, o: BenchOptions) -> dict[str, object]:
    msgs = _messages(o.count, o.size, o.index)
    store = _store(root, flush_disk_type="SYNC")
    p = Progress("append_sync_concurrent", o.count)
    latencies: list[float] = []
    done = 0

    async def writer(k: int) -> None:
        nonlocal done
        put = store.put_async
        for i in range(k, len(msgs), o.writers):
            t = time.perf_counter()
            r = await put([msgs[i]])
            latencies.append(time.perf_counter() - t)
            if not r.ok:
                raise RuntimeError(f"put failed: {r.status}")
            done += 1
            if done & 0x3FFF == 0:
                p.update(done)

    async def main() -> None:
        await asyncio.gather(*(writer(k) for k in range(o.writers)))

    t0 = time.perf_counter()
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(main())
    elapsed = time.perf_counter() - t0
    store.shutdown()
    latencies.sort()

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3, 3)

    return _result("append_sync_concurrent", o.count, elapsed, o.size, flush="SYNC", writers=o.writers,
                   loop="uvloop" if _loop_factory() else "asyncio",
                   put_ms_p50=pct(0.5), put_ms_p99=pct(0.99), put_ms_max=round(latencies[-1] * 1e3, 3))


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when installed, as the broker uses it."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def bench_read(root: str, o: BenchOptions) -> dict[str, object]:
    store = _store(root, flush_disk_type="ASYNC")
    n = o.read_count
    chunk = 32
    p = Progress("read_sequential(fill)", n)
    for start in range(0, n, 1024):
        msgs = _messages(min(1024, n - start), o.size, o.index, start)
        for m in msgs:
            m.queue_id = 0
        for j in range(0, len(msgs), chunk):
            store.put(msgs[j : j + chunk])
        p.update(start)
    p = Progress("read_sequential", n)
    got = 0
    nbytes = 0
    offset = 0
    get = store.get_messages
    t0 = time.perf_counter()
    while True:
        r = get("bench", "BenchTopic", 0, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            break
        got += r.message_count
        nbytes += r.buffer_total_size
        offset = r.next_begin_offset
        if (got & 0xFFFF) == 0:
            p.update(got)
    elapsed = time.perf_counter() - t0
    store.shutdown()
    if got != n:
        raise RuntimeError(f"read {got} of {n} messages")
    return _result("read_sequential", got, elapsed, o.size, pull_batch=32, bytes_read=nbytes)


RUNNERS: dict[str, Callable[[str, BenchOptions], dict[str, object]]] = {
    "append_single_async": bench_append_single,
    "append_batch_async": bench_append_batch,
    "append_sync_concurrent": bench_append_sync,
    "read_sequential": bench_read,
}


def run(o: BenchOptions, out: TextIO = sys.stdout) -> list[dict[str, object]]:
    results = []
    for case in o.cases:
        root = tempfile.mkdtemp(prefix=f"sluice-bench-{case}-", dir=o.directory)
        try:
            res = RUNNERS[case](root, o)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        out.write(json.dumps(res) + "\n")
        out.flush()
        results.append(res)
    return results
