"""Live producers per group (RocketMQ ProducerManager): who may be asked to check a transaction."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from sluice.broker.client_channel_info import ClientChannelInfo, monotonic_ms
from sluice.remoting.connection import Connection

log = logging.getLogger(__name__)


class ProducerManager:
    def __init__(self, expire_ms: int) -> None:
        self.expire_ms = expire_ms
        self.groups: dict[str, dict[str, ClientChannelInfo]] = {}

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        members = self.groups.setdefault(group, {})
        old = members.get(info.client_id)
        if old is not None and old.conn is info.conn:
            old.last_update = info.last_update
        else:
            members[info.client_id] = info

    def any_channel(self, group: str,
                    allowed: Callable[[ClientChannelInfo], bool] | None = None) -> ClientChannelInfo | None:
        """A live producer of ``group`` (that ``allowed`` accepts), chosen at random (RocketMQ's
        ``getAvailableChannel``); None when none is."""
        live = [ch for ch in self.groups.get(group, {}).values()
                if not ch.conn.closed and (allowed is None or allowed(ch))]
        return random.choice(live) if live else None

    def find_channel(self, client_id: str) -> ClientChannelInfo | None:
        """The live registration of client ``client_id`` in any group (RocketMQ's ``findChannel``: where a reply
        to its request goes); None when it has none."""
        for members in self.groups.values():
            ch = members.get(client_id)
            if ch is not None and not ch.conn.closed:
                return ch
        return None

    def unregister_producer(self, group: str, client_id: str, conn: Connection | None = None) -> None:
        """``client_id`` leaves ``group`` — only the registration made over ``conn`` when it is given (RocketMQ
        removes the requesting channel's: another connection cannot unregister someone else)."""
        members = self.groups.get(group)
        if members is not None:
            ch = members.get(client_id)
            if ch is not None and (conn is None or ch.conn is conn):
                del members[client_id]
            if not members:
                del self.groups[group]

    def on_connection_closed(self, conn: Connection) -> None:
        for group, members in list(self.groups.items()):
            for cid in [cid for cid, ch in members.items() if ch.conn is conn]:
                del members[cid]
            if not members:
                del self.groups[group]

    def scan_not_active(self, now: int | None = None) -> int:
        now = monotonic_ms() if now is None else now
        dropped = 0
        for group, members in list(self.groups.items()):
            for cid in [cid for cid, ch in members.items() if now - ch.last_update > self.expire_ms]:
                log.warning("producer %s of group %s silent for %d ms: dropped", cid, group, self.expire_ms)
                members.pop(cid).conn.close()
                dropped += 1
            if not members:
                del self.groups[group]
        return dropped
