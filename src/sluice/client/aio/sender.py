"""The producer's sender (aiokafka's Sender): puts send requests on the wire and sees them answered. Every wire
path goes through it: a single send, a batch, and the accumulator's auto-batches; each attempt's queue comes from
the queue router, its outcome is noted for fault avoidance, and a failed attempt is retried on another queue or
broker until the send's deadline.

An async send's first attempt is started here from the caller's callback (no task) when its route and connection
are ready; its answer completes the caller's future, or hands over to the retries in a task.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sluice.client.aio.in_flight import InFlight, OnWire
from sluice.client.aio.record_accumulator import BatchKey, PendingSend
from sluice.client.latency_fault_tolerance import LatencyFaultTolerance
from sluice.client.message import Message, SendResult, SendStatus
from sluice.client.message_id import create_uniq_id
from sluice.client.mq_client import MQClientInstance
from sluice.client.queue_router import DEFAULT_TOPIC_QUEUE_NUMS, QueueRouter, QueueSelector, TopicPublishInfo
from sluice.client.request_reply import ReplyMessage
from sluice.common.config import ClientConfig
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.common.namespace import unwrap
from sluice.common.naming import AUTO_CREATE_TOPIC_KEY_TOPIC
from sluice.common.properties import PROPERTY_WAIT_STORE_MSG_OK, encode_properties
from sluice.common.structs import MessageQueue
from sluice.common.sysflag import COMPRESSED_FLAG
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import RemotingError
from sluice.remoting.headers import SendMessageRequestHeader

log = logging.getLogger("sluice.client.aio.producer")  # the producer's log, where users look for it

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

# A send's request for a queue (the same message id and encoding on every attempt); bool: through TBW102.
RequestFor = Callable[[MessageQueue, bool], RemotingCommand]


@dataclass(slots=True)
class _FirstAttempt:
    """A failed first attempt of ``send_async``, handed to the retries (which stop once ``out`` is done: the
    caller cancelled it)."""

    error: Exception
    broker: str
    deadline: float
    out: asyncio.Future[Any]


class Sender:
    def __init__(self, group: str, client: MQClientInstance, config: ClientConfig, router: QueueRouter,
                 faults: LatencyFaultTolerance, in_flight: InFlight) -> None:
        self.group = group
        self.client = client
        self.config = config
        self.router = router
        self.faults = faults
        self.in_flight = in_flight
        self.running = False  # the producer is started: answers may be retried
        self.retries: set[asyncio.Task[Any]] = set()  # async sends' later attempts

    def cancel_retries(self) -> None:
        for t in list(self.retries):
            t.cancel()

    def timeout_s(self, timeout: float | None) -> float:
        return timeout if timeout is not None else self.config.send_msg_timeout / 1000

    # == requests ===================================================================================
    def single_request(self, msg: Message, sharding_key: str | None, system_properties: bytes = b"",
                       system_flag: int = 0) -> tuple[str, RequestFor]:
        """A message's id and its SEND_MESSAGE_V2 (a reply's SEND_REPLY_MESSAGE_V2) request for a queue (the same id
        on every attempt); ``system_properties`` (encoded, each pair led by the separator) and ``system_flag`` are
        added as given."""
        uniq = create_uniq_id()
        code = RequestCode.SEND_MESSAGE_V2
        if isinstance(msg, ReplyMessage):  # (the broker pushes it to its requester)
            code, system_properties = RequestCode.SEND_REPLY_MESSAGE_V2, system_properties + msg.reply_properties()
        props_str = (msg.wire_for_send(uniq, self.config.max_message_size, sharding_key) + system_properties).decode()
        body, sys_flag = msg.body, system_flag
        if len(body) > self.config.compress_msg_body_over_howmuch:
            body, sys_flag = zlib.compress(body, self.config.compress_level), sys_flag | COMPRESSED_FLAG
        born = int(time.time() * 1000)

        def request(mq: MessageQueue, via_default: bool) -> RemotingCommand:
            return RemotingCommand.request(code, self._header(mq, sys_flag, born, msg.flag, props_str), body)

        return uniq, request

    def batch_request(self, body: bytes, props: str) -> RequestFor:
        """A SEND_BATCH_MESSAGE of encoded batch records, ``props`` the request's own properties."""
        born = int(time.time() * 1000)

        def request(mq: MessageQueue, via_default: bool) -> RemotingCommand:
            return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE,
                                           self._header(mq, 0, born, 0, props, batch=True), body)

        return request

    def _header(self, mq: MessageQueue, sys_flag: int, born: int, flag: int, props: str,
                batch: bool = False) -> dict[str, str]:
        return SendMessageRequestHeader(self.group, mq.topic, AUTO_CREATE_TOPIC_KEY_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS,
                                        mq.queue_id, sys_flag, born, flag, props, 0, False, None, batch,
                                        mq.broker_name).encode_v2()

    def result(self, resp: RemotingCommand, mq: MessageQueue, ids: list[str]) -> SendResult:
        status = SendStatus.from_response_code(resp.code) or SendStatus.SEND_OK
        ext = resp.ext_fields
        topic = unwrap(mq.topic, self.config.namespace)  # (the caller's name for it)
        return SendResult(status, ids[0], ext.get("msgId", ""), MessageQueue(topic, mq.broker_name,
                                                                             int(ext.get("queueId", mq.queue_id))),
                          int(ext.get("queueOffset", "-1")), ids, ext.get("transactionId") or None,
                          ext.get("MSG_REGION") or "DefaultRegion", ext.get("TRACE_ON") != "false",
                          ext.get("recallHandle") or None)

    def batch_results(self, resp: RemotingCommand, mq: MessageQueue, sends: list[PendingSend]) -> list[SendResult]:
        """Each message's own result from a batch's answer: its id, the broker's id for it, its queue offset."""
        status = SendStatus.from_response_code(resp.code) or SendStatus.SEND_OK
        ext = resp.ext_fields
        queue = MessageQueue(unwrap(mq.topic, self.config.namespace), mq.broker_name,
                             int(ext.get("queueId", mq.queue_id)))
        base = int(ext.get("queueOffset", "-1"))
        offset_ids = ext.get("msgId", "").split(",")
        if len(offset_ids) != len(sends):
            offset_ids = [""] * len(sends)
        region, trace_on = ext.get("MSG_REGION") or "DefaultRegion", ext.get("TRACE_ON") != "false"
        return [SendResult(status, p.uniq, offset_ids[i], queue, base + i if base >= 0 else -1, [p.uniq], None,
                           region, trace_on) for i, p in enumerate(sends)]

    # == first attempts started from a callback =====================================================
    def _start(self, info: TopicPublishInfo, sharding_key: str | None, queue: MessageQueue | None,
               timeout_s: float, request: RequestFor, loop: asyncio.AbstractEventLoop
               ) -> tuple[Connection, asyncio.Future[RemotingCommand], int, MessageQueue, str, float] | None:
        """A request on the wire now, or None when it needs to wait for something (a connection, a peer that is
        not reading) or something is wrong with it: the task path then does it, and raises what is wrong."""
        try:
            if timeout_s <= 0:
                return None
            mq = self.router.select(info, queue, sharding_key)
            addr = self.client.find_publish_addr(mq.broker_name)
            if addr is None:
                return None
            req = request(mq, info.via_default_topic)
            t0 = loop.time()
            started = self.client.remoting.start_request(addr, req, max(1, int(timeout_s * 1000)))
        except Exception:
            return None
        if started is None:
            return None
        return started[0], started[1], req.opaque, mq, addr, t0

    def start_single(self, msg: Message, sharding_key: str | None, queue: MessageQueue | None,
                     timeout: float | None, loop: asyncio.AbstractEventLoop) -> asyncio.Future[SendResult] | None:
        """The first attempt of an async send put on the wire now (its future), or None when its route is not
        known yet or ``_start`` cannot put it there."""
        try:
            info = self.router.cached(msg.topic)
            if info is None:
                return None
            uniq, request = self.single_request(msg, sharding_key)
        except Exception:
            return None
        timeout_s = self.timeout_s(timeout)
        started = self._start(info, sharding_key, queue, timeout_s, request, loop)
        if started is None:
            return None
        conn, answer, opaque, mq, addr, t0 = started
        send = _AsyncSend(self, loop.create_future(), msg, sharding_key, queue, timeout, uniq, request, mq, addr, t0,
                          t0 + timeout_s)
        self.in_flight.count += 1
        send.out.add_done_callback(send.given_up)
        answer.add_done_callback(lambda f: send.answered(conn, opaque, f))
        return send.out

    def start_batch(self, sends: list[PendingSend], key: BatchKey, timeout: float | None, wait_store_msg_ok: bool,
                    loop: asyncio.AbstractEventLoop) -> bool:
        """An auto-batch put on the wire now as one SEND_BATCH_MESSAGE; False when its route is not known yet or
        ``_start`` cannot put it there."""
        info = self.router.cached(key.topic)
        if info is None:
            return False
        timeout_s = self.timeout_s(timeout)
        props = encode_properties({PROPERTY_WAIT_STORE_MSG_OK: "true" if wait_store_msg_ok else "false"}).decode()
        request = self.batch_request(b"".join(p.record for p in sends), props)
        started = self._start(info, key.sharding_key, key.queue, timeout_s, request, loop)
        if started is None:
            return False
        conn, answer, opaque, mq, addr, t0 = started
        self.in_flight.count += len(sends)
        send = _BatchSend(self, sends, key, timeout, request, mq, addr, t0, t0 + timeout_s)
        answer.add_done_callback(lambda f: send.answered(conn, opaque, f))
        return True

    # == attempts until one is answered ==============================================================
    async def send_with_retries(self, topic: str, request: RequestFor, msg: Message | None,
                                sharding_key: str | None, queue: MessageQueue | None,
                                selector: QueueSelector | None, arg: Any, timeout: float | None,
                                oneway: bool, first: _FirstAttempt | None = None, async_send: bool = False,
                                on_wire: OnWire | None = None) -> tuple[RemotingCommand | None, MessageQueue]:
        """Attempts until one is answered with a send status; ``first``: an attempt already made (by
        ``send_async``), which counts as the first and whose deadline holds. A send of ``send_async`` retries
        ``retry_times_when_send_async_failed`` times (none when pinned to a queue), others
        ``retry_times_when_send_failed`` (RocketMQ's two)."""
        loop = asyncio.get_running_loop()
        timeout_s = self.timeout_s(timeout)
        deadline = first.deadline if first is not None else loop.time() + timeout_s
        retries = self.config.retry_times_when_send_async_failed if async_send or first is not None \
            else self.config.retry_times_when_send_failed
        if (async_send or first is not None) and (sharding_key is not None or queue is not None
                                                   or selector is not None):
            # An async send pinned to a queue is not retried (RocketMQ's orderly sends are not): the sends made
            # after it may be stored already, and a retry would store it after them.
            retries = 0
        attempts = 1 if oneway else 1 + retries
        last_broker = first.broker if first is not None else None
        last_error = first.error if first is not None else None
        mq: MessageQueue | None = None
        if isinstance(last_error, BrokerResponseError) and last_error.code == ResponseCode.TOPIC_NOT_EXIST:
            self.router.forget(topic)
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
            info = await self.router.publish_info(topic)
            mq = self.router.select(info, queue, sharding_key, selector, msg, arg, last_broker)
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
                outcome = self.outcome(mq, addr, (loop.time() - t0) * 1000, resp, None)
            except RemotingError as exc:
                outcome = self.outcome(mq, addr, (loop.time() - t0) * 1000, None, exc)
            if isinstance(outcome, RemotingCommand):
                return outcome, mq
            last_error, last_broker = outcome, mq.broker_name
            log.info("send to %s (%s) failed on attempt %d: %s", mq, addr, attempt + 1, outcome)
            if isinstance(outcome, BrokerResponseError) and outcome.code == ResponseCode.TOPIC_NOT_EXIST:
                self.router.forget(topic)
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

    def outcome(self, mq: MessageQueue, addr: str, latency_ms: float, resp: RemotingCommand | None,
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


class _AsyncSend:
    """An async send whose first attempt ``start_single`` put on the wire: its answer completes ``out``, or hands
    over to the retries in a task. The send's in-flight slot is freed once, when its last attempt ends."""

    __slots__ = ("sender", "out", "msg", "sharding_key", "queue", "timeout", "uniq", "request", "mq", "addr",
                 "t0", "deadline", "retry")

    def __init__(self, sender: Sender, out: asyncio.Future[SendResult], msg: Message, sharding_key: str | None,
                 queue: MessageQueue | None, timeout: float | None, uniq: str, request: RequestFor,
                 mq: MessageQueue, addr: str, t0: float, deadline: float) -> None:
        self.sender = sender
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
        s, out = self.sender, self.out
        loop = out.get_loop()
        try:
            exc = RemotingError("send cancelled") if f.cancelled() else f.exception()
            outcome = s.outcome(self.mq, self.addr, (loop.time() - self.t0) * 1000, None if exc else f.result(), exc)
            if out.done():  # the caller gave up on it
                s.in_flight.release()
            elif isinstance(outcome, RemotingCommand):
                out.set_result(s.result(outcome, self.mq, [self.uniq]))
                s.in_flight.release()
            elif not s.running:
                raise ClientError(f"the producer was shut down while sending to {self.mq}: {outcome}")
            else:
                log.info("send to %s (%s) failed on attempt 1: %s", self.mq, self.addr, outcome)
                retry = self.retry = loop.create_task(s.send_with_retries(
                    self.msg.topic, self.request, self.msg, self.sharding_key, self.queue, None, None, self.timeout,
                    oneway=False, first=_FirstAttempt(outcome, self.mq.broker_name, self.deadline, out)))
                s.retries.add(retry)
                retry.add_done_callback(self.retried)
        except Exception as final:  # no other attempt can help, or the answer could not be read
            if not out.done():
                out.set_exception(final)
            s.in_flight.release()

    def retried(self, task: asyncio.Task[tuple[RemotingCommand | None, MessageQueue]]) -> None:
        s = self.sender
        s.retries.discard(task)
        s.in_flight.release()
        if task.cancelled() and not self.out.done() and not s.running:  # cancelled by shutdown, not the caller
            self.out.set_exception(ClientError(f"the producer was shut down while sending to {self.mq}"))
            return
        try:
            settle(self.out, task, self._result_of)
        except Exception as exc:  # the answer could not be read
            if not self.out.done():
                self.out.set_exception(exc)

    def _result_of(self, answered: tuple[RemotingCommand | None, MessageQueue]) -> SendResult:
        resp, mq = answered
        assert resp is not None  # (not one-way)
        return self.sender.result(resp, mq, [self.uniq])

    def given_up(self, out: asyncio.Future[SendResult]) -> None:
        """``out`` is done: when the caller cancelled it, no further attempt."""
        if out.cancelled() and self.retry is not None:
            self.retry.cancel()


class _BatchSend:
    """An auto-batch on the wire: its answer completes every member's future, or hands the whole batch over to
    the retries in a task. Its members' in-flight slots are freed when its last attempt ends."""

    __slots__ = ("sender", "sends", "key", "timeout", "request", "mq", "addr", "t0", "deadline")

    def __init__(self, sender: Sender, sends: list[PendingSend], key: BatchKey, timeout: float | None,
                 request: RequestFor, mq: MessageQueue, addr: str, t0: float, deadline: float) -> None:
        self.sender = sender
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
            self.sender.in_flight.release()

    def _settle(self, resp: RemotingCommand, mq: MessageQueue) -> None:
        for p, result in zip(self.sends, self.sender.batch_results(resp, mq, self.sends), strict=True):
            if not p.out.done():
                p.out.set_result(result)

    def _fail(self, exc: BaseException) -> None:
        for p in self.sends:
            if not p.out.done():
                p.out.set_exception(exc)

    def answered(self, conn: Connection, opaque: int, f: asyncio.Future[RemotingCommand]) -> None:
        conn.abandon(opaque, f)
        s = self.sender
        loop = asyncio.get_running_loop()
        try:
            exc = RemotingError("send cancelled") if f.cancelled() else f.exception()
            outcome = s.outcome(self.mq, self.addr, (loop.time() - self.t0) * 1000, None if exc else f.result(), exc)
            if isinstance(outcome, RemotingCommand):
                self._settle(outcome, self.mq)
                self._release()
            elif not s.running:
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
                retry = loop.create_task(s.send_with_retries(
                    self.key.topic, self.request, None, self.key.sharding_key, self.key.queue, None, None,
                    self.timeout, oneway=False,
                    first=_FirstAttempt(outcome, self.mq.broker_name, self.deadline, waiting)))
                s.retries.add(retry)
                retry.add_done_callback(self.retried)
        except Exception as final:  # no other attempt can help, or the answer could not be read
            self._fail(final)
            self._release()

    def retried(self, task: asyncio.Task[tuple[RemotingCommand | None, MessageQueue]]) -> None:
        self.sender.retries.discard(task)
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


def chain(inner: asyncio.Future[SendResult], out: asyncio.Future[SendResult]) -> None:
    """``out`` (what the caller holds) completes as ``inner`` does; cancelling ``out`` cancels ``inner``."""
    inner.add_done_callback(lambda f: settle(out, f, lambda r: r))
    out.add_done_callback(lambda o: inner.cancel() if o.cancelled() else None)


T = TypeVar("T")
R = TypeVar("R")


def settle(out: asyncio.Future[R], task: asyncio.Future[T], convert: Callable[[T], R]) -> None:
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


__all__ = ["AVOID_SECONDS", "RETRY_RESPONSE_CODES", "RequestFor", "Sender", "chain", "settle"]
