"""Checkpoints kept in memory first (RocketMQ's PopBufferMergeService, ``enablePopBufferMerge``).

A pop's checkpoint is not written to the revive log when the pop is answered: it stays in memory, acks of its
messages are merged into it there, and one whose messages are all acknowledged (or put back for redelivery)
before ``pop_ck_stay_buffer_time`` ms is never written at all. One still open after that time is written with
what it has acknowledged (its ``bm``), oldest first; from then on its acks are written as ack records, as without
the buffer. A pop + ack so costs no write at all in the common case, instead of two.

What this changes for a crash: the group's consumer offset of a queue moves past a pop only once its checkpoint is
settled, put back or written, in the order of the pops (the next pop reads from the offset the last one reached,
held here meanwhile), and offsets so moved are journaled to the revive log every ``JOURNAL_MS`` (read back only
after a crash: the offsets file is seconds old then). A broker killed with checkpoints in memory hands their
messages out again after it restarts — acknowledged ones included (at least once, as a pull consumer's
uncommitted offsets) — never loses one. A broker that stops writes every open checkpoint first.

A checkpoint is in one of three states: only in memory (``buffered``; its acks final there), being written
(``writing``: acks of it wait for the outcome) or in the log (``logged``; its acks written as records). Writes go
oldest first, as the broker's own puts (never turned down by back-pressure), early from ``pop_ck_max_buffer_size``
buffered on; while twice that many wait (the store refuses them), pops are answered SYSTEM_BUSY.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import deque
from typing import TYPE_CHECKING

from sluice.broker.pop.pop_revive_service import CheckPoint, now_ms
from sluice.common.service import AsyncService
from sluice.store.results import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from sluice.broker.pop.pop_revive_service import PopReviveService
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

QueueKey = tuple[str, str, int]  # group, topic, queue id
RETRY_SECONDS = 1.0  # a write that failed is tried again after this
JOURNAL_MS = 200
JOURNAL_ENTRIES = 1000  # queues' offsets in one record at most
WRITE_CHUNK = 512  # checkpoints in one put at most
BUSY_SECONDS = 0.01  # a due checkpoint named by a put under way is looked at again after this
STOP_WAIT_SECONDS = 5.0  # at the stop, how long such puts are waited for


class _Queue:
    """One queue's pops not yet behind the group's committed offset: (checkpoint or None for a skip, the offset
    after it), in pop order; and where the next pop reads."""

    __slots__ = ("ahead", "pending")

    def __init__(self) -> None:
        self.pending: deque[tuple[CheckPoint | None, int]] = deque()
        self.ahead = 0


def _pop_time(ck: CheckPoint) -> int:
    return ck.pop_time


def _offset_free(ck: CheckPoint | None) -> bool:
    """Whether the group's offset may move past ``ck``: nothing of it can be lost by a crash any more (written, or
    every message acknowledged or put back; an ack of one only in memory is never undone)."""
    return ck is None or ck.writing is None and (ck.logged or ck.settled or ck.revived)


class PopBufferMergeService(AsyncService):
    def __init__(self, config: BrokerConfig, store: MessageStore, revive: PopReviveService) -> None:
        super().__init__()
        self.enabled = config.enable_pop_buffer_merge
        self.stay_ms = config.pop_ck_stay_buffer_time
        self.max_size = config.pop_ck_max_buffer_size
        self.max_queue = config.pop_ck_offset_max_queue_size
        self.store = store
        self.revive = revive
        self.queues: dict[QueueKey, _Queue] = {}
        self._unwritten: deque[CheckPoint] = deque()  # buffered checkpoints in pop order (settled ones skipped)
        self.size = 0  # checkpoints buffered, neither written nor settled
        self._wake = asyncio.Event()
        self._full: set[QueueKey] = set()  # queues past max_queue pending pops: written now
        # Offsets moved since the last offset record: journaled to the revive log every ``journal_ms``, so that a
        # restart after a crash does not hand out again what was settled in memory since the offsets file was
        # written (its interval is seconds).
        self._moved: dict[QueueKey, int] = {}
        self.journal_ms = JOURNAL_MS
        self._journal_timer: asyncio.TimerHandle | None = None
        revive.on_done = self._done

    # == what a pop asks =============================================================================
    @property
    def full(self) -> bool:
        """Twice ``max_size`` checkpoints wait (from ``max_size`` on they are written early, so the store refuses
        them): pops are turned down meanwhile."""
        return self.size >= 2 * self.max_size

    def pop_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """Where the group's next pop of the queue reads, when it is past the committed offset."""
        q = self.queues.get((group, topic, queue_id))
        return None if q is None else q.ahead

    def reset(self, group: str, topic: str, queue_id: int) -> None:
        """The group's offset of the queue was reset: its pops so far no longer move it (their checkpoints stay
        open, and revive as before; a reset forward skips their messages, as it skips the others)."""
        self.queues.pop((group, topic, queue_id), None)

    def popped(self, group: str, topic: str, queue_id: int, next_offset: int, ck: CheckPoint | None) -> None:
        """A pop of the queue read up to ``next_offset``, handing out ``ck``'s messages (None: it only skipped
        messages its filter did not take). The group's offset gets there once ``ck`` is safe and every earlier
        pop of the queue is."""
        key = (group, topic, queue_id)
        q = self.queues.get(key)
        if q is None:
            if ck is None:  # nothing before it waits: move the offset now
                self._commit(key, next_offset)
                return
            q = self.queues[key] = _Queue()
        q.ahead = next_offset
        q.pending.append((ck, next_offset))
        if ck is not None:
            ck.buffered = True
            self.size += 1
            self._unwritten.append(ck)
            self.revive.track(ck)
            if self.size >= self.max_size:
                self._wake.set()
            if len(q.pending) > self.max_queue:
                self._full.add(key)
                self._wake.set()
        self._advance(key, q)

    def take_queue(self, group: str, topic: str, queue_id: int) -> list[CheckPoint]:
        """The queue's buffered checkpoints, now being written by the caller (in its put, before any record that
        names one of them): pass them to ``written`` with its result."""
        q = self.queues.get((group, topic, queue_id))
        if q is None:
            return []
        taken = [ck for ck, _ in q.pending if ck is not None and ck.buffered and not ck.settled and not ck.revived]
        if any(ck.busy for ck in taken):
            return []  # (later: the queue's checkpoints are written as a prefix of its pops)
        for ck in taken:
            self._writing(ck)
        return taken

    # == state changes ===============================================================================
    def _writing(self, ck: CheckPoint) -> None:
        ck.buffered = False
        ck.writing = asyncio.get_running_loop().create_future()
        self.size -= 1
        ck.revive_offset = self.store.get_max_offset_in_queue(self.revive.topic, ck.revive_qid)

    def written(self, cks: list[CheckPoint], r: PutMessageResult, submitted: bool = True) -> None:
        """The put of ``cks``' records ended with ``r`` (``submitted`` False: they were never put)."""
        back: list[CheckPoint] = []
        for ck in cks:
            fut, ck.writing = ck.writing, None
            if fut is not None and not fut.done():
                fut.set_result(None)
            if submitted:
                self.revive.count_put(ck.group, ck.topic, "CK", r.status)
            if r.stored:
                ck.logged = True
            elif not ck.settled and not ck.revived:
                ck.buffered = True
                self.size += 1
                back.append(ck)
        if back:  # (back in pop order among the others: a queue's are written as a prefix of its pops)
            ids = {id(ck) for ck in back}
            self._unwritten = deque(heapq.merge(
                back, (ck for ck in self._unwritten if ck.buffered and id(ck) not in ids), key=_pop_time))
        for ck in cks:
            self._done(ck)

    def _done(self, ck: CheckPoint) -> None:
        """``ck`` was settled, put back or written: the offsets waiting behind it may move."""
        if ck.buffered and (ck.settled or ck.revived):
            ck.buffered = False
            self.size -= 1
        key = (ck.group, ck.topic, ck.queue_id)
        q = self.queues.get(key)
        if q is not None:
            self._advance(key, q)

    def _advance(self, key: QueueKey, q: _Queue) -> None:
        pending = q.pending
        committed = -1
        while pending and _offset_free(pending[0][0]):
            committed = pending.popleft()[1]
        if committed >= 0:
            self._commit(key, committed)
        if not pending:
            del self.queues[key]
            self._full.discard(key)

    def _commit(self, key: QueueKey, offset: int) -> None:
        offsets = self.store.consumer_offsets
        if offsets.has_offset_reset(*key):  # (an admin's reset waits for the next pop: not overwritten)
            return
        offsets.commit_offset(key[0], key[1], key[2], offset)
        self._moved[key] = offset
        if self._journal_timer is None and self.enabled:
            self._journal_timer = asyncio.get_running_loop().call_later(self.journal_ms / 1000, self._wake.set)

    async def until_written(self, cks: list[CheckPoint]) -> None:
        """Wait while any of ``cks`` is being written: then each is either only in memory or in the log."""
        while True:
            writes = {id(f): f for ck in cks if (f := ck.writing) is not None}
            if not writes:
                return
            await asyncio.wait(writes.values())

    # == writing =====================================================================================
    def start(self) -> None:
        if self.enabled:
            self._spawn(self._run())

    async def stop(self) -> None:
        """Stop, writing every checkpoint still open first (a restart then knows them all)."""
        await super().stop()
        if self._journal_timer is not None:
            self._journal_timer.cancel()
            self._journal_timer = None
        try:  # the writes under way first (one that fails puts its checkpoints back: written below)
            await asyncio.wait_for(self.until_written(
                [ck for ck in self.revive.checkpoints.values() if ck.writing is not None]), STOP_WAIT_SECONDS)
        except TimeoutError:
            log.warning("pop checkpoints still being written at the stop")
        if self.size:
            # (a revive or a change of invisible time under way first: its checkpoint's record must not miss it)
            deadline = asyncio.get_running_loop().time() + STOP_WAIT_SECONDS
            while any(ck.busy for ck in self._unwritten if ck.buffered) and \
                    asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(BUSY_SECONDS)
            await self._write(self._take(None))
        self._moved.clear()  # (the offsets file is written at the stop: current)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                ok = await self._write(self._take(now_ms() - self.stay_ms))
                if self._journal_timer is not None and self._journal_timer.when() <= asyncio.get_running_loop().time():
                    self._journal_timer = None
                    ok = await self._journal() and ok
                delay = max(BUSY_SECONDS, self._next_due()) if ok else RETRY_SECONDS
            except Exception:
                log.exception("writing buffered pop checkpoints failed")
                delay = RETRY_SECONDS
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass

    async def _journal(self) -> bool:
        """Write the offsets that moved since the last time (when they did a while ago: a burst of acks is one
        record, not one each)."""
        moved = self._moved
        if not moved:
            return True
        self._moved = {}
        entries = [[g, t, q, o] for (g, t, q), o in moved.items()]
        try:
            records = [self.revive.offset_record(entries[i:i + JOURNAL_ENTRIES])
                       for i in range(0, len(entries), JOURNAL_ENTRIES)]
            r = await self.store.put_async(records)  # (the broker's own: not turned down by back-pressure)
        except Exception:
            r = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, "not written")
        if not r.stored:
            log.warning("cannot journal %d pop offsets: %s %s; trying again", len(entries), r.status.name, r.remark)
            for key, offset in moved.items():
                self._moved.setdefault(key, offset)
            self._journal_timer = asyncio.get_running_loop().call_later(RETRY_SECONDS, self._wake.set)
        return r.stored

    def _next_due(self) -> float:
        """Seconds until the oldest buffered checkpoint has stayed its time."""
        unwritten = self._unwritten
        while unwritten and not unwritten[0].buffered:
            unwritten.popleft()
        if not unwritten:
            return self.stay_ms / 1000
        return max(0.0, (unwritten[0].pop_time + self.stay_ms - now_ms()) / 1000)

    def _take(self, popped_by: int | None) -> list[CheckPoint]:
        """The buffered checkpoints to write now, oldest first: those popped by ``popped_by`` (ms; None: all), those
        past the buffer's bound, and every buffered one of a queue with too many pops waiting (as a prefix of that
        queue's pops, so a written checkpoint never lies past one of the same queue still only in memory)."""
        out: list[CheckPoint] = []
        unwritten = self._unwritten
        while unwritten:
            ck = unwritten[0]
            if not ck.buffered or ck.settled or ck.revived:
                unwritten.popleft()
                continue
            if popped_by is not None and (ck.busy or ck.pop_time > popped_by and self.size < self.max_size):
                break  # (a busy one is written next time, before any popped after it; at the stop, now)
            unwritten.popleft()
            self._writing(ck)
            out.append(ck)
        for key in list(self._full):
            taken = self.take_queue(*key)
            if taken or key not in self.queues:
                self._full.discard(key)
            out += taken  # (none while one of the queue's is busy: again next time)
        out.sort(key=_pop_time)  # (stable: each queue's stay in its pop order)
        return out

    async def _write(self, cks: list[CheckPoint]) -> bool:
        """Write ``cks`` (taken, in pop order), a chunk a put; after a chunk that fails, the rest go back to the
        buffer unwritten (a queue's checkpoints reach the log in the order of its pops)."""
        failed = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, "not written")
        for i in range(0, len(cks), WRITE_CHUNK):
            chunk, rest = cks[i:i + WRITE_CHUNK], cks[i + WRITE_CHUNK:]
            answered: list[bool] = []

            def on_done(r: PutMessageResult, chunk: list[CheckPoint] = chunk, answered: list[bool] = answered) -> None:
                if not answered:
                    answered.append(True)
                    self.written(chunk, r)

            try:
                records = [self.revive.checkpoint_record(ck) for ck in chunk]
                r = await self.store.put_async(records, on_done)  # (once submitted, on_done answers it, always)
            except asyncio.CancelledError:
                self.written(rest, failed, submitted=False)
                raise
            except Exception:
                if not answered:  # (raised before it was submitted)
                    self.written(chunk, failed, submitted=False)
                self.written(rest, failed, submitted=False)
                raise
            if not r.stored:
                log.warning("cannot write %d buffered pop checkpoints: %s %s; trying again", len(cks) - i,
                            r.status.name, r.remark)
                self.written(rest, r, submitted=False)
                return False
        return True

    def stats(self) -> dict[str, int]:
        return {"buffered_checkpoints": self.size,
                "pending_offsets": sum(len(q.pending) for q in self.queues.values())}


__all__ = ["PopBufferMergeService"]
