"""The asyncio producer (RocketMQ DefaultMQProducer): sync-style, oneway and batch sends, ordered by key.

``sluice.aio.Producer`` is this class; ``sluice.Producer`` runs it on a background loop for threaded code. It is
made as aiokafka's is: the queue router picks each attempt's queue (``sluice.client.queue_router``), async sends
wait in the record accumulator for their batch, the sender puts every request on the wire and retries it
(``sender``), and the in-flight bookkeeping bounds the async sends (``in_flight``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.auth.credentials import CredentialsLike
from sluice.client.aio.in_flight import InFlight, OnWire, Place
from sluice.client.aio.record_accumulator import BatchKey, PendingSend, ProducerBatch, RecordAccumulator, batchable
from sluice.client.aio.sender import Sender, chain
from sluice.client.aio.trace_dispatcher import TraceDispatcher
from sluice.client.batch import encode_message_batch
from sluice.client.latency_fault_tolerance import LatencyFaultTolerance
from sluice.client.message import MAX_PROPERTIES_SIZE, Message, SendResult
from sluice.client.message_id import create_uniq_id
from sluice.client.mq_client import MQClientInstance, client_config
from sluice.client.queue_router import QueueRouter, QueueSelector, TopicPublishInfo
from sluice.client.request_reply import ReplyMessage, RequestTimeoutError, request_properties
from sluice.client.trace import now_ms, pub_context
from sluice.common.batch_codec import encode_batch_record
from sluice.common.config import ClientConfig
from sluice.common.errors import ClientError, MessageFormatError
from sluice.common.message import MessageExt
from sluice.common.namespace import unwrap, wrap
from sluice.common.naming import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, validate_group, validate_topic
from sluice.common.properties import encode_properties
from sluice.common.recall_handle import RecallHandle, RecallHandleError
from sluice.common.structs import MessageQueue
from sluice.remoting.codes import RequestCode
from sluice.remoting.headers import RecallMessageRequestHeader
from sluice.remoting.tls import TlsLike

if TYPE_CHECKING:
    from sluice.client.otel import Instrumentation

_REGION = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")


class Producer:
    """Send messages to topics. Use ``async with Producer(...)`` or ``await start()`` / ``await shutdown()``."""

    def __init__(self, group: str = "DEFAULT_PRODUCER", namesrv: str | None = None, *,
                 config: ClientConfig | None = None, credentials: CredentialsLike | None = None,
                 tls: TlsLike | None = None, **settings: Any) -> None:
        """``credentials``: (access key, secret key) that sign every request (ACL 2.0); ``tls``: True, or an
        ``ssl.SSLContext``, for brokers and name servers that speak TLS."""
        validate_group(group)
        cfg = client_config(config, namesrv, settings, "producer")
        # With a namespace the group and every topic go out wrapped (``ns%name``), and results come back without it.
        self.group = wrap(cfg.namespace, group)
        validate_group(self.group)
        self.config = cfg
        self.client = MQClientInstance(cfg, credentials, tls)
        self.faults = LatencyFaultTolerance()
        self.router = QueueRouter(self.client, cfg, self.faults)
        self.accumulator = RecordAccumulator(cfg.batch_max_bytes)
        self.in_flight = InFlight(cfg.max_inflight_async_sends, self.accumulator)
        self.sender = Sender(self.group, self.client, cfg, self.router, self.faults, self.in_flight)
        self._flush_handle: asyncio.Handle | None = None
        # With ``enable_trace``: each answered send is recorded in the trace topic (docs/trace.md).
        self.trace = TraceDispatcher(group, "PRODUCER", cfg, Producer, credentials, tls) if cfg.enable_trace else None
        # With trace on, an auto-batched message carries the broker's region and trace switch itself (as last
        # answered): brokers stamp only messages sent singly, and a Java consumer's trace skips a message without
        # MSG_REGION.
        self._region_stamp = b"\x02MSG_REGION\x01DefaultRegion\x02TRACE_ON\x01true"
        # With ``enable_otel``: a publish span per send, its trace context carried in the message.
        self.otel: Instrumentation | None = None
        if cfg.enable_otel:
            from sluice.client.otel import Instrumentation  # (an optional dependency, loaded only when asked for)

            self.otel = Instrumentation(group)

    @property
    def started(self) -> bool:
        return self.sender.running

    @started.setter
    def started(self, value: bool) -> None:
        self.sender.running = value

    # == lifecycle ===================================================================================
    async def start(self) -> Producer:
        if self.started:
            return self
        self.client.producer_groups.add(self.group)
        await self.client.start()
        self._flush_handle = None  # (one left pending by a loop that closed)
        self.in_flight.reset()
        self.started = True
        if self.trace is not None and not await self.trace.start():
            self.trace = None  # (a trace is never worth the producer: it runs without one, as Java's)
        return self

    async def shutdown(self) -> None:
        if self.started:
            self._flush_batches()  # what callers already handed over leaves, as sends in flight do
            self.started = False
            self.sender.cancel_retries()
            await self.client.shutdown()
            if self.trace is not None:
                await self.trace.shutdown()

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
        span = None
        if self.otel is not None and isinstance(msg, Message):
            span, msg = self._publish_span(msg)
        if selector is not None and self.config.namespace:
            selector = self._named_selector(selector, msg)
        msg, queue = self._named(msg), self._named_queue(queue)
        started = now_ms() if self.trace is not None else 0
        try:
            result = await self._send_one(msg, sharding_key, queue, selector, arg, timeout, oneway=False)
        except BaseException as exc:
            if span is not None:
                self._end_publish(span, None, exc)
            raise
        assert result is not None
        if span is not None:
            self._end_publish(span, result, None)
        if self.trace is not None:
            self._trace_pub(msg, result, started)
        return result

    async def request(self, msg: Message, timeout: float = 3.0, *, sharding_key: str | None = None,
                      queue: MessageQueue | None = None) -> MessageExt:
        """Send ``msg`` as a request and wait for its reply (RocketMQ's ``DefaultMQProducer.request``): a consumer
        of the topic answers with ``create_reply_message(request, body)`` and ``send``; the broker pushes the reply
        here. Raises ``RequestTimeoutError`` when no reply came within ``timeout`` seconds (sending included)."""
        self._check_started()
        if not isinstance(msg, Message) or isinstance(msg, ReplyMessage):
            raise TypeError(f"request takes a Message, not {type(msg).__name__}")
        msg, queue = self._named(msg), self._named_queue(queue)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self.router.cached(msg.topic) is None:
            # The broker a reply reaches must know this client's connection: registered with every broker now.
            await self.router.publish_info(msg.topic)
            await self.client.send_heartbeat_to_all()
        correlation_id, reply = self.client.replies.expect()
        try:
            self._flush_batches(msg.topic)
            uniq, request = self.sender.single_request(
                msg, sharding_key, request_properties(correlation_id, self.client.client_id, int(timeout * 1000)))
            started = now_ms()
            resp, mq = await self.sender.send_with_retries(msg.topic, request, msg, sharding_key, queue, None, None,
                                                           max(0.001, deadline - loop.time()), oneway=False)
            assert resp is not None
            if self.trace is not None:
                self._trace_pub(msg, self.sender.result(resp, mq, [uniq]), started)
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):  # (not wait_for: it may drop a cancel)
                    return await reply
            except TimeoutError:
                raise RequestTimeoutError(f"send request message to <{unwrap(msg.topic, self.config.namespace)}> OK, "
                                          f"but wait reply message "
                                          f"timeout, {int(timeout * 1000)} ms.") from None
        finally:
            self.client.replies.forget(correlation_id)

    async def recall_message(self, topic: str, recall_handle: str, timeout: float | None = None) -> str:
        """Take back a timer message before it is due (RocketMQ 5's ``recallMessage``), with the
        ``SendResult.recall_handle`` its send returned; the message's id. ``BrokerResponseError`` when the broker
        refuses (recall off, the handle bad or its time passed)."""
        self._check_started()
        validate_topic(topic)
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            raise ClientError(f"topic {topic} is not supported: a retry or dead-letter topic")
        topic = wrap(self.config.namespace, topic)
        try:
            handle = RecallHandle.decode(recall_handle)
        except RecallHandleError as exc:
            raise ClientError(str(exc)) from None
        await self.router.publish_info(topic)
        addr = self.client.find_broker_addr(handle.broker_name)
        if addr is None:
            raise ClientError(f"The broker service address not found: {handle.broker_name}")
        header = RecallMessageRequestHeader(self.group, topic, recall_handle, handle.broker_name)
        resp = await self.client.api.invoke_ok(addr, RequestCode.RECALL_MESSAGE, header.encode(),
                                               timeout_ms=int(self.sender.timeout_s(timeout) * 1000))
        return resp.ext_fields.get("msgId", "")

    async def send_oneway(self, msg: Message, *, sharding_key: str | None = None,
                          queue: MessageQueue | None = None) -> None:
        """Send without waiting for any answer (no retry, no result)."""
        await self._send_one(self._named(msg), sharding_key, self._named_queue(queue), None, None, None, oneway=True)

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
        if self.config.namespace:
            queue = self._named_queue(queue)
            if self.otel is None:
                msg = self._named(msg)
        if (self.trace is None and self.otel is None) or not isinstance(msg, Message):
            return self._send_async(msg, sharding_key, queue, timeout)
        span = None
        if self.otel is not None:
            span, msg = self._publish_span(msg)
            msg = self._named(msg)
        return self._traced(msg, now_ms(), self._send_async(msg, sharding_key, queue, timeout), span)

    def _send_async(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None,
                    timeout: float | None) -> asyncio.Future[SendResult]:
        loop = asyncio.get_running_loop()
        place: Place | None = None
        topic = msg.topic if isinstance(msg, Message) else ""  # (not a Message: the send's task says so)
        if self.started:
            # Not ahead of an earlier send to the topic still on its way to the wire (waiting for a route, a
            # connection or room): a topic's async sends leave in the order they were made.
            room = self.in_flight.has_room()
            if room and topic not in self.in_flight.unsent and self.config.auto_batch and isinstance(msg, Message) \
                    and batchable(msg, self.config.compress_msg_body_over_howmuch):
                fut = self._append(msg, sharding_key, queue, timeout, loop)
                if fut is not None:
                    return fut
            self._flush_batches(topic)  # (held sends of the topic leave first; they may take the task path)
            if room and topic not in self.in_flight.unsent:
                fut = self.sender.start_single(msg, sharding_key, queue, timeout, loop)
                if fut is not None:
                    return fut
            place = self.in_flight.take_place(loop)
        return self._send_async_task(msg, sharding_key, queue, timeout, loop, place)

    async def send_batch(self, msgs: Sequence[Message], *, sharding_key: str | None = None,
                         queue: MessageQueue | None = None, timeout: float | None = None) -> SendResult:
        """Send messages of one topic as one request to one queue; each gets its own id."""
        self._check_started()
        spans: list[Any] = []
        if self.otel is not None:  # (a publish span per message, each carrying its own)
            pairs = [self._publish_span(m) for m in msgs]
            spans, msgs = [p[0] for p in pairs], [p[1] for p in pairs]
        if self.config.namespace:
            msgs, queue = [self._named(m) for m in msgs], self._named_queue(queue)
        try:
            result = await self._send_batch_traced(msgs, sharding_key, queue, timeout)
        except BaseException as exc:
            for span in spans:
                self._end_publish(span, None, exc)
            raise
        for span in spans:
            self._end_publish(span, result, None)
        return result

    async def _send_batch_traced(self, msgs: Sequence[Message], sharding_key: str | None,
                                 queue: MessageQueue | None, timeout: float | None) -> SendResult:
        if any(isinstance(m, ReplyMessage) for m in msgs):
            raise MessageFormatError("a reply is sent on its own (send), not in a batch")
        batch = encode_message_batch(msgs, self.config.max_message_size)
        self._flush_batches(batch.topic)
        request = self.sender.batch_request(batch.body, encode_properties(batch.properties).decode())
        started = now_ms()
        resp, mq = await self.sender.send_with_retries(batch.topic, request, msgs[0], sharding_key, queue, None, None,
                                                       timeout, oneway=False)
        assert resp is not None
        result = self.sender.result(resp, mq, batch.msg_ids)
        if self.trace is not None:  # (a Pub record per message, each found by its own id)
            offset_ids = result.offset_msg_id.split(",")
            for i, m in enumerate(msgs):
                one = replace(result, msg_id=batch.msg_ids[i], msg_ids=[batch.msg_ids[i]],
                              offset_msg_id=offset_ids[i] if len(offset_ids) == len(msgs) else "")
                self._trace_pub(m, one, started)
        return result

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
        topic, queue = wrap(self.config.namespace, topic), self._named_queue(queue)
        self._flush_batches(topic)
        request = self.sender.batch_request(body, "")
        resp, mq = await self.sender.send_with_retries(topic, request, None, None, queue, None, None, timeout,
                                                       oneway=False)
        assert resp is not None
        return self.sender.result(resp, mq, [""])

    async def publish_info(self, topic: str) -> TopicPublishInfo:
        """The queues to send ``topic`` to; through TBW102's brokers while the topic has no route yet."""
        info = await self.router.publish_info(wrap(self.config.namespace, topic))
        if not self.config.namespace:
            return info
        return TopicPublishInfo([self._user_queue(q) for q in info.queues], info.via_default_topic)

    # == trace =======================================================================================
    def _trace_pub(self, msg: Message, result: SendResult, started: int, half: bool = False) -> None:
        assert self.trace is not None
        if _REGION.fullmatch(result.region_id):  # (a broker's word, put into messages: only a plain name)
            switch = "true" if result.trace_on else "false"
            self._region_stamp = f"\x02MSG_REGION\x01{result.region_id}\x02TRACE_ON\x01{switch}".encode()
        ctx = pub_context(self.group, msg, result, started,
                          self.client.find_broker_addr(result.queue.broker_name) or "", half)
        if ctx is not None:
            self.trace.append(ctx)

    def _traced(self, msg: Message, started: int, fut: asyncio.Future[SendResult],
                span: Any = None) -> asyncio.Future[SendResult]:
        def done(f: asyncio.Future[SendResult]) -> None:
            error = asyncio.CancelledError() if f.cancelled() else f.exception()
            ok = error is None
            if span is not None:
                self._end_publish(span, f.result() if ok else None, error)
            if ok and self.trace is not None:
                self._trace_pub(msg, f.result(), started)
        fut.add_done_callback(done)
        return fut

    def _end_publish(self, span: Any, result: SendResult | None, error: BaseException | None) -> None:
        assert self.otel is not None
        self.otel.end_publish(span, result, error)

    def _publish_span(self, msg: Message) -> tuple[Any, Message]:
        """A publish span for ``msg``, and the message to send: carrying the span's trace context (a copy: the
        caller's message is left as it is)."""
        assert self.otel is not None
        span, traceparent = self.otel.start_publish(msg)
        return span, (replace(msg, trace_context=traceparent) if traceparent else msg)

    # == namespaces ==================================================================================
    def _named(self, msg: Message) -> Message:
        """``msg`` with its topic as the broker knows it in this producer's namespace (a copy: the caller's
        message keeps its name)."""
        ns = self.config.namespace
        if not ns or not isinstance(msg, Message) or isinstance(msg, ReplyMessage):
            # (a reply goes to its cluster's reply topic, outside any namespace: sent there, it has a route)
            return msg
        topic = wrap(ns, msg.topic)
        return msg if topic == msg.topic else replace(msg, topic=topic)

    def _named_queue(self, queue: MessageQueue | None) -> MessageQueue | None:
        ns = self.config.namespace
        if not ns or queue is None:
            return queue
        return MessageQueue(wrap(ns, queue.topic), queue.broker_name, queue.queue_id)

    def _user_queue(self, queue: MessageQueue) -> MessageQueue:
        return MessageQueue(unwrap(queue.topic, self.config.namespace), queue.broker_name, queue.queue_id)

    def _named_selector(self, selector: QueueSelector, msg: Message) -> QueueSelector:
        """``selector`` as the caller wrote it, given the queues and the message under the caller's names; the queue
        it picks goes back into the namespace (as RocketMQ's producer does)."""
        def select(queues: list[MessageQueue], _: Message, arg: Any) -> MessageQueue:
            chosen = selector([self._user_queue(q) for q in queues], msg, arg)
            named = self._named_queue(chosen)
            return chosen if named is None else named
        return select

    # == the send paths ==============================================================================
    def _check_started(self) -> None:
        if not self.started:
            raise ClientError("the producer is not started: call start() first")

    async def _send_one(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None,
                        selector: QueueSelector | None, arg: Any, timeout: float | None,
                        oneway: bool, async_send: bool = False, on_wire: OnWire | None = None
                        ) -> SendResult | None:
        self._check_started()
        if not isinstance(msg, Message):
            raise TypeError(f"send takes a Message, not {type(msg).__name__}")
        self._flush_batches(msg.topic)  # async sends held for a batch were made first: they leave first
        uniq, request = self.sender.single_request(msg, sharding_key)
        resp, mq = await self.sender.send_with_retries(msg.topic, request, msg, sharding_key, queue, selector, arg,
                                                       timeout, oneway, async_send=async_send, on_wire=on_wire)
        return None if resp is None else self.sender.result(resp, mq, [uniq])

    def _send_async_task(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None,
                         timeout: float | None, loop: asyncio.AbstractEventLoop,
                         place: Place | None) -> asyncio.Future[SendResult]:
        """An async send done by a task, in its topic's line to the wire."""
        topic = msg.topic if isinstance(msg, Message) else ""
        on_wire = OnWire(self.in_flight, topic, loop)
        task = loop.create_task(self._bounded_send(msg, sharding_key, queue, timeout, place, on_wire))
        task.add_done_callback(lambda _: on_wire())  # never written (failed, or cancelled even before it ran)
        if place is not None:
            taken = place
            task.add_done_callback(lambda _: self.in_flight.give_back_unused(taken))
        return task

    async def _bounded_send(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None,
                            timeout: float | None, place: Place | None = None,
                            on_wire: OnWire | None = None) -> SendResult:
        if place is None:
            self._check_started()
            place = self.in_flight.take_place(asyncio.get_running_loop())
        place.used = True
        if place.waiter is not None:
            try:
                await place.waiter  # ``release`` hands this send the slot it frees
            except asyncio.CancelledError:
                if place.waiter.done() and not place.waiter.cancelled():
                    self.in_flight.release()  # the slot this send was handed goes to the next one
                raise
        try:
            self._check_started()
            result = await self._send_one(msg, sharding_key, queue, None, None, timeout, oneway=False,
                                          async_send=True, on_wire=on_wire)
            assert result is not None
            return result
        finally:
            self.in_flight.release()

    # == auto-batching ==============================================================================
    def _append(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None, timeout: float | None,
                loop: asyncio.AbstractEventLoop) -> asyncio.Future[SendResult] | None:
        """Hold an async send for the batch of its place; None when it cannot be encoded (the task path then
        raises what is wrong with it)."""
        uniq = create_uniq_id()
        try:
            wire = msg.wire_for_send(uniq, self.config.max_message_size, sharding_key)
            if self.trace is not None and len(wire) + len(self._region_stamp) <= MAX_PROPERTIES_SIZE:
                wire += self._region_stamp  # (see _trace_pub)
            record = encode_batch_record(msg.body, wire, msg.flag)
        except Exception:
            return None
        out: asyncio.Future[SendResult] = loop.create_future()
        full = self.accumulator.append(BatchKey(msg.topic, sharding_key, queue), PendingSend(msg, uniq, record, out),
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
        acc = self.accumulator
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
        key, timeout = batch.key, batch.timeout
        sends = [p for p in batch.sends if not p.out.done()]  # (cancelled by their callers meanwhile)
        if not sends:
            return
        if not self.started:
            for p in sends:
                p.out.set_exception(ClientError("the producer was shut down before the message was sent"))
            return
        in_line = key.topic in self.in_flight.unsent  # an earlier send of the topic is on the task path: behind it
        if len(sends) == 1:
            p = sends[0]
            inner = None if in_line else self.sender.start_single(p.msg, key.sharding_key, key.queue, timeout, loop)
            if inner is None:
                inner = self._send_async_task(p.msg, key.sharding_key, key.queue, timeout, loop,
                                              self.in_flight.take_place(loop))
            chain(inner, p.out)
        elif in_line or not self.sender.start_batch(sends, key, timeout, batch.wait_store_msg_ok, loop):
            for p in sends:
                chain(self._send_async_task(p.msg, key.sharding_key, key.queue, timeout, loop,
                                            self.in_flight.take_place(loop)), p.out)


__all__ = ["Producer", "QueueSelector", "TopicPublishInfo"]
