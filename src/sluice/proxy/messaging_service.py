"""``apache.rocketmq.v2.MessagingService`` in front of Sluice's brokers: what RocketMQ's proxy does for the
RocketMQ 5 clients, in cluster mode (routes from the name server, every broker reached over the remoting
protocol, as any client of it).

Sends become SEND_MESSAGE_V2 (the client's message id kept as UNIQ_KEY, a FIFO message group as the sharding key,
a delivery timestamp as a timer); receives are POP_MESSAGE over the whole topic on the broker asked for; acks,
changes of invisible duration and their receipt handles are the broker's own POP ones. Every answer carries an
in-band ``Status``, as the proxy's do.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from sluice.client.message_id import create_uniq_id
from sluice.client.mq_client import MQClientInstance
from sluice.common.config import ClientConfig
from sluice.common.errors import BrokerResponseError, ClientError, SluiceError
from sluice.common.extra_info import PROPERTY_POP_CK, Receipt, ReceiptError
from sluice.common.message import MessageExt, decode_message_id
from sluice.common.naming import validate_group, validate_topic
from sluice.common.properties import (
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    encode_properties,
)
from sluice.common.sysflag import (
    PERM_READ,
    PERM_WRITE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from sluice.proxy.protocol import CODE, pb
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.errors import RemotingError

log = logging.getLogger(__name__)

MAX_BODY_SIZE = 4 * 1024 * 1024
MAX_POLL_SECONDS = 20.0  # the proxy's bound on a receive's long polling
MIN_INVISIBLE_SECONDS = 10.0
MAX_INVISIBLE_SECONDS = 12 * 3600.0
MESSAGE_TYPES = [1, 2, 3, 4]  # NORMAL, FIFO, DELAY, TRANSACTION
# Properties a gRPC client's user properties may not set: the ones the system keeps for itself.
_SYSTEM_KEYS = frozenset({PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, PROPERTY_SHARDING_KEY,
                          PROPERTY_TIMER_DELIVER_MS, PROPERTY_POP_CK, "WAIT", "DELAY", PROPERTY_TRANSACTION_PREPARED,
                          PROPERTY_PRODUCER_GROUP, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID,
                          PROPERTY_TRANSACTION_CHECK_TIMES})
PRODUCER_GROUP = "PROXY_SEND_GROUP"
SEND_CODES_OK = (ResponseCode.SUCCESS,)


TELEMETRY_QUEUE = 1024  # commands waiting for one client's stream
GROUP_CACHE_SECONDS = 30.0
DEFAULT_RETRIES = 16
GROUP_CACHE_SIZE = 10_000
# A gRPC receipt handle: the broker's POP receipt, then where the message lies in the commit log.
HANDLE_SEPARATOR = "#"


def make_handle(receipt: Receipt, commit_log_offset: int | None) -> str:
    return str(receipt) if commit_log_offset is None else f"{receipt}{HANDLE_SEPARATOR}{commit_log_offset}"


def parse_handle(handle: str) -> tuple[Receipt, int | None]:
    """A receipt handle this front gave: the broker's receipt and the message's commit-log offset."""
    text, sep, offset = handle.rpartition(HANDLE_SEPARATOR)
    if not sep:
        return Receipt.parse(handle), None
    if not offset.isdigit() or len(offset) > 19:
        raise ReceiptError(f"receipt handle ends in {offset[:40]!r}, not a commit-log offset")
    return Receipt.parse(text), int(offset)


@dataclass(frozen=True, slots=True)
class TransactionId:
    """A gRPC transaction id: where the half message lies, which is all END_TRANSACTION needs."""

    broker_name: str
    commit_log_offset: int
    queue_offset: int

    def encode(self) -> str:
        return f"{self.broker_name}:{self.commit_log_offset}:{self.queue_offset}"

    @classmethod
    def decode(cls, text: str) -> TransactionId:
        broker, _, rest = text.rpartition(":")
        broker, _, commit_log = broker.rpartition(":")
        if not broker or not commit_log.isdigit() or not rest.isdigit():
            raise ValueError(f"transaction id {text[:80]!r} is not one this front gave")
        return cls(broker, int(commit_log), int(rest))


def status(code: str, message: str = "") -> Any:
    return pb.Status(code=CODE[code], message=message or code)


def duration_seconds(d: Any) -> float:
    return d.seconds + d.nanos / 1e9


class MessagingService:
    """The RPCs, each an ``async def`` taking the request and the gRPC context."""

    def __init__(self, namesrv: str, config: ClientConfig | None = None) -> None:
        base = config or ClientConfig()
        self.client = MQClientInstance(base.replace(namesrv_addr=namesrv, instance_name="sluice-proxy"))
        self._turn = itertools.count()
        self._producer_streams: dict[str, list[asyncio.Queue[Any]]] = {}  # topic → Telemetry streams
        self._groups: dict[str, tuple[float, bool, int]] = {}  # group → (when looked up, FIFO, retries)

    async def start(self) -> None:
        await self.client.start()

    async def shutdown(self) -> None:
        await self.client.shutdown()

    # == routes, heartbeats, settings ================================================================
    async def QueryRoute(self, req: Any, context: Any) -> Any:  # noqa: N802 - the RPC's name
        topic = req.topic.name
        try:
            validate_topic(topic)
            route = await self.client.update_route(topic)
        except SluiceError as exc:
            return pb.QueryRouteResponse(status=status("ILLEGAL_TOPIC" if isinstance(exc, ValueError)
                                                       else "INTERNAL_SERVER_ERROR", str(exc)))
        if route is None or not route.queue_datas:
            return pb.QueryRouteResponse(status=status("TOPIC_NOT_FOUND", f"topic {topic} not found"))
        out = pb.QueryRouteResponse(status=status("OK"))
        masters = {b.broker_name for b in route.broker_datas if b.master_addr}
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
                mq.accept_message_types.extend(MESSAGE_TYPES)
        return out

    async def Heartbeat(self, req: Any, context: Any) -> Any:  # noqa: N802
        return pb.HeartbeatResponse(status=status("OK"))

    async def NotifyClientTermination(self, req: Any, context: Any) -> Any:  # noqa: N802
        return pb.NotifyClientTerminationResponse(status=status("OK"))

    async def Telemetry(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:  # noqa: N802
        """The settings exchange: each settings command is answered with the client's settings completed with
        this front's (retry policy, body size limit, receive batch and polling bounds); a producer's stream also
        carries the checks of its topics' undecided transactions."""
        out: asyncio.Queue[Any] = asyncio.Queue(maxsize=TELEMETRY_QUEUE)
        registered = False

        async def read() -> None:
            nonlocal registered
            try:
                async for cmd in requests:
                    if not cmd.HasField("settings"):
                        continue
                    fifo, retries = False, DEFAULT_RETRIES
                    if cmd.settings.HasField("subscription") and cmd.settings.subscription.HasField("group"):
                        fifo, retries = await self._group(cmd.settings.subscription.group.name)
                    reply = self._settings_reply(cmd.settings, fifo, retries)
                    if reply.settings.HasField("publishing") and not registered:
                        self._register_producer([t.name for t in reply.settings.publishing.topics], out)
                        registered = True
                    await out.put(pb.TelemetryCommand(status=status("OK"), settings=reply.settings))
            finally:
                await out.put(None)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while (cmd := await out.get()) is not None:
                yield cmd
        finally:
            reader.cancel()
            self._unregister_producer(out)

    @staticmethod
    def _settings_reply(client: Any, fifo: bool = False, retries: int = 16) -> Any:
        reply = pb.TelemetryCommand()
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
            settings.backoff_policy.max_attempts = retries + 1
            for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200):
                settings.backoff_policy.customized_backoff.next.add(seconds=s)
        settings.metric.on = False
        return reply

    # == send ========================================================================================
    async def SendMessage(self, req: Any, context: Any) -> Any:  # noqa: N802
        if len(req.messages) != 1:
            return pb.SendMessageResponse(status=status("BAD_REQUEST", "send one message at a time"))
        m = req.messages[0]
        sp = m.system_properties
        try:
            props, sharding = self._properties(m)
        except ValueError as exc:
            code, _, text = str(exc).partition(": ")
            return self._send_failed(code, text)
        topic = m.topic.name
        route = await self.client.get_route(topic)
        queues = [] if route is None else route.publish_queues(topic)
        if not queues:
            return self._send_failed("TOPIC_NOT_FOUND", f"topic {topic} not found")
        if sharding:  # one message group, one queue: its order kept
            mq = queues[int.from_bytes(hashlib.sha256(sharding.encode()).digest()[:8], "big") % len(queues)]
        else:
            mq = queues[next(self._turn) % len(queues)]
        addr = self.client.find_broker_addr(mq.broker_name)
        if addr is None:
            return self._send_failed("INTERNAL_SERVER_ERROR", f"no address for broker {mq.broker_name}")
        born = sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else int(time.time() * 1000)
        transactional = sp.message_type == 4
        group, sys_flag = PRODUCER_GROUP, 0
        if transactional:  # a half message, checked back with the producers of its topic (RocketMQ's proxy's way)
            group, sys_flag = topic, TRANSACTION_PREPARED_TYPE
            props[PROPERTY_TRANSACTION_PREPARED] = "true"
            props[PROPERTY_PRODUCER_GROUP] = topic
        ext = {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(mq.queue_id), "f": str(sys_flag),
               "g": str(born), "h": "0", "i": encode_properties(props).decode(), "j": "0", "k": "false",
               "m": "false", "n": mq.broker_name}
        try:
            resp = await self.client.api.invoke(addr, RequestCode.SEND_MESSAGE_V2, ext, m.body, timeout_ms=3000)
        except RemotingError as exc:
            return self._send_failed("PROXY_TIMEOUT" if isinstance(exc, TimeoutError) else "INTERNAL_SERVER_ERROR",
                                     str(exc))
        if resp.code != ResponseCode.SUCCESS:
            code = {ResponseCode.FLUSH_DISK_TIMEOUT: "MASTER_PERSISTENCE_TIMEOUT",
                    ResponseCode.FLUSH_SLAVE_TIMEOUT: "SLAVE_PERSISTENCE_TIMEOUT",
                    ResponseCode.SLAVE_NOT_AVAILABLE: "HA_NOT_AVAILABLE",
                    ResponseCode.MESSAGE_ILLEGAL: "BAD_REQUEST",
                    ResponseCode.TOPIC_NOT_EXIST: "TOPIC_NOT_FOUND",
                    ResponseCode.NO_PERMISSION: "FORBIDDEN",
                    ResponseCode.SYSTEM_BUSY: "TOO_MANY_REQUESTS"}.get(resp.code, "INTERNAL_SERVER_ERROR")
            return self._send_failed(code, resp.remark or f"broker answered {resp.code}")
        out = pb.SendMessageResponse(status=status("OK"))
        queue_offset = int(resp.ext_fields.get("queueOffset", "0"))
        transaction_id = ""
        if transactional:  # everything END_TRANSACTION needs, so the front keeps nothing
            try:
                _, commit_log_offset = decode_message_id(resp.ext_fields.get("msgId", "").split(",")[0])
            except ValueError:
                return self._send_failed("INTERNAL_SERVER_ERROR", "the broker answered without an offset message id")
            transaction_id = TransactionId(mq.broker_name, commit_log_offset, queue_offset).encode()
        out.entries.add(status=status("OK"), message_id=props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX],
                        offset=queue_offset, transaction_id=transaction_id)
        return out

    @staticmethod
    def _send_failed(code: str, text: str) -> Any:
        out = pb.SendMessageResponse(status=status(code, text))
        out.entries.add(status=status(code, text))
        return out

    @staticmethod
    def _properties(m: Any) -> tuple[dict[str, str], str]:
        """The stored properties of a gRPC message, and its message group; ``ValueError("CODE: why")``."""
        sp = m.system_properties
        if not m.body:
            raise ValueError("MESSAGE_BODY_EMPTY: the message body is empty")
        if len(m.body) > MAX_BODY_SIZE:
            raise ValueError(f"MESSAGE_BODY_TOO_LARGE: the body of {len(m.body)} bytes exceeds {MAX_BODY_SIZE}")
        if sp.message_type == 4 and (sp.HasField("message_group") or sp.HasField("delivery_timestamp")):
            raise ValueError("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: a transactional message has no message group "
                             "and no delivery time")
        props: dict[str, str] = {}
        size = 0
        for k, v in m.user_properties.items():
            if k in _SYSTEM_KEYS or not k or "\x01" in k or "\x02" in k or "\x01" in v or "\x02" in v:
                raise ValueError(f"ILLEGAL_MESSAGE_PROPERTY_KEY: user property {k[:40]!r} is not allowed")
            size += len(k) + len(v)
            props[k] = v
        if size > 16 * 1024:
            raise ValueError(f"MESSAGE_PROPERTIES_TOO_LARGE: user properties of {size} bytes exceed 16 KiB")
        if sp.HasField("tag"):
            if not sp.tag or "|" in sp.tag or "\x01" in sp.tag or "\x02" in sp.tag:
                raise ValueError(f"ILLEGAL_MESSAGE_TAG: tag {sp.tag[:40]!r} is not allowed")
            props[PROPERTY_TAGS] = sp.tag
        if sp.keys:
            props[PROPERTY_KEYS] = " ".join(sp.keys)
        props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id or create_uniq_id()
        sharding = ""
        if sp.HasField("message_group"):
            if not sp.message_group or len(sp.message_group.encode()) >= 64:
                raise ValueError("ILLEGAL_MESSAGE_GROUP: a message group is 1 to 63 bytes")
            sharding = props[PROPERTY_SHARDING_KEY] = sp.message_group
        if sp.HasField("delivery_timestamp"):
            ts = sp.delivery_timestamp
            ms = ts.seconds if ts.seconds > 10**11 else ts.ToMilliseconds()  # the client's unit trap
            if ms - time.time() * 1000 > 86_400_000:
                raise ValueError("ILLEGAL_DELIVERY_TIME: a delivery time more than a day ahead")
            props[PROPERTY_TIMER_DELIVER_MS] = str(ms)
        return props, sharding

    # == receive and settle ==========================================================================
    async def ReceiveMessage(self, req: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        group, topic = req.group.name, req.message_queue.topic.name
        broker = req.message_queue.broker.name
        try:
            validate_group(group)
            validate_topic(topic)
        except ValueError as exc:
            yield pb.ReceiveMessageResponse(status=status("BAD_REQUEST", str(exc)))
            yield self._now()
            return
        invisible = duration_seconds(req.invisible_duration) if req.HasField("invisible_duration") else 60.0
        if not req.auto_renew and not MIN_INVISIBLE_SECONDS <= invisible <= MAX_INVISIBLE_SECONDS:
            yield pb.ReceiveMessageResponse(status=status(
                "ILLEGAL_INVISIBLE_TIME", f"invisible duration {invisible:g} s is not within "
                                          f"{MIN_INVISIBLE_SECONDS:g} .. {MAX_INVISIBLE_SECONDS:g} s"))
            yield self._now()
            return
        poll = duration_seconds(req.long_polling_timeout) if req.HasField("long_polling_timeout") else 15.0
        remaining = context.time_remaining() if context.time_remaining() is not None else poll + 3
        poll = max(0.0, min(poll, MAX_POLL_SECONDS, remaining - 1.5))  # answer before the client's deadline
        batch = max(1, min(req.batch_size or 32, 32))
        expr = req.filter_expression
        exp_type, exp = ("SQL92", expr.expression) if expr.type == 2 else ("TAG", expr.expression or "*")
        await self.client.get_route(topic)
        addr = self.client.find_broker_addr(broker)
        if addr is None:
            yield pb.ReceiveMessageResponse(status=status("NOT_FOUND", f"broker {broker} not found"))
            yield self._now()
            return
        fifo = await self._is_fifo(group, addr)
        queue_id = req.message_queue.id if fifo and req.message_queue.id >= 0 else -1
        try:
            msgs = await self.client.api.pop_message(addr, broker, group, topic, exp_type, exp, batch,
                                                     int(invisible * 1000), int(poll * 1000), orderly=fifo,
                                                     attempt_id=req.attempt_id, queue_id=queue_id)
        except BrokerResponseError as exc:
            code = {ResponseCode.TOPIC_NOT_EXIST: "TOPIC_NOT_FOUND",
                    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "CONSUMER_GROUP_NOT_FOUND",
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED: "ILLEGAL_FILTER_EXPRESSION",
                    ResponseCode.POLLING_FULL: "TOO_MANY_REQUESTS",
                    ResponseCode.NO_PERMISSION: "FORBIDDEN"}.get(exc.code, "INTERNAL_SERVER_ERROR")
            yield pb.ReceiveMessageResponse(status=status(code, exc.remark))
            yield self._now()
            return
        except (ClientError, RemotingError) as exc:
            yield pb.ReceiveMessageResponse(status=status("INTERNAL_SERVER_ERROR", str(exc)))
            yield self._now()
            return
        if not msgs:
            yield pb.ReceiveMessageResponse(status=status("MESSAGE_NOT_FOUND", "no new message"))
            yield self._now()
            return
        yield pb.ReceiveMessageResponse(status=status("OK"))
        for m in msgs:
            yield pb.ReceiveMessageResponse(message=self._message(m, req.message_queue.topic, invisible))
        yield self._now()

    @staticmethod
    def _now() -> Any:
        out = pb.ReceiveMessageResponse()
        out.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        return out

    @staticmethod
    def _message(m: MessageExt, topic: Any, invisible: float) -> Any:
        props = dict(m.properties)
        out = pb.Message(body=m.body)
        out.topic.CopyFrom(topic)
        sp = out.system_properties
        sp.message_id = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or m.msg_id
        if PROPERTY_POP_CK in props:  # the broker's receipt, and where the message lies (for a forward to the DLQ)
            sp.receipt_handle = f"{props[PROPERTY_POP_CK]}{HANDLE_SEPARATOR}{m.commit_log_offset}"
        sp.body_encoding = 1  # IDENTITY: bodies are inflated before they leave
        sp.body_digest.type = 1  # CRC32
        sp.body_digest.checksum = f"{zlib.crc32(m.body) & 0xFFFFFFFF:08X}"
        sp.born_timestamp.FromMilliseconds(m.born_timestamp)
        sp.born_host = m.born_host
        sp.store_timestamp.FromMilliseconds(m.store_timestamp)
        sp.store_host = m.store_host
        sp.queue_id = m.queue_id
        sp.queue_offset = m.queue_offset
        if invisible:
            sp.invisible_duration.FromMilliseconds(int(invisible * 1000))
        sp.delivery_attempt = m.reconsume_times + 1
        if PROPERTY_TAGS in props:
            sp.tag = props[PROPERTY_TAGS]
        if props.get(PROPERTY_KEYS):
            sp.keys.extend(k for k in props[PROPERTY_KEYS].split(" ") if k)
        sp.message_type = 1
        if props.get(PROPERTY_SHARDING_KEY):
            sp.message_group = props[PROPERTY_SHARDING_KEY]
            sp.message_type = 2
        if PROPERTY_TIMER_DELIVER_MS in props:
            sp.delivery_timestamp.FromMilliseconds(int(props[PROPERTY_TIMER_DELIVER_MS]))
            sp.message_type = 3
        if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
            sp.message_type = 4
        for k, v in props.items():
            if k not in _SYSTEM_KEYS and k not in _STORED_ONLY:
                out.user_properties[k] = v
        return out

    async def AckMessage(self, req: Any, context: Any) -> Any:  # noqa: N802
        out = pb.AckMessageResponse()
        codes = set()
        for entry in req.entries:
            code, text = await self._ack_one(req.group.name, req.topic.name, entry.receipt_handle)
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

    async def _ack_one(self, group: str, topic: str, handle: str) -> tuple[str, str]:
        try:
            receipt, _ = parse_handle(handle)
        except ReceiptError as exc:
            return "INVALID_RECEIPT_HANDLE", str(exc)
        addr = await self._addr_of(topic, receipt.broker_name)
        if addr is None:
            return "INVALID_RECEIPT_HANDLE", f"no broker {receipt.broker_name}"
        try:
            await self.client.api.ack_message(addr, group, topic, receipt)
        except BrokerResponseError as exc:
            if exc.code in (ResponseCode.NO_MESSAGE, ResponseCode.INVALID_PARAMETER):
                return "INVALID_RECEIPT_HANDLE", exc.remark
            return "INTERNAL_SERVER_ERROR", exc.remark
        except (ClientError, RemotingError) as exc:
            return "INTERNAL_SERVER_ERROR", str(exc)
        return "OK", ""

    async def ChangeInvisibleDuration(self, req: Any, context: Any) -> Any:  # noqa: N802
        seconds = duration_seconds(req.invisible_duration)
        if not 0 <= seconds <= MAX_INVISIBLE_SECONDS:
            return pb.ChangeInvisibleDurationResponse(status=status(
                "ILLEGAL_INVISIBLE_TIME", f"invisible duration {seconds:g} s is not within 0 .. "
                                          f"{MAX_INVISIBLE_SECONDS:g} s"))
        try:
            receipt, commit_log_offset = parse_handle(req.receipt_handle)
        except ReceiptError as exc:
            return pb.ChangeInvisibleDurationResponse(status=status("INVALID_RECEIPT_HANDLE", str(exc)))
        addr = await self._addr_of(req.topic.name, receipt.broker_name)
        if addr is None:
            return pb.ChangeInvisibleDurationResponse(status=status("INVALID_RECEIPT_HANDLE",
                                                                    f"no broker {receipt.broker_name}"))
        try:
            renewed = await self.client.api.change_invisible_time(addr, req.group.name, req.topic.name, receipt,
                                                                  int(seconds * 1000))
        except BrokerResponseError as exc:
            code = "INVALID_RECEIPT_HANDLE" if exc.code in (ResponseCode.NO_MESSAGE, ResponseCode.INVALID_PARAMETER) \
                else "INTERNAL_SERVER_ERROR"
            return pb.ChangeInvisibleDurationResponse(status=status(code, exc.remark))
        except (ClientError, RemotingError) as exc:
            return pb.ChangeInvisibleDurationResponse(status=status("INTERNAL_SERVER_ERROR", str(exc)))
        return pb.ChangeInvisibleDurationResponse(status=status("OK"), receipt_handle=make_handle(renewed,
                                                                                                  commit_log_offset))

    async def _addr_of(self, topic: str, broker: str) -> str | None:
        addr = self.client.find_broker_addr(broker)
        if addr is None:
            await self.client.get_route(topic)
            addr = self.client.find_broker_addr(broker)
        return addr

    # == push consumers ==============================================================================
    async def QueryAssignment(self, req: Any, context: Any) -> Any:  # noqa: N802
        """Every broker of the topic with queue id -1 (pop them all), at this front's address: the proxy's
        answer to a group that is not FIFO."""
        topic = req.topic.name
        try:
            validate_topic(topic)
            validate_group(req.group.name)
            route = await self.client.update_route(topic)
        except ValueError as exc:
            return pb.QueryAssignmentResponse(status=status("BAD_REQUEST", str(exc)))
        except SluiceError as exc:
            return pb.QueryAssignmentResponse(status=status("INTERNAL_SERVER_ERROR", str(exc)))
        if route is None:
            return pb.QueryAssignmentResponse(status=status("TOPIC_NOT_FOUND", f"topic {topic} not found"))
        masters = {b.broker_name for b in route.broker_datas if b.master_addr}
        readable = sorted({q.broker_name for q in route.queue_datas
                           if q.broker_name in masters and q.read_queue_nums > 0 and q.perm & PERM_READ})
        if not readable:
            return pb.QueryAssignmentResponse(status=status("FORBIDDEN", "no readable queue"))
        out = pb.QueryAssignmentResponse(status=status("OK"))
        fifo = await self._is_fifo(req.group.name)
        queues = {q.broker_name: q.read_queue_nums for q in route.queue_datas}
        for name in readable:  # FIFO: each queue (a message group lives in one); else the whole broker
            for qid in range(queues[name]) if fifo else (-1,):
                mq = out.assignments.add().message_queue
                mq.topic.CopyFrom(req.topic)
                mq.id = qid
                mq.permission = 4
                mq.broker.name = name
                mq.broker.endpoints.CopyFrom(req.endpoints)
        return out

    async def _is_fifo(self, group: str, addr: str | None = None) -> bool:
        return (await self._group(group, addr))[0]

    async def _group(self, group: str, addr: str | None = None) -> tuple[bool, int]:
        """Whether ``group`` is a FIFO group (its ``consumeMessageOrderly``) and its retries, looked up at most
        every 30 s (a group the brokers do not know yet: not FIFO, 16 retries)."""
        now = time.monotonic()
        known = self._groups.get(group)
        if known is not None and now - known[0] < GROUP_CACHE_SECONDS:
            return known[1], known[2]
        fifo, retries = False, DEFAULT_RETRIES
        for a in [addr] if addr else self.client.master_addrs():
            try:
                table = await self.client.api.get_all_subscription_groups(a)
            except (ClientError, RemotingError) as exc:
                log.info("subscription groups of %s: %s", a, exc)
                continue
            entry = table.get(group)
            if isinstance(entry, dict):
                fifo = bool(entry.get("consumeMessageOrderly", False))
                retries = int(entry.get("retryMaxTimes", DEFAULT_RETRIES))
            break
        if len(self._groups) >= GROUP_CACHE_SIZE:
            self._groups.clear()
        self._groups[group] = (now, fifo, retries)
        return fifo, retries

    # == transactions ================================================================================
    async def EndTransaction(self, req: Any, context: Any) -> Any:  # noqa: N802
        try:
            tid = TransactionId.decode(req.transaction_id)
        except ValueError as exc:
            return pb.EndTransactionResponse(status=status("INVALID_TRANSACTION_ID", str(exc)))
        if req.resolution not in (1, 2):  # unspecified: it stays open, and is checked again later
            return pb.EndTransactionResponse(status=status("OK"))
        addr = await self._addr_of(req.topic.name, tid.broker_name)
        if addr is None:
            return pb.EndTransactionResponse(status=status("INVALID_TRANSACTION_ID", f"no broker {tid.broker_name}"))
        ext = {"producerGroup": req.topic.name, "tranStateTableOffset": str(tid.queue_offset),
               "commitLogOffset": str(tid.commit_log_offset),
               "commitOrRollback": str(TRANSACTION_COMMIT_TYPE if req.resolution == 1 else TRANSACTION_ROLLBACK_TYPE),
               "msgId": req.message_id, "transactionId": req.transaction_id,
               "fromTransactionCheck": "true" if req.source == 2 else "false"}
        try:
            resp = await self.client.api.invoke(addr, RequestCode.END_TRANSACTION, ext, timeout_ms=3000)
        except RemotingError as exc:
            return pb.EndTransactionResponse(status=status("INTERNAL_SERVER_ERROR", str(exc)))
        if resp.code != ResponseCode.SUCCESS:
            return pb.EndTransactionResponse(status=status("INVALID_TRANSACTION_ID", resp.remark or str(resp.code)))
        return pb.EndTransactionResponse(status=status("OK"))

    def _register_producer(self, topics: list[str], stream: asyncio.Queue[Any]) -> None:
        """A producer's settings: the checks of its topics' transactions go to its Telemetry stream."""
        new = False
        for topic in topics:
            self._producer_streams.setdefault(topic, []).append(stream)
            if topic not in self.client.producer_groups:
                self.client.producer_groups.add(topic)
                self.client.transaction_checkers[topic] = self._orphan_check
                new = True
        if new:
            asyncio.get_running_loop().create_task(self._announce())

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

    def _orphan_check(self, broker_addr: str, ext: dict[str, str], msg: MessageExt) -> None:
        """A broker asks about an undecided transaction: to a producer of its topic, through Telemetry."""
        topic = msg.properties.get(PROPERTY_REAL_TOPIC, msg.topic)
        streams = self._producer_streams.get(topic)
        broker = next((name for name, addrs in self.client.broker_addrs.items() if broker_addr in addrs.values()),
                      None)
        if not streams or broker is None:
            log.info("no gRPC producer of %s to check transaction %s with", topic, ext.get("transactionId"))
            return
        try:
            tid = TransactionId(broker, int(ext["commitLogOffset"]), int(ext["tranStateTableOffset"]))
        except (KeyError, ValueError):
            log.warning("broker %s asked about a transaction without its offsets", broker_addr)
            return
        resource = pb.Resource(name=topic)
        msg.topic = topic
        cmd = pb.TelemetryCommand()
        cmd.recover_orphaned_transaction_command.message.CopyFrom(self._message(msg, resource, 0.0))
        cmd.recover_orphaned_transaction_command.transaction_id = tid.encode()
        stream = streams[next(self._turn) % len(streams)]
        try:
            stream.put_nowait(cmd)
        except asyncio.QueueFull:
            log.warning("the Telemetry stream of a producer of %s is full: transaction check dropped", topic)

    # == dead letters ================================================================================
    async def ForwardMessageToDeadLetterQueue(self, req: Any, context: Any) -> Any:  # noqa: N802
        """A FIFO push consumer gave up on a message: into the group's DLQ (CONSUMER_SEND_MSG_BACK with no delay
        level), then acknowledged, which releases its message group (RocketMQ's proxy's way)."""
        try:
            receipt, commit_log_offset = parse_handle(req.receipt_handle)
        except ReceiptError as exc:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status("INVALID_RECEIPT_HANDLE", str(exc)))
        if commit_log_offset is None:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(
                "INVALID_RECEIPT_HANDLE", "the receipt handle does not say where the message lies"))
        group, topic = req.group.name, req.topic.name
        addr = await self._addr_of(topic, receipt.broker_name)
        if addr is None:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status("INVALID_RECEIPT_HANDLE",
                                                                            f"no broker {receipt.broker_name}"))
        ext = {"group": group, "offset": str(commit_log_offset), "delayLevel": "-1",
               "originMsgId": req.message_id, "originTopic": topic,
               "maxReconsumeTimes": str(max(0, req.max_delivery_attempts - 1))}
        try:
            resp = await self.client.api.invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK, ext, timeout_ms=3000)
            if resp.code != ResponseCode.SUCCESS:
                return pb.ForwardMessageToDeadLetterQueueResponse(status=status(
                    "INTERNAL_SERVER_ERROR", resp.remark or f"broker answered {resp.code}"))
            await self.client.api.ack_message(addr, group, topic, receipt)
        except BrokerResponseError as exc:  # in the DLQ, but the receipt expired: it comes back, once more
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status("INVALID_RECEIPT_HANDLE", exc.remark))
        except (ClientError, RemotingError) as exc:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status("INTERNAL_SERVER_ERROR", str(exc)))
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status("OK"))


