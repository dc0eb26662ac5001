"""The client's RPCs to name servers and brokers (RocketMQ MQClientAPIImpl): requests built, responses read."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from sluice.client.message import PullStatus
from sluice.common import fastjson
from sluice.common.backoff import RNG
from sluice.common.compression import MAX_INFLATED_BODY_SIZE, inflate
from sluice.common.errors import BrokerResponseError, ClientError, MessageFormatError, NameServerUnavailableError
from sluice.common.extra_info import (
    PROPERTY_FIRST_POP_TIME,
    PROPERTY_POP_CK,
    OffsetInfo,
    Receipt,
    real_topic,
    retry_flag,
)
from sluice.common.message import MessageExt
from sluice.common.message_codec import decode_records
from sluice.common.properties import PROPERTY_INNER_MULTI_DISPATCH, PROPERTY_INNER_MULTI_QUEUE_OFFSET
from sluice.common.structs import HeartbeatData, MessageQueue, SubscriptionData, TopicRouteData
from sluice.common.sysflag import COMPRESSED_FLAG
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import RemotingError
from sluice.remoting.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
    PopLiteMessageRequestHeader,
    PopMessageRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    RequestHeader,
    SearchOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)

log = logging.getLogger(__name__)

_PULL_FLAG_SUBSCRIPTION = 0x4  # the subscription travels with the pull (no registered consumer needed)


@dataclass(slots=True)
class RawPull:
    """A pull's outcome with its records as the broker sent them (``sluice.common.message_codec`` layout)."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes | memoryview


def _json(resp: RemotingCommand) -> Any:
    """A response body as RocketMQ's Java side writes it (fastjson: bare number keys, object keys)."""
    try:
        return fastjson.loads(bytes(resp.body) or b"null")
    except ValueError as exc:
        raise ClientError(f"response to request code {resp.code} has a malformed JSON body: {exc}") from exc


def _queue_entries(table: Any) -> list[dict[str, Any]]:
    """A map keyed by MessageQueue objects (fastjson's form, what RocketMQ and Sluice send) as a list of entries,
    each the queue's fields and the value's; a list (what Sluice sent before) as it is."""
    if isinstance(table, dict):
        return [{**dict(k), **(v if isinstance(v, dict) else {"offset": v})} for k, v in table.items()
                if isinstance(k, fastjson.ObjectKey)]
    return [e for e in table or [] if isinstance(e, dict)]


