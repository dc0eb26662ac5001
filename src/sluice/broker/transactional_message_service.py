"""Transactional messages (RocketMQ's TransactionalMessageService and TransactionalMessageCheckService).

A producer's half message is stored in queue 0 of RMQ_SYS_TRANS_HALF_TOPIC with its real topic and queue in
REAL_TOPIC / REAL_QID, where no consumer looks. END_TRANSACTION decides it: a commit stores the message again
under its real topic and queue, a rollback does not; either way an op message in RMQ_SYS_TRANS_OP_HALF_TOPIC
(body ``<half offset>,``, tag ``d``) records the decision. A commit's op and its message are one append, op first,
so a crash can tear only the message, and ``start`` writes it again from the half message.

Half messages undecided ``transaction_timeout`` after they were sent are checked back: each round the service
walks the half queue from where it stopped (the consume offset of group CID_RMQ_SYS_TRANS), stores each undecided
one again at the end of the queue with TRANSACTION_CHECK_TIMES one higher, and asks a producer of its group
(CHECK_TRANSACTION_STATE) about the new copy; past ``transaction_check_max`` checks it is discarded, kept in
TRANS_CHECK_MAX_TIME_TOPIC. Every copy carries TRAN_PREPARED_QUEUE_OFFSET, the queue offset of the first: a
transaction is known by it, and is decided once, whichever copy the producer answers about.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.common.decimal_text import parse_long
from sluice.common.message import MessageExt, MessageExtBrokerInner, create_message_id
from sluice.common.message_codec import encode_record
from sluice.common.naming import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from sluice.common.properties import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    encode_properties,
)
from sluice.common.service import AsyncService
from sluice.common.sysflag import (
    PERM_READ,
    PERM_WRITE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.headers import CheckTransactionStateRequestHeader
from sluice.store.consume_queue import BLANK_ENTRY_SIZE
from sluice.store.results import PutMessageResult

if TYPE_CHECKING:
    from sluice.broker.client_channel_info import ClientChannelInfo
    from sluice.broker.producer_manager import ProducerManager
    from sluice.broker.schedule_message_service import ScheduleMessageService
    from sluice.broker.timer_message_service import TimerMessageService
    from sluice.broker.topic_config_manager import EnsureSystemTopic
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

CHECK_GROUP = "CID_RMQ_SYS_TRANS"  # whose consume offsets hold how far the half and op queues were walked
REMOVE_TAG = "d"
_TURN = 0.005  # the longest a check round holds the event loop at once (s)


@dataclass(slots=True)
class Decision:
    """What END_TRANSACTION asked of a half message: the answer to send back, or None when it is done."""

    code: int
    remark: str


class TransactionalMessageService(AsyncService):
    def __init__(self, config: BrokerConfig, broker_addr: str, store: MessageStore,
                 producer_manager: ProducerManager, ensure_system_topic: EnsureSystemTopic,
                 schedule_service: ScheduleMessageService, timer_service: TimerMessageService,
                 may_check: Callable[[ClientChannelInfo, str], bool] | None = None) -> None:
        super().__init__()
        # With authorization on: whether a producer may be asked about a message of a topic (its user may publish
        # to it) — a check carries the half message, which another group's would-be producer must not read.
        self.may_check = may_check
        self.config = config
        self.broker_addr = broker_addr
        self.store = store
        self.producer_manager = producer_manager
        self.ensure_system_topic = ensure_system_topic
        self.schedule_service = schedule_service
        self.timer_service = timer_service
        c = config
        self.timeout_ms = c.transaction_timeout
        self.check_max = c.transaction_check_max
        self.check_interval = c.transaction_check_interval / 1000
        # Transactions (by the queue offset of their first half message) with a copy at or past the walked
        # offset: the newest copy's offset; and those decided there: the op's queue offset. Both bounded by the
        # half messages not yet walked past.
        self.live: dict[int, int] = {}
        self.decided: dict[int, int] = {}
        self._deciding: set[int] = set()  # END_TRANSACTIONs being stored
        self.half_walked = 0
        self.checks_sent = 0
        self.checks_unasked = 0  # checks due with no producer of the group (allowed to be) online to ask
        self.discarded = 0
        # Told of undecided half messages by real topic: +n found at load, -1 at a discard (the metrics' gauge).
        self.on_half: Callable[[str, int], None] | None = None

    # == lifecycle ===================================================================================
    def load(self) -> None:
        """Learn the pending and decided transactions from the half and op queues; repair a torn commit."""
        offsets = self.store.consumer_offsets
        self.half_walked = max(0, offsets.query_offset(CHECK_GROUP, TRANS_HALF_TOPIC, 0),
                               self.store.get_min_offset_in_queue(TRANS_HALF_TOPIC, 0))
        topics: dict[int, str] = {}
        for copy in self._half_copies(self.half_walked, self.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)):
            self.live[first_offset(copy)] = copy.queue_offset
            topics[first_offset(copy)] = copy.properties.get(PROPERTY_REAL_TOPIC) or copy.topic
        op_from = max(0, offsets.query_offset(CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0),
                      self.store.get_min_offset_in_queue(TRANS_OP_HALF_TOPIC, 0))
        last_op: MessageExt | None = None
        for op in self._messages(TRANS_OP_HALF_TOPIC, op_from, self.store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC,
                                                                                                     0)):
            last_op = op
            for first in op_offsets(op.body):
                if first in self.live:
                    self.decided[first] = op.queue_offset
        if last_op is not None:
            self._repair_torn_commit(last_op)
        if self.on_half is not None:
            for first, topic in topics.items():
                if first not in self.decided:
                    self.on_half(topic, 1)
        if self.live:
            log.info("%d transactions pending, %d of them decided and not yet walked past", len(self.live),
                     len(self.decided))

    def start(self) -> None:
        """Check back undecided transactions every ``transaction_check_interval``."""
        self._spawn(self._run())

    def _repair_torn_commit(self, op: MessageExt) -> None:
        """A commit's op is followed, in the same append, by the message; a crash in between leaves the op last
        in the log without its message. Store the message again from the half message."""
        if op.properties.get(PROPERTY_TRANSACTION_OUTCOME) != "commit":
            return
        if op.commit_log_offset + op.store_size < self.store.get_max_phy_offset():
            return  # something follows the op: the message (only the log's tail can be torn)
        half = self.store.look_message_by_offset(op.prepared_transaction_offset)
        if half is None or half.topic != TRANS_HALF_TOPIC:
            log.error("the last committed transaction's half message at %d is gone: its message cannot be restored",
                      op.prepared_transaction_offset)
            return
        msg = committed_message(half)
        if self.timer_service.prepare(msg) is not None:
            log.warning("restored transaction %s has an unusable timer: delivered now", half.uniq_key)
        r = self.store.put([self.schedule_service.redirect(msg)])
        if r.stored:
            log.warning("restored the message of transaction %s (%s), torn off by a crash as it was committed",
                        half.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), half.properties.get(
                            PROPERTY_REAL_TOPIC))
        else:
            log.error("cannot restore the message of the last committed transaction: %s %s", r.status.name, r.remark)

    # == the send path ===============================================================================
    def prepare(self, msg: MessageExtBrokerInner) -> MessageExtBrokerInner:
        """A half message: ``msg`` (in place) bound for queue 0 of the half topic, its own topic and queue kept in
        REAL_TOPIC / REAL_QID."""
        props = msg.properties
        for name in _BROKER_OWNED:  # the broker's to set: a producer's would confuse the checks
            props.pop(name, None)
        uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if uniq:
            props[PROPERTY_TRANSACTION_ID] = uniq
        props[PROPERTY_REAL_TOPIC] = msg.topic
        props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        msg.sys_flag = (msg.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_NOT_TYPE
        msg.topic = TRANS_HALF_TOPIC
        msg.queue_id = 0
        self.ensure_system_topic(TRANS_HALF_TOPIC, 1, PERM_READ | PERM_WRITE)
        return msg

    # == END_TRANSACTION =============================================================================
    def check_end(self, group: str, queue_offset: int, commit_log_offset: int,
                  topic: str | None = None) -> tuple[MessageExt | None, Decision]:
        """The half message END_TRANSACTION names, if it may be decided now; else why not (RocketMQ's remarks
        where it has one). A ``topic`` named must be the half message's own (what authorization allowed), or, with
        authorization off, the half topic a RocketMQ broker's check names (its clients answer with what it named;
        Sluice's checks name the real topic)."""
        half = self.store.look_message_by_offset(commit_log_offset)
        if half is None or half.topic != TRANS_HALF_TOPIC or (
                topic is not None and topic != half.properties.get(PROPERTY_REAL_TOPIC) and (
                    topic != TRANS_HALF_TOPIC or self.config.authorization_enabled)):
            return None, Decision(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        if half.properties.get(PROPERTY_PRODUCER_GROUP) != group:
            return None, Decision(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if half.queue_offset != queue_offset:
            return None, Decision(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        first = first_offset(half)
        if first in self.decided or first in self._deciding or (
                first not in self.live and half.queue_offset < self.half_walked):
            return None, Decision(ResponseCode.SYSTEM_ERROR,
                                  f"the transaction of half message {half.queue_offset} is already committed, rolled "
                                  f"back or discarded")
        return half, Decision(ResponseCode.SUCCESS, "")

    async def end(self, half: MessageExt, commit: bool) -> PutMessageResult:
        """Record the decision (and, for a commit, store the message), as one append."""
        first = first_offset(half)
        self._deciding.add(first)

        def written(r: PutMessageResult) -> None:
            # (when the write is answered, whatever becomes of the request that asked for it)
            if r.stored:  # (a flush that timed out stored it all the same: decided)
                self.decided[first] = r.queue_offset
            self._deciding.discard(first)

        try:
            op = self._op(half, "commit" if commit else "rollback")
            msgs = [op, committed_message(half)] if commit else [op]
            if commit:  # a timer or a delay level of the message applies from now on, as to any send
                if self.timer_service.prepare(msgs[1]) is not None:  # (checked at send: a changed config)
                    log.warning("committed transaction %s has an unusable timer: delivered now", half.uniq_key)
                msgs[1] = self.schedule_service.redirect(msgs[1])
        except BaseException:
            self._deciding.discard(first)
            raise
        return await self.store.put_async(msgs, written)

    def _op(self, half: MessageExt, outcome: str) -> MessageExtBrokerInner:
        self.ensure_system_topic(TRANS_OP_HALF_TOPIC, 1, PERM_READ | PERM_WRITE)
        return MessageExtBrokerInner(
            TRANS_OP_HALF_TOPIC, f"{first_offset(half)},".encode(), 0, 0,
            {"TAGS": REMOVE_TAG, PROPERTY_TRANSACTION_OUTCOME: outcome, PROPERTY_WAIT_STORE_MSG_OK: "false"},
            TRANSACTION_NOT_TYPE, int(time.time() * 1000), self.broker_addr, self.broker_addr,
            prepared_transaction_offset=half.commit_log_offset)

    # == check-back ==================================================================================
    async def _run(self) -> None:
        while True:
            try:
                await self.check_round()
            except Exception:
                log.exception("transaction check round failed")
            await asyncio.sleep(self.check_interval)

    async def check_round(self) -> int:
        """Walk the half queue from where the last round stopped: past what is decided, checking back (or
        discarding) what is old enough; stop at the first message too young. Returns how many were checked."""
        store = self.store
        loop = asyncio.get_running_loop()
        started_ms = int(time.time() * 1000)
        turn_ends = loop.time() + _TURN
        end = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)  # copies made in this round wait for the next
        i = max(self.half_walked, store.get_min_offset_in_queue(TRANS_HALF_TOPIC, 0))
        checked = 0
        try:
            while i < end:
                if loop.time() >= turn_ends:
                    await asyncio.sleep(0)
                    turn_ends = loop.time() + _TURN
                copy = self._half_copy(i)
                if copy is None:
                    i += 1
                    continue
                first = first_offset(copy)
                if first in self._deciding:
                    break  # decided right now: look again next round
                newest = self.live.get(first, first)  # (never checked: its first copy is its only one)
                if first in self.decided:
                    if newest == i:  # nothing of it is left ahead
                        # Walked past first, so that an END_TRANSACTION arriving meanwhile is still refused.
                        self.half_walked = max(self.half_walked, i + 1)
                        self.live.pop(first, None)
                        del self.decided[first]
                    i += 1
                    continue
                if newest != i:  # an older copy of one checked since
                    i += 1
                    continue
                if copy.store_timestamp >= started_ms:
                    break
                age = started_ms - copy.born_timestamp
                immunity = _immunity_ms(copy)
                if immunity is None and 0 <= age <= self.timeout_ms:
                    break  # the rest were sent later
                times = _decimal(copy.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES), 0, 0)
                if immunity is not None and 0 <= age <= max(immunity, self.timeout_ms):
                    # Its producer asked for longer: put it back at the end of the queue and go on (RocketMQ's
                    # putImmunityMsgBackToHalfQueue), so that it holds up no transaction sent after it.
                    if not await self._put_back(copy, times):
                        break
                elif times >= self.check_max:
                    if not await self._discard(copy, times):
                        break
                elif not await self._check_back(copy, times + 1):
                    break
                else:
                    checked += 1
                i += 1
        finally:  # (also when the round fails half-way: what it walked past is decided, and its ops may go)
            self.half_walked = max(self.half_walked, i)  # (advanced already, as decided ones were walked past)
            store.consumer_offsets.commit_offset(CHECK_GROUP, TRANS_HALF_TOPIC, 0, self.half_walked)
            op_from = min(self.decided.values(), default=store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0))
            store.consumer_offsets.commit_offset(CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, op_from)
        return checked

    async def _put_back(self, copy: MessageExt, times: int) -> bool:
        """Store ``copy`` again unchecked, to be looked at in a later round."""
        r = await self.store.put_async([half_copy_again(copy, times)])
        if not r.stored:
            log.warning("cannot store half message %d again: %s %s", copy.queue_offset, r.status.name, r.remark)
            return False
        self.live[first_offset(copy)] = r.queue_offset
        return True

    async def _check_back(self, copy: MessageExt, times: int) -> bool:
        """Store ``copy`` again, ``times`` checked, and ask a producer of its group about the new copy."""
        again = half_copy_again(copy, times)
        r = await self.store.put_async([again])
        if not r.stored:
            log.warning("cannot store half message %d again to check it back: %s %s", copy.queue_offset,
                        r.status.name, r.remark)
            return False
        first = first_offset(copy)
        self.live[first] = r.queue_offset
        new = self.store.look_message_by_offset(r.wrote_offset)
        if new is None:
            return True
        group = copy.properties.get(PROPERTY_PRODUCER_GROUP, "")
        real_topic = copy.properties.get(PROPERTY_REAL_TOPIC, TRANS_HALF_TOPIC)
        may_check = self.may_check
        channel = self.producer_manager.any_channel(
            group, None if may_check is None else lambda ch: may_check(ch, real_topic))
        if channel is None:
            self.checks_unasked += 1
            log.warning("transaction %s of group %s is undecided, and no producer of the group is online to ask",
                        copy.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), group)
            return True
        uniq = new.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
        # The header names the real topic, which the producer's answer echoes (RocketMQ names the half topic, which
        # with authorization on only a user allowed to publish to that system topic could answer).
        header = CheckTransactionStateRequestHeader(real_topic, new.queue_offset, new.commit_log_offset, uniq,
                                                    uniq, create_message_id(self.broker_addr, new.commit_log_offset),
                                                    self.config.broker_name)
        req = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header.encode(), check_message_body(new),
                                      oneway=True)
        channel.conn.write(req)
        self.checks_sent += 1
        return True

    async def _discard(self, copy: MessageExt, times: int) -> bool:
        """Give up on ``copy``'s transaction after ``times`` checks: keep it in TRANS_CHECK_MAX_TIME_TOPIC, and
        record the end with an op so that a late END_TRANSACTION is refused."""
        self.ensure_system_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1, PERM_READ | PERM_WRITE)
        kept = half_copy_again(copy, times)
        kept.topic = TRANS_CHECK_MAX_TIME_TOPIC
        first = first_offset(copy)
        self._deciding.add(first)  # no END_TRANSACTION while the discard is being stored
        try:
            r = await self.store.put_async([self._op(copy, "discard"), kept])
        finally:
            self._deciding.discard(first)
        if not r.stored:
            log.warning("cannot discard half message %d: %s %s", copy.queue_offset, r.status.name, r.remark)
            return False
        self.half_walked = max(self.half_walked, copy.queue_offset + 1)  # (refuses a late END_TRANSACTION)
        self.live.pop(first, None)
        self.decided.pop(first, None)
        self.discarded += 1
        if self.on_half is not None:
            self.on_half(copy.properties.get(PROPERTY_REAL_TOPIC) or copy.topic, -1)
        log.warning("transaction %s of group %s (topic %s) discarded undecided after %d checks; the message is kept "
                    "in %s", copy.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                    copy.properties.get(PROPERTY_PRODUCER_GROUP), copy.properties.get(PROPERTY_REAL_TOPIC), times,
                    TRANS_CHECK_MAX_TIME_TOPIC)
        return True

    # == reading the queues ==========================================================================
    def _half_copy(self, queue_offset: int) -> MessageExt | None:
        cq = self.store.find_consume_queue(TRANS_HALF_TOPIC, 0, create=False)
        entry = cq.get_entry(queue_offset) if cq is not None else None
        if entry is None or entry[1] == BLANK_ENTRY_SIZE:
            return None
        return self.store.look_message_by_offset(entry[0], entry[1])

    def _half_copies(self, start: int, end: int) -> list[MessageExt]:
        return self._messages(TRANS_HALF_TOPIC, start, end)

    def _messages(self, topic: str, start: int, end: int) -> list[MessageExt]:
        cq = self.store.find_consume_queue(topic, 0, create=False)
        if cq is None:
            return []
        out = []
        for i in range(start, end):
            entry = cq.get_entry(i)
            if entry is None or entry[1] == BLANK_ENTRY_SIZE:
                continue
            m = self.store.look_message_by_offset(entry[0], entry[1])
            if m is not None:
                out.append(m)
        return out


