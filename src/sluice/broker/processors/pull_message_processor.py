"""PULL_MESSAGE with long polling and the commit-offset piggyback."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from time import perf_counter
from typing import TYPE_CHECKING

from sluice.broker.expression_message_filter import (
    ExpressionForRetryMessageFilter,
    ExpressionMessageFilter,
    property_filter_disabled,
)
from sluice.broker.pull_request_hold_service import TooManyHeldPulls
from sluice.common.errors import InvalidSubscriptionError
from sluice.common.hashing import tag_hash_code
from sluice.common.naming import RETRY_GROUP_TOPIC_PREFIX
from sluice.common.structs import perm_readable
from sluice.filter import CompiledExpression, compile_expression, is_tag_type
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.deferred_response import DeferredResponse
from sluice.remoting.headers import PullMessageRequestHeader
from sluice.store.message_store import RecordFilter
from sluice.store.results import GetMessageStatus

if TYPE_CHECKING:
    from sluice.broker.broker_stats import BrokerStats
    from sluice.broker.consumer_filter_manager import ConsumerFilterManager
    from sluice.broker.consumer_manager import ConsumerManager
    from sluice.broker.pull_request_hold_service import PullRequestHoldService
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8
FLAG_LITE_PULL = 0x10


class SubscriptionParseError(ValueError):
    pass


@lru_cache(maxsize=4096)
def tag_codes_of(expression: str) -> frozenset[int] | None:
    """The tags codes a TAG expression selects; None means every message (``*`` or empty).

    As RocketMQ's FilterAPI reads it: split on ``||`` (as Java's String.split, which drops trailing empty
    parts), each part trimmed, empty parts dropped — so ``"TagA ||"`` is TagA and an expression of blanks
    selects nothing; one of nothing but bars (``"||"``) is refused, as Java's finds no part at all.
    """
    if not expression or expression == "*":
        return None
    parts = expression.split("||")
    while parts and not parts[-1]:
        parts.pop()
    if not parts:
        raise SubscriptionParseError(f"tag expression {expression!r} holds no tag")
    return frozenset(tag_hash_code(t) for t in (part.strip() for part in parts) if t)


# Store status → (response code, whether the request may be held)
_STATUS_CODE = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
}


class PullMessageProcessor:
    def __init__(self, config: BrokerConfig, broker_addr: str, store: MessageStore,
                 topic_config_manager: TopicConfigManager, subscription_group_manager: SubscriptionGroupManager,
                 consumer_manager: ConsumerManager, consumer_filter_manager: ConsumerFilterManager,
                 hold_service: PullRequestHoldService, stats: BrokerStats,
                 swapped_out: Callable[[str, int, int], bool]) -> None:
        self.config = config
        self.broker_addr = broker_addr
        self.store = store
        self.topic_config_manager = topic_config_manager
        self.subscription_group_manager = subscription_group_manager
        self.consumer_manager = consumer_manager
        self.consumer_filter_manager = consumer_filter_manager
        self.hold_service = hold_service
        self.stats = stats
        self.swapped_out = swapped_out

    def pull_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | DeferredResponse:
        return self._process(conn, req, PullMessageRequestHeader.decode(req.ext_fields), allow_suspend=True)

    # The Java DefaultLitePullConsumer's pull: the same request and answer under its own code.
    lite_pull_message = pull_message

    def _process(self, conn: Connection, req: RemotingCommand, h: PullMessageRequestHeader,
                 allow_suspend: bool) -> RemotingCommand | DeferredResponse:
        if not perm_readable(self.config.broker_permission):
            return req.response(ResponseCode.NO_PERMISSION,
                                f"the broker[{self.broker_addr}] pulling message is forbidden")
        group = self.subscription_group_manager.find(h.consumer_group)
        if group is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{h.consumer_group}] does not exist")
        if not group.consume_enable:
            return req.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}")
        tc = self.topic_config_manager.get(h.topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
        if not perm_readable(tc.perm):
            return req.response(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
        if h.queue_id < 0 or h.queue_id >= tc.read_queue_nums:
            return req.response(ResponseCode.INVALID_PARAMETER,
                                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                                f"[{tc.read_queue_nums}] consumer:[{conn.remote_addr}]")
        codes: frozenset[int] | None = None
        expr: CompiledExpression | None = None
        if h.sys_flag & FLAG_SUBSCRIPTION:
            if is_tag_type(h.expression_type):
                try:
                    codes = tag_codes_of(h.subscription or "")
                except SubscriptionParseError:
                    return req.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                        "parse the consumer's subscription failed")
            else:
                if not h.subscription:
                    return req.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                        "parse the consumer's subscription failed")
                if not self.config.enable_property_filter:
                    return self._property_filter_disabled(req, h.expression_type)
                try:  # RocketMQ would serve every message here (its build swallows the error)
                    expr = compile_expression(h.expression_type, h.subscription)
                except InvalidSubscriptionError as exc:
                    return req.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                        f"parse the consumer's subscription failed: {str(exc).splitlines()[0]}")
        else:
            sub = self.consumer_manager.find_subscription(h.consumer_group, h.topic)
            if sub is None:
                return req.response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                    f"the consumer's subscription not exist, group: {h.consumer_group}")
            if sub.sub_version < h.sub_version:
                return req.response(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
            if is_tag_type(sub.expression_type):
                codes = tag_codes_of(sub.sub_string)
            else:
                if not self.config.enable_property_filter:
                    return self._property_filter_disabled(req, sub.expression_type)
                data = self.consumer_filter_manager.get(h.topic, h.consumer_group)
                if data is None:
                    return req.response(ResponseCode.FILTER_DATA_NOT_EXIST,
                                        "The broker's consumer filter data is not exist!Your expression may be wrong!")
                if data.client_version < h.sub_version:
                    return req.response(ResponseCode.FILTER_DATA_NOT_LATEST,
                                        "the consumer's consumer filter data not latest")
                expr = data.compiled
        record_filter: RecordFilter | None = None
        if expr is not None:
            record_filter = ExpressionMessageFilter(expr)
        elif self.config.enable_property_filter and h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            # A retried message meets again the filter of the topic it came from.
            filters = self.consumer_filter_manager.of_group(h.consumer_group)
            if filters:
                record_filter = ExpressionForRetryMessageFilter({t: d.compiled for t, d in filters.items()})

        reset = self.store.consumer_offsets.take_reset_offset(h.consumer_group, h.topic, h.queue_id)
        if reset is not None:  # an admin moved the group: the consumer continues from there
            return req.response(ResponseCode.PULL_OFFSET_MOVED, "OFFSET_RESET", {
                "suggestWhichBrokerId": "0", "nextBeginOffset": str(reset),
                "minOffset": str(self.store.get_min_offset_in_queue(h.topic, h.queue_id)),
                "maxOffset": str(self.store.get_max_offset_in_queue(h.topic, h.queue_id))})
        t0 = perf_counter()
        r = self.store.get_messages(h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, codes,
                                 record_filter)
        self.stats.record_get(r.message_count if r.buffers else 0, perf_counter() - t0)
        status = r.status
        if status in (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE):
            code = ResponseCode.PULL_NOT_FOUND if h.queue_offset == 0 else ResponseCode.PULL_OFFSET_MOVED
        else:
            code = _STATUS_CODE[status]
        # (a slave keeps commits too: with the master gone, consumers commit there; while the master is up its
        # offsets overwrite them, SlaveSynchronize)
        if allow_suspend and h.sys_flag & FLAG_COMMIT_OFFSET and h.commit_offset >= 0:
            self.store.consumer_offsets.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and h.sys_flag & FLAG_SUSPEND:
            c = self.config
            timeout = h.suspend_timeout_millis if c.long_polling_enable else c.short_polling_time_mills
            return self._hold(conn, req, h, timeout)
        # Reads of messages no longer in memory are pointed at slave 1 (RocketMQ's slaveReadEnable with
        # whichBrokerWhenConsumeSlowly 1), so that they do not evict the pages the master's writers use.
        slow = (self.config.slave_read_enable and code == ResponseCode.SUCCESS
                and self.swapped_out(h.topic, h.queue_id, h.queue_offset))
        ext = {"suggestWhichBrokerId": "1" if slow else "0", "nextBeginOffset": str(r.next_begin_offset),
               "minOffset": str(r.min_offset), "maxOffset": str(r.max_offset)}
        resp = req.response(code, None if code == ResponseCode.SUCCESS else status.name, ext)
        if r.buffers:
            resp.body_parts = r.buffers
            if not conn.closed:  # (a held pull answered after its consumer left: nothing reaches anyone)
                self.stats.record_group_get(h.topic, h.consumer_group, r.message_count, r.buffer_total_size)
                self.store.consumer_offsets.commit_pull_offset(h.consumer_group, h.topic, h.queue_id,
                                                               r.next_begin_offset)
        return resp

    @staticmethod
    def _property_filter_disabled(req: RemotingCommand, expression_type: str) -> RemotingCommand:
        return req.response(ResponseCode.SYSTEM_ERROR, property_filter_disabled(expression_type))

    def _hold(self, conn: Connection, req: RemotingCommand, h: PullMessageRequestHeader,
              timeout_ms: int) -> RemotingCommand | DeferredResponse:
        """Long polling: answer once a message arrives in the queue or the suspend timeout passes."""
        store = self.store

        def answer() -> RemotingCommand:
            result = self._process(conn, req, h, allow_suspend=False)
            assert isinstance(result, RemotingCommand)
            return result

        deferred = DeferredResponse()
        try:
            held = self.hold_service.hold(
                h.topic, h.queue_id, h.queue_offset, max(timeout_ms, 0) / 1000,
                lambda _arrived: deferred.resolve(answer),
                lambda: store.get_max_offset_in_queue(h.topic, h.queue_id) > h.queue_offset)
        except TooManyHeldPulls as exc:
            return req.response(ResponseCode.SYSTEM_BUSY, f"too many pulls held: {exc}")
        deferred.on_cancel = held.drop
        return deferred
