"""A client-streaming RPC served through a check of each command (authorization, namespaces): the commands the
check lets through go to the servicer; each other is answered in band, at once, and the stream goes on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

log = logging.getLogger(__name__)

STREAM_QUEUE = 1024  # answers of one stream waiting for its client


async def filtered_stream(requests: AsyncIterator[Any], context: Any, serve: Callable[..., AsyncIterator[Any]],
                          refusal: Callable[[Any], Any | None], name: str,
                          each_answer: Callable[[Any], None] | None = None) -> AsyncIterator[Any]:
    """``serve``'s answers to the commands ``refusal`` returns None for, with the refusals it returns for the
    others, in the order they come; ``each_answer`` sees each of ``serve``'s answers first. A servicer that fails
    ends the stream (logged)."""
    out: asyncio.Queue[Any] = asyncio.Queue(maxsize=STREAM_QUEUE)
    done = object()

    async def admitted() -> AsyncIterator[Any]:
        async for cmd in requests:
            refused = refusal(cmd)
            if refused is None:
                yield cmd
            else:
                await out.put(refused)

    async def pump() -> None:
        try:
            async for item in serve(admitted(), context):
                if each_answer is not None:
                    each_answer(item)
                await out.put(item)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the %s stream failed", name)
        await out.put(done)

    task = asyncio.get_running_loop().create_task(pump())
    try:
        while (item := await out.get()) is not done:
            yield item
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
