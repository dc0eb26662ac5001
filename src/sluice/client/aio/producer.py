"""The asyncio producer (RocketMQ DefaultMQProducer): sync-style, oneway and batch sends, ordered by key.

``sluice.aio.Producer`` is this class; ``sluice.Producer`` runs it on a background loop for threaded code.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sluice.client.aio.record_accumulator import BatchKey, PendingSend, ProducerBatch, RecordAccumulator, batchable
from sluice.client.batch import encode_message_batch
from sluice.client.latency_fault_tolerance import LatencyFaultTolerance
from sluice.client.message import Message, SendResult, SendStatus
from sluice.client.message_id import create_uniq_id
from sluice.client.mq_client import MQClientInstance, client_config
from sluice.common.backoff import RNG
from sluice.common.batch_codec import encode_batch_record
from sluice.common.config import ClientConfig
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.common.hashing import java_string_hash
from sluice.common.naming import AUTO_CREATE_TOPIC_KEY_TOPIC, validate_group
from sluice.common.properties import PROPERTY_WAIT_STORE_MSG_OK, encode_properties
from sluice.common.structs import MessageQueue, TopicRouteData, perm_writeable
from sluice.common.sysflag import COMPRESSED_FLAG
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import RemotingError
from sluice.remoting.headers import SendMessageRequestHeader

log = logging.getLogger(__name__)

# Send failures worth another attempt (RocketMQ DefaultMQProducerImpl retryResponseCodes).
RETRY_RESPONSE_CODES = frozenset({ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                                  ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION, ResponseCode.NO_BUYER_ID,
                                  ResponseCode.NOT_IN_CURRENT_UNIT, ResponseCode.SYSTEM_BUSY})
# Refusals that say this broker takes no writes for the topic now (no longer the master, or its write permission
# wiped): its route may have changed, so it is fetched again soon. FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and
# SLAVE_NOT_AVAILABLE are not among them: the message is stored, and they are send results, as in RocketMQ.
REROUTE_RESPONSE_CODES = frozenset({ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.NO_PERMISSION})
# Refusals after which the broker is avoided for AVOID_SECONDS (it pushes back, or takes no writes now).
AVOID_RESPONSE_CODES = frozenset({ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE,
                                  ResponseCode.NO_PERMISSION})
AVOID_SECONDS = 10.0
DEFAULT_TOPIC_QUEUE_NUMS = 4

QueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


@dataclass(slots=True)
class TopicPublishInfo:
    queues: list[MessageQueue]
    via_default_topic: bool  # no route yet: sending through TBW102 makes the broker create the topic


def select_by_hash(queues: list[MessageQueue], key: str) -> MessageQueue:
    """Same key → same queue (RocketMQ SelectMessageQueueByHash over Java's String.hashCode)."""
    h = java_string_hash(key)
    index = abs(h - int(h / len(queues)) * len(queues))  # Java's truncating remainder, then abs
    return queues[index]


class Producer:
    """Send messages to topics. Use ``async with Producer(...)`` or ``await start()`` / ``await shutdown()``."""

    def __init__(self, group: str = "DEFAULT_PRODUCER", namesrv: str | None = None, *,
                 config: ClientConfig | None = None, **settings: Any) -> None:
        validate_group(group)
        cfg = client_config(config, namesrv, settings, "producer")
        self.group = group
        self.config = cfg
        self.client = MQClientInstance(cfg)
        self.faults = LatencyFaultTolerance()
        self._rr = itertools.count(RNG.randrange(1 << 16))
        self._publish: dict[str, tuple[TopicRouteData | None, TopicPublishInfo]] = {}
        self._inflight = 0  # async sends started and not yet answered (bounded by max_inflight_async_sends)
        # Per topic, the last async send on the task path whose request is not written yet.
        self._unsent: dict[str, _OnWire] = {}
        self._room_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._retries: set[asyncio.Task[Any]] = set()  # async sends' later attempts
        self._accumulator = RecordAccumulator(cfg.batch_max_bytes)
        self._flush_handle: asyncio.Handle | None = None
        self.started = False

    # == lifecycle ===================================================================================
    async def start(self) -> Producer:
        if self.started:
            return self
        self.client.producer_groups.add(self.group)
        await self.client.start()
        self._flush_handle = None  # (one left pending by a loop that closed)
        self._inflight = 0
        self._room_waiters.clear()
        self.started = True
        return self

    async def shutdown(self) -> None:
        if self.started:
            self._flush_batches()  # what callers already handed over leaves, as sends in flight do
            self.started = False
            for t in list(self._retries):
                t.cancel()
            await self.client.shutdown()

    async def __aenter__(self) -> Producer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # == public sends ================================================================================
    async def send(self, msg: Message, *, sharding_key: str | None = None, queue: MessageQueue | None = None,
                   selector: QueueSelector | None = None, arg: Any = None, timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's answer; retried on another queue / broker on failure.

        ``sharding_key`` (or ``selector`` / ``queue``) pins the queue: messages with the same key keep their
        order. Raises ``ClientError`` / ``BrokerResponseError`` when the message could not be stored.
        """
        result = await self._send_one(msg, sharding_key, queue, selector, arg, timeout, oneway=False)
        assert result is not None
        return result

    async def send_oneway(self, msg: Message, *, sharding_key: str | None = None,
                          queue: MessageQueue | None = None) -> None:
        """Send without waiting for any answer (no retry, no result)."""
        await self._send_one(msg, sharding_key, queue, None, None, None, oneway=True)

    def send_async(self, msg: Message, *, sharding_key: str | None = None, queue: MessageQueue | None = None,
                   timeout: float | None = None) -> asyncio.Future[SendResult]:
        """Start a send and return at once; the future's result is the ``SendResult`` (retried as ``send`` is).

        With ``auto_batch`` (the default), a message that may share a batch (no delay or timer, a body under
        the compression threshold) waits for the end of the current turn of the event loop (or
        ``batch_max_delay_ms``): the async sends made meanwhile for the same topic leave together as one
        SEND_BATCH_MESSAGE to one queue, up to ``batch_max_bytes``; each future still gets its message's own
        result (id, broker id, queue offset). A lone message leaves as a plain send.

        Otherwise, when the topic's route and the broker's connection are known and fewer than
        ``max_inflight_async_sends`` sends are in flight (none waiting for room), the request is on the wire
        when this returns and its answer completes the future from the response's callback (no task per send).
        Otherwise a task does what ``send`` does, once there is room; a send takes its place in line here, so
        sends waiting for room go in the order they were made. Cancelling the future stops any further
        attempt; a first attempt already on the wire keeps its slot until it is answered (and may still store
        the message), a later one frees it at once.
        """
        loop = asyncio.get_running_loop()
        place: _Place | None = None
        topic = msg.topic if isinstance(msg, Message) else ""  # (not a Message: the send's task says so)
        if self.started:
            # Not ahead of an earlier send to the topic still on its way to the wire (waiting for a route, a
            # connection or room): a topic's async sends leave in the order they were made.
            room = self._has_room()
            if room and topic not in self._unsent and self.config.auto_batch and isinstance(msg, Message) \
                    and batchable(msg, self.config.compress_msg_body_over_howmuch):
                fut = self._append(msg, sharding_key, queue, timeout, loop)
                if fut is not None:
                    return fut
            self._flush_batches(topic)  # (held sends of the topic leave first; they may take the task path)
            if room and topic not in self._unsent:
                fut = self._start_async(msg, sharding_key, queue, timeout, loop)
                if fut is not None:
                    return fut
            place = self._take_place(loop)
        return self._send_async_task(msg, sharding_key, queue, timeout, loop, place)

    def _send_async_task(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None,
                         timeout: float | None, loop: asyncio.AbstractEventLoop,
                         place: _Place | None) -> asyncio.Future[SendResult]:
        """An async send done by a task, in its topic's line to the wire."""
        topic = msg.topic if isinstance(msg, Message) else ""
        on_wire = _OnWire(self, topic, loop)
        task = loop.create_task(self._bounded_send(msg, sharding_key, queue, timeout, place, on_wire))
        task.add_done_callback(lambda _: on_wire())  # never written (failed, or cancelled even before it ran)
        if place is not None:
            task.add_done_callback(lambda _, place=place: self._give_back_unused(place))
        return task

    async def _bounded_send(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None,
                            timeout: float | None, place: _Place | None = None,
                            on_wire: _OnWire | None = None) -> SendResult:
        if place is None:
            self._check_started()
            place = self._take_place(asyncio.get_running_loop())
        place.used = True
        if place.waiter is not None:
            try:
                await place.waiter  # ``_release`` hands this send the slot it frees
            except asyncio.CancelledError:
                if place.waiter.done() and not place.waiter.cancelled():
                    self._release()  # the slot this send was handed goes to the next one
                raise
        try:
            self._check_started()
            result = await self._send_one(msg, sharding_key, queue, None, None, timeout, oneway=False,
                                          async_send=True, on_wire=on_wire)
            assert result is not None
            return result
        finally:
            self._release()

    def _has_room(self) -> bool:
        """Whether another async send may go (or be held for a batch) now: fewer than ``max_inflight_async_sends``
        in flight or held, and nobody waiting for room."""
        return self._inflight + self._accumulator.pending < self.config.max_inflight_async_sends \
            and not self._parked()

    def _take_place(self, loop: asyncio.AbstractEventLoop) -> _Place:
        """A slot if there is room and nobody waits for one, else a place at the end of the line."""
        if self._has_room():
            self._inflight += 1
            return _Place(None)
        waiter: asyncio.Future[None] = loop.create_future()
        self._room_waiters.append(waiter)
        return _Place(waiter)

    def _give_back_unused(self, place: _Place) -> None:
        """A send's task ended before it ran (cancelled at once): what ``send_async`` took for it goes back."""
        if place.used:
            return
        waiter = place.waiter
        if waiter is None or (waiter.done() and not waiter.cancelled()):
            self._release()
        else:
            waiter.cancel()

    def _parked(self) -> bool:
        """Whether some send is waiting for room."""
        waiters = self._room_waiters
        while waiters and waiters[0].done():
            waiters.popleft()
        return bool(waiters)

    def _release(self) -> None:
        """A send's slot is free: hand it to the oldest send waiting for room, else give it back."""
        waiters = self._room_waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._inflight -= 1

    def _start_async(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None,
                     timeout: float | None, loop: asyncio.AbstractEventLoop) -> asyncio.Future[SendResult] | None:
        """The first attempt of an async send put on the wire now, or None when it needs to wait for something
        (a route, a connection, a peer that is not reading) or something is wrong with it: the task path then
        does it, and raises what is wrong."""
        timeout_s = timeout if timeout is not None else self.config.send_msg_timeout / 1000
        try:
            cached = self._publish.get(msg.topic)
            route = self.client.routes.get(msg.topic)
            if cached is None or route is None or cached[0] is not route or timeout_s <= 0:
                return None
            info = cached[1]
            if queue is not None:
                mq = queue
            elif sharding_key is not None:
                mq = select_by_hash(info.queues, sharding_key)
            else:
                mq = self._select_queue(info.queues, None)
            addr = self.client.find_publish_addr(mq.broker_name)
            if addr is None:
                return None
            uniq, request = self._single_request(msg, sharding_key)
            req = request(mq, info.via_default_topic)
            t0 = loop.time()
            started = self.client.remoting.start_request(addr, req, max(1, int(timeout_s * 1000)))
        except Exception:
            return None
        if started is None:
            return None
        conn, answer = started
        send = _AsyncSend(self, loop.create_future(), msg, sharding_key, queue, timeout, uniq, request, mq, addr, t0,
                          t0 + timeout_s)
        self._inflight += 1
        send.out.add_done_callback(send.given_up)
        opaque = req.opaque
        answer.add_done_callback(lambda f: send.answered(conn, opaque, f))
        return send.out

    # == auto-batching ==============================================================================
    def _append(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None, timeout: float | None,
                loop: asyncio.AbstractEventLoop) -> asyncio.Future[SendResult] | None:
        """Hold an async send for the batch of its place; None when it cannot be encoded (the task path then
        raises what is wrong with it)."""
        uniq = create_uniq_id()
        try:
            record = encode_batch_record(msg.body, msg.wire_for_send(uniq, self.config.max_message_size,
                                                                     sharding_key), msg.flag)
        except Exception:
            return None
        out: asyncio.Future[SendResult] = loop.create_future()
        full = self._accumulator.append(BatchKey(msg.topic, sharding_key, queue), PendingSend(msg, uniq, record, out),
                                        timeout)
        if full is not None:
            self._send_batch(full, loop)
        elif self._flush_handle is None:
            delay = self.config.batch_max_delay_ms
            self._flush_handle = loop.call_later(delay / 1000, self._flush_due) if delay else \
                loop.call_soon(self._flush_due)
        return out

    def _flush_due(self) -> None:
        self._flush_handle = None
        self._flush_batches()

    def _flush_batches(self, topic: str | None = None) -> None:
        """Send the batches held (``topic``'s only: before a send of the topic that does not wait with them)."""
        acc = self._accumulator
        if not acc.batches or (topic is not None and not acc.holds(topic)):
            return
        if topic is None and self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        loop = asyncio.get_running_loop()
        for batch in acc.drain(topic):
            self._send_batch(batch, loop)

    def _send_batch(self, batch: ProducerBatch, loop: asyncio.AbstractEventLoop) -> None:
        """Put a batch on the wire: one message as a plain send, more as SEND_BATCH_MESSAGE; when the route or
        the connection is not ready, each message goes its own way on the task path, in order."""
        key = batch.key
        sends = [p for p in batch.sends if not p.out.done()]  # (cancelled by their callers meanwhile)
        if not sends:
            return
        if not self.started:
            for p in sends:
                p.out.set_exception(ClientError("the producer was shut down before the message was sent"))
            return
        timeout = batch.timeout
        in_line = key.topic in self._unsent  # an earlier send of the topic is on the task path: behind it
        if len(sends) == 1:
            p = sends[0]
            inner = None if in_line else self._start_async(p.msg, key.sharding_key, key.queue, timeout, loop)
            if inner is None:
                inner = self._send_async_task(p.msg, key.sharding_key, key.queue, timeout, loop,
                                              self._take_place(loop))
            _chain(inner, p.out)
            return
        timeout_s = timeout if timeout is not None else self.config.send_msg_timeout / 1000
        body = b"".join(p.record for p in sends)
        props = encode_properties({PROPERTY_WAIT_STORE_MSG_OK: "true" if batch.wait_store_msg_ok else "false"}).decode()
        born = int(time.time() * 1000)

        def request(mq: MessageQueue, via_default: bool) -> RemotingCommand:
            return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE,
                                           self._header(mq, via_default, 0, born, 0, props, batch=True), body)

        started = None
        try:
            cached = self._publish.get(key.topic)
            route = self.client.routes.get(key.topic)
            if not in_line and cached is not None and route is not None and cached[0] is route and timeout_s > 0:
                info = cached[1]
                if key.queue is not None:
                    mq = key.queue
                elif key.sharding_key is not None:
                    mq = select_by_hash(info.queues, key.sharding_key)
                else:
                    mq = self._select_queue(info.queues, None)
                addr = self.client.find_publish_addr(mq.broker_name)
                if addr is not None:
                    req = request(mq, info.via_default_topic)
                    t0 = loop.time()
                    started = self.client.remoting.start_request(addr, req, max(1, int(timeout_s * 1000)))
        except Exception:
            started = None
        if started is None:
            for p in sends:
                _chain(self._send_async_task(p.msg, key.sharding_key, key.queue, timeout, loop,
                                             self._take_place(loop)), p.out)
            return
        conn, answer = started
        self._inflight += len(sends)
        send = _BatchSend(self, sends, key, timeout, request, mq, addr, t0, t0 + timeout_s)
        opaque = req.opaque
        answer.add_done_callback(lambda f: send.answered(conn, opaque, f))

    @staticmethod
    def _batch_results(resp: RemotingCommand, mq: MessageQueue, sends: list[PendingSend]) -> list[SendResult]:
        """Each message's own result from a batch's answer: its id, the broker's id for it, its queue offset."""
        status = SendStatus.from_response_code(resp.code) or SendStatus.SEND_OK
        ext = resp.ext_fields
        queue = MessageQueue(mq.topic, mq.broker_name, int(ext.get("queueId", mq.queue_id)))
        base = int(ext.get("queueOffset", "-1"))
        offset_ids = ext.get("msgId", "").split(",")
        if len(offset_ids) != len(sends):
            offset_ids = [""] * len(sends)
        return [SendResult(status, p.uniq, offset_ids[i], queue, base + i if base >= 0 else -1, [p.uniq])
                for i, p in enumerate(sends)]

    async def send_batch(self, msgs: Sequence[Message], *, sharding_key: str | None = None,
                         queue: MessageQueue | None = None, timeout: float | None = None) -> SendResult:
        """Send messages of one topic as one request to one queue; each gets its own id."""
        self._check_started()
        batch = encode_message_batch(msgs, self.config.max_message_size)
        self._flush_batches(batch.topic)
        props = encode_properties(batch.properties).decode()
        born = int(time.time() * 1000)

        def request(mq: MessageQueue, via_default: bool) -> RemotingCommand:
            return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE,
                                           self._header(mq, via_default, 0, born, 0, props, batch=True), batch.body)

        resp, mq = await self._send_with_retries(batch.topic, request, msgs[0], sharding_key, queue, None, None,
                                                 timeout, oneway=False)
        assert resp is not None
        return self._result(resp, mq, batch.msg_ids)

    async def send_batch_body(self, topic: str, body: bytes, *, queue: MessageQueue | None = None,
                              timeout: float | None = None) -> SendResult:
        """Send an already encoded batch body (``sluice.common.batch_codec`` records, each message with its own
        properties) as one request; like ``send_batch`` but for callers that encode in bulk (the Spark sink).
        Messages without a ``UNIQ_KEY`` property get none: their id is the broker's offset id. The request
        carries no header properties, so the broker stores each record's own as they are (a message without
        ``WAIT`` waits for the store, the default)."""
        self._check_started()
        if not body:
            raise ClientError("a batch needs at least one message")
        self._flush_batches(topic)
        born = int(time.time() * 1000)

        def request(mq: MessageQueue, via_default: bool) -> RemotingCommand:
            header = self._header(mq, via_default, 0, born, 0, "", batch=True)
            return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header, body)

        resp, mq = await self._send_with_retries(topic, request, None, None, queue, None, None, timeout,
                                                 oneway=False)
        assert resp is not None
        return self._result(resp, mq, [""])

    # == the send path ===============================================================================
    def _check_started(self) -> None:
        if not self.started:
            raise ClientError("the producer is not started: call start() first")

    async def _send_one(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None,
                        selector: QueueSelector | None, arg: Any, timeout: float | None,
                        oneway: bool, async_send: bool = False, on_wire: _OnWire | None = None
                        ) -> SendResult | None:
        self._check_started()
        if not isinstance(msg, Message):
            raise TypeError(f"send takes a Message, not {type(msg).__name__}")
        self._flush_batches(msg.topic)  # async sends held for a batch were made first: they leave first
        uniq, request = self._single_request(msg, sharding_key)

        resp, mq = await self._send_with_retries(msg.topic, request, msg, sharding_key, queue, selector, arg,
                                                 timeout, oneway, async_send=async_send, on_wire=on_wire)
        return None if resp is None else self._result(resp, mq, [uniq])

    def _single_request(self, msg: Message, sharding_key: str | None, system_properties: bytes = b"",
                        system_flag: int = 0) -> tuple[str, Callable[[MessageQueue, bool], RemotingCommand]]:
        """A message's id and its SEND_MESSAGE_V2 request for a queue (the same id on every attempt);
        ``system_properties`` (encoded, each pair led by the separator) and ``system_flag`` are added as given."""
        uniq = create_uniq_id()
        props_str = (msg.wire_for_send(uniq, self.config.max_message_size, sharding_key) + system_properties).decode()
        body, sys_flag = msg.body, system_flag
        if len(body) > self.config.compress_msg_body_over_howmuch:
            body, sys_flag = zlib.compress(body, self.config.compress_level), sys_flag | COMPRESSED_FLAG
        born = int(time.time() * 1000)

        def request(mq: MessageQueue, via_default: bool) -> RemotingCommand:
            return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                           self._header(mq, via_default, sys_flag, born, msg.flag, props_str), body)

        return uniq, request

    def _header(self, mq: MessageQueue, via_default: bool, sys_flag: int, born: int, flag: int, props: str,
                batch: bool = False) -> dict[str, str]:
        """SendMessageRequestHeaderV2 (RocketMQ's one-letter keys)."""
        return SendMessageRequestHeader(self.group, mq.topic, AUTO_CREATE_TOPIC_KEY_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS,
                                        mq.queue_id, sys_flag, born, flag, props, 0, False, None, batch,
                                        mq.broker_name).encode_v2()

    @staticmethod
    def _result(resp: RemotingCommand, mq: MessageQueue, ids: list[str]) -> SendResult:
        status = SendStatus.from_response_code(resp.code) or SendStatus.SEND_OK
        ext = resp.ext_fields
        return SendResult(status, ids[0], ext.get("msgId", ""), MessageQueue(mq.topic, mq.broker_name,
                                                                             int(ext.get("queueId", mq.queue_id))),
                          int(ext.get("queueOffset", "-1")), ids, ext.get("transactionId") or None)

    async def publish_info(self, topic: str) -> TopicPublishInfo:
        """The queues to send ``topic`` to; through TBW102's brokers while the topic has no route yet."""
        route = self.client.routes.get(topic)
        if route is None:
            route = await self.client.update_route(topic)
        cached = self._publish.get(topic)
        if cached is not None and cached[0] is route and route is not None:
            return cached[1]
        queues = route.publish_queues(topic) if route is not None else []
        if not queues and route is not None:
            # No master to write to (one failed and no slave has taken over yet, as far as this route knows):
            # ask again, at most once a second, so sends resume soon after a promotion, not at the next poll.
            fetch = self.client.refresh_route_soon(topic)
            if fetch is not None:
                try:
                    route = await asyncio.shield(fetch)
                except (ClientError, RemotingError) as exc:
                    log.info("route refresh of %s failed: %s", topic, exc)
                queues = route.publish_queues(topic) if route is not None else []
        if queues:
            self._forget_faults_of_new_masters(cached[0] if cached is not None else None, route)
            info = TopicPublishInfo(queues, False)
            self.client.publish_topics.add(topic)
        elif route is not None:
            # The topic exists but no master may be written to (read-only, or masters down). Going through
            # TBW102 here would auto-create it, writable, on other brokers (RocketMQ refuses likewise).
            raise ClientError(f"No route info of this topic: {topic} (it has no writable queue on a live master; "
                              f"perm {', '.join(f'{q.broker_name}={q.perm}' for q in route.queue_datas)})")
        else:
            default = self.client.routes.get(AUTO_CREATE_TOPIC_KEY_TOPIC) or await self.client.update_route(
                AUTO_CREATE_TOPIC_KEY_TOPIC)
            if default is None:
                raise ClientError(f"No route info of this topic: {topic} (create it, or enable topic auto-creation)")
            queues = [MessageQueue(topic, q.broker_name, i) for q in sorted(default.queue_datas,
                                                                           key=lambda q: q.broker_name)
                      if perm_writeable(q.perm) for i in range(min(DEFAULT_TOPIC_QUEUE_NUMS, q.read_queue_nums))]
            if not queues:
                raise ClientError(f"No route info of this topic: {topic}")
            info = TopicPublishInfo(queues, True)
            self.client.publish_topics.add(topic)
        self._publish[topic] = (route, info)
        return info

    def _forget_faults_of_new_masters(self, old: TopicRouteData | None, new: TopicRouteData | None) -> None:
        """A group whose master changed address (a slave promoted) is no longer avoided for its old master's
        failures."""
        if old is None or new is None:
            return
        before = {b.broker_name: b.master_addr for b in old.broker_datas}
        for b in new.broker_datas:
            if b.master_addr is not None and before.get(b.broker_name, b.master_addr) != b.master_addr:
                self.faults.forget(b.broker_name)

    def _select_queue(self, queues: list[MessageQueue], last_broker: str | None) -> MessageQueue:
        n = len(queues)
        start = next(self._rr)
        if self.config.send_latency_fault_enable:
            for i in range(n):
                mq = queues[(start + i) % n]
                if mq.broker_name != last_broker and self.faults.is_available(mq.broker_name):
                    return mq
        for i in range(n):
            mq = queues[(start + i) % n]
            if mq.broker_name != last_broker:
                return mq
        return queues[start % n]

    async def _send_with_retries(self, topic: str, request: Callable[[MessageQueue, bool], RemotingCommand],
                                 msg: Message | None, sharding_key: str | None, queue: MessageQueue | None,
                                 selector: QueueSelector | None, arg: Any, timeout: float | None,
                                 oneway: bool, first: _FirstAttempt | None = None, async_send: bool = False,
                                 on_wire: _OnWire | None = None
                                 ) -> tuple[RemotingCommand | None, MessageQueue]:
        """Attempts until one is answered with a send status; ``first``: an attempt already made (by
        ``send_async``), which counts as the first and whose deadline holds. A send of ``send_async`` retries
        ``retry_times_when_send_async_failed`` times, others ``retry_times_when_send_failed`` (RocketMQ's two)."""
        loop = asyncio.get_running_loop()
        timeout_s = timeout if timeout is not None else self.config.send_msg_timeout / 1000
        deadline = first.deadline if first is not None else loop.time() + timeout_s
        retries = self.config.retry_times_when_send_async_failed if async_send or first is not None \
            else self.config.retry_times_when_send_failed
        attempts = 1 if oneway else 1 + retries
        last_broker = first.broker if first is not None else None
        last_error = first.error if first is not None else None
        mq: MessageQueue | None = None
        if isinstance(last_error, BrokerResponseError) and last_error.code == ResponseCode.TOPIC_NOT_EXIST:
            self._publish.pop(topic, None)
            await self.client.update_route(topic)
        for attempt in range(0 if first is None else 1, attempts):
            if first is not None and first.out.done():
                raise asyncio.CancelledError()  # the caller gave up on the send
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            if last_error is not None:
                # The failure asked for the route again: this attempt goes by the answer (a new master).
                await self._route_settled(topic, deadline)
                if first is not None and first.out.done():
                    raise asyncio.CancelledError()
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
            info = await self.publish_info(topic)
            if queue is not None:
                mq = queue
            elif sharding_key is not None:
                mq = select_by_hash(info.queues, sharding_key)
            elif selector is not None:
                mq = selector(list(info.queues), msg, arg)
            else:
                mq = self._select_queue(info.queues, last_broker)
            addr = self.client.find_publish_addr(mq.broker_name)
            if addr is None:  # the group lost its master since the queues were chosen
                self.client.refresh_route_soon(topic)
                await self._route_settled(topic, deadline)
                addr = self.client.find_publish_addr(mq.broker_name)
                if addr is None:
                    last_error = ClientError(f"broker {mq.broker_name} has no master")
                    continue
            req = request(mq, info.via_default_topic)
            t0 = loop.time()
            try:
                if oneway:
                    await self.client.remoting.invoke_oneway(addr, req)
                    return None, mq
                if on_wire is not None and not on_wire.done:
                    conn = await self.client.remoting.connection(addr)
                    await on_wire.turn()  # the topic's earlier sends are written
                    on_wire()
                    resp = await conn.invoke(req, max(1, int(remaining * 1000)) / 1000)
                else:
                    resp = await self.client.remoting.invoke(addr, req, max(1, int(remaining * 1000)))
                outcome = self._outcome(mq, addr, (loop.time() - t0) * 1000, resp, None)
            except RemotingError as exc:
                outcome = self._outcome(mq, addr, (loop.time() - t0) * 1000, None, exc)
            if isinstance(outcome, RemotingCommand):
                return outcome, mq
            last_error, last_broker = outcome, mq.broker_name
            log.info("send to %s (%s) failed on attempt %d: %s", mq, addr, attempt + 1, outcome)
            if isinstance(outcome, BrokerResponseError) and outcome.code == ResponseCode.TOPIC_NOT_EXIST:
                self._publish.pop(topic, None)
                await self.client.update_route(topic)
        if last_error is None:
            last_error = TimeoutError(f"send timed out after {timeout_s:.3f} s")
        raise ClientError(f"send to topic {topic} failed after {attempts} attempt(s): {last_error}") from last_error

    async def _route_settled(self, topic: str, deadline: float) -> None:
        """Wait (until ``deadline`` at most) for a fetch of ``topic``'s route under way, if there is one."""
        fetch = self.client.route_fetch_in_flight(topic)
        if fetch is None:
            return
        try:
            async with asyncio.timeout(max(0.0, deadline - asyncio.get_running_loop().time())):
                await asyncio.shield(fetch)
        except (TimeoutError, ClientError, RemotingError):
            pass  # the attempt goes by the route known so far

    def _outcome(self, mq: MessageQueue, addr: str, latency_ms: float, resp: RemotingCommand | None,
                 exc: BaseException | None) -> RemotingCommand | Exception:
        """One attempt's outcome, noted for fault avoidance: the answer to keep, or the error worth another
        attempt; raises the error no other attempt can help (a broker refusal outside the retry codes, or an
        error that is not the connection's)."""
        if exc is not None:
            if not isinstance(exc, RemotingError):
                raise exc
            self.faults.update(mq.broker_name, latency_ms, isolation=True)
            self.client.refresh_route_soon(mq.topic)  # gone, or not answering: a slave may be taking over
            return exc
        assert resp is not None
        self.faults.update(mq.broker_name, latency_ms)
        if SendStatus.from_response_code(resp.code) is not None:
            return resp
        if resp.code in AVOID_RESPONSE_CODES:
            # A broker pushing back, or no longer taking writes: avoided for a while, the retry goes to another
            # (RocketMQ 5's producer isolates a broker that answered so, for 10 s).
            self.faults.avoid(mq.broker_name, AVOID_SECONDS)
        error = BrokerResponseError(resp.code, resp.remark, addr)
        if resp.code in REROUTE_RESPONSE_CODES:
            self.client.refresh_route_soon(mq.topic)
        if resp.code not in RETRY_RESPONSE_CODES:
            raise error
        return error


