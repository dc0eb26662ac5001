"""``apache.rocketmq.v2.MessagingService`` in front of Sluice's brokers: what RocketMQ's proxy does for the
RocketMQ 5 clients, in cluster mode (routes from the name server, every broker reached over the remoting
protocol, as any client of it).

Sends become SEND_MESSAGE_V2 (the client's message id kept as UNIQ_KEY, a FIFO message group as the sharding key,
a delivery timestamp as a timer, a transactional message as a half message); receives are POP_MESSAGE over the
whole topic on the broker asked for (orderly, queue by queue, for a FIFO group); acks, changes of invisible
duration and their receipt handles are the broker's own POP ones. Every answer carries an in-band ``Status``, as
the proxy's do; what goes wrong inside is a status too, never an aborted call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import grpc

from sluice.auth.credentials import CredentialsLike
from sluice.client.mq_client import MQClientInstance
from sluice.client.queue_router import select_by_hash
from sluice.common.config import ClientConfig
from sluice.common.errors import BrokerResponseError, ClientError, InvalidNameError, SluiceError
from sluice.common.extra_info import PROPERTY_POP_CK, Receipt, ReceiptError, real_topic
from sluice.common.lite import MAX_LITE_TOPIC_SIZE, to_lmq_name, validate_lite_topic
from sluice.common.message import MessageExt, decode_message_id
from sluice.common.naming import validate_group
from sluice.common.properties import (
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    PROPERTY_LITE_TOPIC,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    encode_properties,
)
from sluice.common.recall_handle import RecallHandle, RecallHandleError
from sluice.common.structs import MessageQueue
from sluice.common.sysflag import (
    PERM_READ,
    PERM_WRITE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from sluice.proxy.grpc_auth import GrpcAuth
from sluice.proxy.grpc_converter import (
    MAX_BODY_SIZE,
    TRANSACTION,
    Refused,
    TransactionId,
    check_topic,
    handle_lite_topic,
    make_handle,
    parse_handle,
    status,
    stored_properties,
    to_pb_message,
)
from sluice.proxy.grpc_tls_front import GrpcTlsFront
from sluice.proxy.namespaces import namespaced
from sluice.proxy.protocol import RPCS, SERVICE, pb
from sluice.proxy.stream_filter import filtered_stream
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import RemotingError
from sluice.remoting.headers import (
    CheckTransactionStateRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    NotifyUnsubscribeLiteRequestHeader,
    RecallMessageRequestHeader,
    SendMessageRequestHeader,
)
from sluice.remoting.tls import ServerTls

log = logging.getLogger(__name__)

MAX_POLL_SECONDS = 20.0  # the proxy's bound on a receive's long polling
DEADLINE_MARGIN = 1.0  # seconds a receive answers before the client's deadline
MIN_INVISIBLE_SECONDS = 10.0
MAX_INVISIBLE_SECONDS = 12 * 3600.0
AUTO_RENEW_INVISIBLE_SECONDS = 60.0
# The wait before each retry of a message (RocketMQ's delay levels from 1 s): what consumers are told to sleep.
RETRY_BACKOFF = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
MAX_RETRIES = 1000
MESSAGE_TYPES = [1, 2, 3, 4]  # NORMAL, FIFO, DELAY, TRANSACTION: what a topic without a message.type accepts
# What a topic of each ``message.type`` accepts (RocketMQ's RouteActivity); UNSPECIFIED where it is not known.
ACCEPTED_MESSAGE_TYPES = {"NORMAL": [1], "FIFO": [2], "DELAY": [3], "TRANSACTION": [4], "LITE": [5], "PRIORITY": [6],
                          "MIXED": MESSAGE_TYPES, "": MESSAGE_TYPES}
PRODUCER_GROUP = "PROXY_SEND_GROUP"
BROKER_TIMEOUT = 2.5  # a unary call's broker request: answered in-band before the client's 3 s deadline
TELEMETRY_QUEUE = 1024  # commands waiting for one client's stream
GROUP_CACHE_SECONDS = 30.0
GROUP_CACHE_SIZE = 10_000
TYPE_LOOKUP_SECONDS = 1.0  # a route's wait for a master to say the topic's message type
TYPE_RETRY_SECONDS = 5.0  # how long a lookup no master answered stands
DEFAULT_RETRIES = 16
DEFAULT_LITE_QUOTA = 2000  # lite.sub.client.quota's default
ROUTED_TOPICS = 10_000  # topics whose routes the front keeps fresh
LARGE_BATCH = 1 << 20  # bodies of a receive from which its frames are built off the loop
LITE_PUSH_CONSUMER = 5  # ClientType
CLIENT_TYPES = 100_000  # clients whose types (from their settings) the front keeps
MAX_LITE_TOPICS_PER_SYNC = 10_000
TELEMETRY_END_GRACE = 0.5  # (s) a stream whose requests ended is held this long: a cancel shows within it
LITE_ACTIONS = ("PARTIAL_ADD", "PARTIAL_REMOVE", "COMPLETE_ADD", "COMPLETE_REMOVE")
_OFFSET_TYPES = {"policy": "POLICY", "offset": "OFFSET", "tail_n": "TAIL_N", "timestamp": "TIMESTAMP"}
RELEASE_TIMEOUT_MS = 3_000
# Broker codes of a send → the gRPC code a client is told.
_SEND_CODES: dict[int, str] = {ResponseCode.FLUSH_DISK_TIMEOUT: "MASTER_PERSISTENCE_TIMEOUT",
               ResponseCode.FLUSH_SLAVE_TIMEOUT: "SLAVE_PERSISTENCE_TIMEOUT",
               ResponseCode.SLAVE_NOT_AVAILABLE: "HA_NOT_AVAILABLE",
               ResponseCode.MESSAGE_ILLEGAL: "BAD_REQUEST",
               ResponseCode.TOPIC_NOT_EXIST: "TOPIC_NOT_FOUND",
               ResponseCode.NO_PERMISSION: "FORBIDDEN",
               ResponseCode.SYSTEM_BUSY: "TOO_MANY_REQUESTS",
               ResponseCode.LMQ_QUOTA_EXCEEDED: "LITE_TOPIC_QUOTA_EXCEEDED"}
# Broker codes of a recall → the gRPC code (RocketMQ's proxy: ResponseBuilder's mapping, the rest internal errors).
_RECALL_CODES: dict[int, str] = {ResponseCode.SYSTEM_BUSY: "TOO_MANY_REQUESTS",
                                 ResponseCode.REQUEST_CODE_NOT_SUPPORTED: "NOT_IMPLEMENTED"}
# Broker codes that mean a receipt the broker cannot match: a push consumer stops retrying on this one only.
_STALE_RECEIPT = (ResponseCode.NO_MESSAGE, ResponseCode.INVALID_PARAMETER, ResponseCode.TOPIC_NOT_EXIST,
                  ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, ResponseCode.MESSAGE_ILLEGAL)


def _tag_set(expression: str) -> frozenset[str] | None:
    """The tags a TAG expression names, read as the broker reads it ("a || b", empty parts dropped); None for
    every tag."""
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    return None if not tags or "*" in tags else tags


def _auto_renew_invisible(fifo: bool, retries: int) -> float:
    """How long an ``auto_renew`` receive's messages stay invisible. A FIFO push consumer retries a message in
    place, sleeping the backoff between tries, before it forwards it to the DLQ: the message must stay its own
    for all of that (the front does not renew it while the client holds it)."""
    if not fifo:
        return AUTO_RENEW_INVISIBLE_SECONDS
    schedule = sum(RETRY_BACKOFF[:max(0, min(retries, len(RETRY_BACKOFF)))])
    return min(MAX_INVISIBLE_SECONDS, AUTO_RENEW_INVISIBLE_SECONDS + schedule)


# A message handed to a receive: (message, broker address, group, topic, lite topic if a lite pop's)
Popped = tuple[MessageExt, str, str, str, str | None]


class Duration(Protocol):
    """``google.protobuf.Duration``'s fields."""

    seconds: int
    nanos: int


