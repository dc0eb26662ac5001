"""The Sluice client: producers and consumers speaking RocketMQ's remoting protocol.

Threaded classes here (``Producer``, ``PushConsumer``, ``PullConsumer``, ``SimpleConsumer``); asyncio ones in
``sluice.aio``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:  # the names below are imported on first use (sluice._lazy)
    from sluice.client.lite_push_consumer import LitePushConsumer
    from sluice.client.message import ConsumeOrderlyStatus, ConsumeStatus, Message, SendResult, SendStatus
    from sluice.client.producer import Producer
    from sluice.client.pull_consumer import PullConsumer
    from sluice.client.push_consumer import PushConsumer
    from sluice.client.simple_consumer import SimpleConsumer
    from sluice.client.transaction import LocalTransactionState, TransactionListener, TransactionSendResult
    from sluice.client.transaction_producer import TransactionProducer

_EXPORTS = {
    "ConsumeOrderlyStatus": "sluice.client.message",
    "ConsumeStatus": "sluice.client.message",
    "LitePushConsumer": "sluice.client.lite_push_consumer",
    "LocalTransactionState": "sluice.client.transaction",
    "Message": "sluice.client.message",
    "Producer": "sluice.client.producer",
    "PullConsumer": "sluice.client.pull_consumer",
    "PushConsumer": "sluice.client.push_consumer",
    "SendResult": "sluice.client.message",
    "SendStatus": "sluice.client.message",
    "SimpleConsumer": "sluice.client.simple_consumer",
    "TransactionListener": "sluice.client.transaction",
    "TransactionProducer": "sluice.client.transaction_producer",
    "TransactionSendResult": "sluice.client.transaction",
}
__all__ = [
    "ConsumeOrderlyStatus", "ConsumeStatus", "LitePushConsumer", "LocalTransactionState", "Message", "Producer",
    "PullConsumer", "PushConsumer", "SendResult", "SendStatus", "SimpleConsumer", "TransactionListener",
    "TransactionProducer", "TransactionSendResult",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
