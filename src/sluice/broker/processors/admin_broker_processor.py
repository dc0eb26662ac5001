"""Topic admin, queue offsets, queue locks and stats (RocketMQ's AdminBrokerProcessor)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from sluice.broker.processors.client_manage_processor import parse_json_body
from sluice.broker.subscription_group_manager import SubscriptionGroupConfig
from sluice.broker.topic_config_manager import SYSTEM_TOPICS
from sluice.common import fastjson
from sluice.common.errors import InvalidNameError
from sluice.common.fastjson import ObjectKey
from sluice.common.naming import validate_group, validate_topic
from sluice.common.structs import MessageQueue, TopicConfig, TopicFilterType
from sluice.common.sysflag import PERM_READ, PERM_WRITE
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import BadRequestError

if TYPE_CHECKING:
    from sluice.broker.broker_controller import BrokerController

log = logging.getLogger(__name__)


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
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    # == topics ======================================================================================
    async def update_and_create_topic(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        b = self.broker
        topic = req.ext_str("topic")
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            return req.response(ResponseCode.INVALID_PARAMETER, str(exc))
        if topic in SYSTEM_TOPICS or topic in (b.config.broker_cluster_name, b.config.broker_name):
            return req.response(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
        read, write = req.ext_int("readQueueNums", 16), req.ext_int("writeQueueNums", 16)
        if not (0 < read <= 1024 and 0 < write <= 1024):
            return req.response(ResponseCode.SYSTEM_ERROR, "queue numbers must be between 1 and 1024")
        tft = req.ext_fields.get("topicFilterType") or "SINGLE_TAG"
        try:
            filter_type = TopicFilterType(tft)
        except ValueError:
            return req.response(ResponseCode.SYSTEM_ERROR, f"topicFilterType {tft!r} is not SINGLE_TAG or MULTI_TAG")
        tc = TopicConfig(topic, read, write, req.ext_int("perm", PERM_READ | PERM_WRITE), filter_type,
                         req.ext_int("topicSysFlag", 0), req.ext_bool("order"))
        b.topic_config_manager.update(tc)
        b.trigger_register()
        try:  # answered once the topic table is on disk (written off the event loop)
            await asyncio.wrap_future(b.topic_config_manager.persist())
        except OSError as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, f"topic {topic} is created, but the topic table could not "
                                                           f"be saved ({exc}); it is saved once the disk allows")
        return req.response(ResponseCode.SUCCESS)

    async def delete_topic_in_broker(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        b = self.broker
        topic = req.ext_str("topic")
        if topic in SYSTEM_TOPICS:
            return req.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        b.topic_config_manager.delete(topic)
        b.trigger_register()
        # On the store thread, after the sends read before this request (the files go too: off the loop).
        await b.store.on_store_thread(lambda: b.store.delete_topics([topic]))
        return req.response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=json_body(self.broker.topic_config_wrapper()))

    def get_topic_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """One topic's config (Java's TopicConfigAndQueueMapping; Sluice has no static-topic queue mapping)."""
        topic = req.ext_str("topic")
        tc = self.broker.topic_config_manager.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        return req.response(ResponseCode.SUCCESS, body=json_body({**tc.to_json(), "attributes": {},
                                                                  "mappingDetail": None}))

    def get_topic_name_list(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        topics = sorted(self.broker.topic_config_manager.table)
        return req.response(ResponseCode.SUCCESS, body=json_body({"brokerAddr": self.broker.broker_addr,
                                                                  "topicList": topics}))

    def get_topic_stats_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Per queue: min / max offset and last store time (``sluice topic status``)."""
        b = self.broker
        topic = req.ext_str("topic")
        tc = b.topic_config_manager.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table: dict[ObjectKey, dict[str, int]] = {}
        for qid in range(tc.write_queue_nums):
            max_off = b.store.get_max_offset_in_queue(topic, qid)
            last = b.store.get_message_store_timestamp(topic, qid, max_off - 1) if max_off > 0 else 0
            table[queue_key(b.config.broker_name, topic, qid)] = {
                "lastUpdateTimestamp": max(last, 0), "maxOffset": max_off,
                "minOffset": b.store.get_min_offset_in_queue(topic, qid)}
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps({"offsetTable": table, "topicPutTps": 0.0}))

    # == offsets =====================================================================================
    def get_max_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        off = self.broker.store.get_max_offset_in_queue(req.ext_str("topic"), req.ext_int("queueId"))
        return req.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def get_min_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        off = self.broker.store.get_min_offset_in_queue(req.ext_str("topic"), req.ext_int("queueId"))
        return req.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def search_offset_by_timestamp(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        off = self.broker.store.get_offset_in_queue_by_time(req.ext_str("topic"), req.ext_int("queueId"),
                                                            req.ext_int("timestamp"))
        return req.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def get_earliest_msg_storetime(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        ts = self.broker.store.get_earliest_message_time(req.ext_str("topic"), req.ext_int("queueId"))
        return req.response(ResponseCode.SUCCESS, None, {"timestamp": str(ts)})

    # == orderly consumption locks ===================================================================
    def lock_batch_mq(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        data = parse_json_body(req, "lock")
        group, client_id = str(data.get("consumerGroup") or ""), str(data.get("clientId") or "")
        if not group or not client_id:
            raise BadRequestError("lock body needs consumerGroup and clientId")
        locked = self.broker.lock_manager.try_lock_batch(group, _mq_set(data, "mqSet"), client_id)
        return req.response(ResponseCode.SUCCESS, body=json_body({"lockOKMQSet": [m.to_json() for m in locked]}))

    def unlock_batch_mq(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        data = parse_json_body(req, "unlock")
        self.broker.lock_manager.unlock_batch(str(data.get("consumerGroup") or ""), _mq_set(data, "mqSet"),
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
        except (InvalidNameError, ValueError) as exc:
            return req.response(ResponseCode.INVALID_PARAMETER, f"bad subscription group config: {exc}")
        self.broker.subscription_group_manager.update(g)
        log.info("subscription group %s created or updated: %s", g.group_name, g.to_json())
        return req.response(ResponseCode.SUCCESS)

    def get_all_consumer_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Every group's committed offsets, as consumerOffset.json holds them (a slave copies them)."""
        table = self.broker.store.consumer_offsets.offset_table_json()
        return req.response(ResponseCode.SUCCESS, body=json_body({"offsetTable": table}))

    def get_all_delay_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """The delay levels' delivery offsets, as delayOffset.json holds them (a slave copies them)."""
        s = self.broker.schedule_service
        offsets = dict(s.offsets) if s is not None else {}
        return req.response(ResponseCode.SUCCESS,
                            body=json_body({"offsetTable": {str(k): v for k, v in sorted(offsets.items())}}))

    def get_timer_check_point(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """How far the timer service has taken the timer queue and delivered (a slave copies it: a slave made
        master does not deliver those timers again). JSON, not RocketMQ's binary TimerCheckpoint."""
        t = self.broker.timer_service
        if t is None:
            return req.response(ResponseCode.SYSTEM_ERROR, "this broker runs no timer service (a slave)")
        enqueue_offset, _, dequeue_ms = t.checkpoint
        return req.response(ResponseCode.SUCCESS,
                            body=json_body({"enqueueOffset": enqueue_offset, "dequeueMs": dequeue_ms}))

    def get_all_subscriptiongroup_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        m = self.broker.subscription_group_manager
        return req.response(ResponseCode.SUCCESS, body=json_body({
            "dataVersion": m.data_version.to_json(),
            "subscriptionGroupTable": {n: g.to_json() for n, g in sorted(m.table.items())}}))

    def query_topic_consume_by_who(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        b = self.broker
        topic = req.ext_str("topic")
        groups = set(b.consumer_manager.groups_of_topic(topic)) | b.store.consumer_offsets.groups_of_topic(topic)
        return req.response(ResponseCode.SUCCESS, body=json_body({"groupList": sorted(groups)}))

    def get_consume_stats(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Per queue of the group's topics: broker offset, consumer offset and last store time, in an
        ``offsetTable`` keyed by MessageQueue objects as fastjson writes it (not standard JSON: Java reads no other
        form)."""
        b = self.broker
        group = req.ext_str("consumerGroup")
        only = req.ext_fields.get("topic") or ""
        offsets = b.store.consumer_offsets
        topics = {k.split("@", 1)[0] for k in offsets.offset_table if k.split("@", 1)[1] == group}
        g = b.consumer_manager.get(group)
        if g is not None:
            topics |= set(g.subscriptions)
        if only:
            topics &= {only}
        table: dict[ObjectKey, dict[str, int]] = {}
        for topic in sorted(topics):
            tc = b.topic_config_manager.get(topic)
            if tc is None:
                continue
            for qid in range(tc.read_queue_nums):
                broker_off = b.store.get_max_offset_in_queue(topic, qid)
                consumer_off = max(offsets.query_offset(group, topic, qid), 0)  # none committed: 0, as in RocketMQ
                last = b.store.get_message_store_timestamp(topic, qid, consumer_off - 1) if consumer_off > 0 else 0
                table[queue_key(b.config.broker_name, topic, qid)] = {
                    "brokerOffset": broker_off, "consumerOffset": consumer_off, "lastTimestamp": max(last, 0),
                    "pullOffset": consumer_off}
        if not table and g is None:
            return req.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"the consumer group [{group}] has no offsets and is not online")
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps({"consumeTps": 0.0, "offsetTable": table}))

    def invoke_broker_to_reset_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Move a group's offsets on a topic to a time (-1: the end) or, for one queue, to an offset; RocketMQ 5's
        server-side reset: the offsets are committed here, and each queue's next pull tells the consumer
        (PULL_OFFSET_MOVED to the new offset) while commits from before the reset are ignored."""
        b = self.broker
        topic, group = req.ext_str("topic"), req.ext_str("group")
        queue_id, timestamp = req.ext_int("queueId", -1), req.ext_int("timestamp", -1)
        offset = req.ext_int("offset", -1) if req.ext_fields.get("offset") not in (None, "", "null") else -1
        if b.config.broker_id != 0:
            return req.response(ResponseCode.SYSTEM_ERROR, "Can not reset offset in slave broker")
        tc = b.topic_config_manager.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} does not exist")
        if group not in b.subscription_group_manager.table:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} does not exist")
        store = b.store

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
        table = {queue_key(b.config.broker_name, topic, qid): target for qid, target in targets.items()}
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps({"offsetTable": table}))

    def get_consumer_connection_list(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        b = self.broker
        group = req.ext_str("consumerGroup")
        g = b.consumer_manager.get(group)
        if g is None:
            return req.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        return req.response(ResponseCode.SUCCESS, body=json_body({
            "connectionSet": [{"clientAddr": ch.conn.remote_addr, "clientId": ch.client_id,
                               "language": ch.language, "version": ch.version} for ch in g.channels.values()],
            "consumeFromWhere": g.consume_from_where.name, "consumeType": g.consume_type.name,
            "messageModel": g.message_model.name,
            "subscriptionTable": {t: s.to_json() for t, s in g.subscriptions.items()}}))

    def get_broker_runtime_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        b = self.broker
        store = b.store
        table = {"brokerVersionDesc": "sluice", "msgPutTotalTodayNow": str(b.stats.put_msgs),
                 "msgGetTotalTodayNow": str(b.stats.get_msgs), "commitLogMinOffset": str(store.get_min_phy_offset()),
                 "commitLogMaxOffset": str(store.get_max_phy_offset()),
                 "dispatchBehindBytes": str(store.get_max_phy_offset() - store.dispatched_offset),
                 "bootTimestamp": str(b.boot_timestamp), "runtime": f"{int(time.time() * 1000) - b.boot_timestamp} ms",
                 "flushDiskType": store.config.flush_disk_type.value, "heldPulls": str(b.hold_service.count),
                 "eventLoopLagMaxMs": f"{b.loop_lag.max_lag * 1000:.1f}",
                 "eventLoopBusyMaxMs": f"{b.loop_lag.max_busy * 1000:.1f}",
                 "gcPauseMaxMs": f"{b.loop_lag.max_gc_pause * 1000:.1f}", "brokerRole": b.role.value,
                 **store.back_pressure_info()}
        if b.fenced:
            table["fenced"] = b.write_guard() if b.write_guard is not None else "true"
        if b.ha_service is not None:  # replication lag of each connected slave, in bytes ("id:lag,...")
            table["haSlaveLagBytes"] = ",".join(f"{i}:{lag}" for i, lag in sorted(b.ha_service.lag().items()))
            table["haInSyncSlaves"] = ",".join(str(s.broker_id) for s in b.ha_service.in_sync_slaves())
        if b.ha_client is not None:
            table["haMasterAddress"] = b.ha_client.connected_to
        return req.response(ResponseCode.SUCCESS, body=json_body({"table": table}))
