"""The consume queues of every light queue (``%LMQ%...``) in one shared SQLite database.

A topic's consume queue is a run of files; a light queue holds little, and a broker may keep a million of them, so
they share one store instead (RocketMQ keeps them in RocksDB for the same reason): one row per queue (its name and
its next offset), one per entry (commit-log offset, size, tags code), an index by commit-log offset for recovery's
cut and retention. Nothing is kept in memory per queue: a ``LightQueue`` is a view made when asked for.

Like the consume-queue files, the database is derived from the commit log: written without an fsync per commit
(WAL, ``synchronous=NORMAL``: a crash can lose the last commits, never break the database), made durable by
``flush`` before the store's checkpoint vouches for it, and completed again by recovery's dispatch from there.
Writes come from the store thread; reads from any thread, each on a connection of its own.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final

import numpy as np

from sluice.common.lite import parent_and_lite
from sluice.common.naming import LMQ_QUEUE_ID
from sluice.store.consume_queue import CQ_ENTRY_DTYPE, offset_by_time

log = logging.getLogger(__name__)

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS queues (qid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, next INTEGER NOT NULL,
                                   last INTEGER NOT NULL DEFAULT 0, parent TEXT);
CREATE TABLE IF NOT EXISTS entries (qid INTEGER NOT NULL, off INTEGER NOT NULL, phys INTEGER NOT NULL,
                                    size INTEGER NOT NULL, tag INTEGER NOT NULL, PRIMARY KEY (qid, off))
                                    WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_by_phys ON entries (phys);
"""
# Each lite topic's queue's parent topic and last store time (ms; 0: not known, a store made before it was kept),
# indexed together: a parent's queues idle since a time are found without walking them, or other parents' (the
# lite topics' expiry).
_LAST_INDEX: Final = ("CREATE INDEX IF NOT EXISTS queues_by_parent_last ON queues (parent, last) "
                      "WHERE parent IS NOT NULL")
# An older store's lite topics' parents, from their names (%LMQ%$<parent>$<lite topic>).
_PARENTS: Final = ("UPDATE queues SET parent = substr(name, 7, instr(substr(name, 7), '$') - 1) "
                   "WHERE parent IS NULL AND substr(name, 1, 6) = '%LMQ%$' AND instr(substr(name, 7), '$') > 1")

# (name, queue offset, commit-log offset, size, tags code, store time in ms) of one entry
LightEntry = tuple[str, int, int, int, int, int]
_QID_CACHE: Final = 65_536  # names → queue ids of the queues used lately (a queue id never changes while it lives)
# One light queue's entries read at a time at most (a pull asks for 32; a filtered one for up to 800).
_MAX_READ: Final = 4_096


class LightQueue:
    """One light queue, as the readers see a consume queue (a view: nothing of it is kept once dropped)."""

    __slots__ = ("store", "topic", "queue_id", "qid")

    entries_per_file = 1  # (no files: an offset past a hole is the next one)

    def __init__(self, store: LightQueueStore, topic: str, qid: int) -> None:
        self.store = store
        self.topic = topic
        self.queue_id = LMQ_QUEUE_ID
        self.qid = qid

    @property
    def max_offset(self) -> int:
        return self.store.next_offset_of(self.qid)

    @property
    def min_offset(self) -> int:
        return self.store.min_offset_of(self.qid)

    def get_entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        row = self.store.reader().execute("SELECT phys, size, tag FROM entries WHERE qid = ? AND off = ?",
                                          (self.qid, queue_offset)).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def get_entries(self, queue_offset: int, max_entries: int) -> np.ndarray:
        """Up to ``max_entries`` consecutive entries from ``queue_offset``."""
        n = max(0, min(max_entries, _MAX_READ))
        rows = self.store.reader().execute(
            "SELECT off, phys, size, tag FROM entries WHERE qid = ? AND off >= ? AND off < ? ORDER BY off",
            (self.qid, queue_offset, queue_offset + n)).fetchall()
        run = 0
        for off, *_ in rows:
            if off != queue_offset + run:
                break
            run += 1
        return np.array([r[1:] for r in rows[:run]], CQ_ENTRY_DTYPE)

    def offset_by_time(self, timestamp: int, store_time_of: Callable[[int, int], int | None]) -> int:
        return offset_by_time(self.get_entry, self.min_offset, self.max_offset, timestamp, store_time_of)


