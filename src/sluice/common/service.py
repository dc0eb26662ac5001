"""AsyncService: a service whose work runs as tasks on the event loop (RocketMQ's ServiceThread, the asyncio
way). ``start()`` (each service's own: some load or listen first) spawns its loops with ``_spawn``; ``await
stop()`` cancels them and waits until each has ended, so that nothing of the service runs after it."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class AsyncService:
    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[Any]] = []

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as one of the service's tasks, on the running loop."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.append(task)
        return task

    async def stop(self) -> None:
        """Cancel the service's tasks and wait for their end. What a task raised is not raised again here: its
        loop logs its own failures, and a stop must go on."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        # (gather, not ``await task``: a cancel of stop() itself propagates instead of being taken for the task's)
        await asyncio.gather(*tasks, return_exceptions=True)
