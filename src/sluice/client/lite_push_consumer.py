"""The threaded lite push consumer: ``sluice.aio.LitePushConsumer`` with its loop in the background; plain-function
listeners run on its consume thread pool."""

from __future__ import annotations

from typing import Any

from sluice.client import _loop
from sluice.client.aio.lite_push_consumer import Listener
from sluice.client.aio.lite_push_consumer import LitePushConsumer as AsyncLitePushConsumer
from sluice.common.lite import OffsetOption


class LitePushConsumer(_loop.SyncFacade[AsyncLitePushConsumer]):
    """``c = LitePushConsumer("agents", namesrv=..., bind_topic="Conversations"); @c.listener def f(m): ...;
    c.start(); c.subscribe_lite("chat-1")``. Arguments as ``sluice.aio.LitePushConsumer``."""

    def __init__(self, group: str, namesrv: str | None = None, **kwargs: Any) -> None:
        self.aio = AsyncLitePushConsumer(group, namesrv, **kwargs)

    def register_listener(self, fn: Listener) -> Listener:
        return self.aio.register_listener(fn)

    listener = register_listener

    @property
    def lite_topics(self) -> frozenset[str]:
        return self.aio.lite_topics

    def subscribe_lite(self, *lite_topics: str, offset: OffsetOption | None = None) -> None:
        _loop.run(self.aio.subscribe_lite(*lite_topics, offset=offset))

    def unsubscribe_lite(self, *lite_topics: str) -> None:
        _loop.run(self.aio.unsubscribe_lite(*lite_topics))


__all__ = ["LitePushConsumer"]
