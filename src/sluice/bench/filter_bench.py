"""``sluice bench filter``: filtered pulls as the broker serves them — the store reading one queue 32 messages at a
time from offset 0 to its end (``get_messages``, what PULL_MESSAGE does) — one JSON line per case.

The queue holds ``count`` messages of 128-byte bodies with the properties a client sends (TAGS, KEYS, UNIQ_KEY,
WAIT) and three of its own: ``region`` (one of ten), ``price`` and ``seq``. Every filter selects 10 % of them.
``scanned_per_s`` is consume-queue entries looked at per second, ``served`` the messages that matched, ``pull_ms``
the mean and largest time of one pull (the event loop's cost of one filtered PULL_MESSAGE).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TextIO

from sluice.broker import expression_message_filter
from sluice.broker.expression_message_filter import ExpressionMessageFilter, filter_properties, record_properties
from sluice.broker.processors.pull_message_processor import tag_codes_of
from sluice.common.config import FlushDiskType, MessageStoreConfig
from sluice.common.message import MessageExtBrokerInner
from sluice.common.properties import encode_properties
from sluice.filter import compile_sql92
from sluice.store import GetMessageStatus, MessageStore

TOPIC = "FilterBench"
REGIONS = [f"r{i}" for i in range(10)]
# name → (tag expression or None, SQL92 expression or None, what it shows)
CASES: dict[str, tuple[str | None, str | None, str]] = {
    "unfiltered": (None, None, "every message, no filter (the baseline)"),
    "tag_10pct": ("T3", None, "TAG filter: consume-queue tag codes only, no record read"),
    "sql_10pct_one_property": (None, "region = 'r3'", "SQL92 on one property, looked up in the record"),
    "sql_10pct_three_properties": (None, "region IN ('r3') AND price BETWEEN 0 AND 1000000 AND seq IS NOT NULL",
                                   "SQL92 on three properties, each looked up"),
    "sql_10pct_decoded": (None, "region = 'r3' AND price >= 0 AND seq IS NOT NULL AND KEYS IS NOT NULL AND "
                                "UNIQ_KEY IS NOT NULL AND WAIT = 'true' AND TAGS IS NOT NULL",
                          "SQL92 on seven properties: the record's properties decoded whole"),
}


@dataclass
class FilterBenchOptions:
    count: int = 200_000
    size: int = 128
    directory: str | None = None
    cases: tuple[str, ...] = tuple(CASES)


def _messages(n: int, size: int) -> list[MessageExtBrokerInner]:
    body = os.urandom(size)
    out = []
    for i in range(n):
        props = {"TAGS": f"T{i % 10}", "KEYS": f"order-{i}", "UNIQ_KEY": f"7F0000010F2C00000000{i:012X}",
                 "WAIT": "true", "region": REGIONS[i % 10], "price": str(i % 5000), "seq": str(i)}
        out.append(MessageExtBrokerInner(TOPIC, body, queue_id=0, properties=props, born_host="127.0.0.1:50000",
                                         born_timestamp=1_700_000_000_000))
    return out


def _read_all(store: MessageStore, end: int, tags: str | None, sql: str | None) -> dict[str, object]:
    codes = tag_codes_of(tags) if tags else None
    record_filter = ExpressionMessageFilter(compile_sql92(sql)) if sql else None
    offset = served = pulls = 0
    worst = 0.0
    t0 = time.perf_counter()
    while offset < end:
        t = time.perf_counter()
        r = store.get_messages("bench", TOPIC, 0, offset, 32, codes, record_filter)
        worst = max(worst, time.perf_counter() - t)
        if r.status not in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE):
            raise RuntimeError(f"pull at {offset}: {r.status}")
        served += r.message_count
        pulls += 1
        offset = r.next_begin_offset
        r.release()
    elapsed = time.perf_counter() - t0
    return {"scanned": end, "served": served, "pulls": pulls, "seconds": round(elapsed, 3),
            "scanned_per_s": round(end / elapsed), "served_per_s": round(served / elapsed),
            "pull_ms_mean": round(elapsed / pulls * 1000, 3), "pull_ms_max": round(worst * 1000, 3)}


def _evaluate_only(n: int) -> dict[str, object]:
    """The expression alone on decoded properties, and reading a record's properties alone: where the time goes."""
    expr = compile_sql92("region = 'r3'")
    props = filter_properties(encode_properties({"TAGS": "T3", "KEYS": "order-3", "WAIT": "true", "region": "r3",
                                                 "price": "3", "seq": "3", "UNIQ_KEY": "7F0000010F2C" + "0" * 20}))
    matches = expr.matches
    t0 = time.perf_counter()
    for _ in range(n):
        matches(props)
    eval_us = (time.perf_counter() - t0) / n * 1e6
    return {"evaluate_us": round(eval_us, 3)}


def run(o: FilterBenchOptions, out: TextIO = sys.stdout) -> list[dict[str, object]]:
    root = tempfile.mkdtemp(prefix="sluice-filter-bench-", dir=o.directory)
    results = []
    try:
        cfg = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 * 1024 * 1024,
                                 max_hash_slot_num=500_000, max_index_num=2_000_000,
                                 flush_disk_type=FlushDiskType.ASYNC_FLUSH)
        store = MessageStore(cfg).start()
        try:
            msgs = _messages(o.count, o.size)
            for i in range(0, len(msgs), 32):
                if not store.put(msgs[i:i + 32]).ok:
                    raise RuntimeError("put failed")
            end = store.get_max_offset_in_queue(TOPIC, 0)
            probe = store.get_messages("bench", TOPIC, 0, 0, 1)  # the record reader, alone
            buf = probe.buffers[0]
            t0 = time.perf_counter()
            for _ in range(100_000):
                record_properties(buf, 0)
            read_us = (time.perf_counter() - t0) / 100_000 * 1e6
            probe.release()
            for case in o.cases:
                tags, sql, what = CASES[case]
                line = {"case": case, "filter": sql or tags or "", "what": what, **_read_all(store, end, tags, sql)}
                results.append(line)
                out.write(json.dumps(line) + "\n")
                out.flush()
            parts = {"case": "costs", "record_properties_us": round(read_us, 3), **_evaluate_only(200_000),
                     "lookup_max_names": expression_message_filter.LOOKUP_MAX_NAMES}
            results.append(parts)
            out.write(json.dumps(parts) + "\n")
        finally:
            store.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results