def duration_seconds(d: Duration) -> float:
    return d.seconds + d.nanos / 1e9


def _remaining(context: Any, default: float) -> float:
    left = context.time_remaining()
    return default if left is None else left


def _client_id(context: Any) -> str:
    """The calling client's id (``x-mq-client-id``), or ""."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id" and isinstance(value, str):
            return value[:256]
    return ""


def _int_or(text: object, default: int) -> int:
    try:
        return int(str(text))
    except ValueError:
        return default


def _is_lite_name(name: str) -> bool:
    try:
        validate_lite_topic(name)
    except InvalidNameError:
        return False
    return True


def _same_peer(peer: str) -> str | None:
    return peer


def _no_peer(peer: str) -> str | None:
    return None


class MessagingService:
    """The RPCs, each an ``async def`` taking the request and the gRPC context."""

    def __init__(self, namesrv: str, config: ClientConfig | None = None, auth: GrpcAuth | None = None,
                 credentials: CredentialsLike | None = None, broker_tls: ssl.SSLContext | None = None) -> None:
        base = config or ClientConfig()
        # ``credentials`` (the inner client credentials) sign what the front sends to brokers with ACL on; ``auth``
        # checks every RPC first (an unchecked front would lend those credentials to anyone).
        self.client = MQClientInstance(base.replace(namesrv_addr=namesrv, instance_name="sluice-proxy"), credentials,
                                       broker_tls)
        self.auth = auth
        # grpcio's peer of a call → the client's (behind the TLS front, grpcio sees the loopback); None: a call
        # that did not come through the front (refused).
        self.peer_of: Callable[[str], str | None] = _same_peer
        self.front: GrpcTlsFront | None = None
        self._turn = itertools.count()
        self._producer_streams: dict[str, list[asyncio.Queue[Any]]] = {}  # topic → Telemetry streams
        self._groups: dict[str, tuple[float, bool, int]] = {}  # group → (when looked up, FIFO, retries)
        # topic → (the route they are of, its writable queues, the same broker after broker): made once a route
        self._send_queues: dict[str, tuple[Any, list[MessageQueue], list[MessageQueue]]] = {}
        self._group_lite_quota: dict[str, int] = {}  # group → its lite.sub.client.quota (as last looked up)
        self._group_lite_bind: dict[str, str] = {}  # group → its lite.bind.topic ("": none; as last looked up)
        # topic → (when looked up, its message.type, whether a master answered); the lookups under way
        self._topic_types: dict[str, tuple[float, str, bool]] = {}
        self._type_lookups: dict[str, asyncio.Future[str]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        # Lite push consumers (RocketMQ 5.5): each client's type, from its settings (bounded); each lite push
        # consumer's Telemetry stream, where the brokers' unsubscribe notices go.
        self._client_types: dict[str, int] = {}
        self._lite_streams: dict[str, asyncio.Queue[Any]] = {}
        self._lite_bind_topics: dict[str, tuple[str, str]] = {}  # lite consumer → (bind topic, group), bounded
        self.client.on_unsubscribe_lite = self._notify_unsubscribe_lite
        self.stopping = False

    async def start(self) -> None:
        await self.client.start()

    async def shutdown(self) -> None:
        if self._background:  # releases and acks under way get their few seconds
            await asyncio.wait(list(self._background), timeout=RELEASE_TIMEOUT_MS / 1000)
        for t in list(self._background):
            t.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.client.shutdown()

    def _spawn(self, coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    async def _route(self, topic: str, fresh: bool = False) -> Any:
        """The topic's route (``Refused`` TOPIC_NOT_FOUND, or INTERNAL_SERVER_ERROR when no name server answers);
        the topic is kept fresh by the client's route loop from then on."""
        try:
            route = await (self.client.update_route(topic) if fresh else self.client.get_route(topic))
        except SluiceError as exc:
            raise Refused("INTERNAL_SERVER_ERROR", f"no route for {topic}: {exc}") from None
        if route is None or not route.queue_datas:
            raise Refused("TOPIC_NOT_FOUND", f"topic {topic} not found")
        if topic not in self.client.publish_topics and len(self.client.publish_topics) < ROUTED_TOPICS:
            self.client.publish_topics.add(topic)
        return route

    async def _addr_of(self, topic: str, broker: str) -> str:
        addr = self.client.find_broker_addr(broker)
        if addr is None:
            await self._route(topic)
            addr = self.client.find_broker_addr(broker)
        if addr is None:
            raise Refused("INVALID_RECEIPT_HANDLE", f"no broker {broker} serves {topic}")
        return addr

    # == routes, heartbeats, settings ================================================================
    async def QueryRoute(self, req: Any, context: Any) -> Any:  # noqa: N802 - the RPC's name
        topic = req.topic.name
        try:
            check_topic(topic)
            route = await self._route(topic, fresh=True)
        except Refused as exc:
            return pb.QueryRouteResponse(status=exc.status())
        out = pb.QueryRouteResponse(status=status("OK"))
        masters = {b.broker_name for b in route.broker_datas if b.master_addr}
        kind = await self._topic_message_type(topic, sorted(b.master_addr for b in route.broker_datas
                                                            if b.master_addr))
        accepted = ACCEPTED_MESSAGE_TYPES.get(kind, [0])
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if qd.broker_name not in masters:
                continue
            for i in range(max(qd.read_queue_nums, qd.write_queue_nums)):
                readable = i < qd.read_queue_nums and qd.perm & PERM_READ
                writable = i < qd.write_queue_nums and qd.perm & PERM_WRITE
                mq = out.message_queues.add(id=i, permission=4 if readable and writable else 2 if readable else
                                            3 if writable else 1)
                mq.topic.CopyFrom(req.topic)
                mq.broker.name = qd.broker_name
                mq.broker.id = 0
                mq.broker.endpoints.CopyFrom(req.endpoints)  # this front is the one address clients call
                mq.accept_message_types.extend(accepted)
        return out

    async def _topic_message_type(self, topic: str, addrs: list[str]) -> str:
        """The topic's ``message.type`` attribute ("" when it has none), looked up at most every 30 s on the
        masters serving it (all at once, the first answer kept; one lookup shared by the routes asked meanwhile);
        when none answers within a second, the last known answer (or "") for the next 5 s."""
        now = time.monotonic()
        known = self._topic_types.get(topic)
        if known is not None and now - known[0] < (GROUP_CACHE_SECONDS if known[2] else TYPE_RETRY_SECONDS):
            return known[1]
        pending = self._type_lookups.get(topic)
        if pending is None:
            pending = asyncio.ensure_future(self._look_up_type(topic, addrs, known[1] if known else ""))
            self._type_lookups[topic] = pending
            pending.add_done_callback(lambda _: self._type_lookups.pop(topic, None))
        return await asyncio.shield(pending)

    async def _look_up_type(self, topic: str, addrs: list[str], fallback: str) -> str:
        async def one(addr: str) -> str:
            config = await self.client.api.get_topic_config(addr, topic, timeout_ms=int(TYPE_LOOKUP_SECONDS * 1000))
            attributes = (config or {}).get("attributes")
            return str(attributes.get("message.type") or "") if isinstance(attributes, dict) else ""

        kind, answered = fallback, False
        tasks = [asyncio.ensure_future(one(a)) for a in addrs]
        try:
            for next_done in asyncio.as_completed(tasks, timeout=TYPE_LOOKUP_SECONDS + 0.5):
                try:
                    kind, answered = await next_done, True
                    break
                except (ClientError, RemotingError) as exc:
                    log.info("topic config of %s: %s", topic, exc)
        except TimeoutError:
            log.info("topic config of %s: no master answered within %.1f s", topic, TYPE_LOOKUP_SECONDS)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if len(self._topic_types) >= GROUP_CACHE_SIZE:
            self._topic_types.clear()
        self._topic_types[topic] = (time.monotonic(), kind, answered)
        return kind

    async def Heartbeat(self, req: Any, context: Any) -> Any:  # noqa: N802
        return pb.HeartbeatResponse(status=status("OK"))

    async def NotifyClientTermination(self, req: Any, context: Any) -> Any:  # noqa: N802
        client_id = _client_id(context)
        bound = self._lite_bind_topics.get(client_id) if client_id else None
        if bound is not None and bound[1] == req.group.name:  # (only the client's own group ends its subscription)
            self._offline_lite(client_id)
        return pb.NotifyClientTerminationResponse(status=status("OK"))

    def _offline_lite(self, client_id: str) -> None:
        """A lite push consumer is gone: its subscriptions are dropped on every master (RocketMQ's
        offlineClientLiteSubscription), so its lite topics go to the group's other readers at once."""
        if self._client_types.get(client_id) != LITE_PUSH_CONSUMER:
            return
        bound = self._lite_bind_topics.pop(client_id, None)
        self._client_types.pop(client_id, None)
        self._lite_streams.pop(client_id, None)
        if bound is None:
            return
        entry = {"action": "COMPLETE_REMOVE", "clientId": client_id, "group": bound[1], "topic": bound[0],
                 "liteTopicSet": [], "version": 0}
        for addr in self.client.master_addrs():
            self._spawn(self._lite_ctl_quietly(addr, entry))

    # == lite topics =================================================================================
    async def SyncLiteSubscription(self, req: Any, context: Any) -> Any:  # noqa: N802
        """A lite push consumer's subscription change (RocketMQ 5.5's ClientActivity.syncLiteSubscription),
        relayed to every master of the bind topic as LITE_SUBSCRIPTION_CTL."""
        try:
            await self._sync_lite(req, context)
        except Refused as exc:
            return pb.SyncLiteSubscriptionResponse(status=exc.status())
        return pb.SyncLiteSubscriptionResponse(status=status("OK"))

    async def _sync_lite(self, req: Any, context: Any) -> None:
        topic, group = req.topic.name, req.group.name
        check_topic(topic)
        try:
            validate_group(group)
        except ValueError as exc:
            raise Refused("ILLEGAL_CONSUMER_GROUP", str(exc)) from None
        client_id = _client_id(context)
        if not client_id:
            raise Refused("CLIENT_ID_REQUIRED", "the request has no x-mq-client-id")
        if not 0 <= req.action < len(LITE_ACTIONS):
            raise Refused("BAD_REQUEST", f"unknown lite subscription action {req.action}")
        action = LITE_ACTIONS[req.action]
        lites = list(dict.fromkeys(req.lite_topic_set))
        if len(lites) > MAX_LITE_TOPICS_PER_SYNC:
            raise Refused("BAD_REQUEST", f"at most {MAX_LITE_TOPICS_PER_SYNC} lite topics in one request")
        if action == "PARTIAL_ADD":
            for lite in lites:
                try:
                    validate_lite_topic(lite)
                except InvalidNameError as exc:
                    raise Refused("ILLEGAL_LITE_TOPIC", str(exc)) from None
        else:  # (a name that cannot be one is never held: it is left out of the others)
            lites = [t for t in lites if _is_lite_name(t)]
        entry: dict[str, object] = {"action": action, "clientId": client_id, "group": group, "topic": topic,
                                    "liteTopicSet": lites, "version": req.version}
        if action == "PARTIAL_ADD" and req.HasField("offset_option"):
            kind = req.offset_option.WhichOneof("offset_type")
            if kind is not None:
                entry["offsetOption"] = {"type": _OFFSET_TYPES[kind], "value": int(getattr(req.offset_option, kind))}
        route = await self._route(topic)
        masters = {b.master_addr for b in route.broker_datas if b.master_addr}
        if not masters:
            raise Refused("TOPIC_NOT_FOUND", f"topic {topic} has no master")
        self._lite_bind_topics.pop(client_id, None)
        if len(self._lite_bind_topics) >= CLIENT_TYPES:
            self._lite_bind_topics.pop(next(iter(self._lite_bind_topics)))
        self._lite_bind_topics[client_id] = (topic, group)
        results = await asyncio.gather(*(self.client.api.lite_subscription_ctl(a, [entry]) for a in sorted(masters)),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BrokerResponseError):
                codes: dict[int, str] = {
                    ResponseCode.LITE_SUBSCRIPTION_QUOTA_EXCEEDED: "LITE_SUBSCRIPTION_QUOTA_EXCEEDED",
                    ResponseCode.ILLEGAL_OPERATION: "BAD_REQUEST"}
                code = codes.get(r.code, "INTERNAL_SERVER_ERROR")
                raise Refused(code, r.remark)
            if isinstance(r, BaseException):
                raise Refused("INTERNAL_SERVER_ERROR", str(r))

    async def _lite_ctl_quietly(self, addr: str, entry: dict[str, object]) -> None:
        try:
            await self.client.api.lite_subscription_ctl(addr, [entry], timeout_ms=RELEASE_TIMEOUT_MS)
        except (ClientError, RemotingError) as exc:
            log.info("lite subscription removal on %s failed: %s", addr, exc)

    def _notify_unsubscribe_lite(self, header: NotifyUnsubscribeLiteRequestHeader) -> None:
        """A broker's notice that a lite push consumer reads a lite topic no more: down its Telemetry stream."""
        out = self._lite_streams.get(header.client_id)
        if out is None:
            return
        cmd = pb.TelemetryCommand(notify_unsubscribe_lite_command=pb.NotifyUnsubscribeLiteCommand(
            lite_topic=header.lite_topic))
        try:
            out.put_nowait(cmd)
        except asyncio.QueueFull:
            log.info("client %s's stream is full: the unsubscribe notice of %s is dropped", header.client_id,
                     header.lite_topic)

    async def Telemetry(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:  # noqa: N802
        """The settings exchange: each settings command is answered with the client's settings completed with
        this front's (retry policy, body size limit, receive batch and polling bounds, FIFO); a producer's stream
        also carries the checks of its topics' undecided transactions."""
        out: asyncio.Queue[Any] = asyncio.Queue(maxsize=TELEMETRY_QUEUE)
        registered = False
        client_id = _client_id(context)

        async def read() -> None:
            nonlocal registered
            try:
                async for cmd in requests:
                    if not cmd.HasField("settings"):
                        continue
                    self._client_type(client_id, cmd.settings, out)
                    fifo, retries, quota = False, DEFAULT_RETRIES, DEFAULT_LITE_QUOTA
                    if cmd.settings.HasField("subscription") and cmd.settings.subscription.HasField("group"):
                        for entry in cmd.settings.subscription.subscriptions:  # (so that the brokers are known)
                            with contextlib.suppress(Refused):
                                await self._route(entry.topic.name)
                        fifo, retries = await self._group(cmd.settings.subscription.group.name)
                        quota = self._group_lite_quota.get(cmd.settings.subscription.group.name, quota)
                    reply = self._settings_reply(cmd.settings, fifo, retries, quota)
                    if reply.settings.HasField("publishing") and not registered:
                        self._register_producer([t.name for t in reply.settings.publishing.topics], out)
                        registered = True
                    await out.put(reply)
            finally:
                await out.put(None)

        reader = asyncio.get_running_loop().create_task(read())
        cut = False
        try:
            while (cmd := await out.get()) is not None:
                yield cmd
            self._unregister_producer(out)  # (no transaction check may wait in a stream nobody reads)
            # The requests ended: the client closed its side, or the call was cancelled, which grpc reports a
            # moment after ending the requests (the call is then cancelled here).
            await asyncio.sleep(TELEMETRY_END_GRACE)
        except (asyncio.CancelledError, GeneratorExit):
            cut = True
            raise
        finally:
            reader.cancel()
            self._unregister_producer(out)
            if cut and not self.stopping and client_id and self._lite_streams.get(client_id) is out:
                # RocketMQ drops a lite push consumer's subscriptions when its stream is cancelled or cut (its
                # handleGrpcCancel), rather than once they go unrenewed; a stream the client ends keeps them.
                log.info("lite push consumer %s's stream was cut: its lite subscriptions are dropped", client_id)
                self._offline_lite(client_id)
            if client_id and self._lite_streams.get(client_id) is out:
                del self._lite_streams[client_id]

    def _client_type(self, client_id: str, settings: Any, out: asyncio.Queue[Any]) -> None:
        """Keep what type of client ``client_id`` is (a lite push consumer receives by lite pops), and a lite push
        consumer's stream."""
        if not client_id or not settings.HasField("client_type"):
            return
        self._client_types.pop(client_id, None)  # (re-inserted: the longest silent goes first, not the oldest)
        if len(self._client_types) >= CLIENT_TYPES:
            self._client_types.pop(next(iter(self._client_types)))
        self._client_types[client_id] = settings.client_type
        bound = self._lite_bind_topics.get(client_id)
        group = settings.subscription.group.name if settings.HasField("subscription") else ""
        # A lite consumer's stream, where the unsubscribe notices go; never taken over by another group's client
        # claiming its id.
        if settings.client_type == LITE_PUSH_CONSUMER and group and (bound is None or bound[1] == group):
            self._lite_streams[client_id] = out

    @staticmethod
    def _settings_reply(client: Any, fifo: bool = False, retries: int = DEFAULT_RETRIES,
                        lite_quota: int = 0) -> Any:
        reply = pb.TelemetryCommand(status=status("OK"))
        settings = reply.settings
        settings.CopyFrom(client)
        if settings.HasField("publishing"):
            settings.backoff_policy.max_attempts = 3
            settings.backoff_policy.exponential_backoff.initial.FromMilliseconds(10)
            settings.backoff_policy.exponential_backoff.max.FromSeconds(1)
            settings.backoff_policy.exponential_backoff.multiplier = 2.0
            settings.publishing.max_body_size = MAX_BODY_SIZE
            settings.publishing.validate_message_type = True
        elif settings.HasField("subscription"):
            settings.subscription.receive_batch_size = 32
            settings.subscription.long_polling_timeout.FromSeconds(int(MAX_POLL_SECONDS))
            settings.subscription.fifo = fifo
            settings.subscription.lite_subscription_quota = max(0, min(lite_quota, 2**31 - 1))
            settings.subscription.max_lite_topic_size = MAX_LITE_TOPIC_SIZE
            settings.backoff_policy.max_attempts = retries + 1
            for s in RETRY_BACKOFF:
                settings.backoff_policy.customized_backoff.next.add(seconds=s)
        settings.metric.on = False
        return reply

    async def _group(self, group: str, addr: str | None = None, required: bool = False) -> tuple[bool, int]:
        """Whether ``group`` is a FIFO group (its ``consumeMessageOrderly``) and its retries, looked up at most every
        30 s on every master until one knows it (a group none knows yet: not FIFO, 16 retries). A failed lookup is
        not kept: the last known answer serves, else ``Refused`` when ``required`` (a FIFO group's receive must not
        go out unordered)."""
        now = time.monotonic()
        known = self._groups.get(group)
        if known is not None and now - known[0] < GROUP_CACHE_SECONDS:
            return known[1], known[2]
        addrs = sorted({addr, *self.client.master_addrs()} - {None}) if addr else self.client.master_addrs()
        answered = False
        fifo, retries = False, DEFAULT_RETRIES
        for a in addrs:
            try:
                table = await self.client.api.get_all_subscription_groups(a)
            except (ClientError, RemotingError) as exc:
                log.info("subscription groups of %s: %s", a, exc)
                continue
            answered = True
            entry = table.get(group)
            if isinstance(entry, dict):
                fifo = entry.get("consumeMessageOrderly") is True
                attributes = entry.get("attributes")
                attrs = attributes if isinstance(attributes, dict) else {}
                if len(self._group_lite_quota) >= GROUP_CACHE_SIZE:
                    self._group_lite_quota.clear()
                    self._group_lite_bind.clear()
                self._group_lite_quota[group] = _int_or(attrs.get("lite.sub.client.quota"), DEFAULT_LITE_QUOTA)
                self._group_lite_bind[group] = str(attrs.get("lite.bind.topic") or "")
                try:
                    retries = max(0, min(int(entry.get("retryMaxTimes", DEFAULT_RETRIES)), MAX_RETRIES))
                except (TypeError, ValueError):
                    retries = DEFAULT_RETRIES
                break
        if not answered:
            if known is not None:
                return known[1], known[2]
            if required:
                raise Refused("INTERNAL_SERVER_ERROR", f"the brokers did not say what group {group} is")
            return fifo, retries
        if len(self._groups) >= GROUP_CACHE_SIZE:
            self._groups.clear()
        self._groups[group] = (now, fifo, retries)
        return fifo, retries

    # == send ========================================================================================
    async def SendMessage(self, req: Any, context: Any) -> Any:  # noqa: N802
        try:
            if len(req.messages) != 1:
                raise Refused("BAD_REQUEST", "send one message at a time")
            return await self._send(req.messages[0], context)
        except Refused as exc:
            out = pb.SendMessageResponse(status=exc.status())
            out.entries.add(status=exc.status())
            return out

    async def _send(self, m: Any, context: Any) -> Any:
        topic = m.topic.name
        check_topic(topic, send=True)
        props, group = stored_properties(m)
        route = await self._route(topic)
        known = self._send_queues.get(topic)
        if known is not None and known[0] is route:  # (a route fetched again is a new object)
            _, queues, spread = known
        else:
            queues = route.publish_queues(topic)
            spread = self._interleaved(queues)
            if len(self._send_queues) >= ROUTED_TOPICS:
                self._send_queues.clear()
            self._send_queues[topic] = (route, queues, spread)
        if not queues:
            raise Refused("FORBIDDEN", f"topic {topic} has no writable queue")
        lite = props.get(PROPERTY_LITE_TOPIC, "")
        if group or lite:  # a message group (a lite topic) always to one queue, as Sluice's producer picks it
            mq = select_by_hash(queues, group or lite)
        else:  # round robin broker after broker: a client's immediate retries land on another broker
            mq = spread[next(self._turn) % len(spread)]
        addr = self.client.find_broker_addr(mq.broker_name)
        if addr is None:
            raise Refused("INTERNAL_SERVER_ERROR", f"no address for broker {mq.broker_name}")
        sp = m.system_properties
        born = sp.born_timestamp.seconds * 1000 + sp.born_timestamp.nanos // 1_000_000 \
            if sp.HasField("born_timestamp") else 0
        if not 0 < born < 2**62:
            born = int(time.time() * 1000)
        transactional = sp.message_type == TRANSACTION
        producer_group, sys_flag = PRODUCER_GROUP, 0
        if transactional:  # a half message, checked back with the producers of its topic (RocketMQ's proxy's way)
            producer_group, sys_flag = topic, TRANSACTION_PREPARED_TYPE
            props[PROPERTY_TRANSACTION_PREPARED] = "true"
            props[PROPERTY_PRODUCER_GROUP] = topic
        ext = SendMessageRequestHeader(producer_group, topic, "TBW102", 4, mq.queue_id, sys_flag, born, 0,
                                       encode_properties(props).decode(), broker_name=mq.broker_name).encode_v2()
        resp = await self._invoke(addr, RequestCode.SEND_MESSAGE_V2, ext, m.body, context, _SEND_CODES)
        out = pb.SendMessageResponse(status=status("OK"))
        queue_offset = int(resp.ext_fields.get("queueOffset", "0"))
        transaction_id = ""
        if transactional:  # everything END_TRANSACTION needs, so the front keeps nothing
            try:
                _, commit_log_offset = decode_message_id(resp.ext_fields.get("msgId", "").split(",")[0])
            except ValueError:
                raise Refused("INTERNAL_SERVER_ERROR", "the broker answered without an offset message id") from None
            transaction_id = TransactionId(mq.broker_name, commit_log_offset, queue_offset).encode()
        out.entries.add(status=status("OK"), message_id=sp.message_id, offset=queue_offset,
                        transaction_id=transaction_id, recall_handle=resp.ext_fields.get("recallHandle", ""))
        return out

    async def _invoke(self, addr: str, code: int, ext: dict[str, str], body: bytes, context: Any,
                      codes: dict[int, str]) -> RemotingCommand:
        """A request to a broker within the call's deadline; ``Refused`` with the gRPC code ``codes`` maps its
        refusal to (INTERNAL_SERVER_ERROR for the others), or PROXY_TIMEOUT."""
        timeout = max(0.2, min(BROKER_TIMEOUT, _remaining(context, BROKER_TIMEOUT) - 0.3))
        try:
            resp = await self.client.api.invoke(addr, code, ext, body, timeout_ms=int(timeout * 1000))
        except RemotingError as exc:
            raise Refused("PROXY_TIMEOUT" if isinstance(exc, TimeoutError) else "INTERNAL_SERVER_ERROR",
                          str(exc)) from None
        if resp.code != ResponseCode.SUCCESS:
            raise Refused(codes.get(resp.code, "INTERNAL_SERVER_ERROR"), resp.remark or f"broker answered {resp.code}")
        return resp

    # == recall ======================================================================================
    async def RecallMessage(self, req: Any, context: Any) -> Any:  # noqa: N802
        """A timer message taken back before it is due (RocketMQ's RecallMessageActivity): the broker's refusals
        as RocketMQ's proxy maps them (most to INTERNAL_SERVER_ERROR, with the broker's remark)."""
        try:
            topic = req.topic.name
            check_topic(topic, send=True)
            try:
                handle = RecallHandle.decode(req.recall_handle)
            except RecallHandleError as exc:
                raise Refused("INTERNAL_SERVER_ERROR", str(exc)) from None
            addr = await self._addr_of(topic, handle.broker_name)
            header = RecallMessageRequestHeader(None, topic, req.recall_handle, handle.broker_name)
            resp = await self._invoke(addr, RequestCode.RECALL_MESSAGE, header.encode(), b"", context,
                                      _RECALL_CODES)
        except Refused as exc:
            return pb.RecallMessageResponse(status=exc.status())
        return pb.RecallMessageResponse(status=status("OK"), message_id=resp.ext_fields.get("msgId", ""))

    @staticmethod
    def _interleaved(queues: list[MessageQueue]) -> list[MessageQueue]:
        """Queues broker after broker (a0, b0, a1, b1 ...)."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for q in queues:
            by_broker.setdefault(q.broker_name, []).append(q)
        out: list[MessageQueue] = []
        for rank in itertools.count():
            row = [qs[rank] for qs in by_broker.values() if rank < len(qs)]
            if not row:
                return out
            out += row
        return out

    # == receive =====================================================================================
    async def ReceiveMessage(self, req: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        """Status, messages, server time. Whatever the pop got and did not go out (the client went away, a frame
        could not be built) is put back at once, never left invisible."""
        popped: list[Popped] = []  # (message, broker address, group, topic, lite topic)
        sent = 0
        try:
            try:
                frames = await self._receive(req, context, popped)
            except Refused as exc:
                frames = [pb.ReceiveMessageResponse(status=exc.status())]
            for frame in frames:
                yield frame
                if frame.HasField("message"):
                    sent += 1
            yield self._now()
        finally:
            for m, addr, group, topic, lite in popped[sent:]:
                self._spawn(self._settle_quietly(addr, group, topic, m, ack=False, lite_topic=lite))

    async def _receive(self, req: Any, context: Any, popped: list[Popped]) -> list[Any]:
        """The frames of a receive; ``popped`` gets every message popped, in the order of their frames."""
        group, topic = req.group.name, req.message_queue.topic.name
        broker = req.message_queue.broker.name
        try:
            validate_group(group)
        except ValueError as exc:
            raise Refused("ILLEGAL_CONSUMER_GROUP", str(exc)) from None
        check_topic(topic)
        expr = req.filter_expression
        exp_type, exp = ("SQL92", expr.expression) if expr.type == 2 else ("TAG", expr.expression or "*")
        tags = _tag_set(exp) if exp_type == "TAG" else None
        addr = await self._addr_of(topic, broker)
        fifo, retries = await self._group(group, addr, required=True)
        # A lite group's receive is a lite pop of the lite topics the broker offers this client (RocketMQ 5.5's
        # routing: by the group's bind topic, whatever the front knows of the client).
        lite = self._group_lite_bind.get(group) == topic
        client_id = _client_id(context)
        if lite and not client_id:
            raise Refused("CLIENT_ID_REQUIRED", "a lite consumer's receive needs its x-mq-client-id")
        invisible = duration_seconds(req.invisible_duration) if req.HasField("invisible_duration") else \
            _auto_renew_invisible(fifo, retries)
        if not req.auto_renew and not MIN_INVISIBLE_SECONDS <= invisible <= MAX_INVISIBLE_SECONDS:
            raise Refused("ILLEGAL_INVISIBLE_TIME", f"invisible duration {invisible:g} s is not within "
                                                    f"{MIN_INVISIBLE_SECONDS:g} .. {MAX_INVISIBLE_SECONDS:g} s")
        batch = max(1, min(req.batch_size or 32, 32))
        # A push consumer of a FIFO group pops its assigned queue; anyone else the whole broker (a simple
        # consumer names a random queue: waiting on it alone would miss the others' messages).
        queue_id = req.message_queue.id if fifo and req.auto_renew and req.message_queue.id >= 0 else -1
        poll = duration_seconds(req.long_polling_timeout) if req.HasField("long_polling_timeout") else 15.0
        left = _remaining(context, poll + 3)  # after the lookups above: they took some of the deadline
        poll = max(0.0, min(poll, MAX_POLL_SECONDS, left - DEADLINE_MARGIN - 0.5))
        timeout_ms = int(poll * 1000) + 5_000
        # The pop runs shielded: a client that goes away meanwhile leaves its messages to be put back, not hidden.
        pop = asyncio.ensure_future(self.client.api.pop_lite_message(
            addr, broker, client_id, group, topic, batch, int(invisible * 1000), int(poll * 1000),
            attempt_id=req.attempt_id, timeout_ms=timeout_ms) if lite else self.client.api.pop_message(
            addr, broker, group, topic, exp_type, exp, batch, int(invisible * 1000), int(poll * 1000), orderly=fifo,
            attempt_id=req.attempt_id, queue_id=queue_id, timeout_ms=timeout_ms))
        try:
            msgs = await asyncio.shield(pop)
        except asyncio.CancelledError:
            pop.add_done_callback(lambda f: self._release_popped(f, addr, group, topic, lite))
            raise
        except BrokerResponseError as exc:
            codes: dict[int, str] = {ResponseCode.TOPIC_NOT_EXIST: "TOPIC_NOT_FOUND",
                                     ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "CONSUMER_GROUP_NOT_FOUND",
                                     ResponseCode.SUBSCRIPTION_PARSE_FAILED: "ILLEGAL_FILTER_EXPRESSION",
                                     ResponseCode.INVALID_PARAMETER: "BAD_REQUEST",
                                     ResponseCode.POLLING_FULL: "TOO_MANY_REQUESTS",
                                     ResponseCode.NO_PERMISSION: "FORBIDDEN"}
            raise Refused(codes.get(exc.code, "INTERNAL_SERVER_ERROR"), exc.remark) from None
        except (ClientError, RemotingError) as exc:
            raise Refused("PROXY_TIMEOUT" if isinstance(exc, TimeoutError) else "INTERNAL_SERVER_ERROR",
                          str(exc)) from None
        kept: list[MessageExt] = []
        for m in msgs:
            if lite or tags is None or m.tags in tags:
                kept.append(m)
            else:  # the broker matched tag hash codes only: a different tag with the same code is not ours
                self._spawn(self._settle_quietly(addr, group, topic, m, ack=True))
        if not kept:
            return [pb.ReceiveMessageResponse(status=status("MESSAGE_NOT_FOUND", "no new message"))]
        popped.extend((m, addr, group, topic, m.properties.get(PROPERTY_LITE_TOPIC) if lite else None) for m in kept)
        resource = req.message_queue.topic
        if sum(len(m.body) for m in kept) >= LARGE_BATCH:
            built = await asyncio.to_thread(self._frames, kept, resource, invisible, lite)
        else:
            built = self._frames(kept, resource, invisible, lite)
        frames = []
        for entry, frame in zip(list(popped), built, strict=True):
            if frame is None:  # could not be built: put back, and the rest goes out
                popped.remove(entry)
                self._spawn(self._settle_quietly(addr, group, topic, entry[0], ack=False, lite_topic=entry[4]))
            else:
                frames.append(frame)
        return [pb.ReceiveMessageResponse(status=status("OK")), *frames]

    @staticmethod
    def _frames(msgs: list[MessageExt], resource: Any, invisible: float, lite: bool = False) -> list[Any]:
        out: list[Any] = []
        for m in msgs:
            try:
                out.append(pb.ReceiveMessageResponse(message=to_pb_message(m, resource, invisible, lite)))
            except (ValueError, TypeError) as exc:  # one odd stored message never fails the others' receive
                log.warning("message %s of %s cannot go out over gRPC: %s", m.msg_id, m.topic, exc)
                out.append(None)
        return out

    def _release_popped(self, pop: asyncio.Future[list[MessageExt]], addr: str, group: str, topic: str,
                        lite: bool = False) -> None:
        """A receive cancelled while its pop was under way: what the pop got goes back at once (RocketMQ's proxy
        does the same when it cannot write messages to the stream)."""
        if pop.cancelled() or pop.exception() is not None:
            return
        for m in pop.result():
            self._spawn(self._settle_quietly(addr, group, topic, m, ack=False,
                                             lite_topic=m.properties.get(PROPERTY_LITE_TOPIC) if lite else None))

    async def _settle_quietly(self, addr: str, group: str, topic: str, m: MessageExt, ack: bool,
                              lite_topic: str | None = None) -> None:
        try:
            receipt = Receipt.parse(m.properties[PROPERTY_POP_CK])
            if ack:
                await self.client.api.ack_message(addr, group, topic, receipt, timeout_ms=RELEASE_TIMEOUT_MS,
                                                  lite_topic=lite_topic)
            else:
                await self.client.api.change_invisible_time(addr, group, topic, receipt, 0,
                                                            timeout_ms=RELEASE_TIMEOUT_MS, lite_topic=lite_topic)
        except (KeyError, ReceiptError, ClientError, RemotingError) as exc:
            log.info("settling a popped message of %s (group %s) failed: %s", topic, group, exc)

    @staticmethod
    def _now() -> Any:
        out = pb.ReceiveMessageResponse()
        out.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        return out

    # == settle ======================================================================================
    async def AckMessage(self, req: Any, context: Any) -> Any:  # noqa: N802
        out = pb.AckMessageResponse()
        codes = set()
        for entry in req.entries:
            try:
                await self._ack_one(req.group.name, req.topic.name, entry.receipt_handle,
                                    entry.lite_topic if entry.HasField("lite_topic") else "")
                code, text = "OK", ""
            except Refused as exc:
                code, text = exc.code, exc.text
            codes.add(code)
            out.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                            status=status(code, text))
        if not req.entries:
            out.status.CopyFrom(status("BAD_REQUEST", "no entry to acknowledge"))
        elif len(codes) == 1:
            out.status.CopyFrom(out.entries[0].status)
        else:
            out.status.CopyFrom(status("MULTIPLE_RESULTS"))
        return out

    async def _ack_one(self, group: str, topic: str, handle: str, lite_topic: str = "") -> None:
        try:
            receipt, _ = parse_handle(handle)
        except ReceiptError as exc:
            raise Refused("INVALID_RECEIPT_HANDLE", str(exc)) from None
        lite_topic = lite_topic or handle_lite_topic(handle) or ""
        addr = await self._addr_of(topic, receipt.broker_name)
        try:
            await self.client.api.ack_message(addr, group, topic, receipt, lite_topic=lite_topic or None)
        except BrokerResponseError as exc:
            raise Refused("INVALID_RECEIPT_HANDLE" if exc.code in _STALE_RECEIPT else "INTERNAL_SERVER_ERROR",
                          exc.remark) from None
        except (ClientError, RemotingError) as exc:
            raise Refused("INTERNAL_SERVER_ERROR", str(exc)) from None

    async def ChangeInvisibleDuration(self, req: Any, context: Any) -> Any:  # noqa: N802
        try:
            handle = await self._change_invisible(req)
        except Refused as exc:
            return pb.ChangeInvisibleDurationResponse(status=exc.status())

        return pb.ChangeInvisibleDurationResponse(status=status("OK"), receipt_handle=handle)

    async def _change_invisible(self, req: Any) -> str:
        seconds = duration_seconds(req.invisible_duration)
        if not 0 <= seconds <= MAX_INVISIBLE_SECONDS:
            raise Refused("ILLEGAL_INVISIBLE_TIME",
                          f"invisible duration {seconds:g} s is not within 0 .. {MAX_INVISIBLE_SECONDS:g} s")
        try:
            receipt, commit_log_offset = parse_handle(req.receipt_handle)
        except ReceiptError as exc:
            raise Refused("INVALID_RECEIPT_HANDLE", str(exc)) from None
        lite = (req.lite_topic if req.HasField("lite_topic") else "") or handle_lite_topic(req.receipt_handle)
        addr = await self._addr_of(req.topic.name, receipt.broker_name)
        try:
            renewed = await self.client.api.change_invisible_time(addr, req.group.name, req.topic.name, receipt,
                                                                  int(seconds * 1000), lite_topic=lite,
                                                                  suspend=req.HasField("suspend") and req.suspend)
        except BrokerResponseError as exc:
            raise Refused("INVALID_RECEIPT_HANDLE" if exc.code in _STALE_RECEIPT else "INTERNAL_SERVER_ERROR",
                          exc.remark) from None
        except (ClientError, RemotingError) as exc:
            raise Refused("INTERNAL_SERVER_ERROR", str(exc)) from None
        return make_handle(renewed, commit_log_offset, lite)

    # == push consumers ==============================================================================
    async def QueryAssignment(self, req: Any, context: Any) -> Any:  # noqa: N802
        """Every broker of the topic with queue id -1 (pop them all), at this front's address; for a FIFO group
        each queue (a message group lives in one): the proxy's answers."""
        topic = req.topic.name
        try:
            check_topic(topic)
            try:
                validate_group(req.group.name)
            except ValueError as exc:
                raise Refused("ILLEGAL_CONSUMER_GROUP", str(exc)) from None
            route = await self._route(topic, fresh=True)
        except Refused as exc:
            return pb.QueryAssignmentResponse(status=exc.status())
        masters = {b.broker_name for b in route.broker_datas if b.master_addr}
        readable = {q.broker_name: q.read_queue_nums for q in route.queue_datas
                    if q.broker_name in masters and q.read_queue_nums > 0 and q.perm & PERM_READ}
        if not readable:
            return pb.QueryAssignmentResponse(status=status("FORBIDDEN", "no readable queue"))
        out = pb.QueryAssignmentResponse(status=status("OK"))
        fifo, _ = await self._group(req.group.name)
        fifo = fifo and self._group_lite_bind.get(req.group.name) != topic  # (a lite group pops the whole broker)
        for name in sorted(readable):
            for qid in range(readable[name]) if fifo else (-1,):
                mq = out.assignments.add().message_queue
                mq.topic.CopyFrom(req.topic)
                mq.id = qid
                mq.permission = 4
                mq.broker.name = name
                mq.broker.endpoints.CopyFrom(req.endpoints)
        return out

    # == dead letters ================================================================================
    async def ForwardMessageToDeadLetterQueue(self, req: Any, context: Any) -> Any:  # noqa: N802
        """A FIFO push consumer gave up on a message: into the group's DLQ (CONSUMER_SEND_MSG_BACK with no delay
        level), then acknowledged, which releases its message group (RocketMQ's proxy's way)."""
        try:
            await self._forward(req)
        except Refused as exc:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=exc.status())
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status("OK"))

    async def _forward(self, req: Any) -> None:
        group, topic = req.group.name, req.topic.name
        try:
            validate_group(group)
        except ValueError as exc:
            raise Refused("ILLEGAL_CONSUMER_GROUP", str(exc)) from None
        check_topic(topic)
        try:
            receipt, commit_log_offset = parse_handle(req.receipt_handle)
        except ReceiptError as exc:
            raise Refused("INVALID_RECEIPT_HANDLE", str(exc)) from None
        if commit_log_offset is None:
            raise Refused("INVALID_RECEIPT_HANDLE", "the receipt handle does not say where the message lies")
        lite = (req.lite_topic if req.HasField("lite_topic") else "") or handle_lite_topic(req.receipt_handle)
        addr = await self._addr_of(topic, receipt.broker_name)
        try:  # the message the handle says lies at that offset, then the receipt (renewed: still the group's)
            found = await self.client.api.view_message(addr, commit_log_offset)
            m = found[0] if found else None
            where = None if m is None else (m.topic, m.queue_id, m.queue_offset) if not lite else (
                m.topic, 0, _int_or(m.properties.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET), -1),
                m.properties.get(PROPERTY_INNER_MULTI_DISPATCH))
            wanted = (real_topic(receipt.retry, topic, group), receipt.queue_id, receipt.queue_offset) if not lite \
                else (topic, receipt.queue_id, receipt.queue_offset, to_lmq_name(topic, lite))
            if where != wanted:
                raise Refused("INVALID_RECEIPT_HANDLE", "the receipt handle names another message")
            renewed = await self.client.api.change_invisible_time(addr, group, topic, receipt, 60_000,
                                                                  lite_topic=lite or None)
        except BrokerResponseError as exc:
            raise Refused("INVALID_RECEIPT_HANDLE" if exc.code in _STALE_RECEIPT else "INTERNAL_SERVER_ERROR",
                          exc.remark) from None
        except (ClientError, RemotingError, ValueError) as exc:
            raise Refused("INTERNAL_SERVER_ERROR", str(exc)) from None
        ext = ConsumerSendMsgBackRequestHeader(commit_log_offset, group, -1, req.message_id, topic,
                                               max_reconsume_times=max(0, req.max_delivery_attempts - 1)).encode()
        try:
            resp = await self.client.api.invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK, ext, timeout_ms=3000)
            if resp.code != ResponseCode.SUCCESS:
                raise Refused("INTERNAL_SERVER_ERROR", resp.remark or f"broker answered {resp.code}")
            await self.client.api.ack_message(addr, group, topic, renewed, lite_topic=lite or None)
        except BrokerResponseError as exc:  # in the DLQ already: done, whatever the ack says
            log.info("a message forwarded to the DLQ of %s could not be acknowledged: %s", group, exc)
        except (ClientError, RemotingError) as exc:
            raise Refused("INTERNAL_SERVER_ERROR", str(exc)) from None

    # == transactions ================================================================================
    async def EndTransaction(self, req: Any, context: Any) -> Any:  # noqa: N802
        try:
            await self._end_transaction(req)
        except Refused as exc:
            return pb.EndTransactionResponse(status=exc.status())
        return pb.EndTransactionResponse(status=status("OK"))

    async def _end_transaction(self, req: Any) -> None:
        try:
            tid = TransactionId.decode(req.transaction_id)
        except ValueError as exc:
            raise Refused("INVALID_TRANSACTION_ID", str(exc)) from None
        if req.resolution not in (1, 2):  # unspecified: it stays open, and is checked again later
            return
        addr = await self._addr_of(req.topic.name, tid.broker_name)
        ext = EndTransactionRequestHeader(req.topic.name, tid.queue_offset, tid.commit_log_offset,
                                          TRANSACTION_COMMIT_TYPE if req.resolution == 1 else TRANSACTION_ROLLBACK_TYPE,
                                          req.source == 2, req.message_id, req.transaction_id,
                                          topic=req.topic.name).encode()
        try:
            resp = await self.client.api.invoke(addr, RequestCode.END_TRANSACTION, ext, timeout_ms=2500)
        except RemotingError as exc:
            raise Refused("INTERNAL_SERVER_ERROR", str(exc)) from None
        if resp.code != ResponseCode.SUCCESS:
            raise Refused("INVALID_TRANSACTION_ID", resp.remark or str(resp.code))

    def _register_producer(self, topics: list[str], stream: asyncio.Queue[Any]) -> None:
        """A producer's settings: the checks of its topics' transactions go to its Telemetry stream."""
        new = False
        for topic in topics:
            if topic not in self._producer_streams and len(self._producer_streams) >= ROUTED_TOPICS:
                break
            self._producer_streams.setdefault(topic, []).append(stream)
            if topic not in self.client.producer_groups:
                self.client.producer_groups.add(topic)
                self.client.transaction_checkers[topic] = self._orphan_check
                new = True
        if new:
            self._spawn(self._announce())

    async def _announce(self) -> None:
        """Heartbeat the brokers at once, so that they know where to check transactions back."""
        try:
            await self.client.send_heartbeat_to_all()
        except (ClientError, RemotingError) as exc:
            log.info("heartbeat of the gRPC front failed: %s", exc)

    def _unregister_producer(self, stream: asyncio.Queue[Any]) -> None:
        for topic, streams in list(self._producer_streams.items()):
            if stream in streams:
                streams.remove(stream)
            if not streams:
                del self._producer_streams[topic]

    def _orphan_check(self, broker_addr: str, header: CheckTransactionStateRequestHeader, msg: MessageExt) -> None:
        """A broker asks about an undecided transaction: to a producer of its topic, through Telemetry."""
        topic = msg.properties.get(PROPERTY_REAL_TOPIC, msg.topic)
        streams = self._producer_streams.get(topic)
        broker = next((name for name, addrs in self.client.broker_addrs.items() if broker_addr in addrs.values()),
                      None)
        if not streams or broker is None:
            log.info("no gRPC producer of %s to check transaction %s with", topic, header.transaction_id or None)
            return
        tid = TransactionId(broker, header.commit_log_offset, header.tran_state_table_offset)
        msg.topic = topic
        cmd = pb.TelemetryCommand()
        cmd.recover_orphaned_transaction_command.message.CopyFrom(to_pb_message(msg, pb.Resource(name=topic), 0.0))
        cmd.recover_orphaned_transaction_command.transaction_id = tid.encode()
        stream = streams[next(self._turn) % len(streams)]
        try:
            stream.put_nowait(cmd)
        except asyncio.QueueFull:
            log.warning("the Telemetry stream of a producer of %s is full: transaction check dropped", topic)