# == the messages ====================================================================================
def _decimal(raw: str | None, default: int, least: int) -> int:
    """A property as an integer (``default`` when it is not one), at least ``least``."""
    return max(least, parse_long(raw, default))


def first_offset(half: MessageExt) -> int:
    """The queue offset of a transaction's first half message (the one every copy names)."""
    return _decimal(half.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET), half.queue_offset, 0)


def op_offsets(body: bytes) -> list[int]:
    """The half offsets an op message's body (``"3,"`` or RocketMQ's batched ``"3,4,9,"``) names."""
    out = []
    for part in body.decode("ascii", errors="replace").split(","):
        part = part.strip()
        value = parse_long(part)
        if value is not None and value >= 0:
            out.append(value)
    return out


def committed_message(half: MessageExt) -> MessageExtBrokerInner:
    """The message a commit stores: the half message under its real topic and queue (RocketMQ's
    ``endMessageTransaction``), COMMIT in its sys flag, the half's commit-log offset as its prepared offset."""
    props = {k: v for k, v in half.properties.items() if k not in _HALF_ONLY}
    real_qid = half.properties.get(PROPERTY_REAL_QUEUE_ID, "0")
    return MessageExtBrokerInner(
        half.properties.get(PROPERTY_REAL_TOPIC, ""), half.body, parse_long(real_qid, 0),
        half.flag, props, (half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE, half.born_timestamp,
        half.born_host, half.store_host, half.reconsume_times, half.commit_log_offset)


def half_copy_again(half: MessageExt, times: int) -> MessageExtBrokerInner:
    """``half`` stored again for a check: TRANSACTION_CHECK_TIMES ``times``, naming the transaction's first copy."""
    props = dict(half.properties)
    props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times)
    props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(first_offset(half))
    return MessageExtBrokerInner(TRANS_HALF_TOPIC, half.body, 0, half.flag, props, half.sys_flag, half.born_timestamp,
                                 half.born_host, half.store_host, half.reconsume_times)


