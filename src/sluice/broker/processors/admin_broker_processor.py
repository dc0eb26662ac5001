"""Topic admin, queue offsets, queue locks and stats (RocketMQ's AdminBrokerProcessor)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice.broker.processors.client_manage_processor import parse_json_body
from sluice.broker.subscription_group_manager import SubscriptionGroupConfig
from sluice.broker.topic_config_manager import SYSTEM_TOPICS
from sluice.common import fastjson
from sluice.common.attributes import (
    GROUP_ATTRIBUTES,
    MAX_MODIFICATION,
    MESSAGE_TYPE,
    TOPIC_ATTRIBUTES,
    AttributeRefused,
    alter,
    parse_modification,
    topic_attributes_unsupported,
)
from sluice.common.errors import InvalidNameError
from sluice.common.fastjson import ObjectKey
from sluice.common.message import decode_message_id
from sluice.common.naming import reply_topic, validate_group, validate_topic
from sluice.common.structs import MessageQueue, TopicConfig, TopicFilterType
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import BadRequestError, RemotingError
from sluice.remoting.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
)

if TYPE_CHECKING:
    from sluice.broker.consumer_manager import ConsumerManager
    from sluice.broker.producer_manager import ProducerManager
    from sluice.broker.rebalance_lock_manager import RebalanceLockManager
    from sluice.broker.schedule_message_service import ScheduleMessageService
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager
    from sluice.broker.timer_message_service import TimerMessageService
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

CALL_CONSUMER_TIMEOUT = 5.0  # s a relayed request waits for the client (RocketMQ: the admin's timeout, 5 s)


def _json_bool(data: dict[str, Any], name: str, default: bool) -> bool:
    """A JSON boolean field (fastjson also writes "true" / "false" strings)."""
    v = data.get(name, default)
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    if not isinstance(v, bool):
        raise ValueError(f"{name} must be true or false, not {v!r:.40}")
    return v


def _json_int(data: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    """A JSON integer field within ``low .. high`` (a decimal string too, as fastjson reads it)."""
    v = data.get(name, default)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise ValueError(f"{name} must be an integer within {low} .. {high}, not {v!r:.40}")
    return v


def json_body(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def queue_key(broker_name: str, topic: str, queue_id: int) -> ObjectKey:
    """A MessageQueue as the key of a map in a body (fastjson writes it as an object; Java reads nothing else)."""
    return ObjectKey({"brokerName": broker_name, "queueId": queue_id, "topic": topic})


def _mq_set(data: dict, key: str) -> list[MessageQueue]:
    try:
        return [MessageQueue.from_json(m) for m in data.get(key) or []]
    except (KeyError, TypeError, ValueError) as exc:
        raise BadRequestError(f"{key} is malformed: {exc}") from exc


class AdminBrokerProcessor:
    def __init__(self, config: BrokerConfig, broker_addr: str, store: MessageStore, consumer_manager: ConsumerManager,
                 lock_manager: RebalanceLockManager, topic_config_manager: TopicConfigManager,
                 subscription_group_manager: SubscriptionGroupManager, trigger_register: Callable[[], None],
                 topic_config_wrapper: Callable[[], dict[str, Any]],
                 schedule_service: ScheduleMessageService | None, timer_service: TimerMessageService | None,
                 producer_manager: ProducerManager) -> None:
        self.config = config
        self.broker_addr = broker_addr
        self.store = store
        self.consumer_manager = consumer_manager
        self.lock_manager = lock_manager
        self.topic_config_manager = topic_config_manager
        self.subscription_group_manager = subscription_group_manager
        self.trigger_register = trigger_register
        self.topic_config_wrapper = topic_config_wrapper
        # (a master's; None on a slave)
        self.schedule_service = schedule_service
        self.timer_service = timer_service
        self.producer_manager = producer_manager

    # == topics ======================================================================================
    async def update_and_create_topic(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.decode(req.ext_fields)
        topic = h.topic
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            return req.response(ResponseCode.INVALID_PARAMETER, str(exc))
        if topic in SYSTEM_TOPICS or topic in (self.config.broker_cluster_name, self.config.broker_name,
                                               reply_topic(self.config.broker_cluster_name)):
            return req.response(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
        read, write = h.read_queue_nums, h.write_queue_nums
        if not (0 < read <= 1024 and 0 < write <= 1024):
            return req.response(ResponseCode.SYSTEM_ERROR, "queue numbers must be between 1 and 1024")
        tft = h.topic_filter_type
        try:
            filter_type = TopicFilterType(tft)
        except ValueError:
            return req.response(ResponseCode.SYSTEM_ERROR, f"topicFilterType {tft!r} is not SINGLE_TAG or MULTI_TAG")
        try:
            modification = parse_modification(h.attributes)
            if not self.config.enable_mixed_message_type and modification.get("+" + MESSAGE_TYPE.name) == "MIXED":
                return req.response(ResponseCode.INVALID_PARAMETER, "MIXED message type is not supported.")
            existing = self.topic_config_manager.get(topic)
            attributes = alter(existing is None, TOPIC_ATTRIBUTES, existing.attributes if existing else {},
                               modification)
            unsupported = topic_attributes_unsupported(modification)
        except AttributeRefused as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if unsupported:
            return req.response(ResponseCode.SYSTEM_ERROR, unsupported)
        tc = TopicConfig(topic, read, write, h.perm, filter_type, h.topic_sys_flag, h.order, attributes)
        self.topic_config_manager.update(tc)
        self.trigger_register()
        try:  # answered once the topic table is on disk (written off the event loop)
            await asyncio.wrap_future(self.topic_config_manager.persist())
        except OSError as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, f"topic {topic} is created, but the topic table could not "
                                                           f"be saved ({exc}); it is saved once the disk allows")
        return req.response(ResponseCode.SUCCESS)

    async def delete_topic_in_broker(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        topic = DeleteTopicRequestHeader.decode(req.ext_fields).topic
        if topic in SYSTEM_TOPICS or topic == reply_topic(self.config.broker_cluster_name):
            return req.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        self.topic_config_manager.delete(topic)
        self.trigger_register()
        # On the store thread, after the sends read before this request (the files go too: off the loop).
        await self.store.on_store_thread(lambda: self.store.delete_topics([topic]))
        return req.response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=json_body(self.topic_config_wrapper()))

    def get_topic_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """One topic's config (Java's TopicConfigAndQueueMapping; Sluice has no static-topic queue mapping)."""
        topic = GetTopicConfigRequestHeader.decode(req.ext_fields).topic
        tc = self.topic_config_manager.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        return req.response(ResponseCode.SUCCESS, body=json_body({**tc.to_json(), "mappingDetail": None}))

    def get_topic_name_list(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        topics = sorted(self.topic_config_manager.table)
        return req.response(ResponseCode.SUCCESS, body=json_body({"brokerAddr": self.broker_addr,
                                                                  "topicList": topics}))

    def get_topic_stats_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Per queue: min / max offset and last store time (``sluice topic status``)."""
        topic = GetTopicStatsInfoRequestHeader.decode(req.ext_fields).topic
        tc = self.topic_config_manager.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table: dict[ObjectKey, dict[str, int]] = {}
        for qid in range(tc.write_queue_nums):
            max_off = self.store.get_max_offset_in_queue(topic, qid)
            last = self.store.get_message_store_timestamp(topic, qid, max_off - 1) if max_off > 0 else 0
            table[queue_key(self.config.broker_name, topic, qid)] = {
                "lastUpdateTimestamp": max(last, 0), "maxOffset": max_off,
                "minOffset": self.store.get_min_offset_in_queue(topic, qid)}
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps({"offsetTable": table, "topicPutTps": 0.0}))

    # == offsets =====================================================================================
    def get_max_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.decode(req.ext_fields)
        off = self.store.get_max_offset_in_queue(h.topic, h.queue_id)
        return req.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def get_min_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.decode(req.ext_fields)
        off = self.store.get_min_offset_in_queue(h.topic, h.queue_id)
        return req.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def search_offset_by_timestamp(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.decode(req.ext_fields)
        off = self.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return req.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def get_earliest_msg_storetime(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.decode(req.ext_fields)
        ts = self.store.get_earliest_message_time(h.topic, h.queue_id)
        return req.response(ResponseCode.SUCCESS, None, {"timestamp": str(ts)})

    # == orderly consumption locks ===================================================================
    def lock_batch_mq(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        data = parse_json_body(req, "lock")
        group, client_id = str(data.get("consumerGroup") or ""), str(data.get("clientId") or "")
        if not group or not client_id:
            raise BadRequestError("lock body needs consumerGroup and clientId")
        locked = self.lock_manager.try_lock_batch(group, _mq_set(data, "mqSet"), client_id)
        return req.response(ResponseCode.SUCCESS, body=json_body({"lockOKMQSet": [m.to_json() for m in locked]}))

    def unlock_batch_mq(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        data = parse_json_body(req, "unlock")
        self.lock_manager.unlock_batch(str(data.get("consumerGroup") or ""), _mq_set(data, "mqSet"),
                                              str(data.get("clientId") or ""))
        return req.response(ResponseCode.SUCCESS)

    # == groups and stats ============================================================================
    def update_and_create_subscriptiongroup(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """A group's config (RocketMQ's SubscriptionGroupConfig as JSON), created or replaced; a field of the wrong
        type or out of range is refused, naming it."""
        data = parse_json_body(req, "the subscription group")
        try:
            name = data.get("groupName")
            if not isinstance(name, str):
                raise ValueError("groupName must be a string")
            validate_group(name)
            g = SubscriptionGroupConfig(
                name, _json_bool(data, "consumeEnable", True), _json_bool(data, "consumeFromMinEnable", True),
                _json_bool(data, "consumeBroadcastEnable", True), _json_int(data, "retryQueueNums", 1, 0, 1024),
                _json_int(data, "retryMaxTimes", 16, 0, 1000), _json_int(data, "brokerId", 0, 0, 1024),
                _json_int(data, "whichBrokerWhenConsumeSlowly", 1, 0, 1024),
                _json_bool(data, "notifyConsumerIdsChangedEnable", True),
                _json_bool(data, "consumeMessageOrderly", False))
            modification = data.get("attributes") or {}
            if not isinstance(modification, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in modification.items()):
                raise ValueError("attributes must be an object of text values")
            if sum(len(k) + len(v) + 2 for k, v in modification.items()) > MAX_MODIFICATION:
                raise ValueError(f"attributes take more than {MAX_MODIFICATION} characters")
        except (InvalidNameError, ValueError) as exc:
            return req.response(ResponseCode.INVALID_PARAMETER, f"bad subscription group config: {exc}")
        existing = self.subscription_group_manager.table.get(g.group_name)
        try:
            g.attributes = alter(existing is None, GROUP_ATTRIBUTES, existing.attributes if existing else {},
                                 modification)
        except AttributeRefused as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, str(exc))
        self.subscription_group_manager.update(g)
        log.info("subscription group %s created or updated: %s", g.group_name, g.to_json())
        return req.response(ResponseCode.SUCCESS)

    def delete_subscriptiongroup(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """A group's config, and with ``cleanOffset`` its committed offsets; success whether it existed or not, as
        in RocketMQ."""
        h = DeleteSubscriptionGroupRequestHeader.decode(req.ext_fields)
        existed = self.subscription_group_manager.delete(h.group_name)
        if h.clean_offset:
            self.store.consumer_offsets.remove_group(h.group_name)
        log.info("subscription group %s deleted (%s, offsets %s) by %s", h.group_name,
                 "it existed" if existed else "there was none", "removed" if h.clean_offset else "kept",
                 conn.remote_addr)
        return req.response(ResponseCode.SUCCESS)

    def get_all_consumer_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Every group's committed offsets, as consumerOffset.json holds them (a slave copies them)."""
        table = self.store.consumer_offsets.offset_table_json()
        return req.response(ResponseCode.SUCCESS, body=json_body({"offsetTable": table}))

    def get_all_delay_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """The delay levels' delivery offsets, as delayOffset.json holds them (a slave copies them)."""
        s = self.schedule_service
        offsets = dict(s.offsets) if s is not None else {}
        return req.response(ResponseCode.SUCCESS,
                            body=json_body({"offsetTable": {str(k): v for k, v in sorted(offsets.items())}}))

    def get_timer_check_point(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """How far the timer service has taken the timer queue and delivered (a slave copies it: a slave made
        master does not deliver those timers again). JSON, not RocketMQ's binary TimerCheckpoint."""
        t = self.timer_service
        if t is None:
            return req.response(ResponseCode.SYSTEM_ERROR, "this broker runs no timer service (a slave)")
        enqueue_offset, _, dequeue_ms = t.checkpoint
        return req.response(ResponseCode.SUCCESS,
                            body=json_body({"enqueueOffset": enqueue_offset, "dequeueMs": dequeue_ms}))

    def get_all_subscriptiongroup_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        m = self.subscription_group_manager
        return req.response(ResponseCode.SUCCESS, body=json_body({
            "dataVersion": m.data_version.to_json(),
            "subscriptionGroupTable": {n: g.to_json() for n, g in sorted(m.table.items())}}))

    def query_topic_consume_by_who(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        topic = QueryTopicConsumeByWhoRequestHeader.decode(req.ext_fields).topic
        groups = set(self.consumer_manager.groups_of_topic(topic)) | self.store.consumer_offsets.groups_of_topic(topic)
        return req.response(ResponseCode.SUCCESS, body=json_body({"groupList": sorted(groups)}))

    def get_consume_stats(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Per queue of the group's topics: broker offset, consumer offset and last store time, in an
        ``offsetTable`` keyed by MessageQueue objects as fastjson writes it (not standard JSON: Java reads no other
        form)."""
        h = GetConsumeStatsRequestHeader.decode(req.ext_fields)
        group, only = h.consumer_group, h.topic
        offsets = self.store.consumer_offsets
        topics = {k.split("@", 1)[0] for k in offsets.offset_table if k.split("@", 1)[1] == group}
        g = self.consumer_manager.get(group)
        if g is not None:
            topics |= set(g.subscriptions)
        if only:
            topics &= {only}
        table: dict[ObjectKey, dict[str, int]] = {}
        for topic in sorted(topics):
            tc = self.topic_config_manager.get(topic)
            if tc is not None:
                table.update(self._offset_table(group, topic, tc.read_queue_nums, waits=True))
        if not table and g is None:
            return req.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"the consumer group [{group}] has no offsets and is not online")
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps({"consumeTps": 0.0, "offsetTable": table}))

    def _offset_table(self, group: str, topic: str, queues: int,
                      waits: bool = False) -> dict[ObjectKey, dict[str, int]]:
        """RocketMQ's OffsetWrapper of each queue: the broker's and the group's offsets, where its pulls got to
        (at least its committed offset, as RocketMQ 5 reports it), the last consumed message's store time; and,
        with ``waits`` (one group's stats, not the whole broker's), Sluice's ``queueingLatencyMs``: how long the
        oldest message not yet pulled and still kept has waited (0: none waits; fastjson readers skip a field they
        lack)."""
        offsets = self.store.consumer_offsets
        table: dict[ObjectKey, dict[str, int]] = {}
        now = int(time.time() * 1000)
        for qid in range(queues):
            broker_off = max(self.store.get_max_offset_in_queue(topic, qid), 0)
            consumer_off = max(offsets.query_offset(group, topic, qid), 0)  # none committed: 0, as in RocketMQ
            last = self.store.get_message_store_timestamp(topic, qid, consumer_off - 1) if consumer_off > 0 else 0
            pulled = max(consumer_off, offsets.query_pull_offset(group, topic, qid))
            row = {"brokerOffset": broker_off, "consumerOffset": consumer_off, "lastTimestamp": max(last, 0),
                   "pullOffset": pulled}
            if waits:
                oldest = max(pulled, self.store.get_min_offset_in_queue(topic, qid))  # (older ones expired)
                waiting = self.store.get_message_store_timestamp(topic, qid, oldest) if oldest < broker_off else 0
                row["queueingLatencyMs"] = max(now - waiting, 0) if waiting > 0 else 0
            table[queue_key(self.config.broker_name, topic, qid)] = row
        return table

    async def get_consumer_running_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Relayed to the client it names (RocketMQ's ``callConsumer``): its answer, ConsumerRunningInfo, is the
        answer (``mqadmin consumerStatus``, the dashboard's client view)."""
        h = GetConsumerRunningInfoRequestHeader.decode(req.ext_fields)
        ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, h.encode())
        return await self._call_consumer(req, h.consumer_group, h.client_id, ask)

    async def consume_message_directly(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """The stored message ``msgId`` handed to one client's listener (the dashboard's "resend to this consumer",
        ``mqadmin queryMsgById -g G -d CLIENT``); the client's ConsumeMessageDirectlyResult is the answer. Beyond
        RocketMQ, the message must be of the topic the request names (what authorization allowed), and with
        authorization on it must name one."""
        h = ConsumeMessageDirectlyResultRequestHeader.decode(req.ext_fields)
        try:
            _, offset = decode_message_id(h.msg_id)
        except ValueError as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, f"bad msgId {h.msg_id!r}: {exc}")
        msg = self.store.look_message_by_offset(offset, visible_only=True)
        record = self.store.select_one_message_by_offset(offset, visible_only=True) if msg is not None else None
        if msg is None or record is None or (h.topic is not None and msg.topic != h.topic):
            return req.response(ResponseCode.SYSTEM_ERROR, f"no message {h.msg_id} on this broker")
        if h.topic is None and self.config.authorization_enabled:
            return req.response(ResponseCode.NO_PERMISSION,
                                "CONSUME_MESSAGE_DIRECTLY must name its topic when authorization is on")
        ask = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, h.encode(), bytes(record))
        return await self._call_consumer(req, h.consumer_group, h.client_id, ask)

    async def _call_consumer(self, req: RemotingCommand, group: str, client_id: str,
                             ask: RemotingCommand) -> RemotingCommand:
        g = self.consumer_manager.get(group)
        ch = g.channels.get(client_id) if g is not None else None
        if ch is None or ch.conn.closed:
            return req.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{client_id}> not online")
        try:
            answer = await ch.conn.invoke(ask, CALL_CONSUMER_TIMEOUT)
        except (RemotingError, TimeoutError, OSError) as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {exc}")
        return req.response(answer.code, answer.remark, body=answer.body)

    def get_broker_consume_stats(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Every subscription group's progress on this broker's topics (RocketMQ's ConsumeStatsList): per group,
        one ConsumeStats per topic it has offsets on (its subscribed ones when it is online), ``isOrder``: ordered
        topics only; ``totalDiff`` the sum of what every group has left."""
        h = GetConsumeStatsInBrokerHeader.decode(req.ext_fields)
        offsets = self.store.consumer_offsets
        by_group: dict[str, set[str]] = {}
        for key in list(offsets.offset_table):
            topic, _, group = key.partition("@")
            by_group.setdefault(group, set()).add(topic)
        stats_list: list[dict[str, list[dict[str, Any]]]] = []
        total_diff = 0
        for group in sorted(self.subscription_group_manager.table):
            online = self.consumer_manager.get(group)
            stats = []
            for topic in sorted(by_group.get(group, ())):
                tc = self.topic_config_manager.get(topic)
                if tc is None or (h.is_order and not tc.order):
                    continue
                if online is not None and online.subscriptions and topic not in online.subscriptions:
                    continue
                table = self._offset_table(group, topic, tc.write_queue_nums)
                total_diff += sum(w["brokerOffset"] - w["consumerOffset"] for w in table.values())
                stats.append({"consumeTps": 0.0, "offsetTable": table})
            stats_list.append({group: stats})
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps({
            "brokerAddr": self.broker_addr, "consumeStatsList": stats_list, "totalDiff": total_diff,
            "totalInflightDiff": 0}))

    def invoke_broker_to_reset_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Move a group's offsets on a topic to a time (-1: the end) or, for one queue, to an offset; RocketMQ 5's
        server-side reset: the offsets are committed here, and each queue's next pull tells the consumer
        (PULL_OFFSET_MOVED to the new offset) while commits from before the reset are ignored."""
        h = ResetOffsetRequestHeader.decode(req.ext_fields)
        topic, group, queue_id, timestamp, offset = h.topic, h.group, h.queue_id, h.timestamp, h.offset
        if self.config.broker_id != 0:
            return req.response(ResponseCode.SYSTEM_ERROR, "Can not reset offset in slave broker")
        tc = self.topic_config_manager.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} does not exist")
        if group not in self.subscription_group_manager.table:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} does not exist")
        store = self.store

        def by_time(qid: int) -> int:
            if timestamp < 0:
                return store.get_max_offset_in_queue(topic, qid)
            return store.get_offset_in_queue_by_time(topic, qid, timestamp)

        targets: dict[int, int] = {}
        if queue_id >= 0:
            if offset >= 0:
                low = store.get_min_offset_in_queue(topic, queue_id)
                high = store.get_max_offset_in_queue(topic, queue_id)
                if offset < low or offset > high + 1:
                    return req.response(ResponseCode.SYSTEM_ERROR,
                                        f"Target offset {offset} not in consume queue range [{low}-{high}]")
                targets[queue_id] = offset
            else:
                targets[queue_id] = by_time(queue_id)
        else:
            targets = {qid: by_time(qid) for qid in range(tc.read_queue_nums)}
        for qid, target in targets.items():
            store.consumer_offsets.assign_reset_offset(group, topic, qid, target)
        log.info("offsets of group %s on topic %s reset by %s: %s", group, topic, conn.remote_addr, targets)
        table = {queue_key(self.config.broker_name, topic, qid): target for qid, target in targets.items()}
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps({"offsetTable": table}))

    def get_producer_connection_list(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        group = GetProducerConnectionListRequestHeader.decode(req.ext_fields).producer_group
        members = self.producer_manager.groups.get(group)
        if members is None:
            return req.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        return req.response(ResponseCode.SUCCESS, body=json_body({"connectionSet": [
            {"clientAddr": ch.conn.remote_addr, "clientId": ch.client_id, "language": ch.language,
             "version": ch.version} for ch in members.values()]}))

    def get_consumer_connection_list(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        group = GetConsumerConnectionListRequestHeader.decode(req.ext_fields).consumer_group
        g = self.consumer_manager.get(group)
        if g is None:
            return req.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        return req.response(ResponseCode.SUCCESS, body=json_body({
            "connectionSet": [{"clientAddr": ch.conn.remote_addr, "clientId": ch.client_id,
                               "language": ch.language, "version": ch.version} for ch in g.channels.values()],
            "consumeFromWhere": g.consume_from_where.name, "consumeType": g.consume_type.name,
            "messageModel": g.message_model.name,
            "subscriptionTable": {t: s.to_json() for t, s in g.subscriptions.items()}}))
