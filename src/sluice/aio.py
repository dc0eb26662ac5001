"""Sluice's asyncio API: ``from sluice.aio import Producer, PushConsumer, PullConsumer``."""

from sluice.client.aio import Producer, PullConsumer, PushConsumer
from sluice.client.message import ConsumeOrderlyStatus, ConsumeStatus, Message, SendResult, SendStatus

__all__ = ["ConsumeOrderlyStatus", "ConsumeStatus", "Message", "Producer", "PullConsumer", "PushConsumer",
           "SendResult", "SendStatus"]
