"""The operator's client (RocketMQ's MQAdminExt): topics, consumer groups and message lookups.

``async with Admin("127.0.0.1:9876") as admin: ...``. Every call talks to the name server(s) and the
brokers directly; nothing is cached between calls, so each answer is current. ``sluice topic``,
``sluice group`` and ``sluice msg`` are thin shells over this class.

Errors: ``AdminError`` for answers an operator should read as they are ("no route for topic 'x'",
"cannot connect to name server ..."); ``BrokerResponseError`` when a broker refused a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sluice.auth.credentials import CredentialsLike, signing_hook
from sluice.client.auth_admin import AuthAdminAPI, acl_info, user_info
from sluice.client.message import Message, SendResult
from sluice.client.mq_client_api import MQClientAPI
from sluice.client.trace import TRACE_TOPIC, TraceStep, records_for, trace_steps
from sluice.common import fastjson
from sluice.common.attributes import TOPIC_MESSAGE_TYPES, AttributeRefused, parse_modification
from sluice.common.compression import MAX_INFLATED_BODY_SIZE, inflate
from sluice.common.config import RemotingConfig
from sluice.common.errors import BrokerResponseError, ClientError, MessageFormatError
from sluice.common.message import MessageExt, decode_message_id
from sluice.common.naming import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    validate_group,
    validate_topic,
)
from sluice.common.structs import ClusterInfo, MessageQueue, TopicRouteData
from sluice.common.sysflag import COMPRESSED_FLAG, PERM_READ, PERM_WRITE
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import ConnectionClosedError, RemotingConnectError, RemotingError
from sluice.remoting.headers import (
    DeleteSubscriptionGroupRequestHeader,
    GetProducerConnectionListRequestHeader,
    ResetOffsetRequestHeader,
)
from sluice.remoting.tls import TlsLike, client_tls

T = TypeVar("T")

DEFAULT_NAMESRV = "127.0.0.1:9876"
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
ADMIN_PRODUCER_GROUP = "SLUICE_ADMIN_PRODUCER"
LONG_MAX = (1 << 63) - 1
# A new group's config, as RocketMQ's SubscriptionGroupConfig defaults it.
GROUP_DEFAULTS: dict[str, Any] = {
    "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
    "consumeMessageOrderly": False, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
    "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True}
_PARALLEL_CALLS = 32


class AdminError(ClientError):
    """An admin call that cannot be done as asked; the message is meant for the operator as it is."""


# == results =======================================================================================
@dataclass(slots=True)
class QueueStatus:
    """One queue of a topic: the offsets it holds and when its last message was stored (ms, 0 = never)."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int

    @property
    def messages(self) -> int:
        return max(self.max_offset - self.min_offset, 0)

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "minOffset": self.min_offset,
                "maxOffset": self.max_offset, "lastUpdateTimestamp": self.last_update_timestamp}


