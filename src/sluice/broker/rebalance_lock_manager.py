"""Queue locks for orderly consumers (RocketMQ RebalanceLockManager): one owner per (group, queue)."""

from __future__ import annotations

from dataclasses import dataclass

from sluice.broker.client_channel_info import monotonic_ms
from sluice.common.structs import MessageQueue


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update: int


class RebalanceLockManager:
    def __init__(self, max_live_ms: int) -> None:
        self.max_live_ms = max_live_ms
        self.table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def _held_by_other(self, entry: LockEntry | None, client_id: str, now: int) -> bool:
        return entry is not None and entry.client_id != client_id and now - entry.last_update <= self.max_live_ms

    def try_lock_batch(self, group: str, mqs: list[MessageQueue], client_id: str,
                       now: int | None = None) -> list[MessageQueue]:
        """Lock (or renew) every queue not held by another live owner; returns those now held by ``client_id``."""
        now = monotonic_ms() if now is None else now
        locks = self.table.setdefault(group, {})
        out = []
        for mq in mqs:
            entry = locks.get(mq)
            if self._held_by_other(entry, client_id, now):
                continue
            locks[mq] = LockEntry(client_id, now)
            out.append(mq)
        return out

    def unlock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> None:
        locks = self.table.get(group)
        if not locks:
            return
        for mq in mqs:
            entry = locks.get(mq)
            if entry is not None and entry.client_id == client_id:
                del locks[mq]

    def unlock_all(self, group: str, client_id: str) -> list[MessageQueue]:
        """Release every lock ``client_id`` holds in ``group`` (it unregistered: it consumes no more); those queues."""
        locks = self.table.get(group)
        if not locks:
            return []
        mine = [mq for mq, entry in locks.items() if entry.client_id == client_id]
        for mq in mine:
            del locks[mq]
        return mine

    def owner(self, group: str, mq: MessageQueue, now: int | None = None) -> str | None:
        now = monotonic_ms() if now is None else now
        entry = self.table.get(group, {}).get(mq)
        if entry is None or now - entry.last_update > self.max_live_ms:
            return None
        return entry.client_id
