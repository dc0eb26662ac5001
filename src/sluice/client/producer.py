"""The threaded producer: ``sluice.aio.Producer`` driven from any thread (it runs on a background loop)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from sluice.client import _loop
from sluice.client.aio.producer import Producer as AsyncProducer
from sluice.client.aio.producer import QueueSelector
from sluice.client.message import Message, SendResult
from sluice.common.config import ClientConfig
from sluice.common.structs import MessageQueue


class Producer(_loop.SyncFacade):
    """Send messages. ``with Producer("group", namesrv="127.0.0.1:9876") as p: p.send(Message(...))``."""

    def __init__(self, group: str = "DEFAULT_PRODUCER", namesrv: str | None = None, *,
                 config: ClientConfig | None = None, **settings: Any) -> None:
        self.aio = AsyncProducer(group, namesrv, config=config, **settings)

    def send(self, msg: Message, *, sharding_key: str | None = None, queue: MessageQueue | None = None,
             selector: QueueSelector | None = None, arg: Any = None, timeout: float | None = None) -> SendResult:
        """Send and wait for the broker (see ``sluice.aio.Producer.send``)."""
        return _loop.run(self.aio.send(msg, sharding_key=sharding_key, queue=queue, selector=selector, arg=arg,
                                       timeout=timeout))

    def send_async(self, msg: Message, *, sharding_key: str | None = None, queue: MessageQueue | None = None,
                   timeout: float | None = None) -> Future[SendResult]:
        """Start a send; the returned ``concurrent.futures.Future`` gets the ``SendResult``."""
        return _loop.submit(self.aio._bounded_send(msg, sharding_key, queue, timeout))

    def send_oneway(self, msg: Message, *, sharding_key: str | None = None, queue: MessageQueue | None = None) -> None:
        _loop.run(self.aio.send_oneway(msg, sharding_key=sharding_key, queue=queue))

    def send_batch(self, msgs: Sequence[Message], *, sharding_key: str | None = None,
                   queue: MessageQueue | None = None, timeout: float | None = None) -> SendResult:
        return _loop.run(self.aio.send_batch(msgs, sharding_key=sharding_key, queue=queue, timeout=timeout))
