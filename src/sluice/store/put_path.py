"""The put path: how a put is checked, appended, and answered once as durable as its sender waits for (RocketMQ's
CommitLog.asyncPutMessage with its flush and replica waits).

There is one put path (``_append_puts``); ``put_then`` (a caller on an event loop: the broker), ``put_async`` (a
task) and ``put`` (a thread) only differ in how they wait for the group commit. An event loop's puts are appended
on the store thread (``PutService``); their answers come back on the loop.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import struct
import threading
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Protocol, TypeAlias

import numpy as np

from sluice.common.config import MessageStoreConfig
from sluice.common.errors import InvalidNameError, MessageFormatError
from sluice.common.lmq_dispatch import dispatch_names, lmq_problem
from sluice.common.message import MessageExtBrokerInner
from sluice.common.naming import LMQ_QUEUE_ID, is_lmq, validate_topic
from sluice.common.properties import (
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    PROPERTY_WAIT_STORE_MSG_OK,
    property_marker,
)
from sluice.store.commit_log import (
    AppendResult,
    CommitLog,
    CommitLogClosed,
    PropertiesTooLarge,
    RawBatch,
    SegmentOverflow,
    no_queue_offset,
)
from sluice.store.dispatcher import DISK_FAILED, Dispatcher
from sluice.store.flush import FlushWaiter, GroupCommitService
from sluice.store.put_service import OVERLOAD, Job, PutService
from sluice.store.results import PutMessageResult, PutMessageStatus

log = logging.getLogger(__name__)

# A put: messages stored as consecutive records, or a SEND_BATCH_MESSAGE body stored as it came.
Put: TypeAlias = list[MessageExtBrokerInner] | RawBatch
# How a put is answered: ``done(i, result)`` for the i-th put of a call.
PutDone: TypeAlias = Callable[[int, PutMessageResult], None]
# What a wait for the slaves ended with: None when one has the bytes, else the status and remark to answer.
ReplicaOutcome: TypeAlias = tuple[PutMessageStatus, str] | None
# The puts of a call that were stored: (the put's index, its records, how many).
Stored: TypeAlias = list[tuple[int, AppendResult, int]]


class ReplicationWaiter(Protocol):
    """A SYNC_MASTER's wait for its slaves (``sluice.store.ha.ha_service``): one call per group of puts."""

    def wait_for_replicas(self, end_offset: int, callback: Callable[[ReplicaOutcome], None],
                          deadline: float | None = None) -> None:
        """On the event loop: ``callback`` once the in-sync slaves have the log up to ``end_offset``, or why not
        (FLUSH_SLAVE_TIMEOUT by ``deadline``, the loop's clock, at the latest)."""

    def wait_for_replicas_threadsafe(self, end_offset: int, callback: Callable[[ReplicaOutcome], None]) -> None:
        """The same from another thread; ``callback`` runs on the event loop."""


class WritableStore(Protocol):
    """What the put path asks of the store as a whole: whether it is open and its disk takes writes, and where a
    disk failure is reported."""

    @property
    def running(self) -> bool: ...

    @property
    def write_failure(self) -> str: ...

    @property
    def no_space(self) -> str: ...

    @property
    def disk_full(self) -> bool: ...

    @property
    def disk_full_remark(self) -> str: ...

    def note_no_space(self, what: str, exc: OSError) -> None: ...

    def fail_writes(self, what: str, exc: BaseException) -> None: ...


_DISPATCH_MARK = property_marker(PROPERTY_INNER_MULTI_DISPATCH)
_OFFSETS_MARK = property_marker(PROPERTY_INNER_MULTI_QUEUE_OFFSET)


@lru_cache(maxsize=4096)
def _topic_problem(topic: str) -> str | None:
    try:
        validate_topic(topic)
    except InvalidNameError as exc:
        return str(exc)
    return None


def _waits(put: Put) -> bool:
    """Whether a put's sender waits for its durability: unless every message says WAIT=false (a raw batch's
    WAIT comes with the request's properties)."""
    if isinstance(put, RawBatch):
        return put.extra_properties.get(PROPERTY_WAIT_STORE_MSG_OK) != "false"
    return any(m.wait_store_msg_ok for m in put)