@dataclass(slots=True)
class _FirstAttempt:
    """A failed first attempt of ``send_async``, handed to the retries (which stop once ``out`` is done: the
    caller cancelled it)."""

    error: Exception
    broker: str
    deadline: float
    out: asyncio.Future[SendResult]


@dataclass(slots=True)
class _Place:
    """A send's place among the async sends: the slot it holds (``waiter`` None) or its place in line."""

    waiter: asyncio.Future[None] | None
    used: bool = False


class _OnWire:
    """The place of an async send on the task path in its topic's line to the wire: its request is written once
    the earlier ones are (``turn``), and the next may go once it is, or never will be (called, once)."""

    __slots__ = ("producer", "topic", "before", "written")

    def __init__(self, producer: Producer, topic: str, loop: asyncio.AbstractEventLoop) -> None:
        self.producer: Producer | None = producer
        self.topic = topic
        prev = producer._unsent.get(topic)
        self.before = prev.written if prev is not None else None
        self.written: asyncio.Future[None] = loop.create_future()
        producer._unsent[topic] = self

    @property
    def done(self) -> bool:
        return self.producer is None

    async def turn(self) -> None:
        if self.before is not None and not self.before.done():
            await asyncio.shield(self.before)  # (shielded: a send given up on does not fail the next one's)

    def __call__(self) -> None:
        p, self.producer = self.producer, None
        if p is None:
            return
        self.written.set_result(None)
        if p._unsent.get(self.topic) is self:
            del p._unsent[self.topic]


