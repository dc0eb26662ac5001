"""Sluice: a RocketMQ-compatible message queue in Python.

``from sluice import Producer, PushConsumer, PullConsumer, Message, ConsumeStatus`` (threaded API);
``from sluice.aio import ...`` for asyncio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

__version__ = "0.1.0"

if TYPE_CHECKING:  # the names below are imported on first use (sluice._lazy)
    from sluice.client import (
        ConsumeOrderlyStatus,
        ConsumeStatus,
        LitePushConsumer,
        LocalTransactionState,
        Message,
        Producer,
        PullConsumer,
        PushConsumer,
        SendResult,
        SendStatus,
        SimpleConsumer,
        TransactionListener,
        TransactionProducer,
        TransactionSendResult,
    )
    from sluice.client.message_selector import MessageSelector
    from sluice.client.request_reply import ReplyMessage, RequestTimeoutError, create_reply_message
    from sluice.common.errors import BrokerResponseError, ClientError, SluiceError
    from sluice.common.lite import OffsetOption
    from sluice.common.message import MessageExt
    from sluice.common.structs import MessageModel, MessageQueue

_EXPORTS = {
    "BrokerResponseError": "sluice.common.errors",
    "ClientError": "sluice.common.errors",
    "ConsumeOrderlyStatus": "sluice.client",
    "ConsumeStatus": "sluice.client",
    "LitePushConsumer": "sluice.client",
    "LocalTransactionState": "sluice.client",
    "Message": "sluice.client",
    "MessageExt": "sluice.common.message",
    "MessageModel": "sluice.common.structs",
    "MessageQueue": "sluice.common.structs",
    "MessageSelector": "sluice.client.message_selector",
    "OffsetOption": "sluice.common.lite",
    "Producer": "sluice.client",
    "ReplyMessage": "sluice.client.request_reply",
    "RequestTimeoutError": "sluice.client.request_reply",
    "PullConsumer": "sluice.client",
    "PushConsumer": "sluice.client",
    "SendResult": "sluice.client",
    "SendStatus": "sluice.client",
    "SimpleConsumer": "sluice.client",
    "SluiceError": "sluice.common.errors",
    "TransactionListener": "sluice.client",
    "TransactionProducer": "sluice.client",
    "TransactionSendResult": "sluice.client",
    "create_reply_message": "sluice.client.request_reply",
}
__all__ = [
    "BrokerResponseError", "ClientError", "ConsumeOrderlyStatus", "ConsumeStatus", "LitePushConsumer",
    "LocalTransactionState", "Message", "MessageExt", "MessageModel", "MessageQueue", "MessageSelector",
    "OffsetOption", "Producer", "PullConsumer", "PushConsumer", "ReplyMessage", "RequestTimeoutError", "SendResult",
    "SendStatus", "SimpleConsumer", "SluiceError", "TransactionListener", "TransactionProducer",
    "TransactionSendResult", "__version__", "create_reply_message",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