@dataclass(slots=True)
class QueueProgress:
    """One queue a consumer group reads: the broker's end, the group's committed offset (0 when none, as brokers
    report it) and the lag."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int  # store time of the last consumed message (ms, 0 = none)
    pull_offset: int = -1  # where the group's pulls got to (RocketMQ 5's pullOffset; -1: not reported)
    queueing_latency_ms: int = 0  # how long the oldest message not yet pulled has waited (0: none, or not reported)

    @property
    def lag(self) -> int:
        # As RocketMQ's consumerProgress: no committed offset counts as 0.
        return max(self.broker_offset - max(self.consumer_offset, 0), 0)

    @property
    def inflight(self) -> int:
        """Pulled and not yet committed."""
        return max(self.pull_offset - max(self.consumer_offset, 0), 0) if self.pull_offset >= 0 else 0

    @property
    def ready(self) -> int:
        """Stored and not yet pulled."""
        return max(self.broker_offset - max(self.pull_offset, self.consumer_offset, 0), 0)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id,
                "brokerOffset": self.broker_offset, "consumerOffset": self.consumer_offset, "lag": self.lag,
                "lastTimestamp": self.last_timestamp, "queueingLatencyMs": self.queueing_latency_ms}


@dataclass(slots=True)
class GroupProgress:
    group: str
    queues: list[QueueProgress] = field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(q.lag for q in self.queues)

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "totalLag": self.total_lag, "queues": [q.to_json() for q in self.queues]}


@dataclass(slots=True)
class GroupInfo:
    """A consumer group as the brokers know it: where it has a config, and who is online now."""

    name: str
    brokers: list[str] = field(default_factory=list)
    clients: list[str] = field(default_factory=list)  # client ids online now
    consume_type: str = ""
    message_model: str = ""
    topics: list[str] = field(default_factory=list)  # subscribed by the online clients

    def to_json(self) -> dict[str, Any]:
        return {"group": self.name, "brokers": self.brokers, "clients": self.clients, "online": len(self.clients),
                "consumeType": self.consume_type, "messageModel": self.message_model, "topics": self.topics}


def parse_perm(text: str | int) -> int:
    """``RW`` / ``R`` / ``W`` (any case) or a number (6 = read + write, RocketMQ's PermName bits)."""
    if isinstance(text, int):
        value = text
    else:
        t = text.strip().upper()
        if t.isdigit():
            value = int(t)
        elif t and set(t) <= {"R", "W"}:
            value = (PERM_READ if "R" in t else 0) | (PERM_WRITE if "W" in t else 0)
        else:
            raise AdminError(f"permission {text!r} is not RW, R, W or a number such as 6")
    if not 0 <= value <= 15:
        raise AdminError(f"permission {value} is not between 0 and 15")
    return value


def uncompressed(msg: MessageExt) -> MessageExt:
    """``msg`` with its body inflated when the producer compressed it (sys flag 0x1); left as is if that fails."""
    if msg.sys_flag & COMPRESSED_FLAG:
        with contextlib.suppress(MessageFormatError):
            msg.body = inflate(msg.body, MAX_INFLATED_BODY_SIZE)
    return msg


class _AdminAPI(MQClientAPI):
    """MQClientAPI whose name server failures read as one plain sentence."""

    async def invoke_namesrv(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
                             timeout_ms: int = 3_000) -> RemotingCommand:
        last: RemotingError | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self.invoke(addr, code, ext, body, timeout_ms)
            except RemotingError as exc:
                last = exc
        where = ";".join(self.namesrv_addrs)
        if isinstance(last, ConnectionClosedError):
            raise AdminError(f"name server {where} closed the connection without an answer (is it a name server?)")
        if last is None or isinstance(last, RemotingConnectError):
            raise AdminError(f"cannot connect to name server {where}")
        raise AdminError(f"name server {where} did not answer: {last}")


class Admin:
    """Administer a Sluice (or RocketMQ) cluster through its name server(s): ``"host:port;host:port"``."""

    def __init__(self, namesrv: str = DEFAULT_NAMESRV, *, timeout_ms: int = 3_000,
                 credentials: CredentialsLike | None = None, tls: TlsLike | None = None) -> None:
        self.namesrv = namesrv
        self.credentials = credentials
        self.tls = tls
        self.namesrv_addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise AdminError("no name server address given (host:port)")
        self.remoting = RemotingClient(RemotingConfig(connect_timeout_millis=timeout_ms,
                                                      default_timeout_millis=timeout_ms),
                                       request_hook=signing_hook(credentials), tls=client_tls(tls))
        self.api = _AdminAPI(self.remoting, self.namesrv_addrs)
        self.auth = AuthAdminAPI(self.api, timeout_ms)

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.remoting.close()

    # == name server ================================================================================
    async def cluster_info(self) -> ClusterInfo:
        return ClusterInfo.from_json(await self.api.get_cluster_info() or {})

    async def brokers(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name → master address, of every broker (or of ``cluster``'s)."""
        info = await self.cluster_info()
        names: Iterable[str] = info.broker_addr_table
        if cluster is not None:
            if cluster not in info.cluster_addr_table:
                known = ", ".join(sorted(info.cluster_addr_table)) or "none"
                raise AdminError(f"no cluster {cluster!r} (clusters: {known})")
            names = info.cluster_addr_table[cluster]
        out = {}
        for name in sorted(names):
            b = info.broker_addr_table.get(name)
            if b is not None and b.master_addr:
                out[name] = b.master_addr
        return out

    async def broker_runtime_info(self, broker: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO of ``broker`` (a name, or a master's host:port): its counters and state as
        the broker reports them (``commitLogMaxOffset``, ``eventLoopLagMaxMs``, ...)."""
        addr = broker if ":" in broker else (await self.brokers()).get(broker)
        if addr is None:
            raise AdminError(f"no broker named {broker!r} has a master")
        try:
            return await self.api.get_broker_runtime_info(addr)
        except RemotingError as exc:
            raise AdminError(f"broker {broker} did not answer: {exc}") from exc

    async def _broker_addr(self, broker: str) -> str:
        """A broker by its name (its master's address) or by its host:port."""
        if ":" in broker:
            return broker
        brokers = await self.brokers()
        addr = brokers.get(broker)
        if addr is None:
            raise AdminError(f"no broker named {broker!r} has a master (brokers: {', '.join(brokers) or 'none'})")
        return addr

    async def broker_config(self, broker: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's settings under RocketMQ's names (secrets as ``******``)."""
        resp = await self.api.invoke_ok(await self._broker_addr(broker), RequestCode.GET_BROKER_CONFIG)
        out = {}
        for line in bytes(resp.body or b"").decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip()
        return out

    async def update_broker_config(self, broker: str, key: str, value: str) -> None:
        """UPDATE_BROKER_CONFIG: one setting changed while the broker runs (those it allows; docs/configuration.md),
        kept for its next start; refused naming the key otherwise."""
        if not key or any(c in key + value for c in "=\n\r"):
            raise AdminError(f"setting {key!r} = {value!r}: neither may hold '=' or a line break")
        await self.api.invoke_ok(await self._broker_addr(broker), RequestCode.UPDATE_BROKER_CONFIG,
                                 body=f"{key}={value}\n".encode())

    async def ha_status(self, broker: str) -> dict[str, Any]:
        """GET_BROKER_HA_STATUS: a master's slaves (acknowledged offset, how far behind, in sync) or a slave's
        master."""
        resp = await self.api.invoke_ok(await self._broker_addr(broker), RequestCode.GET_BROKER_HA_STATUS)
        return dict(json.loads(bytes(resp.body or b"{}")))

    async def broker_epochs(self, broker: str) -> dict[str, Any]:
        """GET_BROKER_EPOCH_CACHE: the master terms a broker's log holds (``epochList``: epoch, startOffset,
        endOffset; the last one open, to Long.MAX_VALUE) and the log's end (``maxOffset``)."""
        resp = await self.api.invoke_ok(await self._broker_addr(broker), RequestCode.GET_BROKER_EPOCH_CACHE)
        return dict(json.loads(bytes(resp.body or b"{}")))

    async def producer_connections(self, group: str) -> list[dict[str, Any]]:
        """The producers of ``group`` connected to each broker (GET_PRODUCER_CONNECTION_LIST), ``broker`` added."""
        brokers = await self.brokers()
        answers = await self._gather(self.api.invoke(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                                     GetProducerConnectionListRequestHeader(group).encode())
                                     for addr in brokers.values())
        out: list[dict[str, Any]] = []
        for name, resp in zip(brokers, answers, strict=True):
            if resp.code == 0 and resp.body:
                out.extend({**c, "broker": name} for c in json.loads(bytes(resp.body)).get("connectionSet") or [])
        return out

    async def group_connections(self, group: str) -> dict[str, Any]:
        """The consumers of ``group`` online on each broker: clients, the group's subscriptions and modes."""
        brokers = await self.brokers()
        answers = await self._gather(self.api.get_consumer_connections(addr, group) for addr in brokers.values())
        merged: dict[str, Any] = {"group": group, "connections": [], "subscriptions": {}}
        for name, conns in zip(brokers, answers, strict=True):
            if not conns:
                continue
            merged["connections"].extend({**c, "broker": name} for c in conns.get("connectionSet") or [])
            merged["subscriptions"].update(conns.get("subscriptionTable") or {})
            for key in ("consumeType", "messageModel", "consumeFromWhere"):
                if key in conns:
                    merged[key] = conns[key]
        return merged

    async def reset_offset(self, group: str, topic: str, timestamp_ms: int) -> dict[str, int]:
        """Move the group's offsets on ``topic`` to the first message stored at or after ``timestamp_ms`` (0: the
        oldest kept; -1: the end) on every broker of the topic (INVOKE_BROKER_TO_RESET_OFFSET, RocketMQ 5's
        server-side reset: consumers online are told at their next pull). ``broker@topic@queue`` → the offset."""
        route = await self.topic_route(topic)
        addrs = [a for b in route.broker_datas if (a := b.select_addr())]
        ext = {**ResetOffsetRequestHeader(topic, group, -1, timestamp_ms).encode(), "isForce": "true"}  # (Java's)
        answers = await self._gather(self.api.invoke_ok(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext,
                                                        timeout_ms=10_000) for addr in addrs)
        out: dict[str, int] = {}
        for resp in answers:
            table = fastjson.loads(bytes(resp.body or b"{}")).get("offsetTable") or {}  # (MessageQueue keys)
            for key, offset in table.items():
                mq = dict(key.items()) if hasattr(key, "items") else {}
                out[f"{mq.get('brokerName', '?')}@{mq.get('topic', topic)}@{mq.get('queueId', '?')}"] = int(offset)
        return dict(sorted(out.items(), key=lambda kv: (kv[0].rsplit("@", 1)[0], int(kv[0].rsplit("@", 1)[1])
                                                        if kv[0].rsplit("@", 1)[1].isdigit() else 0)))

    async def group_config(self, group: str, cluster: str | None = None) -> dict[str, Any] | None:
        """The group's config (RocketMQ's SubscriptionGroupConfig JSON) as the first master that has it holds it."""
        for addr in (await self.brokers(cluster)).values():
            table = await self.api.get_all_subscription_groups(addr)
            if group in table:
                return dict(table[group])
        return None

    async def update_group(self, group: str, cluster: str | None = None, *, must_exist: bool = False,
                           attributes: str | None = None, **changes: Any) -> dict[str, str]:
        """Create or update ``group`` on every master of ``cluster`` (mqadmin updateSubGroup): its config as it is
        (or RocketMQ's defaults) with ``changes`` (RocketMQ's field names: ``retryMaxTimes``, ``consumeEnable``,
        ``consumeBroadcastEnable``, ``consumeFromMinEnable``, ``consumeMessageOrderly``, ``retryQueueNums``,
        ``brokerId``, ``whichBrokerWhenConsumeSlowly``) and ``attributes`` changed as ``+key=value,-key`` says
        (``+priority.factor=50``; mqadmin's ``-a``); broker name → address. With ``must_exist`` a group no
        broker has is an error."""
        validate_group(group)
        try:
            modification = parse_modification(attributes)
        except AttributeRefused as exc:
            raise AdminError(f"attributes {attributes!r}: {exc}") from None
        targets = await self.brokers(cluster)
        if not targets:
            raise AdminError("no broker is registered with the name server" if cluster is None
                             else f"cluster {cluster!r} has no master broker")
        tables = dict(zip(targets.values(), await self._gather(
            self.api.get_all_subscription_groups(addr) for addr in targets.values()), strict=True))
        current = next((dict(t[group]) for t in tables.values() if isinstance(t.get(group), dict)), None)
        if current is None and must_exist:
            raise AdminError(f"no group {group!r} on the brokers" + (f" of cluster {cluster!r}" if cluster else ""))
        # A broker that has the group changes its attributes as asked; one that has not yet gets the group's
        # attributes as the others hold them, changed as asked (a creation takes additions only).
        held = current.pop("attributes", None) if current is not None else None
        created = {f"+{k}": str(v) for k, v in held.items()} if isinstance(held, dict) else {}
        for key, value in modification.items():
            if key.startswith("-"):
                created.pop("+" + key[1:], None)
            else:
                created[key] = value
        config = {**GROUP_DEFAULTS, **(current or {}), **changes, "groupName": group}
        await self._gather(self.api.update_subscription_group(
            addr, {**config, "attributes": modification if group in tables[addr] else created})
            for addr in targets.values())
        return targets

    async def clone_offsets(self, source: str, target: str, topic: str) -> dict[str, int]:
        """Give group ``target`` the committed offsets ``source`` has on ``topic`` (mqadmin cloneGroupOffset):
        ``broker@queue`` → the offset written, for each queue of ``source``'s consume stats (as mqadmin: one it
        never committed is written as 0)."""
        progress = await self.group_progress(source, topic)
        route = await self.topic_route(topic)
        addrs = {b.broker_name: a for b in route.broker_datas if (a := b.select_addr())}
        out: dict[str, int] = {}
        for q in progress.queues:
            if q.broker_name not in addrs:
                continue
            mq = MessageQueue(topic, q.broker_name, q.queue_id)
            await self.api.update_consumer_offset(addrs[q.broker_name], target, mq, q.consumer_offset)
            out[f"{q.broker_name}@{q.queue_id}"] = q.consumer_offset
        return out

    async def reset_queue_offset(self, group: str, topic: str, queue_id: int, offset: int,
                                 broker: str | None = None) -> dict[str, int]:
        """Move the group's offset on one queue of ``topic`` to ``offset`` (mqadmin resetOffsetByQueueId); the
        queue's broker must be named when the topic has several. ``broker@topic@queue`` → the offset."""
        route = await self.topic_route(topic)
        brokers = {b.broker_name: a for b in route.broker_datas if (a := b.select_addr())}
        if broker is None:
            if len(brokers) != 1:
                raise AdminError(f"topic {topic!r} is on {len(brokers)} brokers: name the queue's broker")
            broker = next(iter(brokers))
        if broker not in brokers:
            raise AdminError(f"topic {topic!r} has no queues on broker {broker!r}")
        ext = {**ResetOffsetRequestHeader(topic, group, queue_id, -1, offset).encode(), "isForce": "true"}
        await self.api.invoke_ok(brokers[broker], RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext, timeout_ms=10_000)
        return {f"{broker}@{topic}@{queue_id}": offset}

    async def delete_group(self, group: str, cluster: str | None = None, clean_offset: bool = True, *,
                           retry_topic: bool = True, dlq_topic: bool = False) -> list[str]:
        """DELETE_SUBSCRIPTIONGROUP on every master (of ``cluster``): the brokers it was deleted on. As mqadmin's
        ``deleteSubGroup -c`` does, the group's retry topic goes too (``retry_topic``); its dead-letter topic only
        with ``dlq_topic`` (mqadmin deletes it always: dead letters are not thrown away by surprise here)."""
        brokers = await self.brokers(cluster)
        await self._gather(self.api.invoke_ok(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                              DeleteSubscriptionGroupRequestHeader(group, clean_offset).encode())
                           for addr in brokers.values())
        for wanted, topic in ((retry_topic, RETRY_GROUP_TOPIC_PREFIX + group),
                              (dlq_topic, DLQ_GROUP_TOPIC_PREFIX + group)):
            if wanted and await self.api.get_topic_route(topic) is not None:
                await self.delete_topic(topic, cluster)
        return list(brokers)

    async def topic_route(self, topic: str) -> TopicRouteData:
        route = await self.api.get_topic_route(topic)
        if route is None:
            raise AdminError(f"no route for topic {topic!r}")
        return route

    async def list_topics(self, cluster: str | None = None) -> list[str]:
        if cluster is None:
            return await self.api.get_all_topic_list()
        await self.brokers(cluster)  # an unknown cluster is an error, not an empty list
        return await self.api.get_topics_by_cluster(cluster)

    # == topics =====================================================================================
    async def create_topic(self, topic: str, queues: int = 8, perm: int | str = 6, order: bool = False,
                           cluster: str | None = None, wait: float = 5.0, *, message_type: str | None = None,
                           attributes: str | None = None) -> dict[str, str]:
        """Create or update ``topic`` on every master of ``cluster`` (default: every broker).

        Returns broker name → address of the brokers it was created on. With ``order`` the name server
        also gets the topic's order config (``broker:queues;...``), as RocketMQ's ``updateTopic -o``
        does. ``message_type`` (NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY ...) sets the topic's
        ``message.type`` attribute; ``attributes`` changes any as ``+key=value,-key`` (mqadmin's ``-a``).
        Waits up to ``wait`` seconds for the route to show every one of those brokers.
        """
        validate_topic(topic)
        if message_type is not None:
            if message_type not in TOPIC_MESSAGE_TYPES:
                raise AdminError(f"message type {message_type!r} is not one of {', '.join(TOPIC_MESSAGE_TYPES)}")
            attributes = ",".join(filter(None, (attributes, f"+message.type={message_type}")))
        try:
            parse_modification(attributes)
        except AttributeRefused as exc:
            raise AdminError(f"attributes {attributes!r}: {exc}") from None
        if not 1 <= queues <= 1024:
            raise AdminError(f"queue count {queues} is not between 1 and 1024")
        perm_value = parse_perm(perm)
        targets = await self.brokers(cluster)
        if not targets:
            raise AdminError("no broker is registered with the name server" if cluster is None
                             else f"cluster {cluster!r} has no master broker")
        await self._gather(self.api.create_topic(addr, topic, queues, queues, perm_value, order, attributes)
                           for addr in targets.values())
        if order:
            conf = ";".join(f"{name}:{queues}" for name in sorted(targets))
            await self.api.put_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic, conf)
        if wait > 0:
            await self._wait_route(topic, lambda r: set(targets) <= {q.broker_name for q in r.queue_datas}, wait)
        return targets

    async def update_topic_perm(self, topic: str, perm: int | str, wait: float = 5.0) -> dict[str, str]:
        """Change ``topic``'s permission on each broker that has it, its queues as they are (mqadmin
        updateTopicPerm): broker name → address. Waits up to ``wait`` seconds for the route to show it."""
        perm_value = parse_perm(perm)
        route = await self.topic_route(topic)
        addrs = {b.broker_name: a for b in route.broker_datas if (a := b.select_addr())}
        queues = {q.broker_name: q for q in route.queue_datas if q.broker_name in addrs}
        if not queues:
            raise AdminError(f"topic {topic!r} has no broker with a master")
        await self._gather(self.api.create_topic(addrs[name], topic, q.read_queue_nums, q.write_queue_nums,
                                                 perm_value) for name, q in queues.items())
        if wait > 0:
            await self._wait_route(topic, lambda r: all(q.perm == perm_value for q in r.queue_datas
                                                        if q.broker_name in queues), wait)
        return {name: addrs[name] for name in queues}

    async def delete_topic(self, topic: str, cluster: str | None = None) -> dict[str, str]:
        """Delete ``topic`` from its brokers (those of ``cluster`` only, if given) and from the name server(s)."""
        if cluster is not None:
            targets = await self.brokers(cluster)
        else:
            route = await self.topic_route(topic)
            targets = {b.broker_name: b.master_addr for b in route.broker_datas if b.master_addr}
        await self._gather(self.api.delete_topic_in_broker(addr, topic) for addr in targets.values())
        if cluster is None:
            await self.api.delete_topic_in_namesrv(topic)
        else:
            for addr in self.namesrv_addrs:
                await self.api.invoke_ok(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic,
                                                                                     "clusterName": cluster})
        with contextlib.suppress(BrokerResponseError):
            await self.api.delete_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        return targets

    async def _wait_route(self, topic: str, ready: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            route = await self.api.get_topic_route(topic)
            if route is not None and ready(route):
                return
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.05)

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Per queue of every broker in the route: min / max offset and the last store time."""
        route = await self.topic_route(topic)
        addrs = {b.broker_name: a for b in route.broker_datas if (a := b.select_addr())}
        tables = await self._gather(self.api.get_topic_stats(addr, topic) for addr in addrs.values())
        out = [QueueStatus(str(e.get("brokerName") or name), int(e["queueId"]), int(e.get("minOffset", 0)),
                           int(e.get("maxOffset", 0)), int(e.get("lastUpdateTimestamp", 0)))
               for name, table in zip(addrs, tables, strict=True) for e in table]
        return sorted(out, key=lambda q: (q.broker_name, q.queue_id))

    # == lite topics (RocketMQ 5.5) =================================================================
    async def broker_lite_info(self, broker: str) -> dict[str, Any]:
        """GET_BROKER_LITE_INFO of ``broker`` (a name or host:port): its light queues (``currentLmqNum`` of
        ``maxLmqNum``), lite subscriptions, events waiting, and its lite parent topics (``topicMeta``: expiration
        in minutes) with the groups bound to each (``groupMeta``)."""
        return await self._lite(await self._broker_addr(broker), RequestCode.GET_BROKER_LITE_INFO, {})

    async def parent_topic_info(self, topic: str) -> dict[str, dict[str, Any]]:
        """Broker name → GET_PARENT_TOPIC_INFO of the lite parent ``topic``: its lite topics there
        (``liteTopicCount``), expiration (``ttl``) and bound groups."""
        return await self._lite_per_broker(topic, RequestCode.GET_PARENT_TOPIC_INFO, {"topic": topic})

    async def lite_topic_info(self, parent: str, lite_topic: str) -> dict[str, dict[str, Any]]:
        """Broker name → GET_LITE_TOPIC_INFO: the lite topic's offsets there (``topicOffset``), who reads it
        (``subscriber``: client id and group) and whether that broker is where its messages are sent
        (``shardingToBroker``)."""
        return await self._lite_per_broker(parent, RequestCode.GET_LITE_TOPIC_INFO,
                                           {"parentTopic": parent, "liteTopic": lite_topic})

    async def lite_client_info(self, parent: str, group: str, client_id: str,
                               max_count: int = 1000) -> dict[str, dict[str, Any]]:
        """Broker name → GET_LITE_CLIENT_INFO: the lite topics ``client_id`` of ``group`` reads there (their
        light-queue names, at most ``max_count``; ``liteTopicCount`` -1: it holds no subscription there) and when
        its pops last looked (``lastAccessTime``)."""
        return await self._lite_per_broker(parent, RequestCode.GET_LITE_CLIENT_INFO,
                                           {"parentTopic": parent, "group": group, "clientId": client_id,
                                            "maxCount": str(max_count)})

    async def lite_group_info(self, parent: str, group: str, lite_topic: str = "",
                              top_k: int = 20) -> dict[str, dict[str, Any]]:
        """Broker name → GET_LITE_GROUP_INFO: the group's lag in ``lite_topic`` (``liteTopicOffsetWrapper``), or
        over all its lite topics (``totalLagCount``, the oldest message not consumed, and the ``top_k`` lite topics
        with most messages waiting, ``lagCountTopK``, and with the oldest, ``lagTimestampTopK``)."""
        ext = {"group": group, "topK": str(top_k)}
        if lite_topic:
            ext["liteTopic"] = lite_topic
        return await self._lite_per_broker(parent, RequestCode.GET_LITE_GROUP_INFO, ext)

    async def trigger_lite_dispatch(self, parent: str, group: str, client_id: str = "") -> list[str]:
        """TRIGGER_LITE_DISPATCH on every broker of ``parent``: each offers the group's readers (``client_id``
        only, when given) again every lite topic holding messages the group has not had; the brokers asked."""
        ext = {"group": group}
        if client_id:
            ext["clientId"] = client_id
        addrs = await self._lite_brokers(parent)
        await self._gather(self.api.invoke_ok(a, RequestCode.TRIGGER_LITE_DISPATCH, ext) for a in addrs.values())
        return list(addrs)

    async def _lite_brokers(self, parent: str) -> dict[str, str]:
        route = await self.topic_route(parent)
        return {b.broker_name: b.master_addr for b in sorted(route.broker_datas, key=lambda b: b.broker_name)
                if b.master_addr}

    async def _lite_per_broker(self, parent: str, code: int, ext: dict[str, str]) -> dict[str, dict[str, Any]]:
        addrs = await self._lite_brokers(parent)
        answers = await self._gather(self._lite(a, code, ext) for a in addrs.values())
        return dict(zip(addrs, answers, strict=True))

    async def _lite(self, addr: str, code: int, ext: dict[str, str]) -> dict[str, Any]:
        resp = await self.api.invoke_ok(addr, code, ext)
        try:
            data = fastjson.loads(bytes(resp.body or b"{}"))
        except ValueError as exc:
            raise AdminError(f"broker {addr} answered with a malformed body: {exc}") from None
        if not isinstance(data, dict):
            raise AdminError(f"broker {addr} answered with a malformed body")
        return data

    # == consumer groups ============================================================================
    async def list_groups(self) -> list[GroupInfo]:
        """Every subscription group the brokers hold, with the clients online now."""
        brokers = await self.brokers()
        tables = await self._gather(self.api.get_all_subscription_groups(addr) for addr in brokers.values())
        groups: dict[str, GroupInfo] = {}
        for name, table in zip(brokers, tables, strict=True):
            for g in table:
                groups.setdefault(g, GroupInfo(g)).brokers.append(name)

        async def online(info: GroupInfo) -> None:
            clients: set[str] = set()
            topics: set[str] = set()
            for name in info.brokers:
                conns = await self.api.get_consumer_connections(brokers[name], info.name)
                if not conns:
                    continue
                clients.update(str(c.get("clientId", "")) for c in conns.get("connectionSet") or [])
                topics.update(conns.get("subscriptionTable") or {})
                info.consume_type = str(conns.get("consumeType") or info.consume_type)
                info.message_model = str(conns.get("messageModel") or info.message_model)
            info.clients = sorted(clients)
            info.topics = sorted(topics)

        await self._gather(online(g) for g in groups.values())
        return [groups[n] for n in sorted(groups)]

    async def group_progress(self, group: str, topic: str | None = None) -> GroupProgress:
        """Per queue the group reads (of ``topic`` only, if given): broker offset, committed offset, lag."""
        if topic is not None:
            route = await self.topic_route(topic)
            brokers = {b.broker_name: a for b in route.broker_datas if (a := b.select_addr())}
        else:
            brokers = await self.brokers()
        tables = await self._gather(self.api.get_consume_stats(addr, group, topic or "") for addr in brokers.values())
        queues = [QueueProgress(str(e["topic"]), str(e.get("brokerName") or name), int(e["queueId"]),
                                int(e.get("brokerOffset", 0)), int(e.get("consumerOffset", -1)),
                                int(e.get("lastTimestamp", 0)), int(e.get("pullOffset", -1)),
                                int(e.get("queueingLatencyMs", 0)))
                  for name, table in zip(brokers, tables, strict=True) for e in table]
        if not queues:
            what = f" on topic {topic!r}" if topic else ""
            raise AdminError(f"consumer group {group!r} has no committed offsets{what} and is not online")
        queues.sort(key=lambda q: (q.topic, q.broker_name, q.queue_id))
        return GroupProgress(group, queues)

    # == messages ===================================================================================
    async def get_message(self, msg_id: str, topic: str | None = None) -> list[MessageExt]:
        """The message(s) with this id: a broker's offsetMsgId (store host + commit-log offset), or, with
        ``topic``, a client message id (UNIQ_KEY), looked up in the index of every broker of the topic.

        The id is read as an offset id first; that is used when it names a broker of the cluster.
        """
        msg_id = msg_id.strip()
        try:
            host, offset = decode_message_id(msg_id)
        except ValueError:
            host, offset = None, -1
        if host is not None:
            known = {a for b in (await self.cluster_info()).broker_addr_table.values()
                     for a in b.broker_addrs.values()}
            if host in known:
                try:
                    msgs = await self.api.view_message(host, offset)
                    if msgs:
                        return [uncompressed(m) for m in msgs]
                except (BrokerResponseError, MessageFormatError) as exc:
                    if isinstance(exc, BrokerResponseError) and exc.code == ResponseCode.NO_PERMISSION:
                        raise  # refused, not missing: the caller says so
                    if topic is None:
                        raise AdminError(f"no message with id {msg_id} on {host} ({exc}); for a client message "
                                         "id (UNIQ_KEY) give its topic (--topic)") from None
            elif topic is None:
                port = int(host.rpartition(":")[2])
                where = f" (it names {host})" if 0 < port < 65536 else ""
                raise AdminError(f"{msg_id} is not the offset msg id of a broker of this cluster{where}; "
                                 "for a client message id (UNIQ_KEY) give its topic (--topic)")
        if topic is None:
            raise AdminError(f"{msg_id!r} is not an offset msg id (32 hex characters); for a client message id "
                             "(UNIQ_KEY) give its topic (--topic)")
        msgs = await self._query(topic, msg_id, unique=True, max_num=32, begin_ms=0, end_ms=LONG_MAX)
        if not msgs:
            raise AdminError(f"no message with id {msg_id} in topic {topic!r}")
        return msgs

    async def messages_by_key(self, topic: str, key: str, max_num: int = 64, begin_ms: int = 0,
                              end_ms: int = LONG_MAX) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their KEYS, stored in [begin_ms, end_ms]: the newest
        ``max_num``, oldest first."""
        return await self._query(topic, key, unique=False, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms)

    async def message_trace(self, msg_id: str, trace_topic: str = TRACE_TOPIC, max_num: int = 64,
                            begin_ms: int = 0, end_ms: int = LONG_MAX) -> list[TraceStep]:
        """The trace of message ``msg_id`` (its id as the producer saw it): its send, its transaction's end and
        each consumer group's listener calls, as clients with trace on recorded them in ``trace_topic``
        (``mqadmin queryMsgTraceById``). Empty when no client recorded any."""
        found = await self.messages_by_key(trace_topic, msg_id, max_num, begin_ms, end_ms)
        return trace_steps(r for m in found for r in records_for(msg_id, m.body, m.born_host.rsplit(":", 1)[0]))

    async def _query(self, topic: str, key: str, unique: bool, max_num: int, begin_ms: int,
                     end_ms: int) -> list[MessageExt]:
        route = await self.topic_route(topic)
        addrs = [a for b in route.broker_datas if (a := b.select_addr())]
        found = await self._gather(self.api.query_message(addr, topic, key, max_num, begin_ms, end_ms, unique)
                                   for addr in addrs)
        seen: set[tuple[str, int]] = set()
        out: list[MessageExt] = []
        for msg in (m for msgs in found for m in msgs):
            if msg.topic != topic or (msg.uniq_key != key if unique else key not in msg.keys):
                continue  # index hash collisions
            if (msg.store_host, msg.commit_log_offset) in seen:
                continue
            seen.add((msg.store_host, msg.commit_log_offset))
            out.append(uncompressed(msg))
        out.sort(key=lambda m: (m.store_timestamp, m.store_host, m.commit_log_offset))
        return out[-max_num:] if max_num > 0 else out  # the newest, oldest first

    async def send(self, message: Message, count: int = 1, *, concurrency: int = 64,
                   group: str = ADMIN_PRODUCER_GROUP) -> AsyncGenerator[SendResult, None]:
        """Send ``message`` ``count`` times (up to ``concurrency`` in flight); yields the results in order.

        Use as ``async with contextlib.aclosing(admin.send(...)) as results: async for r in results``.
        """
        from sluice.client.aio.producer import Producer

        async with Producer(group, self.namesrv, credentials=self.credentials, tls=self.tls) as producer:
            window: deque[asyncio.Future[SendResult]] = deque()
            try:
                for _ in range(count):
                    window.append(producer.send_async(message))
                    if len(window) >= concurrency:
                        yield await window.popleft()
                while window:
                    yield await window.popleft()
            finally:
                for fut in window:
                    fut.cancel()
                await asyncio.gather(*window, return_exceptions=True)

    # == ACL 2.0: users and rules ===================================================================
    async def _masters(self, cluster: str | None) -> list[str]:
        targets = await self.brokers(cluster)
        if not targets:
            raise AdminError("no broker is registered with the name server" if cluster is None
                             else f"cluster {cluster!r} has no master broker")
        return list(targets.values())

    async def _first_master(self, broker: str | None) -> str:
        if broker is not None:
            return broker
        return (await self._masters(None))[0]

    async def create_user(self, username: str, password: str, user_type: str = "Normal",
                          cluster: str | None = None) -> None:
        """A user on every master (of ``cluster``): ``user_type`` Normal or Super (only a super user makes one)."""
        info = user_info(username, password, user_type)
        await self._gather(self.auth.create_user(a, info) for a in await self._masters(cluster))

    async def update_user(self, username: str, *, password: str | None = None, user_type: str | None = None,
                          user_status: str | None = None, cluster: str | None = None) -> None:
        """Change a user's password, type or status (``enable`` / ``disable``); what is None stays."""
        info = user_info(username, password, user_type, user_status)
        await self._gather(self.auth.update_user(a, info) for a in await self._masters(cluster))

    async def delete_user(self, username: str, cluster: str | None = None) -> None:
        """The user and its ACL."""
        await self._gather(self.auth.delete_user(a, username) for a in await self._masters(cluster))

    async def get_user(self, username: str, broker: str | None = None) -> dict[str, Any] | None:
        """RocketMQ's ``UserInfo`` (its password included, as RocketMQ answers), from ``broker`` (host:port) or the
        first master; None when there is no such user."""
        return await self.auth.get_user(await self._first_master(broker), username)

    async def list_users(self, name_filter: str | None = None, broker: str | None = None) -> list[dict[str, Any]]:
        return await self.auth.list_users(await self._first_master(broker), name_filter)

    async def create_acl(self, subject: str, entries: Iterable[dict[str, Any]], policy_type: str = "Custom",
                         cluster: str | None = None) -> None:
        """Rules for ``subject`` (``User:alice``), each made with ``policy_entry``; merged into its ACL by resource
        (a rule for a resource it has replaces that one)."""
        info = acl_info(subject, entries, policy_type)
        await self._gather(self.auth.create_acl(a, info) for a in await self._masters(cluster))

    async def update_acl(self, subject: str, entries: Iterable[dict[str, Any]], policy_type: str = "Custom",
                         cluster: str | None = None) -> None:
        info = acl_info(subject, entries, policy_type)
        await self._gather(self.auth.update_acl(a, info) for a in await self._masters(cluster))

    async def delete_acl(self, subject: str, resource: str | None = None, policy_type: str | None = None,
                         cluster: str | None = None) -> None:
        """The rule for ``resource``, or (None) the subject's whole ACL."""
        await self._gather(self.auth.delete_acl(a, subject, resource, policy_type)
                           for a in await self._masters(cluster))

    async def get_acl(self, subject: str, broker: str | None = None) -> dict[str, Any] | None:
        return await self.auth.get_acl(await self._first_master(broker), subject)

    async def list_acls(self, subject_filter: str | None = None, resource_filter: str | None = None,
                        broker: str | None = None) -> list[dict[str, Any]]:
        return await self.auth.list_acls(await self._first_master(broker), subject_filter, resource_filter)

    # == helpers ====================================================================================
    @staticmethod
    async def _gather(calls: Iterable[Awaitable[T]]) -> list[T]:
        """Run ``calls`` at most ``_PARALLEL_CALLS`` at a time; results in order; the first error is raised."""
        sem = asyncio.Semaphore(_PARALLEL_CALLS)

        async def one(call: Awaitable[T]) -> T:
            async with sem:
                return await call

        return list(await asyncio.gather(*(one(c) for c in calls)))


__all__ = ["ADMIN_PRODUCER_GROUP", "DEFAULT_NAMESRV", "LONG_MAX", "Admin", "AdminError", "GroupInfo",
           "GroupProgress", "QueueProgress", "QueueStatus", "parse_perm", "uncompressed"]