class _AsyncSend:
    """An async send whose first attempt ``send_async`` put on the wire: its answer completes ``out``, or hands
    over to the retries in a task. The send's in-flight slot is freed once, when its last attempt ends."""

    __slots__ = ("producer", "out", "msg", "sharding_key", "queue", "timeout", "uniq", "request", "mq", "addr",
                 "t0", "deadline", "retry")

    def __init__(self, producer: Producer, out: asyncio.Future[SendResult], msg: Message, sharding_key: str | None,
                 queue: MessageQueue | None, timeout: float | None, uniq: str,
                 request: Callable[[MessageQueue, bool], RemotingCommand], mq: MessageQueue, addr: str, t0: float,
                 deadline: float) -> None:
        self.producer = producer
        self.out = out
        self.msg = msg
        self.sharding_key = sharding_key
        self.queue = queue
        self.timeout = timeout
        self.uniq = uniq
        self.request = request
        self.mq = mq
        self.addr = addr
        self.t0 = t0
        self.deadline = deadline
        self.retry: asyncio.Task[tuple[RemotingCommand | None, MessageQueue]] | None = None

    def answered(self, conn: Connection, opaque: int, f: asyncio.Future[RemotingCommand]) -> None:
        conn.abandon(opaque, f)
        p, out = self.producer, self.out
        loop = out.get_loop()
        try:
            exc = RemotingError("send cancelled") if f.cancelled() else f.exception()
            outcome = p._outcome(self.mq, self.addr, (loop.time() - self.t0) * 1000, None if exc else f.result(), exc)
            if out.done():  # the caller gave up on it
                p._release()
            elif isinstance(outcome, RemotingCommand):
                out.set_result(p._result(outcome, self.mq, [self.uniq]))
                p._release()
            elif not p.started:
                raise ClientError(f"the producer was shut down while sending to {self.mq}: {outcome}")
            else:
                log.info("send to %s (%s) failed on attempt 1: %s", self.mq, self.addr, outcome)
                retry = self.retry = loop.create_task(p._send_with_retries(
                    self.msg.topic, self.request, self.msg, self.sharding_key, self.queue, None, None, self.timeout,
                    oneway=False, first=_FirstAttempt(outcome, self.mq.broker_name, self.deadline, out)))
                p._retries.add(retry)
                retry.add_done_callback(self.retried)
        except Exception as final:  # no other attempt can help, or the answer could not be read
            if not out.done():
                out.set_exception(final)
            p._release()

    def retried(self, task: asyncio.Task[tuple[RemotingCommand | None, MessageQueue]]) -> None:
        p = self.producer
        p._retries.discard(task)
        p._release()
        if task.cancelled() and not self.out.done() and not p.started:  # cancelled by shutdown, not the caller
            self.out.set_exception(ClientError(f"the producer was shut down while sending to {self.mq}"))
            return
        try:
            _settle(self.out, task, lambda r: p._result(r[0], r[1], [self.uniq]))
        except Exception as exc:  # the answer could not be read
            if not self.out.done():
                self.out.set_exception(exc)

    def given_up(self, out: asyncio.Future[SendResult]) -> None:
        """``out`` is done: when the caller cancelled it, no further attempt."""
        if out.cancelled() and self.retry is not None:
            self.retry.cancel()


