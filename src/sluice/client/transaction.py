"""Transactional sends: what a local transaction decides, the listener that decides it, and the send's result."""

from __future__ import annotations

import enum
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from sluice.client.message import Message, SendResult
from sluice.common.message import MessageExt
from sluice.common.sysflag import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE


class LocalTransactionState(enum.Enum):
    """What a local transaction came to: its half message is committed, rolled back, or left for a check."""

    COMMIT = TRANSACTION_COMMIT_TYPE
    ROLLBACK = TRANSACTION_ROLLBACK_TYPE
    UNKNOWN = TRANSACTION_NOT_TYPE


class TransactionListener(Protocol):
    """The producer's side of a transaction. Either method may be a coroutine function with ``sluice.aio``; an
    exception, or a return value that is not a ``LocalTransactionState``, counts as UNKNOWN."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState | Awaitable[
            LocalTransactionState]:
        """Run the local transaction that goes with ``msg`` (stored, not yet visible) and say how it ended."""
        ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState | Awaitable[LocalTransactionState]:
        """The broker asks about a transaction it has no decision for (the producer said UNKNOWN, crashed, or its
        decision was lost): look it up (``msg.properties['UNIQ_KEY']`` is the transaction id)."""
        ...


@dataclass(slots=True)
class TransactionSendResult(SendResult):
    """A transactional send's ``SendResult`` and what the local transaction decided."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOWN


__all__ = ["LocalTransactionState", "TransactionListener", "TransactionSendResult"]
