"""The threaded push consumer: ``sluice.aio.PushConsumer`` with its loop in the background; plain-function
listeners run on its consume thread pool."""

from __future__ import annotations

from typing import Any

from sluice.client import _loop
from sluice.client.aio.push_consumer import Listener
from sluice.client.aio.push_consumer import PushConsumer as AsyncPushConsumer


class PushConsumer(_loop.SyncConsumerFacade[AsyncPushConsumer]):
    """``c = PushConsumer("group", namesrv=...); c.subscribe("topic", "a || b"); @c.listener def f(msgs): ...;
    c.start()``. Arguments as ``sluice.aio.PushConsumer``."""

    def __init__(self, group: str, namesrv: str | None = None, **kwargs: Any) -> None:
        self.aio = AsyncPushConsumer(group, namesrv, **kwargs)

    def register_listener(self, fn: Listener) -> Listener:
        return self.aio.register_listener(fn)

    listener = register_listener
