"""The threaded transactional producer: ``sluice.aio.TransactionProducer`` driven from any thread."""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any

from sluice.client import _loop
from sluice.client.aio.transaction_producer import TransactionProducer as AsyncTransactionProducer
from sluice.client.aio.transaction_producer import listener_failed, listener_said
from sluice.client.message import Message, SendResult, SendStatus
from sluice.client.producer import Producer
from sluice.client.transaction import LocalTransactionState, TransactionListener, TransactionSendResult
from sluice.common.config import ClientConfig


class TransactionProducer(Producer):
    """Send messages as parts of local transactions (RocketMQ's TransactionMQProducer).

    ``execute_local_transaction`` runs in the thread that calls ``send_message_in_transaction``;
    ``check_local_transaction``, called when a broker asks about an undecided transaction, in a worker thread.
    """

    def __init__(self, group: str, listener: TransactionListener, namesrv: str | None = None, *,
                 config: ClientConfig | None = None, **settings: Any) -> None:
        self.aio: AsyncTransactionProducer = AsyncTransactionProducer(group, listener, namesrv, config=config,
                                                                      **settings)

    @property
    def listener(self) -> TransactionListener:
        return self.aio.listener

    def send_message_in_transaction(self, msg: Message, arg: Any = None, *,
                                    timeout: float | None = None) -> TransactionSendResult:
        """See ``sluice.aio.TransactionProducer.send_message_in_transaction``."""
        result = _loop.run(self.aio.send_half(msg, timeout=timeout))
        state: LocalTransactionState
        error: str | None
        if result.status is SendStatus.SEND_OK:
            fn = self.listener.execute_local_transaction
            try:
                out = fn(msg, arg)
                if inspect.isawaitable(out):
                    out = _loop.run(_awaited(out))
                state, error = listener_said(fn, out)
            except Exception as exc:
                state, error = listener_failed(fn, exc)
        else:
            state, error = LocalTransactionState.ROLLBACK, f"the half message was stored {result.status.name}"
        _loop.run(self.aio.end_transaction(result, state, error))
        return TransactionSendResult(**{f.name: getattr(result, f.name) for f in fields(SendResult)},
                                     local_transaction_state=state)


async def _awaited(out: Any) -> Any:
    return await out


__all__ = ["TransactionProducer"]