class PutPath:
    """The store's writes: ``put_then`` (an event loop's request), ``put_async`` (a task), ``put`` (a thread)."""

    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog, dispatcher: Dispatcher,
                 store: WritableStore) -> None:
        self.config = config
        self.commit_log = commit_log
        self.dispatcher = dispatcher
        self.store = store
        # Replication (``sluice.store.ha``): a slave's store takes no put, only the master's bytes; a SYNC_MASTER's
        # puts wait for ``replication`` too; ``write_guard`` says why a master may not take writes now (a fenced
        # master whose lease ran out), checked at every put.
        self.slave_mode = False
        self.replication: ReplicationWaiter | None = None
        self.write_guard: Callable[[], str] | None = None
        self.append_listeners: list[Callable[[], None]] = []  # the log grew (called on the thread that appended)
        # Set at the store's start: the store thread, and the group commit when puts wait for fsync (SYNC_FLUSH).
        self.put_service: PutService | None = None
        self.group_commit: GroupCommitService | None = None

    def _refusal(self) -> PutMessageResult | None:
        """Why the store takes no put now, if it takes none."""
        if not self.store.running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, "the message store is shut down")
        if self.slave_mode:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                    "message store is slave mode, so putMessage is forbidden")
        if self.write_guard is not None:
            why = self.write_guard()
            if why:
                return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, why)
        if self.store.write_failure:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.store.write_failure)
        if self.store.no_space:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.store.no_space)
        if self.store.disk_full:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.store.disk_full_remark)
        return None

    def _check(self, put: Put) -> PutMessageResult | None:
        refused = self._refusal()
        if refused is not None:
            return refused
        if isinstance(put, RawBatch):
            return self._check_raw(put)
        c = self.config
        if not put:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, "no message to put")
        for m in put:
            problem = _topic_problem(m.topic)
            if problem:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, problem)
            if len(m.body) > c.max_message_size:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                        f"message body of {len(m.body)} bytes exceeds max_message_size "
                                        f"{c.max_message_size}")
            if m.queue_id < 0:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, f"queue id {m.queue_id} is negative")
        if c.enable_lmq:
            return self._check_lmq(put)
        return None

    def _check_lmq(self, put: list[MessageExtBrokerInner]) -> PutMessageResult | None:
        """Light queues a message names, or is sent to, that cannot be: a bad dispatch list, or new light queues
        past the quota (whatever put made the message: a send, a reply, a retry copy). New ones of puts stored
        together may pass it by at most one group's worth."""
        c = self.config
        new: set[str] = set()
        for m in put:
            names = dispatch_names(m.topic, m.properties) if c.enable_multi_dispatch else None
            if names is not None:
                problem = lmq_problem(m.topic, names, c.max_lmq_dispatch)
                if problem:
                    return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, problem)
                new.update(n for n in names if self.dispatcher.find_consume_queue(n, LMQ_QUEUE_ID, False) is None)
            if is_lmq(m.topic) and self.dispatcher.find_consume_queue(m.topic, m.queue_id, False) is None:
                new.add(m.topic)
        if new and self.dispatcher.lmq_count + len(new) > c.max_lmq_consume_queue_num:
            return PutMessageResult(PutMessageStatus.LMQ_CONSUME_QUEUE_NUM_EXCEEDED,
                                    "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]lmq consume queue num exceeded.")
        return None

    def _check_raw(self, batch: RawBatch) -> PutMessageResult | None:
        cols = batch.columns
        if not cols.count:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, "no message to put")
        problem = _topic_problem(batch.topic)
        if problem:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, problem)
        if batch.queue_id < 0:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, f"queue id {batch.queue_id} is negative")
        data = batch.data
        if _DISPATCH_MARK in data or _OFFSETS_MARK in data:  # (a batch is never dispatched to light queues, and only
            # the broker writes offsets in them: a record read back must not claim any)
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, "a batch cannot carry INNER_MULTI_DISPATCH or "
                                                                      "INNER_MULTI_QUEUE_OFFSET: send such messages "
                                                                      "one by one")
        limit = self.config.max_message_size
        too_big = np.flatnonzero(cols.props_len_pos - cols.body_start > limit)
        if len(too_big):
            i = int(too_big[0])
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    f"message {i} of the batch has a body of "
                                    f"{int(cols.props_len_pos[i] - cols.body_start[i])} bytes, over max_message_size "
                                    f"{limit}")
        return None

    def _append_checked(self, put: Put) -> PutMessageResult | AppendResult:
        """Append a put ``_check`` passed, turning what the append raises into the sender's answer."""
        try:
            if isinstance(put, RawBatch):
                return self.commit_log.append_raw_batch(put, self.dispatcher.dispatch_raw_batch)
            return self.commit_log.append(put, self.dispatcher.dispatch)
        except SegmentOverflow as exc:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, str(exc))
        except CommitLogClosed as exc:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, str(exc))
        except PropertiesTooLarge as exc:
            return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, str(exc))
        except (MessageFormatError, UnicodeEncodeError, struct.error) as exc:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, str(exc))
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                self.store.note_no_space("writing the commit log", exc)
                return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.store.no_space)
            if exc.errno in DISK_FAILED:  # the disk failed the write: as a failed fsync, for good
                self.store.fail_writes("writing the commit log", exc)
                return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.store.write_failure)
            log.exception("commit log append failed")
            return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, f"cannot write: {exc}")

    def waits_for_flush(self, put: Put) -> bool:
        """Whether a put answers only after a group commit: SYNC_FLUSH, unless every message says WAIT=false
        (a raw batch's WAIT comes with the request's properties)."""
        if self.group_commit is None:
            return False
        return _waits(put)

    def waits_for_replicas(self, put: Put) -> bool:
        """Whether a put answers only once a slave has its bytes (SYNC_MASTER), WAIT as for the flush."""
        return self.replication is not None and _waits(put)

    def _waits_any(self, put: Put) -> bool:
        return self.waits_for_flush(put) or self.waits_for_replicas(put)

    def _finish_put(self, r: AppendResult, n: int, flushed: bool,
                    replicated: ReplicaOutcome = None) -> PutMessageResult:
        """The answer to a stored put; never raises (the records are stored whatever happens here).
        ``replicated``: what the wait for the slaves ended with, when it did not end well."""
        try:
            result = PutMessageResult(PutMessageStatus.PUT_OK, "", r.wrote_offset, r.wrote_bytes, r.queue_offset, n,
                                      r.store_timestamp, r.phys_offsets)
            if flushed and replicated is not None:
                result.status, result.remark = replicated
            elif not flushed:
                if self.store.write_failure:  # not durable, and never to be: the send failed
                    result.status, result.remark = PutMessageStatus.SERVICE_NOT_AVAILABLE, self.store.write_failure
                else:
                    result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
                    result.remark = f"not flushed within {self.config.sync_flush_timeout} ms"
            return result
        except Exception as exc:
            log.exception("finishing a put failed")
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, f"{type(exc).__name__}: {exc}")

    def put_then(self, puts: Sequence[Put], done: PutDone) -> None:
        """Store ``puts`` (each a list of messages, stored as consecutive records, or a raw batch), their records
        in the log in the order given, for a client's request made on a running event loop that may not block.
        ``done(i, result)`` answers ``puts[i]`` on that loop once the store thread has appended it (and, when its
        sender waits for that, once it is flushed: FLUSH_DISK_TIMEOUT after ``sync_flush_timeout``). Consecutive
        message puts are one append and one flush wait; a put the store refuses does not touch the others. Under
        back-pressure (``PutService``) every put is answered SYSTEM_BUSY and nothing is stored."""
        loop = asyncio.get_running_loop()
        self.dispatcher.bind_loop(loop)
        ps = self.put_service
        if ps is None:
            refused = self._refusal() or PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, "not started")
            for i in range(len(puts)):
                done(i, refused)
            return
        why = ps.admit()
        if why:
            busy = PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY, why)
            for i in range(len(puts)):
                done(i, busy)
            return
        # Bad puts are answered at once; the store thread checks the others only against the store's state.
        ok: list[int] = []
        for i, put in enumerate(puts):
            problem = self._check(put)
            if problem is not None:
                done(i, problem)
            else:
                ok.append(i)
        if len(ok) < len(puts):
            if not ok:
                return
            puts = [puts[i] for i in ok]
            done = functools.partial(_renumbered, ok, done)
        job = _PutJob(self, puts, done, loop, expirable=True)
        if not ps.submit(job, loop):
            job.answer_all(self._refusal() or PutMessageResult(PutMessageStatus.SYSTEM_BUSY, OVERLOAD))

    async def put_async(self, put: Put,
                        on_done: Callable[[PutMessageResult], None] | None = None) -> PutMessageResult:
        """Store one put of the broker's own (never turned down by back-pressure) from a task; the answer comes
        once it is appended, or in SYNC_FLUSH once its records are durable. ``on_done(result)`` runs on the loop
        with the answer, whatever becomes of the awaiting task (bookkeeping that must follow the write even when
        the request that asked for it went away)."""
        loop = asyncio.get_running_loop()
        self.dispatcher.bind_loop(loop)
        fut: asyncio.Future[PutMessageResult] = loop.create_future()

        def done(_i: int, r: PutMessageResult) -> None:
            if on_done is not None:
                on_done(r)
            if not fut.done():  # (the awaiting task may be cancelled)
                fut.set_result(r)

        ps = self.put_service
        if ps is None or not ps.submit(_PutJob(self, [put], done, loop, expirable=False)):
            done(0, self._refusal() or PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                                        "the message store is shut down"))
        return await fut

    def put(self, put: Put) -> PutMessageResult:
        """Store one put from a thread (not an event loop's), on that thread; in SYNC_FLUSH this blocks until its
        records are durable."""
        answers: list[PutMessageResult] = []
        stored, refused = self._append_puts([put])
        for _i, r in refused:
            answers.append(r)
        self.dispatcher.deliver_arrivals(self.dispatcher.take_arrivals())
        if stored:
            self._await_durability([put], stored, lambda _i, r: answers.append(r), None)
        return answers[0]

    def _append_puts(self, puts: Sequence[Put],
                     checked: bool = False) -> tuple[Stored, list[tuple[int, PutMessageResult]]]:
        """Check and append ``puts`` (on the store thread, or a caller's own thread): the puts stored, each with
        its records and how many, and the answers of those refused. ``checked``: their contents were checked
        already, only the store's state is."""
        stored: Stored = []  # (put, its records, how many)
        refused: list[tuple[int, PutMessageResult]] = []
        done: PutDone = lambda i, r: refused.append((i, r))  # noqa: E731
        run: list[int] = []  # consecutive message puts: one append
        for i, put in enumerate(puts):
            problem = self._refusal() if checked else self._check(put)
            if problem is not None:
                done(i, problem)
            elif isinstance(put, RawBatch):
                self._append_run(puts, run, stored, done)
                run = []
                self._append_run(puts, [i], stored, done)
            else:
                run.append(i)
        self._append_run(puts, run, stored, done)
        if stored:
            if self.group_commit is not None:
                self.group_commit.wakeup()  # its records are dispatched once flushed, waited for or not
            for listener in self.append_listeners:
                listener()
        return stored, refused

    def _await_durability(self, puts: Sequence[Put], stored: Stored, done: PutDone,
                          loop: asyncio.AbstractEventLoop | None, since: float | None = None) -> None:
        """Answer the stored ``puts``: at once those whose senders do not wait, the others once flushed (and
        replicated on a SYNC_MASTER), waiting on ``loop`` (None: blocking this thread). ``since``: when the
        request arrived (``time.monotonic()``): the timeouts count from then, so that a sender hears an answer
        within ``sync_flush_timeout`` of asking however long its turn took."""
        deadline = None
        if loop is not None and since is not None:
            deadline = loop.time() + since + self.config.sync_flush_timeout / 1000 - time.monotonic()
        waiting = [s for s in stored if self._waits_any(puts[s[0]])]
        waits = {s[0] for s in waiting}
        for i, r, n in stored:
            if i not in waits:
                done(i, self._finish_put(r, n, True))
        if not waiting:
            return

        end = max(r.wrote_offset + r.wrote_bytes for _, r, _ in waiting)

        def answer(ok: bool, replicated: ReplicaOutcome) -> None:
            for i, r, n in waiting:
                rep = replicated if self.waits_for_replicas(puts[i]) else None
                done(i, self._finish_put(r, n, ok or not self.waits_for_flush(puts[i]), rep))

        replication = self.replication
        needs_replicas = replication is not None and any(self.waits_for_replicas(puts[i]) for i, _, _ in waiting)

        def flushed(ok: bool) -> None:
            if not (ok and needs_replicas):
                answer(ok, None)
                return
            assert replication is not None
            if loop is not None:
                replication.wait_for_replicas(end, lambda rep: answer(True, rep), deadline)
                return
            got: list[ReplicaOutcome] = []
            event = threading.Event()

            def settle(rep: ReplicaOutcome) -> None:
                got.append(rep)
                event.set()

            replication.wait_for_replicas_threadsafe(end, settle)
            if not event.wait(self.config.sync_flush_timeout / 1000 + 1):
                got.append((PutMessageStatus.FLUSH_SLAVE_TIMEOUT, "no slave acknowledged in time"))
            answer(True, got[0])

        if self.group_commit is None or not any(self.waits_for_flush(puts[i]) for i, _, _ in waiting):
            flushed(True)
            return
        if loop is not None:
            self.group_commit.submit_callback(end, flushed, deadline)
            return
        waiter = FlushWaiter(end)
        self.group_commit.submit(waiter)
        flushed(waiter.wait(self.config.sync_flush_timeout / 1000))

    def _append_run(self, puts: Sequence[Put], run: list[int], stored: Stored, done: PutDone) -> None:
        """Append the checked puts ``run`` together (messages) or alone (a raw batch) and note each one's
        records in ``stored``; a put that fails is answered. If a joint append is refused before it writes,
        each put is made on its own, so that each hears its own answer; if it fails after writing (in
        dispatch), every put hears the failure: none is stored twice."""
        if not run:
            return
        if len(run) == 1:
            i = run[0]
            put = puts[i]
            try:
                r = self._append_checked(put)
            except Exception as exc:  # the sender must hear something
                log.exception("a put failed")
                r = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, f"{type(exc).__name__}: {exc}")
            if isinstance(r, PutMessageResult):
                done(i, r)
            else:
                stored.append((i, r, put.columns.count if isinstance(put, RawBatch) else len(put)))
            return
        msgs = [m for i in run for m in puts[i]]  # type: ignore[union-attr]
        log_end = self.commit_log.max_offset
        try:
            r = self._append_checked(msgs)
        except Exception as exc:
            log.exception("a put of %d messages failed", len(msgs))
            r = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, f"{type(exc).__name__}: {exc}")
        if isinstance(r, PutMessageResult):
            if self.commit_log.max_offset != log_end:
                for i in run:
                    done(i, r)
            else:
                for i in run:
                    self._append_run(puts, [i], stored, done)
            return
        assert r.queue_offsets is not None
        end = r.wrote_offset + r.wrote_bytes
        first = 0
        for i in run:
            last = first + len(puts[i])  # type: ignore[arg-type]
            start = r.phys_offsets[first]
            stop = r.phys_offsets[last] if last < len(msgs) else end
            arrivals = {(m.topic, m.queue_id): q + 1 for m, q in zip(msgs[first:last], r.queue_offsets[first:last],
                                                                   strict=True) if not no_queue_offset(m.sys_flag)}
            stored.append((i, AppendResult(start, stop - start, r.queue_offsets[first], r.store_timestamp,
                                           r.phys_offsets[first:last], arrivals), last - first))
            first = last



