"""The threaded pull consumer: ``sluice.aio.PullConsumer`` with its loop in the background."""

from __future__ import annotations

from typing import Any

from sluice.client import _loop
from sluice.client.aio.pull_consumer import PullConsumer as AsyncPullConsumer
from sluice.client.message_selector import MessageSelector
from sluice.common.message import MessageExt
from sluice.common.structs import MessageQueue


class PullConsumer(_loop.SyncConsumerFacade[AsyncPullConsumer]):
    """``c = PullConsumer("group", namesrv=...); c.subscribe("topic"); c.start(); msgs = c.poll(1.0)``."""

    def __init__(self, group: str, namesrv: str | None = None, **kwargs: Any) -> None:
        self.aio = AsyncPullConsumer(group, namesrv, **kwargs)

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        return _loop.run(self.aio.fetch_queues(topic))

    def assign(self, queues: list[MessageQueue], expression: str | MessageSelector | None = "*", *,
               filter: str | None = None) -> None:
        _loop.run(self.aio.assign(queues, expression, filter=filter))

    def assignment(self) -> set[MessageQueue]:
        return self.aio.assignment()

    def poll(self, timeout: float = 5.0, max_messages: int | None = None) -> list[MessageExt]:
        return _loop.run(self.aio.poll(timeout, max_messages))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        _loop.run(self._on_loop(self.aio.seek, mq, offset))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        _loop.run(self.aio.seek_to_begin(mq))

    def seek_to_end(self, mq: MessageQueue) -> None:
        _loop.run(self.aio.seek_to_end(mq))

    def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        _loop.run(self.aio.commit(offsets))

    def committed(self, mq: MessageQueue) -> int:
        return _loop.run(self.aio.committed(mq))