class _BatchSend:
    """An auto-batch on the wire: its answer completes every member's future, or hands the whole batch over to
    the retries in a task. Its members' in-flight slots are freed when its last attempt ends."""

    __slots__ = ("producer", "sends", "key", "timeout", "request", "mq", "addr", "t0", "deadline")

    def __init__(self, producer: Producer, sends: list[PendingSend], key: BatchKey, timeout: float | None,
                 request: Callable[[MessageQueue, bool], RemotingCommand], mq: MessageQueue, addr: str, t0: float,
                 deadline: float) -> None:
        self.producer = producer
        self.sends = sends
        self.key = key
        self.timeout = timeout
        self.request = request
        self.mq = mq
        self.addr = addr
        self.t0 = t0
        self.deadline = deadline

    def _release(self) -> None:
        for _ in self.sends:
            self.producer._release()

    def _settle(self, resp: RemotingCommand, mq: MessageQueue) -> None:
        for p, result in zip(self.sends, self.producer._batch_results(resp, mq, self.sends), strict=True):
            if not p.out.done():
                p.out.set_result(result)

    def _fail(self, exc: BaseException) -> None:
        for p in self.sends:
            if not p.out.done():
                p.out.set_exception(exc)

    def answered(self, conn: Connection, opaque: int, f: asyncio.Future[RemotingCommand]) -> None:
        conn.abandon(opaque, f)
        p = self.producer
        loop = asyncio.get_running_loop()
        try:
            exc = RemotingError("send cancelled") if f.cancelled() else f.exception()
            outcome = p._outcome(self.mq, self.addr, (loop.time() - self.t0) * 1000, None if exc else f.result(), exc)
            if isinstance(outcome, RemotingCommand):
                self._settle(outcome, self.mq)
                self._release()
            elif not p.started:
                raise ClientError(f"the producer was shut down while sending to {self.mq}: {outcome}")
            else:
                log.info("send of a batch of %d to %s (%s) failed on attempt 1: %s", len(self.sends), self.mq,
                         self.addr, outcome)
                # Retried while any member waits; once every caller has given up, no further attempt.
                waiting: asyncio.Future[SendResult] = loop.create_future()

                def given_up(_: object) -> None:
                    if all(m.out.done() for m in self.sends) and not waiting.done():
                        waiting.cancel()

                for m in self.sends:
                    m.out.add_done_callback(given_up)
                retry = loop.create_task(p._send_with_retries(
                    self.key.topic, self.request, None, self.key.sharding_key, self.key.queue, None, None,
                    self.timeout, oneway=False,
                    first=_FirstAttempt(outcome, self.mq.broker_name, self.deadline, waiting)))
                p._retries.add(retry)
                retry.add_done_callback(self.retried)
        except Exception as final:  # no other attempt can help, or the answer could not be read
            self._fail(final)
            self._release()

    def retried(self, task: asyncio.Task[tuple[RemotingCommand | None, MessageQueue]]) -> None:
        p = self.producer
        p._retries.discard(task)
        self._release()
        try:
            if task.cancelled():
                self._fail(ClientError(f"the producer was shut down while sending to {self.mq}"))
            elif (exc := task.exception()) is not None:
                self._fail(exc)
            else:
                resp, mq = task.result()
                assert resp is not None
                self._settle(resp, mq)
        except Exception as exc:  # the answer could not be read
            self._fail(exc)


def _chain(inner: asyncio.Future[SendResult], out: asyncio.Future[SendResult]) -> None:
    """``out`` (what the caller holds) completes as ``inner`` does; cancelling ``out`` cancels ``inner``."""
    inner.add_done_callback(lambda f: _settle(out, f, lambda r: r))
    out.add_done_callback(lambda o: inner.cancel() if o.cancelled() else None)


T = TypeVar("T")
R = TypeVar("R")


def _settle(out: asyncio.Future[R], task: asyncio.Future[T], convert: Callable[[T], R]) -> None:
    """Complete ``out`` with ``task``'s outcome (converted), unless it is done already."""
    if out.done():
        if not task.cancelled():
            task.exception()  # retrieved: nobody waits for it any more
        return
    if task.cancelled():
        out.cancel()
    elif (exc := task.exception()) is not None:
        out.set_exception(exc)
    else:
        out.set_result(convert(task.result()))


__all__ = ["Producer", "QueueSelector", "TopicPublishInfo", "select_by_hash"]
