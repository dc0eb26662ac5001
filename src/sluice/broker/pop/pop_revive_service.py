"""POP invisibility (RocketMQ's PopReviveService and its revive log).

Every pop of a queue makes a *checkpoint* (CK: the group, the queue, the offsets popped, pop time and invisible
time), written to the revive topic ``rmq_sys_REVIVE_LOG_<cluster>`` at once or, by default, only if it is still open
after a while (``PopBufferMergeService``); every ack of a written checkpoint writes an *ack* record there. The broker
keeps the checkpoints not yet settled in memory; once a checkpoint's revive time (pop time + invisible time)
passes, each of its messages not acknowledged is put again into the POP retry topic ``%RETRY%<group>_<topic>``
with ``reconsumeTimes`` + 1 (past the group's ``retryMaxTimes``: into ``%DLQ%<group>``), and the checkpoint is
settled.

Unlike RocketMQ, which hands checkpoints to its timer wheel and reads them back when due, Sluice reads the
revive log only when it starts: from the revive offset it committed (under ``CID_RMQ_SYS_REVIVE_GROUP``, the
oldest record of a checkpoint not yet settled) to the end, replaying checkpoints and acks. So after a crash
every popped-but-unacknowledged message of a written checkpoint comes back once its time is up, and none twice
unless its revive was under way; those of a checkpoint only in memory come back at once (the group's offset had
not moved past them).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from sluice.broker.broker_stats import METRICS_CARDINALITY_LIMIT, counter_slot
from sluice.common.extra_info import PROPERTY_FIRST_POP_TIME, pop_retry_topic
from sluice.common.message import MessageExt, MessageExtBrokerInner
from sluice.common.message_codec import decode_records
from sluice.common.naming import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, dlq_topic
from sluice.common.properties import PROPERTY_RETRY_TOPIC, PROPERTY_TAGS
from sluice.common.service import AsyncService
from sluice.common.sysflag import PERM_READ, PERM_WRITE
from sluice.store.results import GetMessageStatus, PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager
    from sluice.broker.topic_config_manager import EnsureSystemTopic
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG = "ck"
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"
REVIVED_TAG = "rv"  # a checkpoint whose messages were put back (Sluice's own: RocketMQ's timer ordering avoids it)
# Pop offsets moved by checkpoints settled in memory (Sluice's own: [[group, topic, queue id, offset], ...]).
OFFSET_TAG = "po"
# How often a checkpoint whose messages could not be put again is retried.
REVIVE_RETRY_SECONDS = 1.0


def revive_topic(cluster: str) -> str:
    return f"rmq_sys_REVIVE_LOG_{cluster}"


def now_ms() -> int:
    return int(time.time() * 1000)


CheckPointKey = tuple[str, str, int, int, int, str]  # topic, group, queue id, start offset, pop time, broker


@dataclass(slots=True)
class CheckPoint:
    """One pop of one queue (RocketMQ's PopCheckPoint): offsets ``start_offset + diffs[i]`` are invisible until
    ``revive_time`` unless acknowledged (bit i of ``acked``)."""

    topic: str  # the queue's topic: the POP retry topic for a retried message
    group: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    broker_name: str
    diffs: list[int]
    revive_qid: int
    acked: int = 0
    revive_offset: int = -1  # where its record lies in its revive queue (a lower bound until written)
    revived: bool = False  # its unacknowledged messages were put back
    suspend: bool = False  # (RocketMQ 5.5) its messages come back without a delivery counted
    changed: bool = False  # made by a change of invisible time: its message lies inside an earlier pop's
    buffered: bool = False  # only in memory (PopBufferMergeService), waiting to be written
    writing: asyncio.Future[None] | None = None  # its record is being written: done once it is, or failed
    logged: bool = False  # its record is in the revive log
    busy: int = 0  # puts under way that name it (its revive, a change of invisible time): not written meanwhile
    changing: int = 0  # messages (bits) whose change of invisible time is being written: out of reach meanwhile

    @property
    def key(self) -> CheckPointKey:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time, self.broker_name)

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def settled(self) -> bool:
        return self.acked == (1 << len(self.diffs)) - 1

    def index_of(self, offset: int) -> int:
        """Which of its messages lies at ``offset`` (-1: none)."""
        try:
            return self.diffs.index(offset - self.start_offset)
        except ValueError:
            return -1

    def unacked_offsets(self) -> list[int]:
        return [self.start_offset + d for i, d in enumerate(self.diffs) if not self.acked >> i & 1]

    def to_json(self) -> bytes:
        return orjson.dumps({"so": self.start_offset, "pt": self.pop_time, "it": self.invisible_time, "bm": self.acked,
                             "n": len(self.diffs), "q": self.queue_id, "t": self.topic, "c": self.group,
                             "d": self.diffs, "bn": self.broker_name, "reviveTime": self.revive_time,
                             "sp": self.suspend, "ci": self.changed})

    @classmethod
    def from_json(cls, body: bytes, revive_qid: int, revive_offset: int) -> CheckPoint:
        d = orjson.loads(body)
        return cls(str(d["t"]), str(d["c"]), int(d["q"]), int(d["so"]), int(d["pt"]), int(d["it"]), str(d["bn"]),
                   [int(x) for x in d["d"]], revive_qid, int(d.get("bm", 0)), revive_offset,
                   suspend=bool(d.get("sp", False)), changed=bool(d.get("ci", False)), logged=True)


@dataclass(frozen=True, slots=True)
class AckRecord:
    """Acks of popped messages of one checkpoint (RocketMQ's AckMsg, or BatchAckMsg for several), naming it."""

    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time: int
    broker_name: str
    offsets: tuple[int, ...]

    @property
    def key(self) -> CheckPointKey:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time, self.broker_name)

    def to_json(self) -> bytes:
        d: dict[str, Any] = {"ao": self.offsets[0] if len(self.offsets) == 1 else -1, "so": self.start_offset,
                             "c": self.group, "t": self.topic, "q": self.queue_id, "pt": self.pop_time,
                             "bn": self.broker_name}
        if len(self.offsets) > 1:
            d["aol"] = list(self.offsets)
        return orjson.dumps(d)

    @classmethod
    def from_json(cls, body: bytes) -> AckRecord:
        d = orjson.loads(body)
        offsets = tuple(int(o) for o in d["aol"]) if "aol" in d else (int(d["ao"]),)
        return cls(str(d["t"]), str(d["c"]), int(d["q"]), int(d["so"]), int(d["pt"]), str(d["bn"]), offsets)


class PopReviveService(AsyncService):
    """The checkpoints of a broker's pops, their acks, and the revive of what nobody acknowledged in time."""

    def __init__(self, config: BrokerConfig, broker_addr: str, store: MessageStore,
                 subscription_group_manager: SubscriptionGroupManager, ensure_system_topic: EnsureSystemTopic) -> None:
        super().__init__()
        self.config = config
        self.broker_addr = broker_addr
        self.store = store
        self.subscription_group_manager = subscription_group_manager
        self.ensure_system_topic = ensure_system_topic
        self.topic = revive_topic(config.broker_cluster_name)
        self.queue_num = config.revive_queue_num
        self.checkpoints: dict[CheckPointKey, CheckPoint] = {}
        self._due: list[tuple[int, CheckPointKey]] = []  # (revive time, key), stale entries skipped
        self._next_qid = 0
        self._last_pop_time = 0
        self._wake = asyncio.Event()
        # Called with each checkpoint that leaves ``checkpoints`` (settled, revived, or not written).
        self.on_done: Callable[[CheckPoint], None] = lambda ck: None
        self.revived = 0  # messages put back (stats, tests)
        self.dead = 0  # of them, into a DLQ
        # RocketMQ's POP revive counters (PopMetricsManager), bounded as the broker's: checkpoint (CK) and ack
        # (ACK) records written, by put status; records the revive service is done with (a checkpoint settled or
        # revived, an ack applied; Sluice applies acks as they come, and reads the log only at start); messages
        # put back, by put status.
        self.revive_in: dict[tuple[str, str, str, str] | None, list[float]] = {}
        self.revive_out: dict[tuple[str, str, int, str] | None, list[float]] = {}
        self.revive_retry: dict[tuple[str, str, str] | None, list[float]] = {}

    # == lifecycle ===================================================================================
    def load(self) -> None:
        """Replay the revive log from the committed revive offsets (at start, before any pop)."""
        self.ensure_system_topic(self.topic, self.queue_num, PERM_READ | PERM_WRITE)
        store = self.store
        cks = acks = 0
        crashed = store.abnormal_start
        # Every revive queue on disk, also those past a lowered revive_queue_num.
        qids = sorted(set(range(self.queue_num)) | {q for t, q in store.topic_queues if t == self.topic})
        for qid in qids:
            offset = max(store.consumer_offsets.query_offset(REVIVE_GROUP, self.topic, qid),
                         store.get_min_offset_in_queue(self.topic, qid))
            while True:
                r = store.get_messages(REVIVE_GROUP, self.topic, qid, offset, 32)
                if r.status is not GetMessageStatus.FOUND:
                    if r.next_begin_offset > offset:  # filtered, or records removed under it: read on
                        offset = r.next_begin_offset
                        continue
                    break
                for msg, q in zip(decode_records(b"".join(r.buffers)), r.queue_offsets, strict=True):
                    try:
                        if msg.tags == CK_TAG:
                            ck = CheckPoint.from_json(msg.body, qid, q)
                            if not ck.settled:  # (written with every ack merged in: nothing left of it)
                                self._track(ck)
                            self._last_pop_time = max(self._last_pop_time, ck.pop_time)
                            if crashed and not ck.changed:  # (a changed one's offset is its pop's to move)
                                self._popped_past(ck)
                            cks += 1
                        elif msg.tags in (ACK_TAG, BATCH_ACK_TAG):
                            self._apply_ack(AckRecord.from_json(msg.body))
                            acks += 1
                        elif msg.tags == REVIVED_TAG:
                            self.checkpoints.pop(CheckPoint.from_json(msg.body, qid, q).key, None)
                        elif msg.tags == OFFSET_TAG and crashed:
                            self._offsets_moved(orjson.loads(msg.body))
                    except (ValueError, KeyError, TypeError) as exc:  # not ours: skip it, never stop here
                        log.error("revive log %s queue %d offset %d: unreadable record skipped: %s", self.topic, qid,
                                  q, exc)
                r.release()
                offset = r.next_begin_offset
        if cks:
            log.info("revive log replayed: %d checkpoints, %d acks, %d checkpoints open", cks, acks,
                     len(self.checkpoints))

    def _popped_past(self, ck: CheckPoint) -> None:
        """After a crash, a replayed checkpoint: the group's pop offset is past its messages (the offsets file may
        be older than the crash; without this every pop since it was written would be handed out again). Not after
        a clean stop: the offsets file is current then, and may hold an admin's reset backwards."""
        offsets = self.store.consumer_offsets
        end = ck.start_offset + max(ck.diffs, default=-1) + 1
        if offsets.query_offset(ck.group, ck.topic, ck.queue_id) < end:
            offsets.commit_offset(ck.group, ck.topic, ck.queue_id, end)

    def _offsets_moved(self, entries: list[list[Any]]) -> None:
        """After a crash, a journal of pop offsets: the group's offset is at least there (as ``_popped_past``)."""
        offsets = self.store.consumer_offsets
        for group, topic, queue_id, offset in entries:
            group, topic, queue_id, offset = str(group), str(topic), int(queue_id), int(offset)
            if offsets.query_offset(group, topic, queue_id) < offset:
                offsets.commit_offset(group, topic, queue_id, offset)

    def start(self) -> None:
        self._spawn(self._run())

    async def stop(self) -> None:
        await super().stop()
        self._commit_revive_offsets()

    # == checkpoints and acks ========================================================================
    def next_pop_time(self) -> int:
        """The pop time of a new checkpoint: now, but never one already given (a checkpoint is known by it)."""
        t = self._last_pop_time = max(now_ms(), self._last_pop_time + 1)
        return t

    def next_revive_qid(self) -> int:
        qid = self._next_qid
        self._next_qid = (qid + 1) % self.queue_num
        return qid

    def _track(self, ck: CheckPoint) -> None:
        self.checkpoints[ck.key] = ck
        heapq.heappush(self._due, (ck.revive_time, ck.key))
        if len(self._due) > 2 * len(self.checkpoints) + 1024:  # settled ones' entries: drop them, stay bounded
            self._due = [(c.revive_time, k) for k, c in self.checkpoints.items()]
            heapq.heapify(self._due)

    def count_put(self, group: str, topic: str, kind: str, status: PutMessageStatus,
                  revive_qid: int | None = None) -> None:
        """A revive record of ``kind`` (CK or ACK) written with ``status``; an ack written (to ``revive_qid``) is
        also done with: it was applied in memory as it came."""
        counter_slot(self.revive_in, (group, topic, kind, status.value), 1, METRICS_CARDINALITY_LIMIT)[0] += 1
        if kind == "ACK" and revive_qid is not None and status is PutMessageStatus.PUT_OK:
            self._count_out(group, topic, revive_qid, "ACK")

    def _count_out(self, group: str, topic: str, revive_qid: int, kind: str) -> None:
        counter_slot(self.revive_out, (group, topic, revive_qid, kind), 1, METRICS_CARDINALITY_LIMIT)[0] += 1

    def _apply_ack(self, ack: AckRecord) -> None:
        """Mark acked messages in their checkpoint (none when it is settled already or unknown)."""
        ck = self.checkpoints.get(ack.key)
        if ck is None:
            return
        self._count_out(ack.group, ack.topic, ck.revive_qid, "ACK")
        for offset in ack.offsets:
            i = ck.index_of(offset)
            if i >= 0:
                ck.acked |= 1 << i
        if ck.settled:
            self._drop(ck)

    def checkpoint_record(self, ck: CheckPoint, tag: str = CK_TAG) -> MessageExtBrokerInner:
        return self._record(ck.revive_qid, tag, ck.to_json())

    def offset_record(self, entries: list[list[Any]]) -> MessageExtBrokerInner:
        return self._record(0, OFFSET_TAG, orjson.dumps(entries))

    def ack_record(self, ack: AckRecord, revive_qid: int) -> MessageExtBrokerInner:
        return self._record(revive_qid, ACK_TAG if len(ack.offsets) == 1 else BATCH_ACK_TAG, ack.to_json())

    def _record(self, qid: int, tag: str, body: bytes) -> MessageExtBrokerInner:
        # (no keys: nobody looks a revive record up by key, and the index would grow per ack)
        return MessageExtBrokerInner(self.topic, body, qid, 0, {PROPERTY_TAGS: tag}, 0, now_ms(), self.broker_addr,
                                     self.broker_addr)

    def open(self, ck: CheckPoint) -> None:
        """Track a checkpoint about to be written (its messages are invisible from now on)."""
        ck.revive_offset = self.store.get_max_offset_in_queue(self.topic, ck.revive_qid)
        self.track(ck)

    def track(self, ck: CheckPoint) -> None:
        """Track a checkpoint: its messages are invisible from now on, until acknowledged or its revive time."""
        self._track(ck)
        self._wake.set()

    def is_open(self, ck: CheckPoint) -> bool:
        return self.checkpoints.get(ck.key) is ck

    def written(self, ck: CheckPoint, r: PutMessageResult) -> None:
        """Its record is stored (``r``): note where, for the revive offset."""
        self.count_put(ck.group, ck.topic, "CK", r.status)
        if r.stored:
            ck.revive_offset = r.queue_offset
            ck.logged = True

    def forget(self, ck: CheckPoint) -> None:
        """A checkpoint whose record could not be written: its messages were not handed out."""
        self._drop(ck)

    def _drop(self, ck: CheckPoint) -> None:
        if self.checkpoints.get(ck.key) is ck:
            del self.checkpoints[ck.key]
            if (ck.settled or ck.revived) and ck.logged:  # (a buffered one never was in the log)
                self._count_out(ck.group, ck.topic, ck.revive_qid, "CK")
            self.on_done(ck)

    def find(self, topic: str, group: str, queue_id: int, start_offset: int, pop_time: int,
             broker_name: str) -> CheckPoint | None:
        return self.checkpoints.get((topic, group, queue_id, start_offset, pop_time, broker_name))

    def ack(self, ck: CheckPoint, offset: int) -> bool:
        """Mark ``offset`` of ``ck`` acknowledged in memory; False if it was already (or is not one of it)."""
        i = ck.index_of(offset)
        return i >= 0 and self.ack_mask(ck, 1 << i) != 0

    def ack_mask(self, ck: CheckPoint, mask: int) -> int:
        """Mark ``ck``'s messages of the bits of ``mask`` (by their index in it) acknowledged in memory; the bits
        that were not already."""
        new = mask & ~ck.acked & ((1 << len(ck.diffs)) - 1)
        if new:
            ck.acked |= new
            if ck.settled:
                self._drop(ck)
        return new

    def unack(self, ck: CheckPoint, offset: int) -> None:
        """Undo ``ack`` (its record could not be written): the message comes back when its time is up."""
        i = ck.index_of(offset)
        if i >= 0 and ck.acked >> i & 1:
            ck.acked &= ~(1 << i)
            if ck.key not in self.checkpoints and not ck.revived:
                self._track(ck)

    # == revive ======================================================================================
    async def _run(self) -> None:
        while True:
            try:
                delay = await self.revive_due()
            except Exception:
                log.exception("pop revive failed")
                delay = REVIVE_RETRY_SECONDS
            self._commit_revive_offsets()
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass

    async def revive_due(self, now: int | None = None) -> float:
        """Put back the messages of every checkpoint whose time is up; the seconds until the next one is."""
        due = self._due
        now = now_ms() if now is None else now
        batch: list[CheckPoint] = []
        while due and due[0][0] <= now:
            _, key = heapq.heappop(due)
            ck = self.checkpoints.get(key)
            if ck is not None and ck.revive_time <= now:
                batch.append(ck)
        for ck in batch:
            try:
                ok = await self._revive(ck)
            except Exception:  # this one again later; the others of the round still go
                log.exception("pop revive of %s queue %d (group %s) failed", ck.topic, ck.queue_id, ck.group)
                ok = False
            if not ok:
                heapq.heappush(self._due, (now + int(REVIVE_RETRY_SECONDS * 1000), ck.key))
        due = self._due
        if not due:
            return 1.0
        return max(0.0, min(1.0, (due[0][0] - now_ms()) / 1000))

    async def _revive(self, ck: CheckPoint) -> bool:
        if self.checkpoints.get(ck.key) is not ck:
            return True
        if ck.busy:  # a change of its invisible time is being written: again in a moment
            return False
        msgs: list[MessageExtBrokerInner] = []
        for offset in ck.unacked_offsets():
            msg = self._load(ck, offset)
            if msg is not None:
                msgs.append(self._again(ck, msg))
        if msgs:  # with the mark that they are back, for a replay of the revive log
            ck.busy += 1  # (not written meanwhile: its record would follow the mark)
            try:
                r = await self.store.put_async([*msgs, self.checkpoint_record(ck, REVIVED_TAG)])
            finally:
                ck.busy -= 1
            if r.status is PutMessageStatus.MESSAGE_ILLEGAL:  # never to be stored: say so once, and let it go
                log.error("pop revive of %s queue %d (group %s): its messages cannot be put back (%s); dropped: %s",
                          ck.topic, ck.queue_id, ck.group, r.remark, ck.unacked_offsets())
            elif not r.stored:
                log.warning("pop revive of %s queue %d (group %s) failed: %s %s", ck.topic, ck.queue_id, ck.group,
                            r.status.name, r.remark)
                counter_slot(self.revive_retry, (ck.group, ck.topic, r.status.value), 1,
                             METRICS_CARDINALITY_LIMIT)[0] += len(msgs)
                return False
            counter_slot(self.revive_retry, (ck.group, ck.topic, r.status.value), 1,
                         METRICS_CARDINALITY_LIMIT)[0] += len(msgs)
            self.revived += len(msgs)
            self.dead += sum(1 for m in msgs if m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX))
        ck.revived = True
        self._drop(ck)
        return True

    def _load(self, ck: CheckPoint, offset: int) -> MessageExt | None:
        r = self.store.get_messages(ck.group, ck.topic, ck.queue_id, offset, 1)
        try:
            if r.status is not GetMessageStatus.FOUND or not r.queue_offsets or r.queue_offsets[0] != offset:
                log.warning("pop revive: %s queue %d offset %d is gone (%s); not put back", ck.topic, ck.queue_id,
                            offset, r.status.name)
                return None
            return decode_records(b"".join(r.buffers))[0]
        finally:
            r.release()

    def _again(self, ck: CheckPoint, msg: MessageExt) -> MessageExtBrokerInner:
        """The message as it comes back: in the POP retry topic, or the group's DLQ past its retries."""
        props = dict(msg.properties)
        original = ck.topic
        if original.startswith(RETRY_GROUP_TOPIC_PREFIX):
            original = props.get(PROPERTY_RETRY_TOPIC, original)
            retry = ck.topic
        else:
            retry = pop_retry_topic(ck.topic, ck.group)
        props.setdefault(PROPERTY_RETRY_TOPIC, original)
        if msg.reconsume_times == 0 or PROPERTY_FIRST_POP_TIME not in props:
            props[PROPERTY_FIRST_POP_TIME] = str(ck.pop_time)
        sub = self.subscription_group_manager.find(ck.group)
        max_times = sub.retry_max_times if sub is not None else self.config.max_reconsume_times
        if msg.reconsume_times >= max_times and not ck.suspend:  # (a suspended delivery is not a failed one)
            topic = dlq_topic(ck.group)
        else:
            topic = retry
        self.ensure_system_topic(topic, 1, PERM_READ | PERM_WRITE)
        return MessageExtBrokerInner(topic, msg.body, 0, msg.flag, props, msg.sys_flag, msg.born_timestamp,
                                     msg.born_host, self.broker_addr, msg.reconsume_times + (0 if ck.suspend else 1))

    def _commit_revive_offsets(self) -> None:
        """Each revive queue's committed offset: its oldest record of a checkpoint not settled (the end when
        none is), where the next start replays from."""
        store = self.store
        oldest: dict[int, int] = {}
        for ck in self.checkpoints.values():
            if ck.buffered:  # (nothing of it in the log yet; any other one has a lower bound: open(), _writing())
                continue
            if ck.revive_offset < oldest.get(ck.revive_qid, 1 << 62):
                oldest[ck.revive_qid] = ck.revive_offset
        for qid in range(self.queue_num):
            offset = oldest.get(qid, store.get_max_offset_in_queue(self.topic, qid))
            store.consumer_offsets.commit_offset(REVIVE_GROUP, self.topic, qid, offset)

    def stats(self) -> dict[str, Any]:
        return {"open_checkpoints": len(self.checkpoints), "revived": self.revived, "dead": self.dead}


__all__ = ["ACK_TAG", "BATCH_ACK_TAG", "CK_TAG", "OFFSET_TAG", "REVIVED_TAG", "REVIVE_GROUP", "AckRecord", "CheckPoint",
           "PopReviveService", "revive_topic"]
