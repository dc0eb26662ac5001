"""The threaded SimpleConsumer: ``sluice.aio.SimpleConsumer`` with its loop in the background."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from sluice.client import _loop
from sluice.client.aio.simple_consumer import Listener
from sluice.client.aio.simple_consumer import SimpleConsumer as AsyncSimpleConsumer
from sluice.client.message_selector import MessageSelector
from sluice.common.message import MessageExt


class SimpleConsumer(_loop.SyncFacade[AsyncSimpleConsumer]):
    """``c = SimpleConsumer("group", namesrv=...); c.subscribe("topic"); c.start();
    for m in c.receive(16): ...; c.ack(m)``."""

    def __init__(self, group: str, namesrv: str | None = None, **kwargs: Any) -> None:
        self.aio = AsyncSimpleConsumer(group, namesrv, **kwargs)
        self._listening: list[tuple[threading.Event, Future[None]]] = []

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        self.aio.subscribe(topic, expression)

    def receive(self, max_messages: int = 32, invisible_duration: float | None = None,
                wait: float | None = None) -> list[MessageExt]:
        return _loop.run(self.aio.receive(max_messages, invisible_duration, wait))

    def ack(self, msg: MessageExt) -> None:
        _loop.run(self.aio.ack(msg))

    def ack_many(self, msgs: list[MessageExt]) -> None:
        _loop.run(self.aio.ack_many(msgs))

    def change_invisible_duration(self, msg: MessageExt, duration: float, *, suspend: bool = False) -> None:
        _loop.run(self.aio.change_invisible_duration(msg, duration, suspend=suspend))

    def nack(self, msg: MessageExt, delay: float | None = None) -> None:
        _loop.run(self.aio.nack(msg, delay))

    def listen(self, listener: Listener, *, max_in_flight: int = 32) -> None:
        """Hand every message received to ``listener`` in a thread of its own (``max_in_flight`` at once) until
        ``shutdown``: returning acks a message, raising nacks it with the backoff."""
        stop = threading.Event()

        async def run() -> None:
            import asyncio

            loop = asyncio.get_running_loop()
            stopped = asyncio.Event()
            threading.Thread(target=lambda: (stop.wait(), loop.call_soon_threadsafe(stopped.set)),
                             daemon=True).start()
            await self.aio.listen(lambda m: loop.run_in_executor(None, listener, m), max_in_flight=max_in_flight,
                                  stop=stopped)

        self._listening.append((stop, _loop.submit(run())))

    def shutdown(self) -> None:
        for stop, fut in self._listening:
            stop.set()
            fut.result()
        self._listening.clear()
        super().shutdown()
