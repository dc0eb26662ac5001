"""The asyncio transactional producer (RocketMQ's TransactionMQProducer).

``send_message_in_transaction`` stores a half message (TRAN_MSG, invisible to consumers), runs the listener's
local transaction, and tells the broker the outcome with END_TRANSACTION (one-way, as Java's producer does). A
broker that has no outcome — UNKNOWN, a crash, a lost END_TRANSACTION — asks again later with
CHECK_TRANSACTION_STATE, which ``check_local_transaction`` answers.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from sluice.client.aio.producer import Producer
from sluice.client.message import Message, SendResult, SendStatus
from sluice.client.request_reply import ReplyMessage
from sluice.client.trace import end_transaction_context, now_ms
from sluice.client.transaction import LocalTransactionState, TransactionListener, TransactionSendResult
from sluice.common.config import ClientConfig
from sluice.common.errors import MessageFormatError
from sluice.common.message import MessageExt, decode_message_id
from sluice.common.namespace import unwrap, wrap
from sluice.common.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_MSG_REGION,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TRANSACTION_PREPARED,
)
from sluice.common.sysflag import TRANSACTION_PREPARED_TYPE
from sluice.remoting.codes import RequestCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import RemotingError
from sluice.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader

log = logging.getLogger(__name__)

# A state as Java's LocalTransactionState names it in an EndTransaction trace record.
_TRACE_STATE = {LocalTransactionState.COMMIT: "COMMIT_MESSAGE", LocalTransactionState.ROLLBACK: "ROLLBACK_MESSAGE",
                LocalTransactionState.UNKNOWN: "UNKNOW"}

# Checks from brokers answered at once, at most (RocketMQ's check executor queues 2,000); more are dropped, and the
# broker asks again at its next round.
MAX_PENDING_CHECKS = 2_000


class TransactionProducer(Producer):
    """Send messages as parts of local transactions: ``send_message_in_transaction``. Plain sends work too."""

    def __init__(self, group: str, listener: TransactionListener, namesrv: str | None = None, *,
                 config: ClientConfig | None = None, **settings: Any) -> None:
        super().__init__(group, namesrv, config=config, **settings)
        for name in ("execute_local_transaction", "check_local_transaction"):
            if not callable(getattr(listener, name, None)):
                raise TypeError(f"a transaction listener needs the method {name}; {type(listener).__name__} has none")
        self.listener = listener
        self._checks: set[asyncio.Task[None]] = set()

    async def start(self) -> TransactionProducer:
        self.client.transaction_checkers[self.group] = self._on_check
        await super().start()
        return self

    async def shutdown(self) -> None:
        self.client.transaction_checkers.pop(self.group, None)
        for t in list(self._checks):
            t.cancel()
        await super().shutdown()

    async def __aenter__(self) -> TransactionProducer:
        return await self.start()

    # == sending =====================================================================================
    async def send_message_in_transaction(self, msg: Message, arg: Any = None, *,
                                          timeout: float | None = None) -> TransactionSendResult:
        """Store ``msg`` as a half message, run ``execute_local_transaction(msg, arg)`` and commit or roll back
        as it says (UNKNOWN leaves the decision to the check). A half message stored less durably than asked
        (e.g. FLUSH_DISK_TIMEOUT) is rolled back without running the local transaction, as RocketMQ does."""
        result = await self.send_half(msg, timeout=timeout)
        if result.status is SendStatus.SEND_OK:
            state, error = await _decide(self.listener.execute_local_transaction, (msg, arg), in_thread=False)
        else:
            state, error = LocalTransactionState.ROLLBACK, f"the half message was stored {result.status.name}"
        await self.end_transaction(result, state, error, msg=msg)
        return TransactionSendResult(**{f.name: getattr(result, f.name) for f in fields(SendResult)},
                                     local_transaction_state=state)

    async def send_half(self, msg: Message, *, timeout: float | None = None) -> SendResult:
        """Only the first step: store ``msg`` as a half message (to be decided by ``end_transaction``)."""
        self._check_started()
        if not isinstance(msg, Message):
            raise TypeError(f"send_message_in_transaction takes a Message, not {type(msg).__name__}")
        if msg.delay_level:
            raise MessageFormatError("a transactional message cannot have a delay level: it is delivered when "
                                     "committed")
        if isinstance(msg, ReplyMessage):
            raise MessageFormatError("a reply is sent with send, not in a transaction")
        if msg.priority is not None:
            raise MessageFormatError("a transactional message has no priority")
        msg = self._named(msg)
        system = "".join(f"{PROPERTY_SEPARATOR}{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in (
            (PROPERTY_TRANSACTION_PREPARED, "true"), (PROPERTY_PRODUCER_GROUP, self.group))).encode()
        uniq, request = self.sender.single_request(msg, None, system, TRANSACTION_PREPARED_TYPE)
        started = now_ms()
        resp, mq = await self.sender.send_with_retries(msg.topic, request, msg, None, None, None, None, timeout, False)
        assert resp is not None
        result = self.sender.result(resp, mq, [uniq])
        if result.transaction_id is None:
            result.transaction_id = uniq
        if self.trace is not None:
            self._trace_pub(msg, result, started, half=True)
        return result

    async def end_transaction(self, result: SendResult, state: LocalTransactionState,
                              error: str | None = None, *, msg: Message | None = None) -> None:
        """Tell the broker that stored the half message of ``result`` what became of it (one-way: a lost one is
        made good by the check). ``msg``, the message sent, gives a trace record its tags and keys."""
        _, commit_log_offset = decode_message_id(result.offset_msg_id)
        addr = self.client.find_publish_addr(result.queue.broker_name)  # the master: a slave cannot end it
        if addr is None:
            log.warning("no master of broker %s to end transaction %s: it will be checked back",
                        result.queue.broker_name, result.msg_id)
            return
        header = EndTransactionRequestHeader(self.group, result.queue_offset, commit_log_offset, state.value, False,
                                             result.msg_id, result.transaction_id or result.msg_id,
                                             topic=wrap(self.config.namespace, result.queue.topic),
                                             broker_name=result.queue.broker_name)
        req = RemotingCommand.request(RequestCode.END_TRANSACTION, header.encode(), oneway=True)
        req.remark = error
        if self.trace is not None:
            self.trace.append(end_transaction_context(
                self.group, result.queue.topic, result.msg_id, msg.tags if msg else None, msg.keys if msg else None,
                addr, result.transaction_id, _TRACE_STATE[state], False))
        try:
            await self.client.remoting.invoke_oneway(addr, req)
        except RemotingError as exc:
            log.warning("cannot end transaction %s at %s (%s): it will be checked back", result.msg_id, addr, exc)

    # == checks from brokers =========================================================================
    def _on_check(self, broker_addr: str, header: CheckTransactionStateRequestHeader, msg: MessageExt) -> None:
        """CHECK_TRANSACTION_STATE from ``broker_addr`` about ``msg``: answered by a task of its own."""
        if len(self._checks) >= MAX_PENDING_CHECKS:
            log.warning("%d transaction checks pending: the check of %s is dropped (the broker asks again)",
                        len(self._checks), msg.uniq_key)
            return
        task = asyncio.get_running_loop().create_task(self._answer_check(broker_addr, header, msg))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _answer_check(self, broker_addr: str, header: CheckTransactionStateRequestHeader,
                            msg: MessageExt) -> None:
        fn = self.listener.check_local_transaction
        topic = msg.properties.get(PROPERTY_REAL_TOPIC) or msg.topic
        if self.config.namespace:
            msg.topic = unwrap(topic, self.config.namespace)  # (the listener's name for it)
        # A plain function may block on a database: it runs in a thread, not on the event loop.
        state, error = await _decide(fn, (msg,), in_thread=not inspect.iscoroutinefunction(fn))
        answer = EndTransactionRequestHeader(self.group, header.tran_state_table_offset, header.commit_log_offset,
                                             state.value, True, msg.uniq_key or header.msg_id, header.transaction_id,
                                             topic=topic, broker_name=header.broker_name)
        req = RemotingCommand.request(RequestCode.END_TRANSACTION, answer.encode(), oneway=True)
        req.remark = error
        if self.trace is not None:
            self.trace.append(end_transaction_context(
                self.group, answer.topic or msg.topic, answer.msg_id, msg.tags, msg.keys, broker_addr,
                header.transaction_id, _TRACE_STATE[state], True, msg.get_property(PROPERTY_MSG_REGION)))
        try:
            await self.client.remoting.invoke_oneway(broker_addr, req)
        except RemotingError as exc:
            log.warning("cannot answer the check of transaction %s to %s (%s): the broker asks again", msg.uniq_key,
                        broker_addr, exc)


async def _decide(fn: Callable[..., Any], args: tuple[Any, ...], in_thread: bool) -> tuple[LocalTransactionState,
                                                                                            str | None]:
    """What a listener method says; UNKNOWN, with the reason, when it raises or answers something else."""
    try:
        out = await asyncio.to_thread(fn, *args) if in_thread else fn(*args)
        if inspect.isawaitable(out):
            out = await out
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return listener_failed(fn, exc)
    return listener_said(fn, out)


def listener_failed(fn: Callable[..., Any], exc: Exception) -> tuple[LocalTransactionState, str]:
    """A listener method raised: the transaction stays undecided, and the reason goes to the broker."""
    log.warning("%s raised %s: the transaction stays undecided", _name(fn), f"{type(exc).__name__}: {exc}")
    return LocalTransactionState.UNKNOWN, f"{type(exc).__name__}: {exc}"


def listener_said(fn: Callable[..., Any], out: object) -> tuple[LocalTransactionState, str | None]:
    """A listener method's answer, UNKNOWN (logged) when it is not a ``LocalTransactionState``."""
    if not isinstance(out, LocalTransactionState):
        log.error("%s returned %r, not a LocalTransactionState: the transaction stays undecided", _name(fn), out)
        return LocalTransactionState.UNKNOWN, f"the listener returned {out!r}"
    return out, None


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", "the transaction listener")


__all__ = ["TransactionProducer", "listener_failed", "listener_said"]
