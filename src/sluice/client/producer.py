"""The threaded producer: ``sluice.aio.Producer`` driven from any thread (it runs on a background loop)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from sluice.client import _loop
from sluice.client.aio.producer import Producer as AsyncProducer
from sluice.client.aio.producer import QueueSelector
from sluice.client.message import Message, SendResult
from sluice.common.config import ClientConfig
from sluice.common.message import MessageExt
from sluice.common.structs import MessageQueue


class Producer(_loop.SyncFacade[AsyncProducer]):
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
        """Start a send; the returned ``concurrent.futures.Future`` gets the ``SendResult``.

        ``sluice.aio.Producer.send_async`` runs on the background loop in one callback (no task or coroutine
        per send when the request can go on the wire at once); cancelling the returned future cancels it."""
        out: Future[SendResult] = Future()
        _loop.call_soon(self._start_async, out, msg, sharding_key, queue, timeout)
        return out

    def _start_async(self, out: Future[SendResult], msg: Message, sharding_key: str | None,
                     queue: MessageQueue | None, timeout: float | None) -> None:
        """On the background loop: start the send and tie its future to ``out`` both ways."""
        if out.cancelled():
            return  # cancelled before it started
        try:
            fut = self.aio.send_async(msg, sharding_key=sharding_key, queue=queue, timeout=timeout)
        except BaseException as exc:
            if out.set_running_or_notify_cancel():
                out.set_exception(exc)
            return
        fut.add_done_callback(lambda f: _copy_outcome(f, out))
        loop = fut.get_loop()
        out.add_done_callback(lambda o: o.cancelled() and loop.call_soon_threadsafe(fut.cancel))

    def request(self, msg: Message, timeout: float = 3.0, *, sharding_key: str | None = None,
                queue: MessageQueue | None = None) -> MessageExt:
        """Send ``msg`` as a request and wait for its reply (see ``sluice.aio.Producer.request``)."""
        return _loop.run(self.aio.request(msg, timeout, sharding_key=sharding_key, queue=queue))

    def request_async(self, msg: Message, timeout: float = 3.0, *, sharding_key: str | None = None,
                      queue: MessageQueue | None = None) -> Future[MessageExt]:
        """Send a request and return at once; the ``concurrent.futures.Future`` gets the reply (or the error):
        ``add_done_callback`` for a callback, as RocketMQ's ``request(msg, RequestCallback, timeout)``."""
        return _loop.submit(self.aio.request(msg, timeout, sharding_key=sharding_key, queue=queue))

    def recall_message(self, topic: str, recall_handle: str, timeout: float | None = None) -> str:
        """Take back a timer message before it is due (see ``sluice.aio.Producer.recall_message``)."""
        return _loop.run(self.aio.recall_message(topic, recall_handle, timeout))

    def send_oneway(self, msg: Message, *, sharding_key: str | None = None, queue: MessageQueue | None = None) -> None:
        _loop.run(self.aio.send_oneway(msg, sharding_key=sharding_key, queue=queue))

    def send_batch(self, msgs: Sequence[Message], *, sharding_key: str | None = None,
                   queue: MessageQueue | None = None, timeout: float | None = None) -> SendResult:
        return _loop.run(self.aio.send_batch(msgs, sharding_key=sharding_key, queue=queue, timeout=timeout))


def _copy_outcome(fut: asyncio.Future[SendResult], out: Future[SendResult]) -> None:
    """``out`` stays pending (so its owner can cancel it) until the send ends, as ``run_coroutine_threadsafe``'s
    future does."""
    if fut.cancelled():
        out.cancel()
        return
    if not out.set_running_or_notify_cancel():
        return  # cancelled by its owner meanwhile
    if (exc := fut.exception()) is not None:
        out.set_exception(exc)
    else:
        out.set_result(fut.result())
