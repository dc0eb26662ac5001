"""Timer messages (RocketMQ 5's TimerMessageStore): a message with TIMER_DELIVER_MS, TIMER_DELAY_SEC or
TIMER_DELAY_MS is delivered at that time.

On the send path ``prepare`` stores such a message in queue 0 of ``rmq_sys_wheel_timer`` with its due time in
TIMER_OUT_MS (the first multiple of ``timer_precision_ms`` at or after the time asked for) and its real topic and
queue in REAL_TOPIC / REAL_QID. The enqueue task reads that queue and puts each message into the timer wheel: a
unit in the timer log (on disk) chained to the others due at the same time, the chain's head in the wheel (in
memory). The dequeue task wakes at each due time that holds messages, walks its chain, and stores the messages
under their real topics, with TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS added, in the order they were sent.

The checkpoint (``config/timercheck.json``) records how far the timer queue was read into the log, how long the
log is then (flushed first), and until when every due message was delivered (once those are flushed). A restart
cuts the log back to the checkpoint, rebuilds the wheel from it, and goes on from there: a message is delivered at
least once; a crash can deliver the last second's messages twice.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from sluice.common.config_manager import ConfigManager
from sluice.common.decimal_text import parse_long
from sluice.common.errors import StoreConfigError
from sluice.common.message import MessageExt, MessageExtBrokerInner
from sluice.common.naming import TIMER_TOPIC
from sluice.common.properties import (
    PROPERTY_BORN_TIMESTAMP,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TRACE_CONTEXT,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
)
from sluice.common.service import AsyncService
from sluice.common.sysflag import PERM_READ, PERM_WRITE
from sluice.remoting.codes import ResponseCode
from sluice.store.consume_queue import BLANK_ENTRY_SIZE, LogicQueue
from sluice.store.timer_log import TimerLog, TimerUnit
from sluice.store.timer_wheel import TimerWheel, WheelOverflowError

if TYPE_CHECKING:
    from sluice.broker.topic_config_manager import EnsureSystemTopic
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

_TURN = 0.005  # the longest one task holds the event loop at once (s)
_CHUNK = 64  # messages stored per append when a due time is delivered
_TIMER_PROPERTIES = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)


def now_ms() -> int:
    return int(time.time() * 1000)


class Refusal(NamedTuple):
    code: int
    remark: str


def _strict_int(raw: str) -> int:
    value = parse_long(raw)
    if value is None:
        raise ValueError(raw)
    return value


class TimerMessageService(ConfigManager, AsyncService):
    """The timer wheel and its tasks; its checkpoint (``timercheck.json``) is its config file."""

    def __init__(self, store: MessageStore, ensure_system_topic: EnsureSystemTopic) -> None:
        AsyncService.__init__(self)
        ConfigManager.__init__(self, os.path.join(store.config.store_path_config, "timercheck.json"))
        self.store = store
        self.ensure_system_topic = ensure_system_topic
        c = self.store.config
        self.enabled = c.timer_wheel_enable
        self.precision = c.timer_precision_ms
        self.max_delay_ms = c.timer_max_delay_sec * 1000
        self.timer_log = TimerLog(c.store_path_timer_log, c.mapped_file_size_timer_log)
        self.wheel = TimerWheel(self.precision, self.max_delay_ms)
        self.enqueue_offset = 0  # the next message of the timer queue to put into the wheel
        self.dequeue_ms = 0  # every message due before this is taken out of the wheel (maybe being delivered)
        self.delivered_ms = 0  # every message due before this was delivered
        self.delivered = 0
        self.recalled = 0  # timer messages left out of their delivery: recalled
        # Told of each timer message delivered to its topic, with its size (the metrics count it as coming in).
        self.on_delivered: Callable[[str, int], None] | None = None
        # (dequeue_ms reached, the commit-log end then): what the checkpoint may claim once that much is flushed
        self._delivered_marks: collections.deque[tuple[int, int]] = collections.deque(maxlen=4096)
        self._checkpoint = (0, 0, 0)  # enqueue offset, timer-log end, dequeue ms: consistent with one another
        # (enqueue offset, dequeue ms) of the master this broker took over from (see ``load``)
        self.delivered_by_master: tuple[int, int] | None = None
        self._saved_dequeue_ms = 0
        self._undelivered_from: tuple[int, int] | None = None  # see _enqueued
        self._enqueued_through_ms = 0  # see _enqueued_through
        self._wake_enqueue = asyncio.Event()
        self._wake_dequeue = asyncio.Event()
        self._next_wake = 0  # when the dequeue task wakes next (ms)
        self._log_end_max_due: dict[int, int] = {}  # timer-log file start -> latest due time in it
        # The checkpoint the file holds: enqueue offset, timer-log end, dequeue ms, precision (ms) (see ``decode``)
        self._loaded = (0, 0, 0, self.precision)

    # == lifecycle ===================================================================================
    def decode(self, data: dict[str, Any]) -> None:
        self._loaded = (int(data.get("enqueueOffset", 0)), int(data.get("timerLogEnd", 0)),
                        int(data.get("dequeueMs", 0)), int(data.get("precisionMs", self.precision)))
        master = data.get("masterCheckpoint")
        if isinstance(master, dict):
            # Written by this broker as a slave (SlaveSynchronize): its timer log is empty; it is rebuilt from the
            # whole timer queue, but what the old master had taken (below its enqueue offset) and delivered
            # (due before its dequeue time) is not delivered again.
            self.delivered_by_master = (int(master["enqueueOffset"]), int(master["dequeueMs"]))
            self._loaded = (0, 0, self.delivered_by_master[1], self._loaded[3])

    def load(self) -> None:
        """The checkpoint, then the timer log and the wheel from it."""
        super().load()
        enqueue_offset, log_end, dequeue_ms, precision = self._loaded
        self.timer_log.load(log_end)
        # (never past the queue's end: after a power loss the log may hold less than the checkpoint saw)
        self.enqueue_offset = min(max(enqueue_offset, self.store.get_min_offset_in_queue(TIMER_TOPIC, 0)),
                                  self.store.get_max_offset_in_queue(TIMER_TOPIC, 0))
        self.dequeue_ms = dequeue_ms or self._first_dequeue_ms()
        waiting = self.wheel.rebuild(self.timer_log.segments(), self.dequeue_ms)
        if waiting and precision != self.precision:
            # The log's chains link the messages due at one multiple of the old precision: a new one would strand
            # them.
            raise StoreConfigError(f"timer_precision_ms is {self.precision}, but the {waiting} timers waiting in "
                                   f"{self.timer_log.directory} were written with {precision}: set it back to "
                                   f"{precision} until they are delivered")
        for start, units in self.timer_log.segments():
            self._log_end_max_due[start] = int(units["deliver"].max()) if len(units) else 0
        self.delivered_ms = self.dequeue_ms
        self._checkpoint = (self.enqueue_offset, self.timer_log.end, self.dequeue_ms)
        self._saved_dequeue_ms = self.dequeue_ms
        if waiting:
            log.info("%d timer messages waiting; delivery goes on from %d", waiting, self.dequeue_ms)
        reserved_ms = self.store.config.file_reserved_time * 3_600_000
        if self.enabled and reserved_ms < self.max_delay_ms:
            log.warning("commit-log files are kept %d h (file_reserved_time) but timers may wait %d s "
                        "(timer_max_delay_sec): a timer due later than its file is kept is lost when the file is "
                        "deleted; keep files longer than the longest delay", self.store.config.file_reserved_time,
                        self.max_delay_ms // 1000)

    def _first_dequeue_ms(self) -> int:
        """Where delivery starts without a checkpoint (a crash before the first one): at the slot of the oldest
        timer message not yet in the wheel, so that messages due while the broker was down enter the wheel with
        any recall of theirs rather than go out at once without it; never more than a longest delay back (the
        wheel's span), and now when nothing waits."""
        now = now_ms()
        oldest = -1
        if self.enqueue_offset < self.store.get_max_offset_in_queue(TIMER_TOPIC, 0):
            oldest = self.store.get_message_store_timestamp(TIMER_TOPIC, 0, self.enqueue_offset)
        if oldest < 0:
            return self.wheel.due_time(now)
        start = max(oldest, now - self.max_delay_ms)
        return min(start - start % self.precision, self.wheel.due_time(now))

    def start(self) -> None:
        self._spawn(self._enqueue_loop())
        self._spawn(self._dequeue_loop())
        self._spawn(self._checkpoint_loop())
        self.store.arrival_listeners.append(self._on_arrival)

    def close(self) -> None:
        """After the store is shut down (everything flushed): the last checkpoint, exact."""
        self.timer_log.flush()
        # (delivered_ms, not dequeue_ms: a stop in the middle of a due time leaves it to deliver after the restart)
        self._saved_dequeue_ms = self.delivered_ms
        self._checkpoint = (*self._enqueued(), self.delivered_ms)
        self.persist()  # (close writes only what was asked for)
        super().close()
        self.timer_log.close()

    def behind(self, now: int, bounds_ms: list[int]) -> tuple[int, int, int, int, list[int]]:
        """(timer messages not yet in the wheel, the age in ms of the oldest of them, messages due and not yet
        delivered, how far delivery is behind in ms: RocketMQ's timer enqueue and dequeue lag and latency; and how
        many fall due within each of ``bounds_ms`` from now, beyond the one before)."""
        waiting = max(0, self.store.get_max_offset_in_queue(TIMER_TOPIC, 0) - self.enqueue_offset)
        oldest = self.store.get_message_store_timestamp(TIMER_TOPIC, 0, self.enqueue_offset) if waiting else -1
        counts = self.wheel.waiting([min(self.delivered_ms, now), now, *(now + b for b in bounds_ms)])
        due = counts[0]
        return (waiting, max(0, now - oldest) if oldest > 0 else 0, due,
                max(0, now - self.delivered_ms) if due else 0, counts[1:])

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic == TIMER_TOPIC:
            self._wake_enqueue.set()

    # == the send path ===============================================================================
    def check(self, msg: MessageExtBrokerInner) -> Refusal | None:
        """Why a message's timer cannot be taken (the response code and remark), or None; changes nothing."""
        return self._deliver_time(msg)[1]

    def prepare(self, msg: MessageExtBrokerInner) -> Refusal | None:
        """A message with a timer goes (in place) to the timer queue, due at the next multiple of the precision
        at or after its time; others pass unchanged. Why it is refused (the response code and remark), or None."""
        deliver, refusal = self._deliver_time(msg)
        props = msg.properties
        if refusal is not None or deliver is None:
            if refusal is None and _delay_level(props) > 0:  # a delay level wins, as in RocketMQ
                for k in _TIMER_PROPERTIES:
                    props.pop(k, None)
            return refusal
        props[PROPERTY_TIMER_OUT_MS] = str(self.wheel.due_time(deliver))
        props[PROPERTY_REAL_TOPIC] = msg.topic
        props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        msg.topic = TIMER_TOPIC
        msg.queue_id = 0
        self.ensure_system_topic(TIMER_TOPIC, 1, PERM_READ | PERM_WRITE)
        return None

    def _deliver_time(self, msg: MessageExtBrokerInner) -> tuple[int | None, Refusal | None]:
        """When a message's timer is due (None: it has none, or its time has passed), or why it is refused."""
        props = msg.properties
        if not any(k in props for k in _TIMER_PROPERTIES) or msg.topic == TIMER_TOPIC or \
                PROPERTY_TIMER_OUT_MS in props:
            return None, None
        if _delay_level(props) > 0:
            return None, None
        if PROPERTY_TIMER_DEL_UNIQKEY in props:
            return None, Refusal(ResponseCode.MESSAGE_ILLEGAL,
                                 "timer message illegal: deleting a timer message (TIMER_DEL_UNIQKEY) is not supported")
        if not self.enabled:  # (SYSTEM_ERROR, as RocketMQ: a producer tries another broker)
            return None, Refusal(ResponseCode.SYSTEM_ERROR,
                                 f"accurate timer message is not enabled, timerWheelEnable is {self.enabled}")
        now = now_ms()
        try:
            if PROPERTY_TIMER_DELAY_SEC in props:
                deliver = now + _strict_int(props[PROPERTY_TIMER_DELAY_SEC]) * 1000
            elif PROPERTY_TIMER_DELAY_MS in props:
                deliver = now + _strict_int(props[PROPERTY_TIMER_DELAY_MS])
            else:
                deliver = _strict_int(props[PROPERTY_TIMER_DELIVER_MS])
        except ValueError:
            return None, Refusal(ResponseCode.MESSAGE_ILLEGAL, "timer message illegal: TIMER_DELIVER_MS, "
                                                               "TIMER_DELAY_SEC and TIMER_DELAY_MS must be integers")
        if deliver <= now:
            return None, None  # due already: delivered at once, as a plain message
        if deliver - now > self.max_delay_ms:
            return None, Refusal(ResponseCode.MESSAGE_ILLEGAL, f"timer message illegal, the delay time should not "
                                                               f"be bigger than the max delay {self.max_delay_ms}ms")
        return deliver, None

    # == into the wheel ==============================================================================
    async def _enqueue_loop(self) -> None:
        while True:
            try:
                await self.enqueue_available()
            except Exception:
                log.exception("putting timer messages into the wheel failed; trying again")
                await asyncio.sleep(1)
            self._wake_enqueue.clear()
            try:
                async with asyncio.timeout(1.0):
                    await self._wake_enqueue.wait()
            except TimeoutError:
                pass

    async def enqueue_available(self) -> int:
        """Put every message stored in the timer queue since the last call into the wheel (or deliver it, when
        its time has passed); how many."""
        store = self.store
        cq = store.find_consume_queue(TIMER_TOPIC, 0, create=False)
        if cq is None:
            return 0
        sampled = now_ms()  # (everything stored before this is in the queue by its end now)
        end = cq.max_offset
        now_due: list[tuple[MessageExt, int]] = []
        try:
            n = await self._enqueue_until(cq, end, now_due)
        except Exception:
            await self._deliver(now_due)  # taken from the queue already: delivered before the error goes up
            self._undelivered_from = None
            raise
        await self._deliver(now_due)
        self._undelivered_from = None
        if self.enqueue_offset >= end:
            self._enqueued_through_ms = max(self._enqueued_through_ms, sampled)
            self._wake_dequeue.set()
        return n

    def _enqueued_through(self) -> int:
        """Until when every timer message stored is in the wheel: a slot is delivered only once every record due
        in it (a recall among them) has been read. Now, when the timer queue is read to its end."""
        cq = self.store.find_consume_queue(TIMER_TOPIC, 0, create=False)
        if cq is None or self.enqueue_offset >= cq.max_offset:
            return now_ms()
        return self._enqueued_through_ms

    async def _enqueue_until(self, cq: LogicQueue, end: int, now_due: list[tuple[MessageExt, int]]) -> int:
        store = self.store
        loop = asyncio.get_running_loop()
        turn_ends = loop.time() + _TURN
        n = 0
        while self.enqueue_offset < end:
            if loop.time() >= turn_ends:
                await self._deliver(now_due)
                now_due.clear()
                self._undelivered_from = None
                await asyncio.sleep(0)
                turn_ends = loop.time() + _TURN
            entry = cq.get_entry(self.enqueue_offset)
            msg = None
            if entry is not None and entry[1] != BLANK_ENTRY_SIZE:
                msg = store.look_message_by_offset(entry[0], entry[1])
            if msg is not None and PROPERTY_REAL_TOPIC not in msg.properties:
                log.warning("timer message at commit-log offset %d has no REAL_TOPIC: dropped", msg.commit_log_offset)
                msg = None
            skipped = self.delivered_by_master
            if msg is not None and skipped is not None and self.enqueue_offset < skipped[0] \
                    and _due_of(msg) < skipped[1]:
                msg = None  # the old master delivered it
            if msg is not None:
                due = self.wheel.due_time(_due_of(msg))  # (a slot of this precision, whatever it was stored with)
                enqueued = now_ms()
                delete = PROPERTY_TIMER_DEL_UNIQKEY in msg.properties
                if due < self.dequeue_ms:  # its time has passed (or is passing): no wheel
                    if not delete:  # (a recall too late: what it recalls is delivered already)
                        self._deliver_now(now_due, msg, enqueued)
                else:
                    try:
                        prev = self.wheel.newest(due)
                    except WheelOverflowError as exc:
                        log.error("%s: delivering the message at %d now", exc, msg.commit_log_offset)
                        if not delete:
                            self._deliver_now(now_due, msg, enqueued)
                    else:
                        pos = self.timer_log.append(TimerUnit(prev, due, msg.commit_log_offset, enqueued,
                                                              msg.store_size, delete))
                        self.wheel.add(due, pos)
                        start = pos - pos % self.timer_log.file_size
                        self._log_end_max_due[start] = max(self._log_end_max_due.get(start, 0), due)
                        if due < self._next_wake:  # earlier than the dequeue task means to wake
                            self._next_wake = due
                            self._wake_dequeue.set()
            self.enqueue_offset += 1
            n += 1
        return n

    def _deliver_now(self, now_due: list[tuple[MessageExt, int]], msg: MessageExt, enqueued: int) -> None:
        if not now_due:  # until it is delivered, a checkpoint goes back to it
            self._undelivered_from = (self.enqueue_offset, self.timer_log.end)
        now_due.append((msg, enqueued))

    def _enqueued(self) -> tuple[int, int]:
        """How far the timer queue is taken, and the timer log's end then: up to the first message taken but not
        delivered yet (its time had passed), if any."""
        return self._undelivered_from or (self.enqueue_offset, self.timer_log.end)

    # == out of the wheel ============================================================================
    async def _dequeue_loop(self) -> None:
        while True:
            try:
                await self.deliver_due()
            except Exception:
                log.exception("delivering timer messages failed; trying again")
                await asyncio.sleep(1)
                continue
            self._wake_dequeue.clear()
            nxt = self.wheel.next_due(self.dequeue_ms, now_ms() + 1000)  # (it waits a second at most anyway)
            now = now_ms()
            if nxt is not None and nxt <= now and nxt > self._enqueued_through():
                wait = 1.0  # due, but the queue is not read through it yet: the enqueue task wakes this one
            else:
                wait = 1.0 if nxt is None else min(1.0, max(0.0, (nxt - now) / 1000))
            self._next_wake = now + int(wait * 1000)
            if wait <= 0:
                continue
            try:  # until the next due time, or an earlier one comes in
                async with asyncio.timeout(wait):
                    await self._wake_dequeue.wait()
            except TimeoutError:
                pass

    async def deliver_due(self) -> int:
        """Deliver every message due by now, due time by due time; how many."""
        n = 0
        now = min(now_ms(), self._enqueued_through())
        loop = asyncio.get_running_loop()
        turn_ends = loop.time() + _TURN
        while True:
            due = self.wheel.next_due(self.dequeue_ms, now)
            if due is None:
                break
            last, count = self.wheel.take(due)
            # Past this due time before any wait: a message due by then that the enqueue task takes meanwhile is
            # delivered by it at once, not chained into the slot just emptied.
            self.dequeue_ms = due + self.precision
            units: list[TimerUnit] = []
            pos = last
            while pos >= 0 and len(units) < count:
                if loop.time() >= turn_ends:
                    await asyncio.sleep(0)
                    turn_ends = loop.time() + _TURN
                unit = self.timer_log.read(pos)
                if unit is None:
                    log.error("timer log unit at %d is unreadable: %d message(s) due at %d are lost to the wheel",
                              pos, count - len(units), due)
                    break
                units.append(unit)
                pos = unit.prev
            units.reverse()  # in the order they were sent
            recalled = await self._recalled(units, due)
            for i in range(0, len(units), _CHUNK):  # a chunk of messages in memory at a time
                msgs = []
                for u in units[i:i + _CHUNK]:
                    if u.delete:
                        continue
                    m = self.store.look_message_by_offset(u.offset, u.size)
                    if m is None or m.topic != TIMER_TOPIC or self.wheel.due_time(_due_of(m)) != due or \
                            PROPERTY_REAL_TOPIC not in m.properties:
                        log.warning("timer message at commit-log offset %d, due at %d, is gone (aged out, or the "
                                    "log was cut back after a crash)", u.offset, due)
                        continue
                    uniq = m.uniq_key
                    if recalled and uniq and delete_key(m.properties[PROPERTY_REAL_TOPIC], uniq) in recalled:
                        self.recalled += 1
                        continue
                    msgs.append((m, u.enqueue_ms))
                await self._deliver(msgs)
                n += len(msgs)
                await asyncio.sleep(0)
                turn_ends = loop.time() + _TURN
            self.delivered_ms = self.dequeue_ms
            self._delivered_marks.append((self.dequeue_ms, self.store.get_max_phy_offset()))
        passed = (now // self.precision + 1) * self.precision  # every slot up to now is delivered
        if passed > self.dequeue_ms:
            self.dequeue_ms = self.delivered_ms = passed
            self._delivered_marks.append((self.dequeue_ms, self.store.get_max_phy_offset()))
        return n

    async def _recalled(self, units: list[TimerUnit], due: int) -> set[str]:
        """What the recalls among ``units`` (due at ``due``) take back: their delete keys."""
        keys = set()
        loop = asyncio.get_running_loop()
        turn_ends = loop.time() + _TURN
        for u in units:
            if not u.delete:
                continue
            if loop.time() >= turn_ends:
                await asyncio.sleep(0)
                turn_ends = loop.time() + _TURN
            m = self.store.look_message_by_offset(u.offset, u.size)
            if m is None or m.topic != TIMER_TOPIC or self.wheel.due_time(_due_of(m)) != due:
                continue
            key = m.properties.get(PROPERTY_TIMER_DEL_UNIQKEY)
            if key:
                keys.add(key)
        return keys

    def recall_message(self, topic: str, uniq_key: str, deliver_ms: int, producer_group: str, born_host: str,
                       store_host: str) -> MessageExtBrokerInner:
        """The timer message that recalls the one of ``topic`` with ``uniq_key`` due at ``deliver_ms`` - 1 (a
        recall handle's time, RocketMQ's TIMER_OUT_MS + 1): it enters the same slot of the wheel, whose delivery
        then leaves that message out."""
        now = now_ms()
        props = {PROPERTY_TAGS: RECALL_MESSAGE_TAG, PROPERTY_TIMER_DEL_UNIQKEY: delete_key(topic, uniq_key),
                 PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq_key, PROPERTY_TIMER_DELIVER_MS: str(deliver_ms),
                 PROPERTY_BORN_TIMESTAMP: str(now), PROPERTY_TRACE_CONTEXT: "",
                 PROPERTY_PRODUCER_GROUP: producer_group,
                 PROPERTY_TIMER_OUT_MS: str(self.wheel.due_time(deliver_ms - 1)), PROPERTY_REAL_TOPIC: topic,
                 PROPERTY_REAL_QUEUE_ID: "0"}
        self.ensure_system_topic(TIMER_TOPIC, 1, PERM_READ | PERM_WRITE)
        return MessageExtBrokerInner(TIMER_TOPIC, b"0", 0, 0, props, 0, now, born_host, store_host, 0)

    async def _deliver(self, msgs: list[tuple[MessageExt, int]]) -> None:
        """Store ``msgs`` under their real topics (a few per append); retried until the store takes them."""
        for i in range(0, len(msgs), _CHUNK):
            chunk = [delivered_message(m, enq) for m, enq in msgs[i:i + _CHUNK]]
            while True:
                r = await self.store.put_async(chunk)
                if r.stored:
                    self.delivered += len(chunk)
                    if self.on_delivered is not None:
                        each = r.wrote_bytes // len(chunk)
                        for m in chunk:
                            self.on_delivered(m.topic, each)
                    break
                log.warning("cannot deliver %d timer message(s): %s %s; trying again in 1 s", len(chunk),
                            r.status.name, r.remark)
                await asyncio.sleep(1)

    # == checkpoint ==================================================================================
    @property
    def checkpoint(self) -> tuple[int, int, int]:
        """(enqueue offset, timer-log end, dequeue ms), consistent with one another (a slave copies it)."""
        return self._checkpoint

    async def _checkpoint_loop(self) -> None:
        interval = max(0.2, self.store.config.flush_interval_consume_queue / 1000)
        while True:
            await asyncio.sleep(interval)
            self._checkpoint = (*self._enqueued(), self.dequeue_ms)
            self.persist()
            delete_before = self._deletable()
            if delete_before:
                await asyncio.to_thread(self.timer_log.delete_files_before, delete_before)

    def encode(self) -> dict[str, Any]:
        """In the writer's thread: the timer log flushed to what the checkpoint claims, and delivery claimed only
        as far as the commit log is flushed."""
        enqueue_offset, log_end, dequeue_ms = self._checkpoint
        self.timer_log.flush()
        flushed = self.store.commit_log.flushed_where
        saved = self._saved_dequeue_ms
        for reached, log_pos in list(self._delivered_marks):
            if log_pos <= flushed and reached <= dequeue_ms:
                saved = max(saved, reached)
        self._saved_dequeue_ms = saved
        return {"enqueueOffset": enqueue_offset, "timerLogEnd": log_end, "dequeueMs": saved,
                "precisionMs": self.precision}

    def _deletable(self) -> int:
        """The timer-log position before which every file holds only delivered messages."""
        keep = self._saved_dequeue_ms
        before = 0
        for start in sorted(self._log_end_max_due):
            if self._log_end_max_due[start] >= keep or start + self.timer_log.file_size > self.timer_log.end:
                break
            before = start + self.timer_log.file_size
        for start in [s for s in self._log_end_max_due if s < before]:
            del self._log_end_max_due[start]
        return before


RECALL_MESSAGE_TAG = "_RECALL_TAG_"


def delete_key(real_topic: str, uniq_key: str) -> str:
    """What names a timer message to recall (RocketMQ's TimerMessageStore.buildDeleteKey)."""
    return f"{real_topic}+{uniq_key}"


def _due_of(msg: MessageExt) -> int:
    return parse_long(msg.properties.get(PROPERTY_TIMER_OUT_MS), 0)


def _delay_level(props: dict[str, str]) -> int:
    return parse_long(props.get(PROPERTY_DELAY_TIME_LEVEL), 0)


def delivered_message(msg: MessageExt, enqueued_ms: int) -> MessageExtBrokerInner:
    """The message the wheel delivers: the timer message under its real topic and queue, with when it entered
    the wheel and left it (RocketMQ keeps every property, REAL_TOPIC and REAL_QID too)."""
    props = dict(msg.properties)
    props[PROPERTY_TIMER_ENQUEUE_MS] = str(enqueued_ms)
    props[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms())
    props[PROPERTY_WAIT_STORE_MSG_OK] = "false"  # as RocketMQ's: delivery does not wait for a sync flush
    real_qid = props.get(PROPERTY_REAL_QUEUE_ID, "0")
    return MessageExtBrokerInner(props[PROPERTY_REAL_TOPIC], msg.body,
                                 parse_long(real_qid, 0), msg.flag, props, msg.sys_flag,
                                 msg.born_timestamp, msg.born_host, msg.store_host, msg.reconsume_times)