class LightQueueStore:
    """Every light queue's entries, in ``<root>/lightqueue/lmq.db``."""

    def __init__(self, root_dir: str) -> None:
        self.directory = os.path.join(root_dir, "lightqueue")
        self.path = os.path.join(self.directory, "lmq.db")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._qids: OrderedDict[str, int] = OrderedDict()
        self._qids_lock = threading.Lock()
        self.count = 0
        self._closed = False

    # -- connections --------------------------------------------------------------------------------
    def open(self) -> LightQueueStore:
        os.makedirs(self.directory, exist_ok=True)
        db = self._connect()
        db.executescript(_SCHEMA)
        columns = {row[1] for row in db.execute("PRAGMA table_info(queues)")}
        if "last" not in columns:
            db.execute("ALTER TABLE queues ADD COLUMN last INTEGER NOT NULL DEFAULT 0")
        if "parent" not in columns:
            db.execute("ALTER TABLE queues ADD COLUMN parent TEXT")
            db.execute(_PARENTS)
        db.execute("DROP INDEX IF EXISTS queues_by_last_name")  # (an index of this store's first weeks)
        db.execute(_LAST_INDEX)
        self.count = db.execute("SELECT count(*) FROM queues").fetchone()[0]
        return self

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise OSError(f"the light-queue store {self.path} is closed")
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA cache_size=-4096")  # (KiB: a bounded page cache per connection)
        with self._connections_lock:
            self._connections.append(db)
        self._local.db = db
        return db

    def reader(self) -> sqlite3.Connection:
        """This thread's connection."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        return db if db is not None else self._connect()

    def close(self) -> None:
        with self._connections_lock:
            connections, self._connections = self._connections, []
            self._closed = True
        for db in connections:
            try:
                db.close()
            except sqlite3.Error:  # pragma: no cover - (another thread's statement in flight)
                pass

    # -- queues ---------------------------------------------------------------------------------------
    def qid_of(self, name: str) -> int | None:
        with self._qids_lock:
            qid = self._qids.get(name)
            if qid is not None:
                self._qids.move_to_end(name)
                return qid
        row = self.reader().execute("SELECT qid FROM queues WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        self._remember(name, row[0])
        return int(row[0])

    def _remember(self, name: str, qid: int) -> None:
        with self._qids_lock:
            self._qids[name] = qid
            if len(self._qids) > _QID_CACHE:
                self._qids.popitem(last=False)

    def find(self, name: str) -> LightQueue | None:
        qid = self.qid_of(name)
        return None if qid is None else LightQueue(self, name, qid)

    def create(self, name: str) -> LightQueue:
        queue = self.find(name)
        if queue is not None:
            return queue
        db = self.reader()
        db.execute("BEGIN IMMEDIATE")
        try:
            pair = parent_and_lite(name)
            created = db.execute("INSERT OR IGNORE INTO queues (name, next, parent) VALUES (?, 0, ?)",
                                 (name, pair[0] if pair else None)).rowcount
            qid = db.execute("SELECT qid FROM queues WHERE name = ?", (name,)).fetchone()[0]
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.count += created
        self._remember(name, qid)
        return LightQueue(self, name, qid)

    def next_offset(self, name: str) -> int:
        """The offset the next entry of ``name`` takes (0 for a queue not kept)."""
        qid = self.qid_of(name)
        return 0 if qid is None else self.next_offset_of(qid)

    def next_offset_of(self, qid: int) -> int:
        row = self.reader().execute("SELECT next FROM queues WHERE qid = ?", (qid,)).fetchone()
        return 0 if row is None else int(row[0])

    def min_offset_of(self, qid: int) -> int:
        db = self.reader()
        row = db.execute("SELECT min(off) FROM entries WHERE qid = ?", (qid,)).fetchone()
        return int(row[0]) if row[0] is not None else self.next_offset_of(qid)

    def names(self, prefix: str = "") -> list[str]:
        """The names of the queues kept that start with ``prefix``, in order."""
        if not prefix:
            rows = self.reader().execute("SELECT name FROM queues ORDER BY name").fetchall()
        else:
            rows = self.reader().execute("SELECT name FROM queues WHERE name >= ? AND name < ? ORDER BY name",
                                         (prefix, _after(prefix))).fetchall()
        return [r[0] for r in rows]

    def idle(self, parent: str, before_ms: int, limit: int) -> list[tuple[str, int]]:
        """Up to ``limit`` of ``parent``'s lite topics' queues whose last entry was stored before ``before_ms``,
        the longest idle first, each with that time (0: not known); read from the index of parents and last
        store times, so the cost follows what is idle there, not how many queues there are."""
        rows = self.reader().execute(
            "SELECT name, last FROM queues INDEXED BY queues_by_parent_last WHERE parent = ? AND last < ? "
            "ORDER BY last LIMIT ?", (parent, before_ms, limit)).fetchall()
        return [(r[0], int(r[1])) for r in rows]

    def set_last(self, times: list[tuple[str, int]]) -> None:
        """Note queues' last store times where they were not known (queues made by an older store), in one
        transaction."""
        if not times:
            return
        db = self.reader()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("UPDATE queues SET last = ? WHERE name = ? AND last < ?",
                           [(ms, name, ms) for name, ms in times])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def first_after(self, name: str, prefix: str) -> str | None:
        """The first queue name after ``name`` that starts with ``prefix`` (None: none): the parents of lite
        topics are found a jump at a time, not by listing every queue."""
        row = self.reader().execute("SELECT name FROM queues WHERE name > ? AND name < ? ORDER BY name LIMIT 1",
                                    (name, _after(prefix))).fetchone()
        return None if row is None else str(row[0])

    def count_names(self, prefix: str) -> int:
        """How many queues kept have names starting with ``prefix`` (read from the name index, not listed)."""
        row = self.reader().execute("SELECT count(*) FROM queues WHERE name >= ? AND name < ?",
                                    (prefix, _after(prefix))).fetchone()
        return int(row[0])

    # -- writing (the dispatcher, on the store thread) -------------------------------------------------
    def put(self, entries: Iterable[LightEntry]) -> dict[str, int]:
        """Enter ``(name, queue offset, commit-log offset, size, tags code, store time)`` rows in one
        transaction; an entry a queue has already (its offset below the queue's next) is kept as it is. Returns
        each queue's next offset after it, for the queues that took an entry."""
        db = self.reader()
        grown: dict[str, int] = {}
        made = 0
        db.execute("BEGIN IMMEDIATE")
        try:
            ends: dict[str, tuple[int, int]] = {}  # name → (qid, next)
            lasts: dict[str, int] = {}
            rows = []
            for name, off, phys, size, tag, stored in entries:
                known = ends.get(name)
                if known is None:
                    row = db.execute("SELECT qid, next FROM queues WHERE name = ?", (name,)).fetchone()
                    if row is None:
                        pair = parent_and_lite(name)
                        qid = db.execute("INSERT INTO queues (name, next, parent) VALUES (?, 0, ?)",
                                         (name, pair[0] if pair else None)).lastrowid
                        assert qid is not None
                        row = (qid, 0)
                        made += 1
                    known = ends[name] = (int(row[0]), int(row[1]))
                qid, nxt = known
                if off < nxt:
                    continue
                rows.append((qid, off, phys, size, tag))
                ends[name] = (qid, off + 1)
                grown[name] = off + 1
                lasts[name] = max(stored, lasts.get(name, 0))
            db.executemany("INSERT OR REPLACE INTO entries (qid, off, phys, size, tag) VALUES (?, ?, ?, ?, ?)", rows)
            db.executemany("UPDATE queues SET next = ?, last = max(last, ?) WHERE qid = ?",
                           [(ends[name][1], lasts[name], ends[name][0]) for name in grown])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.count += made
        for name in grown:
            self._remember(name, ends[name][0])
        return grown

    def truncate_from(self, phys_offset: int) -> int:
        """Drop the entries of records at or past ``phys_offset`` (recovery: the log ends there); each queue they
        were in ends before the first. Returns how many went."""
        db = self.reader()
        db.execute("BEGIN IMMEDIATE")
        try:
            firsts = db.execute("SELECT qid, min(off) FROM entries WHERE phys >= ? GROUP BY qid",
                                (phys_offset,)).fetchall()
            gone = db.execute("DELETE FROM entries WHERE phys >= ?", (phys_offset,)).rowcount
            db.executemany("UPDATE queues SET next = ? WHERE qid = ?", [(off, qid) for qid, off in firsts])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return gone

    def delete_below(self, commit_log_min_offset: int) -> int:
        """Retention: drop the entries of records no longer in the commit log, a bounded number a transaction
        (the dispatcher's writes wait for each); returns how many went."""
        db = self.reader()
        gone = 0
        while True:
            db.execute("BEGIN IMMEDIATE")
            try:
                n = db.execute("DELETE FROM entries WHERE (qid, off) IN (SELECT qid, off FROM entries WHERE phys < ? "
                               "LIMIT 10000)", (commit_log_min_offset,)).rowcount
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            gone += n
            if n < 10_000:
                return gone

    def drop(self, names: Iterable[str]) -> int:
        """Delete queues with their entries; returns how many there were."""
        db = self.reader()
        qids = []
        for name in names:
            qid = self.qid_of(name)
            if qid is not None:
                qids.append((qid,))
        if not qids:
            return 0
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("DELETE FROM entries WHERE qid = ?", qids)
            gone = sum(db.execute("DELETE FROM queues WHERE qid = ?", q).rowcount for q in qids)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        with self._qids_lock:
            self._qids.clear()  # (a name made again later gets a new queue id)
        self.count -= gone
        return gone

    def flush(self) -> None:
        """Make every committed entry durable (the WAL is synced by a checkpoint), before the store's checkpoint
        says the consume queues hold the log up to some offset."""
        self.reader().execute("PRAGMA wal_checkpoint(PASSIVE)")
        # (a checkpoint that had nothing to copy, or met another, syncs nothing: the WAL is synced here)
        try:
            fd = os.open(self.path + "-wal", os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _after(prefix: str) -> str:
    """The least text greater than every text starting with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


__all__ = ["LightEntry", "LightQueue", "LightQueueStore"]
