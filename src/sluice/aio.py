"""Sluice's asyncio API: ``from sluice.aio import Producer, PushConsumer, PullConsumer``."""

from sluice.client.aio import Producer, PullConsumer, PushConsumer, SimpleConsumer, TransactionProducer
from sluice.client.message import ConsumeOrderlyStatus, ConsumeStatus, Message, SendResult, SendStatus
from sluice.client.message_selector import MessageSelector
from sluice.client.transaction import LocalTransactionState, TransactionListener, TransactionSendResult

__all__ = ["ConsumeOrderlyStatus", "ConsumeStatus", "LocalTransactionState", "Message", "MessageSelector", "Producer",
           "PullConsumer",
           "PushConsumer", "SimpleConsumer", "SendResult", "SendStatus", "TransactionListener", "TransactionProducer",
           "TransactionSendResult"]
