"""Sluice's asyncio API: ``from sluice.aio import Producer, PushConsumer, PullConsumer``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:  # the names below are imported on first use (sluice._lazy)
    from sluice.client.aio import (
        LitePushConsumer,
        Producer,
        PullConsumer,
        PushConsumer,
        SimpleConsumer,
        TransactionProducer,
    )
    from sluice.client.message import ConsumeOrderlyStatus, ConsumeStatus, Message, SendResult, SendStatus
    from sluice.client.message_selector import MessageSelector
    from sluice.client.request_reply import ReplyMessage, RequestTimeoutError, create_reply_message
    from sluice.client.transaction import LocalTransactionState, TransactionListener, TransactionSendResult
    from sluice.common.lite import OffsetOption

_EXPORTS = {
    "ConsumeOrderlyStatus": "sluice.client.message",
    "ConsumeStatus": "sluice.client.message",
    "LitePushConsumer": "sluice.client.aio",
    "LocalTransactionState": "sluice.client.transaction",
    "Message": "sluice.client.message",
    "MessageSelector": "sluice.client.message_selector",
    "OffsetOption": "sluice.common.lite",
    "Producer": "sluice.client.aio",
    "PullConsumer": "sluice.client.aio",
    "PushConsumer": "sluice.client.aio",
    "ReplyMessage": "sluice.client.request_reply",
    "RequestTimeoutError": "sluice.client.request_reply",
    "SendResult": "sluice.client.message",
    "SendStatus": "sluice.client.message",
    "SimpleConsumer": "sluice.client.aio",
    "TransactionListener": "sluice.client.transaction",
    "TransactionProducer": "sluice.client.aio",
    "TransactionSendResult": "sluice.client.transaction",
    "create_reply_message": "sluice.client.request_reply",
}
__all__ = [
    "ConsumeOrderlyStatus", "ConsumeStatus", "LitePushConsumer", "LocalTransactionState", "Message",
    "MessageSelector", "OffsetOption", "Producer", "PullConsumer", "PushConsumer", "ReplyMessage",
    "RequestTimeoutError", "SendResult", "SendStatus", "SimpleConsumer", "TransactionListener",
    "TransactionProducer", "TransactionSendResult", "create_reply_message",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
