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

    async def persist(self, mq: MessageQueue) -> None:
        """Commit the offset in memory, unless this broker has it already: an offset committed to a slave while
        the master was gone is committed again once the master is back (it flows back to it)."""
        offset = self.table.read(mq)
        if offset < 0:
            return
        try:
            addr = await self.client.master_addr_of(mq)
            if self._committed.get(mq) == (addr, offset):
                return
            await self.client.api.update_consumer_offset(addr, self.group, mq, offset)
            self._committed[mq] = (addr, offset)
        except (ClientError, RemotingError) as exc:
            if isinstance(exc, RemotingError):  # its master may be gone: the next commit goes by a fresh route
                self.client.refresh_route_soon(mq.topic)
            log.warning("cannot commit offset %d of %s for group %s: %s", offset, mq, self.group, exc)

    async def persist_all(self, mqs: list[MessageQueue]) -> None:
        await asyncio.gather(*(self.persist(mq) for mq in mqs))

    def remove(self, mq: MessageQueue) -> None:
        self.table.remove(mq)
        self._committed.pop(mq, None)