def _body(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class MQClientAPI:
    """Typed calls over one ``RemotingClient``. Errors: ``BrokerResponseError`` (an error code came back) or
    ``RemotingError`` (no connection, timeout)."""

    def __init__(self, remoting: RemotingClient, namesrv_addrs: list[str]) -> None:
        self.remoting = remoting
        self.namesrv_addrs = list(namesrv_addrs)
        self._ns_index = RNG.randrange(len(namesrv_addrs)) if namesrv_addrs else 0

    async def invoke(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
                     timeout_ms: int = 3_000) -> RemotingCommand:
        return await self.remoting.invoke(addr, RemotingCommand.request(code, ext or {}, body), timeout_ms)

    async def invoke_ok(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
                        timeout_ms: int = 3_000) -> RemotingCommand:
        resp = await self.invoke(addr, code, ext, body, timeout_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark, addr)
        return resp

    # == name server ==================================================================================
    async def invoke_namesrv(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
                             timeout_ms: int = 3_000) -> RemotingCommand:
        """Ask the current name server; on a network failure move on to the next one."""
        if not self.namesrv_addrs:
            raise ClientError("no name server address configured")
        last: Exception | None = None
        for _ in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[self._ns_index % len(self.namesrv_addrs)]
            try:
                return await self.invoke(addr, code, ext, body, timeout_ms)
            except RemotingError as exc:
                last = exc
                self._ns_index += 1
        raise NameServerUnavailableError(f"no name server answered: {last}")

    async def get_topic_route(self, topic: str, timeout_ms: int = 3_000) -> TopicRouteData | None:
        """The topic's route; None when the name server knows no such topic."""
        resp = await self.invoke_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout_ms=timeout_ms)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST or (resp.code == ResponseCode.SUCCESS and not resp.body):
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark)
        try:
            return TopicRouteData.from_json(_json(resp))
        except (KeyError, TypeError, ValueError) as exc:
            raise ClientError(f"the name server's route of topic {topic} is malformed: {exc!r}") from exc

    async def get_cluster_info(self) -> dict[str, Any]:
        resp = await self.invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark)
        info: dict[str, Any] = _json(resp)
        return info

    async def get_all_topic_list(self) -> list[str]:
        resp = await self.invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark)
        return sorted((_json(resp) or {}).get("topicList") or [])

    # == heartbeats ===================================================================================
    async def send_heartbeat(self, addr: str, hb: HeartbeatData, timeout_ms: int = 3_000) -> None:
        await self.invoke_ok(addr, RequestCode.HEART_BEAT, body=_body(hb.to_json()), timeout_ms=timeout_ms)

    async def unregister_client(self, addr: str, client_id: str, producer_group: str, consumer_group: str) -> None:
        await self.invoke_ok(addr, RequestCode.UNREGISTER_CLIENT,
                             UnregisterClientRequestHeader(client_id, producer_group, consumer_group).encode())

    # == consumers ====================================================================================
    async def check_client_config(self, addr: str, group: str, client_id: str, sub: SubscriptionData,
                                  timeout_ms: int = 3_000) -> None:
        """CHECK_CLIENT_CONFIG: whether the broker can apply ``sub``'s filter; ``BrokerResponseError`` if not."""
        body = _body({"clientId": client_id, "group": group, "subscriptionData": sub.to_json()})
        await self.invoke_ok(addr, RequestCode.CHECK_CLIENT_CONFIG, body=body, timeout_ms=timeout_ms)

    async def get_consumer_id_list(self, addr: str, group: str, timeout_ms: int = 3_000) -> list[str]:
        resp = await self.invoke(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                 GetConsumerListByGroupRequestHeader(group).encode(),
                                 timeout_ms=timeout_ms)
        if resp.code != ResponseCode.SUCCESS:
            return []
        return [str(c) for c in (_json(resp) or {}).get("consumerIdList") or []]

    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue, timeout_ms: int = 5_000,
                                    zero_if_not_found: bool = True) -> int:
        """The committed offset, or -1 when the broker has none (QUERY_NOT_FOUND).

        ``zero_if_not_found=False`` (RocketMQ 5's ``setZeroIfNotFound``) asks the broker not to answer 0 for a
        group that never committed on a queue that still starts at 0.
        """
        ext = QueryConsumerOffsetRequestHeader(group, mq.topic, mq.queue_id,
                                               None if zero_if_not_found else False).encode()
        resp = await self.invoke(addr, RequestCode.QUERY_CONSUMER_OFFSET, ext, timeout_ms=timeout_ms)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark, addr)
        return int(resp.ext_fields.get("offset", "-1"))

    async def update_consumer_offset(self, addr: str, group: str, mq: MessageQueue, offset: int,
                                     oneway: bool = False, timeout_ms: int = 5_000) -> None:
        ext = UpdateConsumerOffsetRequestHeader(group, mq.topic, mq.queue_id, offset).encode()
        if oneway:
            await self.remoting.invoke_oneway(addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext))
        else:
            await self.invoke_ok(addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext, timeout_ms=timeout_ms)

    async def pull_message(self, addr: str, group: str, mq: MessageQueue, offset: int, max_nums: int,
                           timeout_ms: int = 10_000, expression: str = "*") -> RawPull:
        """One PULL_MESSAGE, not held by the broker (no long polling) and committing nothing: the stored
        records come back undecoded, for callers that decode in bulk (the Spark source)."""
        ext = PullMessageRequestHeader(group, mq.topic, mq.queue_id, offset, max_nums, _PULL_FLAG_SUBSCRIPTION, -1, 0,
                                       expression, 0, "TAG").encode()
        resp = await self.invoke(addr, RequestCode.PULL_MESSAGE, ext, timeout_ms=timeout_ms)
        status = PullStatus.from_response_code(resp.code)
        if status is None:
            raise BrokerResponseError(resp.code, resp.remark, addr)
        e = resp.ext_fields
        return RawPull(status, int(e.get("nextBeginOffset", offset)), int(e.get("minOffset", 0)),
                       int(e.get("maxOffset", 0)), resp.body if status is PullStatus.FOUND else b"")

    async def _queue_offset(self, code: int, addr: str, header: RequestHeader, field: str = "offset") -> int:
        resp = await self.invoke_ok(addr, code, header.encode())
        return int(resp.ext_fields.get(field, "-1"))

    async def get_broker_runtime_info(self, addr: str, timeout_ms: int = 3_000) -> dict[str, str]:
        resp = await self.invoke_ok(addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout_ms=timeout_ms)
        table = (_json(resp) or {}).get("table")
        if not isinstance(table, dict):
            raise ClientError(f"broker {addr} answered GET_BROKER_RUNTIME_INFO without a table")
        return {str(k): str(v) for k, v in table.items()}

    async def get_max_offset(self, addr: str, mq: MessageQueue) -> int:
        return await self._queue_offset(RequestCode.GET_MAX_OFFSET, addr,
                                        GetMaxOffsetRequestHeader(mq.topic, mq.queue_id))

    async def get_min_offset(self, addr: str, mq: MessageQueue) -> int:
        return await self._queue_offset(RequestCode.GET_MIN_OFFSET, addr,
                                        GetMinOffsetRequestHeader(mq.topic, mq.queue_id))

    async def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self._queue_offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, addr,
                                        SearchOffsetRequestHeader(mq.topic, mq.queue_id, timestamp_ms))

    async def get_earliest_msg_storetime(self, addr: str, mq: MessageQueue) -> int:
        return await self._queue_offset(RequestCode.GET_EARLIEST_MSG_STORETIME, addr,
                                        GetEarliestMsgStoretimeRequestHeader(mq.topic, mq.queue_id), "timestamp")

    async def consumer_send_message_back(self, addr: str, group: str, commit_log_offset: int, delay_level: int,
                                         origin_msg_id: str, origin_topic: str, max_reconsume_times: int,
                                         timeout_ms: int = 3_000) -> None:
        header = ConsumerSendMsgBackRequestHeader(commit_log_offset, group, delay_level, origin_msg_id, origin_topic,
                                                  False, max_reconsume_times)
        await self.invoke_ok(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header.encode(), timeout_ms=timeout_ms)

    async def lock_batch_mq(self, addr: str, group: str, client_id: str, mqs: list[MessageQueue],
                            timeout_ms: int = 1_000) -> list[MessageQueue]:
        body = _body({"consumerGroup": group, "clientId": client_id, "mqSet": [m.to_json() for m in mqs]})
        resp = await self.invoke_ok(addr, RequestCode.LOCK_BATCH_MQ, body=body, timeout_ms=timeout_ms)
        return [MessageQueue.from_json(m) for m in (_json(resp) or {}).get("lockOKMQSet") or []]

    async def unlock_batch_mq(self, addr: str, group: str, client_id: str, mqs: list[MessageQueue],
                              timeout_ms: int = 1_000) -> None:
        body = _body({"consumerGroup": group, "clientId": client_id, "mqSet": [m.to_json() for m in mqs]})
        await self.invoke_ok(addr, RequestCode.UNLOCK_BATCH_MQ, body=body, timeout_ms=timeout_ms)

    # == admin and queries ============================================================================
    async def create_topic(self, addr: str, topic: str, read_queues: int, write_queues: int, perm: int,
                           order: bool = False, attributes: str | None = None) -> None:
        """UPDATE_AND_CREATE_TOPIC; ``attributes`` as ``+key=value,-key`` (sluice.common.attributes)."""
        header = CreateTopicRequestHeader(topic, "TBW102", read_queues, write_queues, perm, "SINGLE_TAG", 0, order,
                                          attributes)
        await self.invoke_ok(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header.encode())

    async def get_topic_config(self, addr: str, topic: str, timeout_ms: int = 3_000) -> dict[str, Any] | None:
        """GET_TOPIC_CONFIG: the broker's config of ``topic`` (RocketMQ's TopicConfig JSON), None when it has none."""
        resp = await self.invoke(addr, RequestCode.GET_TOPIC_CONFIG, GetTopicConfigRequestHeader(topic).encode(),
                                 timeout_ms=timeout_ms)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark, addr)
        out = _json(resp)
        return out if isinstance(out, dict) else None

    async def delete_topic_in_broker(self, addr: str, topic: str) -> None:
        await self.invoke_ok(addr, RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic).encode())

    async def delete_topic_in_namesrv(self, topic: str) -> None:
        for addr in self.namesrv_addrs:
            await self.invoke_ok(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic})

    async def get_all_topic_config(self, addr: str) -> dict[str, Any]:
        return _json(await self.invoke_ok(addr, RequestCode.GET_ALL_TOPIC_CONFIG)) or {}

    async def get_topic_stats(self, addr: str, topic: str) -> list[dict[str, Any]]:
        """One entry per queue: brokerName, queueId, topic, minOffset, maxOffset, lastUpdateTimestamp."""
        resp = await self.invoke_ok(addr, RequestCode.GET_TOPIC_STATS_INFO,
                                    GetTopicStatsInfoRequestHeader(topic).encode())
        return _queue_entries((_json(resp) or {}).get("offsetTable"))

    async def get_consume_stats(self, addr: str, group: str, topic: str = "") -> list[dict[str, Any]]:
        header = GetConsumeStatsRequestHeader(group, topic)
        resp = await self.invoke(addr, RequestCode.GET_CONSUME_STATS, header.encode())
        if resp.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark, addr)
        return _queue_entries((_json(resp) or {}).get("offsetTable"))

    async def get_all_subscription_groups(self, addr: str) -> dict[str, Any]:
        resp = await self.invoke_ok(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        return (_json(resp) or {}).get("subscriptionGroupTable") or {}

    async def update_subscription_group(self, addr: str, config: dict[str, Any]) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ``config`` as RocketMQ's SubscriptionGroupConfig JSON."""
        await self.invoke_ok(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode())

    async def get_consumer_connections(self, addr: str, group: str) -> dict[str, Any] | None:
        resp = await self.invoke(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                 GetConsumerConnectionListRequestHeader(group).encode())
        return _json(resp) if resp.code == ResponseCode.SUCCESS else None

    async def query_message(self, addr: str, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int,
                            unique_key: bool = False) -> list[MessageExt]:
        ext = QueryMessageRequestHeader(topic, key, max_num, begin_ms, end_ms, unique_key).encode()
        resp = await self.invoke(addr, RequestCode.QUERY_MESSAGE, ext, timeout_ms=5_000)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark, addr)
        return decode_records(resp.body)

    async def view_message(self, addr: str, commit_log_offset: int) -> list[MessageExt]:
        resp = await self.invoke_ok(addr, RequestCode.VIEW_MESSAGE_BY_ID,
                                    ViewMessageRequestHeader(commit_log_offset).encode())
        return decode_records(resp.body)

    # == admin: name server ===========================================================================
    async def get_topics_by_cluster(self, cluster: str) -> list[str]:
        resp = await self.invoke_namesrv(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark)
        return sorted((_json(resp) or {}).get("topicList") or [])

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG on every name server (as RocketMQ's admin does)."""
        for addr in self.namesrv_addrs:
            await self.invoke_ok(addr, RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key,
                                                                   "value": value})

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        for addr in self.namesrv_addrs:
            await self.invoke_ok(addr, RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})

    # == POP =========================================================================================
    async def pop_message(self, addr: str, broker_name: str, group: str, topic: str, expression_type: str,
                          expression: str, max_nums: int, invisible_ms: int, poll_ms: int, init_mode: int = 1,
                          orderly: bool = False, attempt_id: str = "", queue_id: int = -1,
                          timeout_ms: int | None = None) -> list[MessageExt]:
        """One POP_MESSAGE (queue id -1: the whole topic on that broker); the messages popped, each with its
        receipt in ``POP_CK``, its topic the one asked for, its reconsume times, its body inflated. [] when the
        poll time passed with nothing."""
        ext = PopMessageRequestHeader(group, topic, queue_id, max_nums, invisible_ms, poll_ms, int(time.time() * 1000),
                                      init_mode, expression_type, expression, orderly, attempt_id,
                                      broker_name).encode()
        resp = await self._pop(addr, RequestCode.POP_MESSAGE, ext, poll_ms, timeout_ms)
        if resp is None:
            return []
        e = resp.ext_fields
        try:
            pop_time, invisible = int(e["popTime"]), int(e["invisibleTime"])
            revive_qid = int(e["reviveQid"])
            info = OffsetInfo.parse(e.get("startOffsetInfo") or "", e.get("msgOffsetInfo") or "")
            order_counts = _order_counts(e.get("orderCountInfo") or "")
        except (KeyError, ValueError) as exc:
            raise ClientError(f"broker {addr} answered a pop with a malformed header: {exc}") from None
        msgs = decode_records(resp.body)
        # Each (topic, queue)'s receipts share all but their last field: built once, the offset appended.
        heads: dict[tuple[str, int], tuple[str, str]] = {}  # → (retry flag, receipt without its offset)
        first_pop = str(pop_time)
        for m in msgs:
            props = m.properties
            head = heads.get((m.topic, m.queue_id))
            if head is None:
                flag = retry_flag(m.topic)
                start = info.start.get((flag, m.queue_id))
                head = heads[(m.topic, m.queue_id)] = (flag, "" if start is None else str(
                    Receipt(start, pop_time, invisible, revive_qid, flag, broker_name, m.queue_id, 0))[:-1])
            ck = props.get(PROPERTY_POP_CK)
            if ck is None or not _broker_receipt(ck, broker_name, pop_time, m.queue_offset):
                if not head[1]:
                    raise ClientError(f"broker {addr} answered a pop without the offsets of {m.topic} "
                                      f"queue {m.queue_id}")
                props[PROPERTY_POP_CK] = head[1] + str(m.queue_offset)
            if PROPERTY_FIRST_POP_TIME not in props:
                props[PROPERTY_FIRST_POP_TIME] = first_pop
            if order_counts:
                times = order_counts.get(f"{head[0]}@qo{m.queue_id}%{m.queue_offset}")
                if times:
                    m.reconsume_times = times
            m.topic = topic
        if any(m.sys_flag & COMPRESSED_FLAG for m in msgs):
            await asyncio.to_thread(inflate_bodies, msgs)
        return msgs

    async def pop_lite_message(self, addr: str, broker_name: str, client_id: str, group: str, topic: str,
                               max_nums: int, invisible_ms: int, poll_ms: int, attempt_id: str = "",
                               timeout_ms: int | None = None) -> list[MessageExt]:
        """One POP_LITE_MESSAGE of ``client_id``'s lite topics of ``topic`` (RocketMQ 5.5): the messages, each
        with the receipt RocketMQ's client builds for it (its light-queue offset, queue 0) and its reconsume times;
        [] when the poll time passed with nothing."""
        ext = PopLiteMessageRequestHeader(client_id, group, topic, max_nums, invisible_ms, poll_ms,
                                          int(time.time() * 1000), attempt_id).encode()
        resp = await self._pop(addr, RequestCode.POP_LITE_MESSAGE, ext, poll_ms, timeout_ms)
        if resp is None:
            return []
        e = resp.ext_fields
        try:
            pop_time, invisible, revive_qid = int(e["popTime"]), int(e["invisibleTime"]), int(e["reviveQid"])
            counts = [int(c) for c in (e.get("orderCountInfo") or "").split(";") if c]
        except (KeyError, ValueError) as exc:
            raise ClientError(f"broker {addr} answered a lite pop with a malformed header: {exc}") from None
        msgs = decode_records(resp.body)
        kept = []
        for i, m in enumerate(msgs):
            queues = (m.properties.get(PROPERTY_INNER_MULTI_DISPATCH) or "").split(",")
            offsets = (m.properties.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET) or "").split(",")
            if len(queues) != 1 or len(offsets) != 1 or not offsets[0].isdigit():
                log.warning("broker %s handed out a lite message without its light-queue offset: skipped", addr)
                continue
            offset = int(offsets[0])
            m.properties[PROPERTY_POP_CK] = str(Receipt(0, pop_time, invisible, revive_qid, "0", broker_name, 0,
                                                        offset))
            m.properties.setdefault(PROPERTY_FIRST_POP_TIME, str(pop_time))
            m.reconsume_times = counts[i] if i < len(counts) else 0
            m.queue_id, m.queue_offset = 0, offset
            kept.append(m)
        if any(m.sys_flag & COMPRESSED_FLAG for m in kept):
            await asyncio.to_thread(inflate_bodies, kept)
        return kept

    async def _pop(self, addr: str, code: int, ext: dict[str, str], poll_ms: int,
                   timeout_ms: int | None) -> RemotingCommand | None:
        """A pop's answer; None when its poll time passed with nothing; ``BrokerResponseError`` for a refusal."""
        resp = await self.invoke(addr, code, ext, timeout_ms=poll_ms + 10_000 if timeout_ms is None else timeout_ms)
        if resp.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND):
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark, addr)
        return resp

    async def lite_subscription_ctl(self, addr: str, entries: list[dict[str, object]],
                                    timeout_ms: int = 3_000) -> None:
        """LITE_SUBSCRIPTION_CTL: lite subscription changes (RocketMQ's LiteSubscriptionDTO objects)."""
        await self.invoke_ok(addr, RequestCode.LITE_SUBSCRIPTION_CTL, {},
                             json.dumps({"subscriptionSet": entries}).encode(), timeout_ms=timeout_ms)

    async def ack_message(self, addr: str, group: str, topic: str, receipt: Receipt,
                          timeout_ms: int = 3_000, lite_topic: str | None = None) -> None:
        """ACK_MESSAGE of one receipt (``topic`` the one it was popped from; a lite topic's: its parent);
        ``BrokerResponseError`` NO_MESSAGE when the receipt expired."""
        ext = AckMessageRequestHeader(group, real_topic(receipt.retry, topic, group), receipt.queue_id,
                                      receipt.queue_offset, str(receipt), receipt.broker_name, lite_topic).encode()
        await self.invoke_ok(addr, RequestCode.ACK_MESSAGE, ext, timeout_ms=timeout_ms)

    async def change_invisible_time(self, addr: str, group: str, topic: str, receipt: Receipt,
                                    invisible_ms: int, timeout_ms: int = 3_000,
                                    lite_topic: str | None = None, suspend: bool = False) -> Receipt:
        """CHANGE_MESSAGE_INVISIBLETIME: the message stays invisible ``invisible_ms`` from now (``suspend``: its
        coming back is not counted as a delivery); its new receipt."""
        ext = ChangeInvisibleTimeRequestHeader(group, real_topic(receipt.retry, topic, group), receipt.queue_id,
                                               receipt.queue_offset, str(receipt), invisible_ms,
                                               receipt.broker_name, lite_topic, suspend).encode()
        resp = await self.invoke_ok(addr, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext, timeout_ms=timeout_ms)
        e = resp.ext_fields
        try:
            return Receipt(receipt.queue_offset, int(e["popTime"]), int(e["invisibleTime"]), int(e["reviveQid"]),
                           receipt.retry, receipt.broker_name, receipt.queue_id, receipt.queue_offset)
        except (KeyError, ValueError) as exc:
            raise ClientError(f"broker {addr} answered with a malformed header: {exc}") from None


