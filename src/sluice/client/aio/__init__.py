"""The asyncio client: ``Producer``, ``PushConsumer``, ``PullConsumer``, ``SimpleConsumer`` with ``async`` methods."""

from sluice.client.aio.producer import Producer
from sluice.client.aio.pull_consumer import PullConsumer
from sluice.client.aio.push_consumer import PushConsumer
from sluice.client.aio.simple_consumer import SimpleConsumer
from sluice.client.aio.transaction_producer import TransactionProducer

__all__ = ["Producer", "PullConsumer", "PushConsumer", "SimpleConsumer", "TransactionProducer"]