def _guarded(service: MessagingService, name: str, fn: Any, resp_cls: Any, client_streams: bool,
             server_streams: bool) -> Any:
    """``fn`` behind ``service.auth``: a refused request is answered with its response type's UNAUTHORIZED status
    (on the Telemetry stream: a command with that status, the stream going on), and never reaches ``fn``."""
    auth = service.auth
    assert auth is not None

    def refusal(req: Any, context: Any, fresh: bool = True) -> Any:
        peer = service.peer_of(context.peer())
        if peer is None:
            return resp_cls(status=status("UNAUTHORIZED", "the client's address is not known: connect to the "
                                                          "front's port"))
        text = auth.refusal(name, req, dict(context.invocation_metadata() or ()), peer, fresh)
        return None if text is None else resp_cls(status=status("UNAUTHORIZED", text))

    if client_streams:
        async def guarded_stream(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            first = True

            def checked(cmd: Any) -> Any:
                nonlocal first
                refused = refusal(cmd, context, fresh=first)  # (the signature's age: at the stream's opening)
                first = False
                return refused

            async for item in filtered_stream(requests, context, fn, checked, name):
                yield item
        return guarded_stream
    if server_streams:
        async def guarded_server_stream(req: Any, context: Any) -> AsyncIterator[Any]:
            refused = refusal(req, context)
            if refused is not None:
                yield refused
                return
            async for item in fn(req, context):
                yield item
        return guarded_server_stream

    async def guarded_unary(req: Any, context: Any) -> Any:
        refused = refusal(req, context)
        return refused if refused is not None else await fn(req, context)
    return guarded_unary


def _fronted(service: MessagingService, fn: Any, client_streams: bool, server_streams: bool) -> Any:
    """``fn`` served only to calls that came through the TLS front: grpcio's loopback port is not a way around
    the front's TLS (enforcing, mutual) nor around the address rules."""

    async def check(context: Any) -> None:
        if service.peer_of(context.peer()) is None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "connect to the gRPC front's port")

    if server_streams:
        async def fronted_stream(req: Any, context: Any) -> AsyncIterator[Any]:
            await check(context)
            async for item in fn(req, context):
                yield item
        return fronted_stream

    async def fronted_unary(req: Any, context: Any) -> Any:
        await check(context)
        return await fn(req, context)
    return fronted_unary


