"""Who reads which lite topics (RocketMQ's LiteSubscriptionRegistry): each client (a lite push consumer, through a
gRPC front) of a group, bound to a parent topic, names the lite topics it reads; they change at run time, a few
at a time (PARTIAL_ADD / PARTIAL_REMOVE) or as a whole (COMPLETE_ADD, every 30 s from the Java client, which also
keeps the subscription alive; COMPLETE_REMOVE when it goes).

A group's lite topic is read by one of its subscribers at a time (the event dispatcher picks it); with
``lite.sub.model=Exclusive`` a new subscriber takes the lite topic over, and the one it replaces is told to
unsubscribe (NOTIFY_UNSUBSCRIBE_LITE). Bounded: ``max_lite_subscription_count`` (client, lite topic) pairs on the
broker; a subscription not renewed within ``lite_subscription_check_timeout`` is dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sluice.common.lite import POLICY_MAX, POLICY_MIN, OffsetOption, parent_and_lite
from sluice.remoting.connection import Connection

log = logging.getLogger(__name__)


def wildcard_key(topic: str, group: str) -> str:
    """What a wildcard group's readers subscribe to (RocketMQ's mock queue name): no lite topic is named so."""
    return f"{topic}@{group}"


class LiteQuotaError(Exception):
    """The broker holds as many lite subscriptions as it may (LITE_SUBSCRIPTION_QUOTA_EXCEEDED)."""


@dataclass
class LiteSubscription:
    group: str
    topic: str  # the parent topic the client is bound to
    lmqs: set[str] = field(default_factory=set)
    updated: float = field(default_factory=time.monotonic)
    conn: Connection | None = None


@dataclass
class LiteGroupSettings:
    """What a group's attributes say about its lite subscriptions."""

    exclusive: bool = False  # lite.sub.model=Exclusive
    reset_on_exclusive: bool = False  # lite.sub.reset.offset.exclusive
    reset_on_unsubscribe: bool = False  # lite.sub.reset.offset.unsubscribe
    wildcard: bool = False  # lite.sub.wildcard: its readers read every lite topic of the parent, naming none


