"""The threaded push consumer: ``sluice.aio.PushConsumer`` with its loop in the background; plain-function
listeners run on its consume thread pool."""

from __future__ import annotations

from typing import Any

from sluice.client import _loop
from sluice.client.aio.push_consumer import Listener
from sluice.client.aio.push_consumer import PushConsumer as AsyncPushConsumer


class PushConsumer:
    """``c = PushConsumer("group", namesrv=...); c.subscribe("topic", "a || b"); @c.listener def f(msgs): ...;
    c.start()``. Arguments as ``sluice.aio.PushConsumer``."""

    def __init__(self, group: str, namesrv: str | None = None, **kwargs: Any) -> None:
        self.aio = AsyncPushConsumer(group, namesrv, **kwargs)

    @property
    def group(self) -> str:
        return self.aio.group

    def subscribe(self, topic: str, expression: str | None = "*") -> None:
        if self.aio.started:
            _loop.run(self._subscribe(topic, expression))
        else:
            self.aio.subscribe(topic, expression)

    async def _subscribe(self, topic: str, expression: str | None) -> None:
        self.aio.subscribe(topic, expression)

    def register_listener(self, fn: Listener) -> Listener:
        return self.aio.register_listener(fn)

    listener = register_listener

    def start(self) -> PushConsumer:
        _loop.run(self.aio.start())
        return self

    def shutdown(self) -> None:
        _loop.run(self.aio.shutdown())

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
