"""SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and CONSUMER_SEND_MSG_BACK."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from time import perf_counter
from typing import TYPE_CHECKING

from sluice.common.attributes import message_type_of_properties
from sluice.common.batch_codec import inflate_batch, scan_batch_columns
from sluice.common.decimal_text import parse_long
from sluice.common.errors import InvalidNameError, MessageFormatError
from sluice.common.lite import LITE_TOPIC_PREFIX, SEPARATOR, to_lmq_name, validate_lite_topic
from sluice.common.message import MessageExtBrokerInner, create_message_ids
from sluice.common.naming import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    dlq_topic,
    retry_topic,
    validate_topic,
)
from sluice.common.properties import (
    PROPERTY_CLUSTER,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_LITE_TOPIC,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_MSG_REGION,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRIORITY,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TRACE_SWITCH,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    decode_properties,
)
from sluice.common.recall_handle import RecallHandle
from sluice.common.structs import TopicConfig, perm_writeable
from sluice.common.sysflag import COMPRESSED_FLAG, PERM_READ, PERM_WRITE
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.deferred_response import DeferredResponse
from sluice.remoting.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from sluice.store.commit_log import RawBatch
from sluice.store.results import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from sluice.broker.broker_stats import BrokerStats
    from sluice.broker.schedule_message_service import ScheduleMessageService
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager
    from sluice.broker.timer_message_service import TimerMessageService
    from sluice.broker.topic_config_manager import EnsureSystemTopic, TopicConfigManager
    from sluice.broker.transactional_message_service import TransactionalMessageService
    from sluice.common.config import BrokerConfig
    from sluice.remoting.dispatcher import RequestDispatcher
    from sluice.store.message_store import MessageStore, PutDone

PUT_STATUS_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.LMQ_CONSUME_QUEUE_NUM_EXCEEDED: ResponseCode.LMQ_QUOTA_EXCEEDED,
    PutMessageStatus.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_BUSY,
    PutMessageStatus.SYSTEM_BUSY: ResponseCode.SYSTEM_BUSY,
    PutMessageStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}
ResponseBuilder = Callable[[PutMessageResult, int], RemotingCommand]
STORED_CODES = frozenset({ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
                          ResponseCode.SLAVE_NOT_AVAILABLE})


@lru_cache(maxsize=4096)
def ipv4_addr(addr: str) -> str:
    """``addr`` if it is an IPv4 ``ip:port`` (records hold IPv4 hosts only), else the loopback with port 0."""
    host, _, port = addr.rpartition(":")
    parts = host.split(".")
    if len(parts) == 4 and all(p.isascii() and p.isdigit() and int(p) < 256 for p in parts) and port.isascii() \
            and port.isdigit():
        return addr
    return "127.0.0.1:0"


def topic_refusal(req: RemotingCommand, topic: str) -> RemotingCommand | None:
    """The answer to a send to a topic no client may write (an illegal name, a system topic); None: it may."""
    try:
        validate_topic(topic)
    except InvalidNameError as exc:
        return req.response(ResponseCode.INVALID_PARAMETER, str(exc))
    if topic in NOT_ALLOWED_SEND_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX):
        # (rmq_sys_*: the broker's own logs, e.g. POP's revive log, which a forged record would corrupt)
        return req.response(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
    return None


def queue_refusal(conn: Connection, req: RemotingCommand, tc: TopicConfig, queue_id: int) -> RemotingCommand | None:
    """The answer to a send to a queue the topic does not have; None: it has it."""
    if queue_id >= max(tc.read_queue_nums, tc.write_queue_nums):
        return req.response(ResponseCode.INVALID_PARAMETER,
                            f"request queueId[{queue_id}] is illegal, topic:[{tc.topic_name}] "
                            f"topicConfig.writeQueueNums:[{tc.write_queue_nums}] consumer:[{conn.remote_addr}]")
    return None


async def put_as_send(store: MessageStore, stats: BrokerStats, inner: MessageExtBrokerInner) -> PutMessageResult:
    """Store a message a client's request made (a reply, a recall) as a send is stored: behind the same
    back-pressure (SYSTEM_BUSY and the rest), timed and counted in the put stats."""
    done: asyncio.Future[PutMessageResult] = asyncio.get_running_loop().create_future()
    t0 = perf_counter()

    def stored(_i: int, r: PutMessageResult) -> None:
        if not done.done():
            done.set_result(r)
    store.put_then([[inner]], stored)
    result = await done
    stats.record_put(result, perf_counter() - t0)
    return result


def _forbidden(store: MessageStore, broker_addr: str) -> str:
    why = f": {store.write_failure}" if store.write_failure else ""
    return f"the broker[{broker_addr}] sending message is forbidden{why}"


log = logging.getLogger(__name__)

# The requests whose puts join a group (``_put``); any other request stores the group first.
_GROUPED_CODES = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.CONSUMER_SEND_MSG_BACK})

# A read's sends go to the store in appends of at most this many messages and body bytes: the append runs
# after the requests it holds, so it must stay a small part of the loop's serving slice.
GROUP_MAX_MESSAGES = 32
GROUP_MAX_BYTES = 1024 * 1024


def metrics_message_type(props: dict[str, str]) -> str:
    """A send's ``message_type`` label (RocketMQ's TopicMessageType.parseFromMessageProperty, in lower case)."""
    return message_type_of_properties(props).lower()


def priority_queue(props: dict[str, str], write_queue_nums: int) -> int | None:
    """The queue a priority message goes to, ``min(priority, writeQueueNums - 1)`` (RocketMQ's SendMessageProcessor):
    None for a message without a priority; the property dropped where the message is of another type (a delay,
    FIFO or transactional message keeps its own queue). ``ValueError`` for a priority that is not 0 .. 2^31 - 1."""
    text = props.get(PROPERTY_PRIORITY)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) >= 2**31:
        raise ValueError(f"the message priority {text[:32]!r} is not an integer within 0 .. 2147483647")
    if message_type_of_properties(props) != "PRIORITY":
        del props[PROPERTY_PRIORITY]
        return None
    return min(int(text), max(0, write_queue_nums - 1))


@dataclass(slots=True)
class _GroupedPut:
    msgs: list[MessageExtBrokerInner]
    respond: ResponseBuilder
    deferred: DeferredResponse
    t0: float


class SendMessageProcessor:
    def __init__(self, config: BrokerConfig, broker_addr: str, store: MessageStore, dispatcher: RequestDispatcher,
                 stats: BrokerStats, topic_config_manager: TopicConfigManager,
                 subscription_group_manager: SubscriptionGroupManager, ensure_system_topic: EnsureSystemTopic,
                 trigger_register: Callable[[], None], schedule_service: ScheduleMessageService,
                 timer_service: TimerMessageService, transaction_service: TransactionalMessageService) -> None:
        self.config = config
        self.broker_addr = broker_addr
        self.store = store
        self.dispatcher = dispatcher
        self.stats = stats
        self.topic_config_manager = topic_config_manager
        self.subscription_group_manager = subscription_group_manager
        self.ensure_system_topic = ensure_system_topic
        self.trigger_register = trigger_register
        # (a master's: a slave refuses sends)
        self.schedule_service = schedule_service
        self.timer_service = timer_service
        self.transaction_service = transaction_service
        self._group: list[_GroupedPut] = []  # the sends of the read being served, not yet in the store
        self._group_bytes = 0
        self._group_msgs = 0

    # == handlers ====================================================================================
    def send_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | DeferredResponse:
        return self._send(conn, req, SendMessageRequestHeader.decode(req.ext_fields))

    def send_message_v2(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | DeferredResponse:
        return self._send(conn, req, SendMessageRequestHeader.decode_v2(req.ext_fields))

    def send_batch_message(self, conn: Connection,
                           req: RemotingCommand) -> RemotingCommand | DeferredResponse:
        h = SendMessageRequestHeader.decode_v2(req.ext_fields)
        h.batch = True  # whatever its 'm' says
        return self._send(conn, req, h)

    def consumer_send_msg_back(self, conn: Connection,
                               req: RemotingCommand) -> RemotingCommand | DeferredResponse:
        """Store a copy of a message a consumer failed on into ``%RETRY%<group>``, delayed; DLQ when exhausted."""
        h = ConsumerSendMsgBackRequestHeader.decode(req.ext_fields)
        group, offset, delay_level = h.group, h.offset, h.delay_level
        sub = self.subscription_group_manager.find(group)
        if sub is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        if not perm_writeable(self.config.broker_permission):
            return req.response(ResponseCode.NO_PERMISSION, _forbidden(self.store, self.broker_addr))
        if sub.retry_queue_nums <= 0:
            return req.response(ResponseCode.SUCCESS)
        msg = self.store.look_message_by_offset(offset, visible_only=True)
        if msg is not None and not h.origin_topic and self.config.authorization_enabled \
                and msg.topic != retry_topic(group):
            # Authorization checked the group only: a message of another topic needs that topic named (and
            # allowed). Sluice's and the Java clients name it.
            return req.response(ResponseCode.NO_PERMISSION,
                                "CONSUMER_SEND_MSG_BACK must name originTopic when authorization is on")
        if msg is None or (h.origin_topic and msg.topic not in (h.origin_topic, retry_topic(group))):
            # (the topic named is the one authorization allowed: another's message is not copied)
            return req.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        max_times = h.max_reconsume_times
        if max_times is None:
            max_times = sub.retry_max_times
        levels = len(self.config.delay_levels)
        if msg.reconsume_times >= max_times or delay_level < 0:
            self.stats.record_dlq(group, h.origin_topic or props[PROPERTY_RETRY_TOPIC])
            topic = dlq_topic(group)
            self.ensure_system_topic(topic, 1, PERM_READ | PERM_WRITE)
            queue_id = 0
            props[PROPERTY_DELAY_TIME_LEVEL] = "0"  # as RocketMQ leaves it: no delay on the way to the DLQ
        else:
            topic = retry_topic(group)
            self.ensure_system_topic(topic, sub.retry_queue_nums, PERM_READ | PERM_WRITE)
            queue_id = random.randrange(sub.retry_queue_nums)
            level = 3 + msg.reconsume_times if delay_level == 0 else delay_level
            props[PROPERTY_DELAY_TIME_LEVEL] = str(min(level, levels))
        origin = h.origin_msg_id or msg.msg_id
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, origin)
        props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
        inner = MessageExtBrokerInner(topic, msg.body, queue_id, msg.flag, props, msg.sys_flag, msg.born_timestamp,
                                      msg.born_host, self.broker_addr, msg.reconsume_times + 1)
        return self._put(conn, [self.schedule_service.redirect(inner)],
                         lambda r, code: req.response(code, r.remark or None))

    # == the send path ===============================================================================
    def _send(self, conn: Connection, req: RemotingCommand,
              h: SendMessageRequestHeader) -> RemotingCommand | DeferredResponse:
        if not perm_writeable(self.config.broker_permission):
            return req.response(ResponseCode.NO_PERMISSION, _forbidden(self.store, self.broker_addr))
        refused = topic_refusal(req, h.topic)
        if refused is not None:
            return refused
        tc = self.topic_config_manager.get(h.topic)
        if tc is None:
            if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = self.ensure_system_topic(h.topic, 1, PERM_READ | PERM_WRITE)
            elif h.default_topic:
                tc = self.topic_config_manager.create_in_send(h.topic, h.default_topic, h.default_topic_queue_nums)
                if tc is not None:
                    self.trigger_register()
            if tc is None:
                return req.response(ResponseCode.TOPIC_NOT_EXIST,
                                    f"topic[{h.topic}] not exist, apply first please!")
        if not perm_writeable(tc.perm):
            return req.response(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] sending message is forbidden")
        queue_id = h.queue_id
        refused = queue_refusal(conn, req, tc, queue_id)
        if refused is not None:
            return refused
        if queue_id < 0:
            queue_id = random.randrange(max(1, tc.write_queue_nums))
        max_size = self.config.store.max_message_size
        if len(req.body) > max_size and not h.batch:
            return req.response(ResponseCode.MESSAGE_ILLEGAL,
                                f"the message body size {len(req.body)} is larger than max_message_size {max_size}")
        born_host = ipv4_addr(conn.remote_addr)
        header_props = decode_properties(h.properties) if h.properties else {}
        message_type = metrics_message_type(header_props)
        stored_topic = h.topic  # (RocketMQ counts a send under the topic it is stored in: a delayed one's is
        # SCHEDULE_TOPIC_XXXX, a half message's RMQ_SYS_TRANS_HALF_TOPIC)
        if h.batch:
            if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                return req.response(ResponseCode.MESSAGE_ILLEGAL, "a batch cannot be sent to a retry topic")
            if header_props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true":
                return req.response(ResponseCode.MESSAGE_ILLEGAL, "a batch cannot hold transactional messages")
            sys_flag = h.sys_flag
            body = req.body if isinstance(req.body, bytes) else bytes(req.body)
            try:
                if sys_flag & COMPRESSED_FLAG:  # the C++ client deflates a whole batch of 4 KiB or more
                    body = inflate_batch(body, self.config.remoting.max_frame_size)
                    sys_flag &= ~COMPRESSED_FLAG
                columns = scan_batch_columns(body)
            except MessageFormatError as exc:
                return req.response(ResponseCode.MESSAGE_ILLEGAL, f"malformed batch body: {exc}")
            raw = RawBatch(h.topic, queue_id, body, columns, sys_flag, h.born_timestamp, born_host, self.broker_addr,
                           h.reconsume_times, header_props)
        else:
            cfg = self.config  # (stamped as RocketMQ's broker does: a client's trace reads them; a batch's are not)
            header_props[PROPERTY_MSG_REGION] = cfg.region_id
            header_props[PROPERTY_TRACE_SWITCH] = "true" if cfg.trace_on else "false"
            header_props[PROPERTY_CLUSTER] = cfg.broker_cluster_name
            topic = h.topic
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
                sub = self.subscription_group_manager.find(group)
                max_times = h.max_reconsume_times if h.max_reconsume_times is not None else (
                    sub.retry_max_times if sub else self.config.max_reconsume_times)
                mrt = header_props.get(PROPERTY_MAX_RECONSUME_TIMES)
                max_times = parse_long(mrt, max_times)
                if h.reconsume_times >= max_times:
                    self.stats.record_dlq(h.producer_group, h.topic)  # (RocketMQ names the sender here)
                    topic = dlq_topic(group)
                    self.ensure_system_topic(topic, 1, PERM_READ | PERM_WRITE)
                    queue_id = 0
                    header_props[PROPERTY_DELAY_TIME_LEVEL] = "0"  # no delay on the way to the DLQ, as RocketMQ
            lite = header_props.get(PROPERTY_LITE_TOPIC)
            if lite:  # its lite topic's light queue too, whatever the client named (RocketMQ's way)
                refusal_text = self._lite_refusal(h.topic, lite)
                if refusal_text is not None:
                    return req.response(ResponseCode.MESSAGE_ILLEGAL, refusal_text)
                header_props[PROPERTY_INNER_MULTI_DISPATCH] = to_lmq_name(h.topic, lite)
            elif LITE_TOPIC_PREFIX in header_props.get(PROPERTY_INNER_MULTI_DISPATCH, ""):
                return req.response(ResponseCode.MESSAGE_ILLEGAL, "INNER_MULTI_DISPATCH names a lite topic: send "
                                                                  "to a lite topic with __LITE_TOPIC")
            try:
                prio_queue = priority_queue(header_props, tc.write_queue_nums)
            except ValueError as exc:
                return req.response(ResponseCode.MESSAGE_ILLEGAL, str(exc))
            if prio_queue is not None and topic == h.topic:
                queue_id = prio_queue
            inner = MessageExtBrokerInner(topic, req.body if isinstance(req.body, bytes) else bytes(req.body),
                                          queue_id, h.flag, header_props, h.sys_flag, h.born_timestamp, born_host,
                                          self.broker_addr, h.reconsume_times)
            if _is_half(inner):
                if self.config.reject_transaction_message:
                    return req.response(ResponseCode.NO_PERMISSION, f"the broker[{self.config.broker_name}] sending "
                                                                    f"transaction message is forbidden")
                refusal = self.timer_service.check(inner)  # (applied at commit; refused now, not then)
                if refusal is not None:
                    return req.response(refusal.code, refusal.remark)
                msgs = [self.transaction_service.prepare(inner)]
            else:
                refusal = self.timer_service.prepare(inner)
                if refusal is not None:
                    return req.response(refusal.code, refusal.remark)
                msgs = [self.schedule_service.redirect(inner)]
            stored_topic = msgs[0].topic

        def respond(r: PutMessageResult, code: int) -> RemotingCommand:
            if code not in STORED_CODES:
                return req.response(code, r.remark or None)
            self.stats.record_topic_put(stored_topic, r.msg_num, r.wrote_bytes, message_type)
            if stored_topic == TRANS_HALF_TOPIC:
                self.stats.record_half(h.topic, r.msg_num)
            ids = create_message_ids(self.broker_addr, r.phys_offsets)
            ext = {"msgId": ids, "queueId": str(queue_id), "queueOffset": str(r.queue_offset),
                   PROPERTY_MSG_REGION: self.config.region_id,
                   PROPERTY_TRACE_SWITCH: "true" if self.config.trace_on else "false"}
            if stored_topic == TIMER_TOPIC:
                handle = self._recall_handle(msgs[0])
                if handle is not None:
                    ext["recallHandle"] = handle
            return req.response(code, None, ext)

        if h.batch:
            return self._put_raw(raw, respond)
        return self._put(conn, msgs, respond)

    def _lite_refusal(self, topic: str, lite: str) -> str | None:
        """Why a message of ``topic`` cannot go to lite topic ``lite`` (None: it can)."""
        c = self.config.store
        if not (c.enable_lmq and c.enable_multi_dispatch):
            return (f"lite topic {lite!r} of {topic}: this broker keeps no light queues (set enable_lmq and "
                    f"enable_multi_dispatch in [store])")
        try:
            validate_lite_topic(lite)
        except InvalidNameError as exc:
            return f"lite topic of {topic}: {exc}"
        if SEPARATOR in topic:
            return f"topic {topic!r} cannot hold lite topics: its name has {SEPARATOR!r}"
        return None

    def _recall_handle(self, stored: MessageExtBrokerInner) -> str | None:
        """What takes a timer message back before it is due (RocketMQ's attachRecallHandle): its due time + 1 ms
        (its slot, whatever the precision), not for a retry topic's."""
        props = stored.properties
        real_topic, due = props.get(PROPERTY_REAL_TOPIC), parse_long(props.get(PROPERTY_TIMER_OUT_MS))
        uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if real_topic is None or due is None or uniq is None or real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return None
        return RecallHandle(real_topic, self.config.broker_name, str(due + 1), uniq).encode()

    def _put_raw(self, raw: RawBatch, respond: ResponseBuilder) -> RemotingCommand | DeferredResponse:
        return self._store_waiting(lambda done: self.store.put_then([raw], done), respond)

    def _put(self, conn: Connection, msgs: list[MessageExtBrokerInner],
             respond: ResponseBuilder) -> RemotingCommand | DeferredResponse:
        """Join the puts of the requests read with this one: they go to the store together once the
        connection has served what it read (``_put_group``), each answered with its own result."""
        group = self._group
        if not group:
            conn.after_backlog(self._put_group)
            self.dispatcher.before_next = self._barrier
        deferred = DeferredResponse()
        group.append(_GroupedPut(msgs, respond, deferred, perf_counter()))
        self._group_bytes += sum(len(m.body) for m in msgs)
        self._group_msgs += len(msgs)
        if self._group_bytes >= GROUP_MAX_BYTES or self._group_msgs >= GROUP_MAX_MESSAGES:
            self._put_group()
        return deferred

    def _put_group(self) -> None:
        """The puts gathered from one read: one append, one flush wait, one arrival notice."""
        group, self._group = self._group, []
        self._group_bytes = self._group_msgs = 0
        if self.dispatcher.before_next == self._barrier:
            self.dispatcher.before_next = None
        if not group:
            return

        def done(i: int, r: PutMessageResult) -> None:
            p = group[i]
            p.deferred.resolve(lambda: self._answer(r, p.t0, p.respond))

        try:
            self.store.put_then([p.msgs for p in group], done)
        except Exception as exc:  # every request of the group must hear something
            log.exception("storing a group of %d sends failed", len(group))
            failed = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, f"{type(exc).__name__}: {exc}")
            for p in group:
                if not p.deferred.resolved:
                    p.deferred.resolve(lambda p=p: p.respond(failed, ResponseCode.SYSTEM_ERROR))  # type: ignore[misc]

    def _barrier(self, code: int) -> None:
        """Before a request that is not a single send: the sends read before it are stored first (a topic
        deleted or reconfigured after a send does not overtake it)."""
        if code not in _GROUPED_CODES:
            self._put_group()

    def _answer(self, r: PutMessageResult, t0: float, respond: ResponseBuilder) -> RemotingCommand:
        """The answer to a put that took since ``t0`` (timed for the stats)."""
        self.stats.record_put(r, perf_counter() - t0)
        return respond(r, PUT_STATUS_CODES[r.status])

    def _store_waiting(self, put: Callable[[PutDone], None],
                       respond: ResponseBuilder) -> RemotingCommand | DeferredResponse:
        """A put answered at once (refused, or nothing to wait for), or deferred until the group commit covers
        it: the flush's completion sends the answer, with no task per request and the loop free meanwhile."""
        t0 = perf_counter()
        deferred: DeferredResponse | None = None
        now: list[PutMessageResult] = []

        def done(_i: int, r: PutMessageResult) -> None:
            if deferred is None:
                now.append(r)
            else:
                deferred.resolve(lambda: self._answer(r, t0, respond))

        put(done)
        if now:
            return self._answer(now[0], t0, respond)
        deferred = DeferredResponse()
        return deferred


__all__ = ["SendMessageProcessor"]


def _is_half(msg: MessageExtBrokerInner) -> bool:
    """A transactional producer's half message (TRAN_MSG), unless it is a retry on its way back with a delay
    (RocketMQ's rule)."""
    if msg.properties.get(PROPERTY_TRANSACTION_PREPARED, "").lower() != "true":
        return False
    delay = parse_long(msg.properties.get(PROPERTY_DELAY_TIME_LEVEL))
    return not (msg.reconsume_times > 0 and delay is not None and delay > 0)