def check_message_body(half: MessageExt) -> bytes:
    """The body of CHECK_TRANSACTION_STATE: the half message as a record, under its real topic and queue (as
    RocketMQ's ``sendCheckMessage`` encodes it)."""
    real_qid = half.properties.get(PROPERTY_REAL_QUEUE_ID, "0")
    return encode_record(
        topic=half.properties.get(PROPERTY_REAL_TOPIC, TRANS_HALF_TOPIC).encode(), body=half.body,
        properties=encode_properties(half.properties), queue_id=parse_long(real_qid, 0),
        flag=half.flag, queue_offset=half.queue_offset, physical_offset=half.commit_log_offset,
        sys_flag=half.sys_flag, born_timestamp=half.born_timestamp, born_host=half.born_host,
        store_timestamp=half.store_timestamp, store_host=half.store_host, reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.prepared_transaction_offset)


def _immunity_ms(half: MessageExt) -> int | None:
    """How long after it was sent its producer asked that a half message be left alone
    (CHECK_IMMUNITY_TIME_IN_SECONDS); None when it did not."""
    raw = half.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
    if raw is None:
        return None
    return _decimal(raw, 0, 0) * 1000


# What the half message holds that its committed message does not. RocketMQ's committed message keeps the rest:
# TRAN_MSG, WAIT and TRANSACTION_CHECK_TIMES too (it clears TRAN_MSG from the map after writing the properties
# string), and consumers see them.
_HALF_ONLY = frozenset({PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET})
# What only the broker writes into a half message.
_BROKER_OWNED = (PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, PROPERTY_TRANSACTION_CHECK_TIMES)

# Sluice's op messages also say what was decided (RocketMQ's do not): the repair of a torn commit needs it.
PROPERTY_TRANSACTION_OUTCOME = "TRAN_OUTCOME"

__all__ = ["CHECK_GROUP", "TransactionalMessageService", "committed_message", "first_offset", "op_offsets"]
