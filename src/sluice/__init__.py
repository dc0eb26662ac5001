"""Sluice: a RocketMQ-compatible message queue in Python.

``from sluice import Producer, PushConsumer, PullConsumer, Message, ConsumeStatus`` (threaded API);
``from sluice.aio import ...`` for asyncio.
"""

__version__ = "0.1.0"

from sluice.client import (  # noqa: E402
    ConsumeOrderlyStatus,
    ConsumeStatus,
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
from sluice.client.message_selector import MessageSelector  # noqa: E402
from sluice.common.errors import BrokerResponseError, ClientError, SluiceError  # noqa: E402
from sluice.common.message import MessageExt  # noqa: E402
from sluice.common.structs import MessageModel, MessageQueue  # noqa: E402

__all__ = ["BrokerResponseError", "ClientError", "ConsumeOrderlyStatus", "ConsumeStatus", "LocalTransactionState",
           "Message", "MessageExt", "MessageModel", "MessageQueue", "MessageSelector", "Producer", "PullConsumer",
           "PushConsumer",
           "SendResult", "SendStatus", "SimpleConsumer", "SluiceError", "TransactionListener", "TransactionProducer",
           "TransactionSendResult", "__version__"]