class LiteSubscriptionRegistry:
    def __init__(self, max_subscriptions: int, group_settings: Callable[[str], LiteGroupSettings],
                 reset_offset: Callable[[str, str, OffsetOption], None],
                 notify_unsubscribe: Callable[[Connection, str, str, str], None]) -> None:
        self.max_subscriptions = max_subscriptions
        self.group_settings = group_settings
        self.reset_offset = reset_offset  # (lmq, group, option)
        self.notify_unsubscribe = notify_unsubscribe  # (connection, client id, group, lite topic)
        self.clients: dict[str, LiteSubscription] = {}
        self.by_lmq: dict[str, dict[str, set[str]]] = {}  # lmq → group → client ids
        self.active = 0  # (client, lite topic) pairs
        self.wildcard: dict[str, set[str]] = {}  # parent → its wildcard groups with readers
        # Told of each (client id, group, lmq) subscribed / unsubscribed, and of a client gone (the dispatcher).
        self.on_register: Callable[[str, str, str], None] = lambda c, g, q: None
        self.on_unregister: Callable[[str, str, str], None] = lambda c, g, q: None
        self.on_remove_all: Callable[[str, str], None] = lambda c, g: None

    # == the client's actions ========================================================================
    def add_partial(self, client_id: str, group: str, topic: str, lmqs: Iterable[str],
                    offset: OffsetOption | None, conn: Connection | None) -> None:
        settings = self.group_settings(group)
        if settings.wildcard:
            raise PermissionError("subscribe lite operation is not supported for this group (lite.sub.wildcard)")
        sub = self._subscription(client_id, group, topic, conn)
        for lmq in lmqs:
            if lmq in sub.lmqs:
                if offset is not None:
                    self._reset(lmq, group, offset)
                continue
            if self.active >= self.max_subscriptions:
                raise LiteQuotaError(f"lite subscription quota exceeded {self.max_subscriptions}")
            if settings.exclusive and self._exclude(client_id, group, lmq) and settings.reset_on_exclusive:
                self._reset(lmq, group, OffsetOption("POLICY", POLICY_MIN))
            if offset is not None:
                self._reset(lmq, group, offset)
            self._add(sub, client_id, lmq)

    def remove_partial(self, client_id: str, group: str, topic: str, lmqs: Iterable[str]) -> None:
        sub = self.clients.get(client_id)
        if sub is None or sub.group != group:
            return
        sub.updated = time.monotonic()
        reset = self.group_settings(sub.group).reset_on_unsubscribe
        for lmq in lmqs:
            if self._remove(sub, client_id, lmq) and reset:
                self._reset(lmq, sub.group, OffsetOption("POLICY", POLICY_MIN))

    def add_complete(self, client_id: str, group: str, topic: str, lmqs: Iterable[str],
                     conn: Connection | None) -> None:
        """The client's whole set: what it no longer names is dropped, what it newly names added. A wildcard
        group's client names nothing: it reads every lite topic of the parent (RocketMQ's mock queue
        ``<parent>@<group>`` stands for them)."""
        sub = self._subscription(client_id, group, topic, conn)
        wanted = set(lmqs)
        if self.group_settings(group).wildcard:
            wanted = {wildcard_key(topic, group)}
            self.wildcard.setdefault(topic, set()).add(group)
        for lmq in sub.lmqs - wanted:
            self._remove(sub, client_id, lmq)
        for lmq in wanted - sub.lmqs:
            if self.active >= self.max_subscriptions:
                raise LiteQuotaError(f"lite subscription quota exceeded {self.max_subscriptions}")
            self._add(sub, client_id, lmq)

    def remove_complete(self, client_id: str, group: str | None = None) -> None:
        """``client_id`` reads nothing any more (of ``group``: a request names the group it was allowed)."""
        sub = self.clients.get(client_id)
        if sub is None or (group is not None and sub.group != group):
            return
        del self.clients[client_id]
        for lmq in list(sub.lmqs):
            self._unlink(client_id, sub.group, lmq)
        sub.lmqs.clear()
        self.on_remove_all(client_id, sub.group)

    # == the broker's ================================================================================
    def subscribers(self, lmq: str, group: str | None = None) -> dict[str, list[str]]:
        """The clients reading ``lmq``, by group (only ``group``'s when given): its subscribers, and the readers
        of the wildcard groups of its parent."""
        groups = self.by_lmq.get(lmq)
        out = {g: sorted(c) for g, c in groups.items() if group is None or g == group} if groups else {}
        if self.wildcard:
            pair = parent_and_lite(lmq)
            for g in self.wildcard.get(pair[0], ()) if pair else ():
                if group is None or g == group:
                    clients = self.by_lmq.get(wildcard_key(pair[0], g), {}).get(g)  # type: ignore[index]
                    if clients:
                        out[g] = sorted(clients)
        return {g: c for g, c in out.items() if c}

    def wildcard_of(self, client_id: str) -> str | None:
        """The parent whose every lite topic ``client_id`` reads (None: it is no wildcard group's reader)."""
        sub = self.clients.get(client_id)
        if sub is None or wildcard_key(sub.topic, sub.group) not in sub.lmqs:
            return None
        return sub.topic

    def clean(self, lmq: str, notify: bool) -> None:
        """``lmq`` is gone (its lite topic expired): nobody reads it any more; each reader told when ``notify``."""
        groups = self.by_lmq.pop(lmq, None)
        if not groups:
            return
        for group, clients in groups.items():
            for client_id in clients:
                sub = self.clients.get(client_id)
                if sub is None or lmq not in sub.lmqs:
                    continue
                sub.lmqs.discard(lmq)
                self.active -= 1
                self.on_unregister(client_id, group, lmq)
                if notify:
                    self._notify(client_id, group, lmq)

    def expire(self, timeout_s: float) -> list[str]:
        """Drop the subscriptions not renewed within ``timeout_s``; the clients dropped."""
        now = time.monotonic()
        gone = [c for c, sub in self.clients.items() if now - sub.updated > timeout_s]
        for client_id in gone:
            log.info("lite subscription of client %s (group %s) not renewed within %.0f s: dropped", client_id,
                     self.clients[client_id].group, timeout_s)
            self.remove_complete(client_id)
        return gone

    def connection_closed(self, conn: Connection) -> None:
        """The connection subscriptions were made over is gone: the unsubscribe notices have no way out now."""
        for sub in self.clients.values():
            if sub.conn is conn:
                sub.conn = None

    def clients_of(self, group: str) -> list[str]:
        return [c for c, sub in self.clients.items() if sub.group == group]

    # == inside ======================================================================================
    def _subscription(self, client_id: str, group: str, topic: str, conn: Connection | None) -> LiteSubscription:
        sub = self.clients.get(client_id)
        if sub is not None and sub.group != group:
            raise PermissionError(f"client {client_id[:80]} reads lite topics in group {sub.group}, not {group}")
        if sub is not None and sub.topic != topic:  # (the group's client bound to another parent: it starts over)
            self.remove_complete(client_id)
            sub = None
        if sub is None:
            if len(self.clients) >= self.max_subscriptions:
                raise LiteQuotaError(f"lite subscription quota exceeded {self.max_subscriptions} (clients)")
            sub = self.clients[client_id] = LiteSubscription(group, topic)
        sub.updated = time.monotonic()
        if conn is not None:
            sub.conn = conn
        return sub

    def _add(self, sub: LiteSubscription, client_id: str, lmq: str) -> None:
        sub.lmqs.add(lmq)
        clients = self.by_lmq.setdefault(lmq, {}).setdefault(sub.group, set())
        if client_id not in clients:
            clients.add(client_id)
            self.active += 1
            self.on_register(client_id, sub.group, lmq)

    def _remove(self, sub: LiteSubscription, client_id: str, lmq: str) -> bool:
        if lmq not in sub.lmqs:
            return False
        sub.lmqs.discard(lmq)
        self._unlink(client_id, sub.group, lmq)
        return True

    def _unlink(self, client_id: str, group: str, lmq: str) -> None:
        groups = self.by_lmq.get(lmq)
        clients = groups.get(group) if groups else None
        if not clients or client_id not in clients:
            return
        clients.discard(client_id)
        self.active -= 1
        if not clients:
            del groups[group]  # type: ignore[union-attr]
            if not groups:
                del self.by_lmq[lmq]
            topic, at, wild_group = lmq.rpartition("@")
            if at and parent_and_lite(lmq) is None and wild_group == group:  # (a wildcard group's last reader)
                left = self.wildcard.get(topic)
                if left is not None:
                    left.discard(group)
                    if not left:
                        del self.wildcard[topic]
        self.on_unregister(client_id, group, lmq)

    def _exclude(self, client_id: str, group: str, lmq: str) -> bool:
        """Exclusive mode: the group's other readers of ``lmq`` give it up, each told; whether there was one."""
        excluded = False
        for other in self.subscribers(lmq, group).get(group, []):
            if other == client_id:
                continue
            sub = self.clients.get(other)
            if sub is not None:
                self._remove(sub, other, lmq)
            self._notify(other, group, lmq)
            excluded = True
            log.info("lite topic %s of group %s: client %s takes it over from %s", lmq, group, client_id, other)
        return excluded

    def _reset(self, lmq: str, group: str, option: OffsetOption) -> None:
        if option.type == "POLICY" and option.value not in (POLICY_MIN, POLICY_MAX):
            return  # LAST: where the group is
        if option.type == "TIMESTAMP":
            return  # (ignored, as by RocketMQ 5.5)
        self.reset_offset(lmq, group, option)

    def _notify(self, client_id: str, group: str, lmq: str) -> None:
        sub = self.clients.get(client_id)
        pair = parent_and_lite(lmq)
        if sub is None or sub.conn is None or pair is None:
            log.info("cannot tell client %s to unsubscribe lite topic %s: no connection", client_id, lmq)
            return
        self.notify_unsubscribe(sub.conn, client_id, group, pair[1])
