"""The asyncio client: ``Producer``, ``PushConsumer``, ``PullConsumer``, ``SimpleConsumer`` with ``async`` methods."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:  # the names below are imported on first use (sluice._lazy)
    from sluice.client.aio.lite_push_consumer import LitePushConsumer
    from sluice.client.aio.producer import Producer
    from sluice.client.aio.pull_consumer import PullConsumer
    from sluice.client.aio.push_consumer import PushConsumer
    from sluice.client.aio.simple_consumer import SimpleConsumer
    from sluice.client.aio.transaction_producer import TransactionProducer

_EXPORTS = {
    "LitePushConsumer": "sluice.client.aio.lite_push_consumer",
    "Producer": "sluice.client.aio.producer",
    "PullConsumer": "sluice.client.aio.pull_consumer",
    "PushConsumer": "sluice.client.aio.push_consumer",
    "SimpleConsumer": "sluice.client.aio.simple_consumer",
    "TransactionProducer": "sluice.client.aio.transaction_producer",
}
__all__ = ["LitePushConsumer", "Producer", "PullConsumer", "PushConsumer", "SimpleConsumer", "TransactionProducer"]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