def _renumbered(indexes: list[int], done: PutDone, i: int, result: PutMessageResult) -> None:
    done(indexes[i], result)


class _PutJob(Job):
    """An event loop's puts, appended on the store thread; the rest (answers, the wait for the flush) back on
    the loop."""

    __slots__ = ("path", "puts", "done", "loop", "expirable", "_answered")

    def __init__(self, path: PutPath, puts: Sequence[Put], done: PutDone, loop: asyncio.AbstractEventLoop,
                 expirable: bool) -> None:
        super().__init__()
        self.path = path
        self.puts = puts
        self.done = done
        self.loop = loop
        self.expirable = expirable
        self._answered = [False] * len(puts)

    def answer(self, i: int, result: PutMessageResult) -> None:
        """On the loop: ``puts[i]``'s answer, once (a late one, after ``overdue``, is dropped)."""
        if self._answered[i]:
            return
        self._answered[i] = True
        self.done(i, result)

    def run(self) -> None:
        self.run_together([self])

    def merges_with(self, other: Job) -> bool:
        return (isinstance(other, _PutJob) and other.path is self.path and other.loop is self.loop
                and other.expirable == self.expirable)

    def run_together(self, jobs: list[Job]) -> None:
        """The puts of ``jobs`` in one call: consecutive message puts one append, and one post to the loop."""
        path = self.path
        puts: list[Put] = []
        for job in jobs:
            assert isinstance(job, _PutJob)
            puts.extend(job.puts)
        try:
            stored, refused = path._append_puts(puts, checked=self.expirable)
        except Exception as exc:  # the senders must hear something
            log.exception("a put failed")
            failed = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, f"{type(exc).__name__}: {exc}")
            for job in jobs:
                job.answer_all(failed)  # type: ignore[attr-defined]
            return
        # Each job's share of the answers (their puts were numbered in a row).
        stored.sort(key=lambda s: s[0])
        refused.sort(key=lambda r: r[0])
        shares: list[tuple[_PutJob, Stored, list[tuple[int, PutMessageResult]]]] = []
        base = 0
        si = ri = 0
        for job in jobs:
            assert isinstance(job, _PutJob)
            end = base + len(job.puts)
            mine_s: Stored = []
            while si < len(stored) and stored[si][0] < end:
                i, r, n = stored[si]
                mine_s.append((i - base, r, n))
                si += 1
            mine_r: list[tuple[int, PutMessageResult]] = []
            while ri < len(refused) and refused[ri][0] < end:
                i, answer = refused[ri]
                mine_r.append((i - base, answer))
                ri += 1
            shares.append((job, mine_s, mine_r))
            base = end
        self._post(_appended_all, path, shares, path.dispatcher.take_arrivals())

    def _appended(self, stored: Stored, refused: list[tuple[int, PutMessageResult]]) -> None:
        """On the loop."""
        for i, r in refused:
            self.answer(i, r)
        if stored:
            self.path._await_durability(self.puts, stored, self.answer, self.loop, self.created)

    def refuse(self, remark: str) -> None:
        self.answer_all(PutMessageResult(PutMessageStatus.SYSTEM_BUSY, remark))

    def overdue(self, remark: str) -> None:
        result = PutMessageResult(PutMessageStatus.SYSTEM_BUSY, remark)
        for i in range(len(self.puts)):
            self.answer(i, result)

    def answer_all(self, result: PutMessageResult) -> None:
        """Answer every put with ``result`` (from any thread)."""
        def answer() -> None:
            for i in range(len(self.puts)):
                self.answer(i, result)

        self._post(answer)

    def _post(self, fn: Callable[..., None], *args: object) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closed: nobody waits for the answer any more


def _appended_all(path: PutPath, shares: list[tuple[_PutJob, Stored, list[tuple[int, PutMessageResult]]]],
                  arrivals: dict[tuple[str, int], int]) -> None:
    """On the loop: what the store thread made of several jobs' puts."""
    if arrivals:
        path.dispatcher.notify_arrivals(arrivals)
    for job, stored, refused in shares:
        job._appended(stored, refused)



__all__ = ["Put", "PutDone", "PutPath", "ReplicaOutcome", "ReplicationWaiter", "WritableStore"]
