"""POP_MESSAGE: messages handed out invisible for a while, each with a receipt, instead of a queue pulled from an
offset (RocketMQ 5's PopMessageProcessor; FIN / REQ / TOUCH in NSQ's words are ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME with a delay and CHANGE_MESSAGE_INVISIBLETIME).

A pop reads the group's queues from its consumer offset (a queue id of -1: every queue, from a random one; the
group's POP retry topic first one time in five, or when the topic has nothing), writes one checkpoint per queue it
read to the revive log (``PopReviveService``), then moves the group's offset past what it handed out: an
unacknowledged message comes back through the retry topic, not through the offset. A pop that finds nothing
waits up to its poll time for a message to arrive.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from sluice.broker.consumer_order_info_manager import OrderInfo
from sluice.broker.expression_message_filter import ExpressionMessageFilter, property_filter_disabled
from sluice.broker.pop.pop_long_polling_service import PollingFull
from sluice.broker.pop.pop_revive_service import CheckPoint, now_ms
from sluice.broker.processors.pull_message_processor import SubscriptionParseError, tag_codes_of
from sluice.common.errors import InvalidNameError, InvalidSubscriptionError
from sluice.common.extra_info import (
    ORDER_REVIVE_QUEUE,
    PROPERTY_POP_CK,
    OffsetInfo,
    Receipt,
    pop_retry_topic,
    retry_flag,
)
from sluice.common.message import MessageExtBrokerInner
from sluice.common.message_codec import decode_records, encode_record, split_records
from sluice.common.naming import RETRY_GROUP_TOPIC_PREFIX, dlq_topic, validate_topic
from sluice.common.properties import PROPERTY_RETRY_TOPIC, encode_properties
from sluice.common.structs import perm_readable
from sluice.common.sysflag import PERM_READ, PERM_WRITE
from sluice.filter import compile_expression, is_tag_type
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import BadRequestError
from sluice.remoting.headers import (
    NotificationRequestHeader,
    PeekMessageRequestHeader,
    PollingInfoRequestHeader,
    PopMessageRequestHeader,
)
from sluice.store.message_store import MessageStore, RecordFilter
from sluice.store.results import GetMessageResult, GetMessageStatus, PutMessageResult

if TYPE_CHECKING:
    from sluice.broker.broker_stats import BrokerStats
    from sluice.broker.consumer_order_info_manager import ConsumerOrderInfoManager
    from sluice.broker.pop.pop_buffer_merge_service import PopBufferMergeService
    from sluice.broker.pop.pop_long_polling_service import PopLongPollingService
    from sluice.broker.pop.pop_revive_service import PopReviveService
    from sluice.broker.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager
    from sluice.broker.topic_config_manager import EnsureSystemTopic, TopicConfigManager
    from sluice.common.config import BrokerConfig

log = logging.getLogger(__name__)

MAX_POP_MESSAGES = 32  # one checkpoint's bit map
MAX_INVISIBLE_TIME = 12 * 3600 * 1000  # the gRPC proxy's bound (RocketMQ's broker takes any)
INIT_MODE_MIN = 0  # a group new to a queue starts at its start (headers.pop.INIT_MODE_MAX: at its end)
# Store statuses after which a pop moves the group's offset to next_begin_offset and reads on.
_SKIP = (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.OFFSET_TOO_SMALL,
         GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.OFFSET_FOUND_NULL,
         GetMessageStatus.MESSAGE_WAS_REMOVING)


def _checked(h: PopMessageRequestHeader) -> PopMessageRequestHeader:
    if h.max_msg_nums > MAX_POP_MESSAGES or h.max_msg_nums < 1:
        raise BadRequestError(f"maxMsgNums {h.max_msg_nums} is not within 1..{MAX_POP_MESSAGES}")
    check_invisible_time(h.invisible_time)
    if h.poll_time < 0:
        raise BadRequestError(f"pollTime {h.poll_time} is negative")
    return h


def _settle(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


def _drop(rd: _Read, offsets: set[int]) -> None:
    """Take the records at ``offsets`` out of what ``rd`` read."""
    r = rd.result
    records = split_records(b"".join(r.buffers))
    r.release()
    kept = [(off, rec) for off, rec in zip(r.queue_offsets, records, strict=True) if off not in offsets]
    rd.result = GetMessageResult(r.status, r.next_begin_offset, r.min_offset, r.max_offset,
                                 [memoryview(b"".join(rec for _, rec in kept))] if kept else [],
                                 [off for off, _ in kept])


def check_invisible_time(ms: int) -> None:
    if not 0 <= ms <= MAX_INVISIBLE_TIME:
        raise BadRequestError(f"invisibleTime {ms} ms is not within 0..{MAX_INVISIBLE_TIME} ms")


@dataclass(slots=True)
class _Read:
    """What one queue gave a pop."""

    topic: str
    queue_id: int
    start: int
    result: GetMessageResult
    ck: CheckPoint | None = None


async def put_all(store: MessageStore, puts: list[list[MessageExtBrokerInner]],
                  each: Callable[[int, PutMessageResult], None] | None = None) -> list[PutMessageResult]:
    """Store several puts in one call (one flush wait); each one's result. ``each(i, result)`` runs as each is
    answered, whatever becomes of the awaiting task (the bookkeeping of what was written must not depend on a
    client that went away meanwhile)."""
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    results: list[PutMessageResult | None] = [None] * len(puts)
    left = len(puts)

    def done(i: int, r: PutMessageResult) -> None:
        nonlocal left
        results[i] = r
        left -= 1
        try:
            if each is not None:
                each(i, r)
        finally:
            if left == 0 and not fut.done():
                fut.set_result(None)

    store.put_then(puts, done)
    if left:
        await fut
    return [r for r in results if r is not None]


class PopMessageProcessor:
    def __init__(self, config: BrokerConfig, broker_addr: str, store: MessageStore, stats: BrokerStats,
                 topic_config_manager: TopicConfigManager, subscription_group_manager: SubscriptionGroupManager,
                 ensure_system_topic: EnsureSystemTopic, pop_revive: PopReviveService,
                 pop_polling: PopLongPollingService, order_info: ConsumerOrderInfoManager,
                 swapped_out: Callable[[str, int, int], bool], pop_buffer: PopBufferMergeService) -> None:
        self.config = config
        self.broker_addr = broker_addr
        self.store = store
        self.stats = stats
        self.topic_config_manager = topic_config_manager
        self.subscription_group_manager = subscription_group_manager
        self.ensure_system_topic = ensure_system_topic
        self.pop_revive = pop_revive
        self.pop_polling = pop_polling
        self.order_info = order_info
        self.swapped_out = swapped_out
        self.pop_buffer = pop_buffer
        self._busy: set[tuple[str, str, int]] = set()  # queues a pop is writing the checkpoint of
        self._busy_waiters: dict[tuple[str, str, int], list[asyncio.Future[None]]] = {}

    async def pop_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = _checked(PopMessageRequestHeader.decode(req.ext_fields))
        refused = self._readable(req, h.topic, h.queue_id, h.consumer_group)
        if refused is not None:
            return refused
        tc = self.topic_config_manager.get(h.topic)
        group = self.subscription_group_manager.find(h.consumer_group)
        assert tc is not None and group is not None
        codes: frozenset[int] | None = None
        record_filter: RecordFilter | None = None
        try:
            if is_tag_type(h.exp_type):
                codes = tag_codes_of(h.exp)
            elif not self.config.enable_property_filter:
                return req.response(ResponseCode.SYSTEM_ERROR, property_filter_disabled(h.exp_type))
            else:
                compiled = compile_expression(h.exp_type, h.exp)
                record_filter = None if compiled is None else ExpressionMessageFilter(compiled)
        except (SubscriptionParseError, InvalidSubscriptionError) as exc:
            return req.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                f"parse the consumer's subscription failed: {str(exc).splitlines()[0]}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + h.poll_time / 1000
        retry = pop_retry_topic(h.topic, h.consumer_group)
        try:  # where unacknowledged messages go back to must be a topic: refused now, not stuck later
            validate_topic(retry)
            validate_topic(dlq_topic(h.consumer_group))
        except InvalidNameError as exc:
            return req.response(ResponseCode.INVALID_PARAMETER,
                                f"group {h.consumer_group!r} and topic {h.topic!r} cannot pop: {exc}")
        while True:
            if h.order:
                resp, unblocked_at = await self._pop_orderly(req, h, group, tc.read_queue_nums, codes, record_filter)
            else:
                resp = await self._pop(req, h, group, tc.read_queue_nums, retry, codes, record_filter,
                                       tc.message_type == "PRIORITY")
                unblocked_at = 0
            if resp is not None:
                return resp
            left = deadline - loop.time()
            if left <= 0:
                return self._empty(req, h, ResponseCode.POLLING_TIMEOUT, "POLLING_TIMEOUT")
            if unblocked_at:  # a blocked queue's in-flight messages come back then: look again
                left = min(left, max(0.001, (unblocked_at - now_ms()) / 1000))
            arrived: asyncio.Future[bool] = loop.create_future()
            try:
                held = self.pop_polling.hold((h.topic, retry), h.queue_id, left, partial(_settle, arrived))
            except PollingFull as exc:
                return self._empty(req, h, ResponseCode.POLLING_FULL, str(exc))
            try:
                if not await arrived and loop.time() >= deadline:
                    return self._empty(req, h, ResponseCode.POLLING_TIMEOUT, "POLLING_TIMEOUT")
            finally:
                held.drop()

    def peek_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """The messages a pop would hand out next, handed to nobody (RocketMQ's PeekMessageProcessor)."""
        ph = PeekMessageRequestHeader.decode(req.ext_fields)
        group, topic, queue_id, max_nums = ph.consumer_group, ph.topic, ph.queue_id, ph.max_msg_nums
        if not 1 <= max_nums <= MAX_POP_MESSAGES:
            raise BadRequestError(f"maxMsgNums {max_nums} is not within 1..{MAX_POP_MESSAGES}")
        refused = self._readable(req, topic, queue_id, group)
        if refused is not None:
            return refused
        tc = self.topic_config_manager.get(topic)
        assert tc is not None
        rand = random.randrange(max(1, tc.read_queue_nums))
        queues = [queue_id] if queue_id >= 0 else [(rand + i) % tc.read_queue_nums for i in range(tc.read_queue_nums)]
        parts: list[bytes | memoryview] = []
        rest = 0
        budget = max_nums
        for qid in queues:
            offset = max(self._read_offset(group, topic, qid), self.store.get_min_offset_in_queue(topic, qid))
            r = self.store.get_messages(group, topic, qid, offset, budget) if budget > 0 else None
            if r is not None and r.status is GetMessageStatus.FOUND:
                parts += [bytes(v) for v in r.buffers]
                budget -= r.message_count
                rest += r.max_offset - r.next_begin_offset
                r.release()
            else:
                rest += max(0, self.store.get_max_offset_in_queue(topic, qid) - offset)
        if not parts:
            return req.response(ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", {"restNum": str(rest)})
        resp = req.response(ResponseCode.SUCCESS, "FOUND", {"restNum": str(rest)})
        resp.body_parts = parts
        return resp

    async def notification(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Whether the group has messages to pop in the topic (or its retry topic), waiting up to ``pollTime``
        for one to arrive (RocketMQ's NotificationProcessor)."""
        nh = NotificationRequestHeader.decode(req.ext_fields)
        group, topic, queue_id, poll_ms = nh.consumer_group, nh.topic, nh.queue_id, nh.poll_time
        refused = self._readable(req, topic, queue_id, group)
        if refused is not None:
            return refused
        retry = pop_retry_topic(topic, group)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, poll_ms) / 1000
        while True:
            if self._has_messages(group, topic, queue_id) or self._has_messages(group, retry, -1):
                return req.response(ResponseCode.SUCCESS, None, {"hasMsg": "true", "pollingFull": "false"})
            left = deadline - loop.time()
            if left <= 0:
                return req.response(ResponseCode.SUCCESS, None, {"hasMsg": "false", "pollingFull": "false"})
            arrived: asyncio.Future[bool] = loop.create_future()
            try:
                held = self.pop_polling.hold((topic, retry), queue_id, left, partial(_settle, arrived))
            except PollingFull:
                return req.response(ResponseCode.SUCCESS, None, {"hasMsg": "false", "pollingFull": "true"})
            try:
                await arrived
            finally:
                held.drop()

    def polling_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """How many pops wait for messages of the topic's queue (RocketMQ's PollingInfoProcessor)."""
        ih = PollingInfoRequestHeader.decode(req.ext_fields)
        group, topic, queue_id = ih.consumer_group, ih.topic, ih.queue_id
        refused = self._readable(req, topic, queue_id, group)
        if refused is not None:
            return refused
        return req.response(ResponseCode.SUCCESS, None, {"pollingNum": str(self.pop_polling.waiting(topic, queue_id))})

    def _readable(self, req: RemotingCommand, topic: str, queue_id: int, group: str) -> RemotingCommand | None:
        if not perm_readable(self.config.broker_permission):
            return req.response(ResponseCode.NO_PERMISSION,
                                f"the broker[{self.broker_addr}] peeking message is forbidden")
        tc = self.topic_config_manager.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not perm_readable(tc.perm):
            return req.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
        if queue_id >= tc.read_queue_nums:
            return req.response(ResponseCode.INVALID_PARAMETER, f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                                                f"topicConfig.readQueueNums:[{tc.read_queue_nums}]")
        g = self.subscription_group_manager.find(group)
        if g is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{group}] does not exist")
        if not g.consume_enable:
            return req.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        return None

    def _release(self, key: tuple[str, str, int]) -> None:
        """A queue's checkpoint is written: pops waiting for it go on."""
        self._busy.discard(key)
        for fut in self._busy_waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    async def _until_free(self, key: tuple[str, str, int]) -> None:
        while key in self._busy:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._busy_waiters.setdefault(key, []).append(fut)
            await fut

    def _has_messages(self, group: str, topic: str, queue_id: int) -> bool:
        tc = self.topic_config_manager.get(topic)
        if tc is None:
            return False
        for qid in [queue_id] if queue_id >= 0 else range(tc.read_queue_nums):
            offset = self._read_offset(group, topic, qid)
            if offset < 0:
                offset = self.store.get_min_offset_in_queue(topic, qid)
            if self.store.get_max_offset_in_queue(topic, qid) > offset:
                return True
        return False

    def _read_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Where the group's next pop of the queue reads (-1: nowhere yet)."""
        offsets = self.store.consumer_offsets
        ahead = self.pop_buffer.pop_offset(group, topic, queue_id)
        if ahead is None or offsets.has_offset_reset(group, topic, queue_id):  # (a reset: the offset it set)
            return offsets.query_offset(group, topic, queue_id)
        return ahead

    def _empty(self, req: RemotingCommand, h: PopMessageRequestHeader, code: int, remark: str) -> RemotingCommand:
        return req.response(code, remark, {"popTime": str(now_ms()), "invisibleTime": str(h.invisible_time),
                                           "reviveQid": str(ORDER_REVIVE_QUEUE if h.order else 0), "restNum": "0"})

    async def _pop(self, req: RemotingCommand, h: PopMessageRequestHeader, group: SubscriptionGroupConfig,
                   queue_nums: int, retry: str, codes: frozenset[int] | None,
                   record_filter: RecordFilter | None, priority_topic: bool = False) -> RemotingCommand | None:
        """One try: the answer with what was found, or None when nothing was.

        On a priority topic a pop (``priority.factor`` % of the group's) reads the queues from the highest
        priority down and the retry topic first only ``pop_from_retry_probability_for_priority`` % of the time
        (RocketMQ's PopMessageProcessor, RIP-80)."""
        rand = random.randrange(100)
        retry_share = self.config.pop_from_retry_probability
        in_order = priority_topic and rand < group.priority_factor
        if in_order:
            retry_share = self.config.pop_from_retry_probability_for_priority
            order = range(queue_nums - 1, -1, -1) if self.config.priority_order_asc else range(queue_nums)
            first = [h.queue_id] if h.queue_id >= 0 else list(order)
        else:
            first = [h.queue_id] if h.queue_id >= 0 else [(rand + i) % queue_nums for i in range(queue_nums)]
        plan: list[tuple[str, int, frozenset[int] | None, RecordFilter | None]] = [
            (h.topic, q, codes, record_filter) for q in first]
        retry_tc = self.topic_config_manager.get(retry)
        if retry_tc is not None:
            retry_plan: list[tuple[str, int, frozenset[int] | None, RecordFilter | None]] = [
                (retry, q, None, None) for q in range(retry_tc.read_queue_nums)]
            plan = retry_plan + plan if rand < retry_share else plan + retry_plan
        budget = h.max_msg_nums
        reads: list[_Read] = []
        rest = 0
        buffered = self.pop_buffer.enabled
        if buffered and self.pop_buffer.full:
            return req.response(ResponseCode.SYSTEM_BUSY,
                                f"broker busy: {self.pop_buffer.size} pop checkpoints wait to be written (twice "
                                f"pop_ck_max_buffer_size); try again later")
        for topic, qid, tag_codes, flt in plan:
            if budget <= 0:
                break
            key = (topic, h.consumer_group, qid)
            if key in self._busy:
                if not in_order:
                    continue
                await self._until_free(key)  # (a higher priority is not passed over for its checkpoint's write)
            offset = self._pop_offset(h, topic, qid)
            r = self.store.get_messages(h.consumer_group, topic, qid, offset, budget, tag_codes, flt)
            if r.status is GetMessageStatus.FOUND:
                reads.append(_Read(topic, qid, offset, r))
                budget -= r.message_count
                rest += r.max_offset - r.next_begin_offset
            elif r.status in _SKIP and r.next_begin_offset != offset:
                if buffered:  # (behind the pops of the queue still only in memory)
                    self.pop_buffer.popped(h.consumer_group, topic, qid, r.next_begin_offset, None)
                else:
                    self.store.consumer_offsets.commit_offset(h.consumer_group, topic, qid, r.next_begin_offset)
        if not reads:
            return None
        pop_time = self.pop_revive.next_pop_time()
        revive_qid = self.pop_revive.next_revive_qid()
        if buffered:  # the checkpoints stay in memory: nothing to wait for
            for rd in reads:
                rd.ck = CheckPoint(rd.topic, h.consumer_group, rd.queue_id, rd.start, pop_time, h.invisible_time,
                                   self.config.broker_name, [q - rd.start for q in rd.result.queue_offsets],
                                   revive_qid)
                self.pop_buffer.popped(h.consumer_group, rd.topic, rd.queue_id, rd.result.next_begin_offset, rd.ck)
            return self._found(req, h, reads, pop_time, revive_qid, rest)
        for rd in reads:
            rd.ck = CheckPoint(rd.topic, h.consumer_group, rd.queue_id, rd.start, pop_time, h.invisible_time,
                               self.config.broker_name, [q - rd.start for q in rd.result.queue_offsets], revive_qid)
            self.pop_revive.open(rd.ck)
            self._busy.add((rd.topic, h.consumer_group, rd.queue_id))

        def written(i: int, r: PutMessageResult) -> None:
            rd = reads[i]
            assert rd.ck is not None
            self._release((rd.topic, h.consumer_group, rd.queue_id))
            self.pop_revive.written(rd.ck, r)
            if r.stored:  # handed out from now on, answered or not: the offset moves past them
                self.store.consumer_offsets.commit_offset(h.consumer_group, rd.topic, rd.queue_id,
                                                       rd.result.next_begin_offset)
            else:  # not handed out: the offset stays, the messages are read again
                self.pop_revive.forget(rd.ck)
                rd.result.release()
            if rest > 0 or not r.stored:  # pops that skipped this queue while it was busy: look again
                self.pop_polling.notify_message_arriving(rd.topic, rd.queue_id, -1)

        results = await put_all(self.store, [[self.pop_revive.checkpoint_record(rd.ck)] for rd in reads if rd.ck],
                                written)
        kept = [rd for rd, r in zip(reads, results, strict=True) if r.stored]
        if not kept:
            failure = results[0]
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"cannot write the pop checkpoint: {failure.status.name} {failure.remark}")
        return self._found(req, h, kept, pop_time, revive_qid, rest)

    async def _pop_orderly(self, req: RemotingCommand, h: PopMessageRequestHeader, group: SubscriptionGroupConfig,
                           queue_nums: int, codes: frozenset[int] | None, record_filter: RecordFilter | None,
                           pop_time: int | None = None) -> tuple[RemotingCommand | None, int]:
        """One orderly try: the answer (None when nothing could be popped) and, when queues were blocked, the
        earliest time one is not. No retry topic, no checkpoint: the group's offset stays on the first message not
        acknowledged, which comes back first."""
        now = now_ms()
        rand = random.randrange(100)
        queues = [h.queue_id] if h.queue_id >= 0 else [(rand + i) % queue_nums for i in range(queue_nums)]
        budget = h.max_msg_nums
        reads: list[_Read] = []
        rest = unblocked_at = 0
        for qid in queues:
            if budget <= 0:
                break
            key = (h.topic, h.consumer_group, qid)
            if key in self._busy:
                continue
            until = self.order_info.blocked_until(key, now, h.attempt_id)
            if until:
                unblocked_at = until if not unblocked_at else min(unblocked_at, until)
                continue
            offset = self._pop_offset(h, h.topic, qid)
            r = self.store.get_messages(h.consumer_group, h.topic, qid, offset, budget, codes, record_filter)
            if r.status is GetMessageStatus.FOUND:
                reads.append(_Read(h.topic, qid, offset, r))
                budget -= r.message_count
                rest += r.max_offset - r.next_begin_offset
            elif r.status in _SKIP and r.next_begin_offset != offset:
                self.store.consumer_offsets.commit_offset(h.consumer_group, h.topic, qid, r.next_begin_offset)
        if not reads:
            return None, unblocked_at
        if pop_time is None:
            pop_time = self.pop_revive.next_pop_time()
        counts: dict[tuple[int, int], int] = {}  # (queue id, offset) → earlier pops
        dead: list[tuple[_Read, int]] = []  # (read, offset) past the group's retries
        for rd in list(reads):
            key = (h.topic, h.consumer_group, rd.queue_id)
            # What the last pop handed out and got acknowledged, after the one that came back: not again.
            last = self.order_info.table.get(key)
            done = set() if last is None else \
                {off for i, off in enumerate(last.offsets) if last.acked >> i & 1} & set(rd.result.queue_offsets)
            if done:
                _drop(rd, done)
            offsets = rd.result.queue_offsets
            every = sorted({*offsets, *done})
            if not offsets:  # all of it was acknowledged already: move on past it
                self.order_info.forget(key)
                self.commit_forward(h.consumer_group, h.topic, rd.queue_id, every[-1] + 1)
                reads.remove(rd)
                continue
            acked = sum(1 << i for i, off in enumerate(every) if off in done)
            before = self.order_info.popped(key, OrderInfo(pop_time, h.invisible_time, every, h.attempt_id, acked))
            for off, n in zip(every, before, strict=True):
                counts[(rd.queue_id, off)] = n
                if n > group.retry_max_times and off not in done:
                    dead.append((rd, off))
        if not reads:
            return None, now_ms() + 1
        if dead:
            reads = await self._dead_letter_orderly(h, reads, dead, counts, pop_time)
            if not reads:
                return None, now_ms() + 1
        info = OffsetInfo()
        order_count: list[str] = []
        for rd in reads:
            info.add(rd.topic, rd.queue_id, rd.start, rd.result.queue_offsets)
            popped_before = [counts[(rd.queue_id, off)] for off in rd.result.queue_offsets]
            order_count += [f"0 qo{rd.queue_id}%{off} {n}" for off, n in zip(rd.result.queue_offsets, popped_before,
                                                                               strict=True)]
            order_count.append(f"0 {rd.queue_id} {min(popped_before)}")
        resp = self._found(req, h, reads, pop_time, ORDER_REVIVE_QUEUE, rest)
        resp.ext_fields["orderCountInfo"] = ";".join(order_count)
        return resp, 0

    async def _dead_letter_orderly(self, h: PopMessageRequestHeader, reads: list[_Read], dead: list[tuple[_Read, int]],
                                   counts: dict[tuple[int, int], int], pop_time: int) -> list[_Read]:
        """Move the messages popped past the group's retries into its DLQ, acknowledged; the reads without them."""
        topic = dlq_topic(h.consumer_group)
        self.ensure_system_topic(topic, 1, PERM_READ | PERM_WRITE)
        moved: list[MessageExtBrokerInner] = []
        for rd, off in dead:
            i = rd.result.queue_offsets.index(off)
            msg = decode_records(split_records(b"".join(rd.result.buffers))[i])[0]
            props = dict(msg.properties)
            props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
            moved.append(MessageExtBrokerInner(topic, msg.body, 0, msg.flag, props, msg.sys_flag, msg.born_timestamp,
                                               msg.born_host, self.broker_addr, counts[(rd.queue_id, off)]))
        for rd in reads:
            _drop(rd, {off for r, off in dead if r is rd})
        keep = [rd for rd in reads if rd.result.queue_offsets]
        key_busy = [(h.topic, h.consumer_group, rd.queue_id) for rd in reads]
        self._busy.update(key_busy)
        try:
            (r,) = await put_all(self.store, [moved])
        finally:
            for key in key_busy:
                self._release(key)
        if not r.stored:  # stay in order: they come back once the pop's invisible time passes
            log.warning("cannot move %d messages of %s past their retries to %s: %s %s", len(moved), h.topic, topic,
                        r.status.name, r.remark)
            return keep
        self.pop_revive.dead += len(moved)
        for rd, off in dead:
            ok, new_offset = self.order_info.ack((h.topic, h.consumer_group, rd.queue_id), pop_time, off)
            if ok and new_offset is not None:
                self.commit_forward(h.consumer_group, h.topic, rd.queue_id, new_offset)
        return keep

    def commit_forward(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        offsets = self.store.consumer_offsets
        if offsets.query_offset(group, topic, queue_id) < offset:
            offsets.commit_offset(group, topic, queue_id, offset)

    def _found(self, req: RemotingCommand, h: PopMessageRequestHeader, reads: list[_Read], pop_time: int,
               revive_qid: int, rest: int) -> RemotingCommand:
        info = OffsetInfo()
        parts: list[bytes | memoryview] = []
        count = 0
        for rd in reads:
            r = rd.result
            info.add(rd.topic, rd.queue_id, rd.start, r.queue_offsets)
            count += r.message_count
            self.stats.record_group_get(rd.topic, h.consumer_group, r.message_count, r.buffer_total_size,
                                        rd.topic.startswith(RETRY_GROUP_TOPIC_PREFIX), h.topic)
            if not rd.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                parts.extend(r.buffers)
                continue
            # A retried message leaves with its receipt and the topic it was popped from (RocketMQ's way).
            for msg in decode_records(b"".join(r.buffers)):
                props = dict(msg.properties)
                props[PROPERTY_POP_CK] = str(Receipt(  # (a producer's own POP_CK property is no receipt)
                    rd.start, pop_time, h.invisible_time, revive_qid, retry_flag(rd.topic), self.config.broker_name,
                    rd.queue_id, msg.queue_offset))
                parts.append(encode_record(
                    topic=h.topic.encode(), body=msg.body, properties=encode_properties(props),
                    queue_id=msg.queue_id, flag=msg.flag, queue_offset=msg.queue_offset,
                    physical_offset=msg.commit_log_offset, sys_flag=msg.sys_flag,
                    born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                    store_timestamp=msg.store_timestamp, store_host=msg.store_host,
                    reconsume_times=msg.reconsume_times,
                    prepared_transaction_offset=msg.prepared_transaction_offset))
            r.release()
        self.stats.record_get(count)
        resp = req.response(ResponseCode.SUCCESS, "FOUND", {
            "popTime": str(pop_time), "invisibleTime": str(h.invisible_time), "reviveQid": str(revive_qid),
            "restNum": str(rest), "startOffsetInfo": info.start_offset_info(),
            "msgOffsetInfo": info.msg_offset_info()})
        resp.body_parts = parts
        return resp

    async def pop_orderly(self, req: RemotingCommand, h: PopMessageRequestHeader, group: SubscriptionGroupConfig,
                          pop_time: int) -> tuple[RemotingCommand | None, int]:
        """One orderly pop of ``h``'s topic (a lite topic's light queue: queue 0, no filter) at ``pop_time``: the
        answer (None: nothing) and, when the queue was blocked, when it is not."""
        return await self._pop_orderly(req, h, group, 1, None, None, pop_time)

    def _pop_offset(self, h: PopMessageRequestHeader, topic: str, qid: int) -> int:
        """Where the group's pop of a queue starts: its offset, or for a group new to the queue the oldest
        message (init mode MIN, and always in a retry topic) or else the newest one, unless the whole queue is
        still in memory (RocketMQ's getInitOffset)."""
        offsets = self.store.consumer_offsets
        reset = offsets.take_reset_offset(h.consumer_group, topic, qid)
        if reset is not None:
            self.pop_buffer.reset(h.consumer_group, topic, qid)
            return reset
        offset = self._read_offset(h.consumer_group, topic, qid)
        if offset >= 0:
            return offset
        store = self.store
        low = store.get_min_offset_in_queue(topic, qid)
        if h.init_mode == INIT_MODE_MIN or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            offset = low
        else:
            high = store.get_max_offset_in_queue(topic, qid)
            offset = 0 if low <= 0 < high and not self.swapped_out(topic, qid, 0) else max(high - 1, 0)
        offsets.commit_offset(h.consumer_group, topic, qid, offset)
        return offset


__all__ = ["MAX_INVISIBLE_TIME", "PopMessageProcessor", "check_invisible_time",
           "put_all"]