def handler(service: MessagingService, fronted: bool = False) -> grpc.GenericRpcHandler:
    """The service's methods as a generic gRPC handler (no generated stubs: the protocol module's classes);
    ``fronted``: served only to calls through the TLS front."""
    methods: dict[str, grpc.RpcMethodHandler] = {}
    for name, (req, resp, client_streams, server_streams) in RPCS.items():
        fn = getattr(service, name)
        if service.auth is not None:
            fn = _guarded(service, name, fn, getattr(pb, resp), client_streams, server_streams)
        fn = namespaced(fn, getattr(pb, resp), client_streams, server_streams)  # (outside: auth sees ns%name)
        if fronted:
            fn = _fronted(service, fn, client_streams, server_streams)
        des, ser = getattr(pb, req).FromString, getattr(pb, resp).SerializeToString
        if client_streams and server_streams:
            methods[name] = grpc.stream_stream_rpc_method_handler(fn, des, ser)
        elif server_streams:
            methods[name] = grpc.unary_stream_rpc_method_handler(fn, des, ser)
        else:
            methods[name] = grpc.unary_unary_rpc_method_handler(fn, des, ser)
    return grpc.method_handlers_generic_handler(SERVICE, methods)


async def serve(namesrv: str, host: str = "127.0.0.1", port: int = 8081, config: ClientConfig | None = None,
                auth: GrpcAuth | None = None, credentials: CredentialsLike | None = None,
                tls: ServerTls | None = None,
                broker_tls: ssl.SSLContext | None = None) -> tuple[grpc.aio.Server, MessagingService, int]:
    """Start the gRPC front on ``host:port`` (0: any free port); the server, its service and the port. ``OSError``
    when the port is taken (gRPC's port sharing is off: two fronts never split one port's clients). With ``auth``,
    every RPC is authenticated and authorized first; ``credentials`` sign what it sends to the brokers. With
    ``tls`` (permissive or enforcing), the port is ``GrpcTlsFront``'s; ``broker_tls`` is for the brokers."""
    service = MessagingService(namesrv, config, auth, credentials, broker_tls)
    await service.start()
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0),
                                      ("grpc.max_receive_message_length", MAX_BODY_SIZE + (4 << 20)),
                                      ("grpc.max_send_message_length", -1)])
    server.add_generic_rpc_handlers((handler(service, fronted=tls is not None),))
    if tls is not None:
        service.peer_of = _no_peer  # (until the front is up, nothing is served from grpcio's loopback port)
    try:
        bound = server.add_insecure_port(f"{host}:{port}" if tls is None else "127.0.0.1:0")
    except RuntimeError:
        bound = 0
    if not bound:
        await service.shutdown()
        raise OSError(f"the gRPC front cannot listen on {host}:{port} (in use?): choose another port, or none")
    await server.start()
    if tls is not None:
        front = GrpcTlsFront(tls, bound)
        try:
            bound = await front.start(host, port)
        except OSError as exc:
            await server.stop(None)
            await service.shutdown()
            raise OSError(f"the gRPC front cannot listen on {host}:{port} ({exc.strerror}): choose another port, "
                          "or none") from exc
        service.front = front
        service.peer_of = front.peer
    log.info("gRPC front (RocketMQ 5 clients) on %s:%d, name server %s", host, bound, namesrv)
    return server, service, bound


async def stop(server: grpc.aio.Server, service: MessagingService) -> None:
    service.stopping = True  # (the streams the stop cancels are not clients gone: their subscriptions stay)
    if service.front is not None:
        service.front.stop_accepting()
    await server.stop(grace=1.0)  # (the calls in flight end through the front's open connections)
    if service.front is not None:
        service.front.close()
    await service.shutdown()


__all__ = ["MessagingService", "handler", "serve", "stop"]
