"""The Sluice client: producers and consumers speaking RocketMQ's remoting protocol.

Threaded classes here (``Producer``, ``PushConsumer``, ``PullConsumer``, ``SimpleConsumer``); asyncio ones in
``sluice.aio``.
"""

from sluice.client.message import ConsumeOrderlyStatus, ConsumeStatus, Message, SendResult, SendStatus
from sluice.client.producer import Producer
from sluice.client.pull_consumer import PullConsumer
from sluice.client.push_consumer import PushConsumer
from sluice.client.simple_consumer import SimpleConsumer
from sluice.client.transaction import LocalTransactionState, TransactionListener, TransactionSendResult
from sluice.client.transaction_producer import TransactionProducer

__all__ = ["ConsumeOrderlyStatus", "ConsumeStatus", "LocalTransactionState", "Message", "Producer", "PullConsumer",
           "PushConsumer", "SendResult", "SimpleConsumer", "SendStatus", "TransactionListener", "TransactionProducer",
           "TransactionSendResult"]