# Stored properties that are not the message's own (the broker's and the retry path's).
_STORED_ONLY = frozenset({"MIN_OFFSET", "MAX_OFFSET", "1ST_POP_TIME", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
                          "ORIGIN_MESSAGE_ID", "CONSUME_START_TIME", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS",
                          "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "MSG_REGION", "TRACE_ON", "CLUSTER",
                          "TRAN_PREPARED_QUEUE_OFFSET", "__transactionId__"})


def handler(service: MessagingService) -> grpc.GenericRpcHandler:
    """The service's methods as a generic gRPC handler (no generated stubs: the protocol module's classes)."""
    from sluice.proxy.protocol import RPCS, SERVICE

    methods: dict[str, grpc.RpcMethodHandler] = {}
    for name, (req, resp, client_streams, server_streams) in RPCS.items():
        fn = getattr(service, name)
        des, ser = getattr(pb, req).FromString, getattr(pb, resp).SerializeToString
        if client_streams and server_streams:
            methods[name] = grpc.stream_stream_rpc_method_handler(fn, des, ser)
        elif server_streams:
            methods[name] = grpc.unary_stream_rpc_method_handler(fn, des, ser)
        else:
            methods[name] = grpc.unary_unary_rpc_method_handler(fn, des, ser)
    return grpc.method_handlers_generic_handler(SERVICE, methods)


async def serve(namesrv: str, host: str = "127.0.0.1", port: int = 8081,
                config: ClientConfig | None = None) -> tuple[grpc.aio.Server, MessagingService, int]:
    """Start the gRPC front on ``host:port`` (0: any free port); the server, its service and the port."""
    service = MessagingService(namesrv, config)
    await service.start()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler(service),))
    bound = server.add_insecure_port(f"{host}:{port}")
    if not bound:
        await service.shutdown()
        raise OSError(f"cannot listen on {host}:{port}")
    await server.start()
    log.info("gRPC front (RocketMQ 5 clients) on %s:%d, name server %s", host, bound, namesrv)
    return server, service, bound


async def stop(server: grpc.aio.Server, service: MessagingService) -> None:
    await server.stop(grace=1.0)
    await service.shutdown()


__all__ = ["MessagingService", "handler", "serve", "stop"]