def _broker_receipt(text: str | None, broker_name: str, pop_time: int, queue_offset: int) -> bool:
    """Whether a popped message's POP_CK is the one the broker made for this pop (a retried message's); a
    producer's own POP_CK property is never taken for a receipt."""
    if text is None:
        return False
    try:
        r = Receipt.parse(text)
    except ValueError:
        return False
    return r.broker_name == broker_name and r.pop_time == pop_time and r.queue_offset == queue_offset \
        and r.retry != "0"


def _order_counts(text: str) -> dict[str, int]:
    """An orderly pop's ``orderCountInfo``: "<retry>@qo<queue>%<offset>" → how often it was popped before."""
    out: dict[str, int] = {}
    for entry in filter(None, text.split(";")):
        parts = entry.split(" ")
        if len(parts) != 3 or not parts[2].isdigit():
            raise ValueError(f"malformed orderCountInfo entry {entry[:60]!r}")
        out[f"{parts[0]}@{parts[1]}"] = int(parts[2])
    return out


def inflate_bodies(msgs: list[MessageExt]) -> None:
    """Inflate the bodies their producers zlib-compressed (sys flag 0x1); a body that does not inflate is
    delivered as stored, with a warning."""
    for m in msgs:
        if m.sys_flag & COMPRESSED_FLAG:
            try:
                m.body = inflate(m.body, MAX_INFLATED_BODY_SIZE, f"the body of message {m.msg_id}")
                m.sys_flag &= ~COMPRESSED_FLAG
            except MessageFormatError as exc:
                log.warning("%s; delivered as stored", exc)
