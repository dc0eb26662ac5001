"""The Sluice client: producers and consumers speaking RocketMQ's remoting protocol.

Threaded classes here (``Producer``, ``PushConsumer``, ``PullConsumer``); asyncio ones in ``sluice.aio``.
"""

from sluice.client.message import ConsumeOrderlyStatus, ConsumeStatus, Message, SendResult, SendStatus
from sluice.client.producer import Producer
from sluice.client.pull_consumer import PullConsumer
from sluice.client.push_consumer import PushConsumer

__all__ = ["ConsumeOrderlyStatus", "ConsumeStatus", "Message", "Producer", "PullConsumer", "PushConsumer",
           "SendResult", "SendStatus"]
