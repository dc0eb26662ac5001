"""Offsets of a clustering consumer, kept by the brokers (RocketMQ RemoteBrokerOffsetStore).

Consumed offsets are tracked in memory and committed to each queue's broker every few seconds, at queue
hand-over and at shutdown (and piggy-backed on pulls).
"""

from __future__ import annotations

import asyncio
import logging

from sluice.client.mq_client import MQClientInstance
from sluice.client.offset_store import OffsetTable
from sluice.common.errors import ClientError
from sluice.common.structs import MessageQueue
from sluice.remoting.errors import RemotingError

log = logging.getLogger(__name__)


class RemoteBrokerOffsetStore:
    def __init__(self, client: MQClientInstance, group: str) -> None:
        self.client = client
        self.group = group
        self.table = OffsetTable()
        self._committed: dict[MessageQueue, tuple[str, int]] = {}  # the last commit: where, which offset

    def load(self) -> None:
        """Nothing to load: the brokers hold the offsets."""

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        self.table.update(mq, offset, increase_only)

    def read_offset(self, mq: MessageQueue) -> int:
        """The offset in memory (-1 when unknown)."""
        return self.table.read(mq)

    async def read_from_store(self, mq: MessageQueue, zero_if_not_found: bool = True) -> int:
        """The offset committed on the broker (-1 when none); remembered in memory."""
        addr = await self.client.master_addr_of(mq)
        offset = await self.client.api.query_consumer_offset(addr, self.group, mq, zero_if_not_found=zero_if_not_found)
        if offset >= 0:
            self.table.update(mq, offset)
            self._committed[mq] = (addr, offset)
        return offset

    async def persist(self, mq: MessageQueue, raise_errors: bool = False) -> bool:
        """Commit the offset in memory, unless this broker has it already: an offset committed to a slave while
        the master was gone is committed again once the master is back (it flows back to it). A failure is logged
        (the next periodic commit tries again), or raised with ``raise_errors``, for a commit asked for by hand.
        Whether a commit was sent."""
        offset = self.table.read(mq)
        if offset < 0:
            return False
        try:
            addr = await self.client.master_addr_of(mq)
            if self._committed.get(mq) == (addr, offset):
                return False
            await self.client.api.update_consumer_offset(addr, self.group, mq, offset)
            self._committed[mq] = (addr, offset)
            return True
        except (ClientError, RemotingError) as exc:
            if isinstance(exc, RemotingError):  # its master may be gone: the next commit goes by a fresh route
                self.client.refresh_route_soon(mq.topic)
            if raise_errors:
                raise ClientError(f"cannot commit offset {offset} of {mq} for group {self.group}: {exc}") from exc
            log.warning("cannot commit offset %d of %s for group %s: %s", offset, mq, self.group, exc)
            return True

    async def persist_all(self, mqs: list[MessageQueue], raise_errors: bool = False) -> None:
        """``persist`` for each queue; with ``raise_errors``, every queue is tried before the first failure is
        raised. Per topic, the queues go one at a time until one commit is sent, then the rest at once: Apache
        RocketMQ makes a group's offset table of a topic at its first commit without a lock
        (``ConsumerOffsetManager.commitOffset``), and of two first commits at once one may be lost."""
        by_topic: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_topic.setdefault(mq.topic, []).append(mq)

        async def one_topic(queues: list[MessageQueue]) -> list[BaseException]:
            failures: list[BaseException] = []
            rest = list(queues)
            while rest:
                try:
                    if await self.persist(rest.pop(0), raise_errors):
                        break
                except ClientError as exc:
                    failures.append(exc)
                    break
            results = await asyncio.gather(*(self.persist(mq, raise_errors) for mq in rest), return_exceptions=True)
            return failures + [r for r in results if isinstance(r, BaseException)]

        for failures in await asyncio.gather(*(one_topic(q) for q in by_topic.values())):
            if failures:
                raise failures[0]

    def remove(self, mq: MessageQueue) -> None:
        self.table.remove(mq)
        self._committed.pop(mq, None)
