"""The lite push consumer (RocketMQ 5.5's LitePushConsumer, over the broker's remoting codes a gRPC front speaks):
a group bound to a parent topic of ``message.type=LITE`` reads the lite topics its consumers name at run time.

``subscribe_lite`` / ``unsubscribe_lite`` change what this consumer reads (LITE_SUBSCRIPTION_CTL to every master
of the parent topic); every ``sync_interval`` the whole set is sent again, which keeps the subscription alive on
the brokers (they drop one not renewed within ``lite_subscription_check_timeout``) and restores it on a broker
that restarted. Each master is long-polled (POP_LITE_MESSAGE) for what arrived in this consumer's lite topics; a
lite topic is read in order: the broker hands out nothing more of one until what it handed out is acknowledged
or comes back. A listener returning normally (or ``ConsumeStatus.CONSUME_SUCCESS``) acknowledges the message;
one raising or returning ``ConsumeStatus.RECONSUME_LATER`` has it come back after ``retry_delays`` (by default
RocketMQ's backoff: 10 s, 30 s, 1 min ...). A broker
that gives one of this consumer's lite topics to another reader (an exclusive group) tells it, and the lite topic
leaves ``lite_topics``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sluice.auth.credentials import CredentialsLike
from sluice.client.aio.simple_consumer import NACK_BACKOFF, receipt_of
from sluice.client.message import ConsumeOrderlyStatus, ConsumeStatus
from sluice.client.message_selector import MessageSelector
from sluice.client.mq_client import MQClientInstance, client_config
from sluice.client.subscription import build_subscription
from sluice.common.config import ClientConfig
from sluice.common.errors import BrokerResponseError, ClientError, InvalidNameError
from sluice.common.lite import OffsetOption, validate_lite_topic
from sluice.common.message import MessageExt
from sluice.common.namespace import unwrap, wrap
from sluice.common.naming import validate_group, validate_topic
from sluice.common.structs import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel
from sluice.remoting.errors import RemotingError
from sluice.remoting.headers import NotifyUnsubscribeLiteRequestHeader
from sluice.remoting.tls import TlsLike

log = logging.getLogger(__name__)

MAX_POP = 32  # messages one pop may hand out (the broker's bound)
MAX_LITE_TOPICS_PER_REQUEST = 10_000  # the broker's bound on one subscription change

Listener = Callable[[MessageExt], Any]
_SUCCESS = (ConsumeStatus.CONSUME_SUCCESS, ConsumeOrderlyStatus.SUCCESS)
_RETRY = (ConsumeStatus.RECONSUME_LATER, ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT)


class LitePushConsumer:
    """``c = LitePushConsumer("agents", namesrv=..., bind_topic="Conversations"); c.register_listener(fn);
    await c.start(); await c.subscribe_lite("chat-1")``."""

    def __init__(self, group: str, namesrv: str | None = None, *, bind_topic: str,
                 invisible_duration: float = 60.0, await_duration: float = 15.0, max_in_flight: int = 64,
                 consume_thread_nums: int = 20, sync_interval: float = 30.0,
                 retry_delays: Sequence[float] = NACK_BACKOFF, config: ClientConfig | None = None,
                 credentials: CredentialsLike | None = None, tls: TlsLike | None = None, **settings: Any) -> None:
        validate_group(group)
        validate_topic(bind_topic)
        if not 1 <= invisible_duration <= 12 * 3600:
            raise ClientError(f"invisible_duration must be within 1 .. 43200 s, not {invisible_duration}")
        if not 0 < await_duration <= 60:
            raise ClientError(f"await_duration must be within 0 .. 60 s (above 0), not {await_duration}")
        if max_in_flight < 1 or consume_thread_nums < 1:
            raise ClientError("max_in_flight and consume_thread_nums must be >= 1")
        if sync_interval <= 0:
            raise ClientError(f"sync_interval must be > 0, not {sync_interval}")
        if not retry_delays or any(not 0 <= d <= 12 * 3600 for d in retry_delays):
            raise ClientError("retry_delays must be delays within 0 .. 43200 s, at least one")
        self.config = client_config(config, namesrv, settings, "consumer")
        self.namespace = self.config.namespace
        self.group = wrap(self.namespace, group)
        self.topic = wrap(self.namespace, bind_topic)
        validate_group(self.group)
        validate_topic(self.topic)
        self.invisible_duration = invisible_duration
        self.await_duration = await_duration
        self.max_in_flight = max_in_flight
        self.sync_interval = sync_interval
        self.retry_delays = tuple(retry_delays)  # a failed message comes back after these (by reconsume times)
        self.client = MQClientInstance(self.config, credentials, tls)
        self.client.on_unsubscribe_lite = self._told_to_unsubscribe
        self._listener: Listener | None = None
        self._lites: dict[str, None] = {}  # what this consumer reads, in the order subscribed
        self._pool = ThreadPoolExecutor(consume_thread_nums, thread_name_prefix=f"sluice-lite-{group}")
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pollers: dict[str, asyncio.Task[None]] = {}  # broker name → its pop loop
        self._running: set[asyncio.Task[None]] = set()  # messages with the listener or being settled
        self._last_of: dict[str, asyncio.Task[None]] = {}  # lite topic → its last message's task (one at a time)
        self._failed: set[str] = set()  # lite topics whose message failed: what follows it is given back
        self._reserved = 0  # slots of pops in flight
        self._space = asyncio.Event()
        self._lock = asyncio.Lock()  # one subscription change at a time (a sync sends the whole set)
        self.started = False
        self._closed = False

    # == set-up ======================================================================================
    def register_listener(self, fn: Listener) -> Listener:
        """``fn(message)``: a plain function (run on ``consume_thread_nums`` threads) or a coroutine function."""
        self._listener = fn
        return fn

    listener = register_listener

    @property
    def lite_topics(self) -> frozenset[str]:
        """The lite topics this consumer reads."""
        return frozenset(self._lites)

    async def start(self) -> LitePushConsumer:
        if self.started:
            return self
        if self._closed:
            raise ClientError("a consumer that was shut down cannot start again: make a new one")
        if self._listener is None:
            raise ClientError("register_listener() first")
        self.client.consumers[self.group] = self
        await self.client.start()
        self.started = True
        self._space.set()
        try:
            await self._sync()  # (the bind topic is checked here: a missing one fails start)
        except BaseException:
            await self.shutdown()
            raise
        self._spawn(self._sync_loop())
        return self

    async def shutdown(self) -> None:
        """Stop popping, let the listener finish what it holds (settled), and end the subscription."""
        if not self.started:
            return
        self.started = False
        self._closed = True
        for t in [*self._tasks, *self._pollers.values()]:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._pollers.values(), return_exceptions=True)
        self._pollers.clear()
        # At once: a pop still held on a broker must not take what arrives next (it would stay invisible).
        entry = self._entry("COMPLETE_REMOVE", [])
        await asyncio.gather(*(self._ctl_quietly(a, entry) for a in await self._masters(quiet=True)))
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        await self.client.shutdown()
        self.client.consumers.pop(self.group, None)
        self._pool.shutdown(wait=False)

    async def __aenter__(self) -> LitePushConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # == subscriptions ===============================================================================
    async def subscribe_lite(self, *lite_topics: str, offset: OffsetOption | None = None) -> None:
        """Read these lite topics too (``offset``: where the group starts in them, RocketMQ's OffsetOption);
        ``BrokerResponseError`` LITE_SUBSCRIPTION_QUOTA_EXCEEDED when a broker holds as many as it may."""
        names = self._checked(lite_topics)
        entry = self._entry("PARTIAL_ADD", names)
        if offset is not None:
            entry["offsetOption"] = offset.to_json()
        async with self._lock:
            await self._ctl_all(entry)
            for n in names:
                self._lites[n] = None

    async def unsubscribe_lite(self, *lite_topics: str) -> None:
        names = self._checked(lite_topics)
        async with self._lock:
            for n in names:
                self._lites.pop(n, None)
            await self._ctl_all(self._entry("PARTIAL_REMOVE", names))

    def _checked(self, lite_topics: tuple[str, ...]) -> list[str]:
        if not self.started:
            raise ClientError("start() the consumer first")
        names = list(dict.fromkeys(lite_topics))
        if not names or len(names) > MAX_LITE_TOPICS_PER_REQUEST:
            raise ClientError(f"name 1 .. {MAX_LITE_TOPICS_PER_REQUEST} lite topics")
        for n in names:
            try:
                validate_lite_topic(n)
            except InvalidNameError as exc:
                raise ClientError(f"lite topic {n[:80]!r}: {exc}") from None
        return names

    def _entry(self, action: str, names: list[str]) -> dict[str, Any]:
        return {"action": action, "clientId": self.client.client_id, "group": self.group, "topic": self.topic,
                "liteTopicSet": names, "version": 0}

    async def _ctl_all(self, entry: dict[str, Any]) -> None:
        masters = await self._masters()
        results = await asyncio.gather(*(self.client.api.lite_subscription_ctl(a, [entry]) for a in masters),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BrokerResponseError):
                raise r
            if isinstance(r, (ClientError, RemotingError)):
                raise ClientError(f"lite subscription change failed: {r}") from r
            if isinstance(r, BaseException):
                raise r

    async def _ctl_quietly(self, addr: str, entry: dict[str, Any]) -> None:
        try:
            await self.client.api.lite_subscription_ctl(addr, [entry])
        except (ClientError, RemotingError) as exc:
            log.info("lite subscription change on %s failed: %s", addr, exc)

    async def _masters(self, quiet: bool = False) -> list[str]:
        """The addresses of the masters serving the bind topic (started pop loops for new ones)."""
        route = await self.client.get_route(self.topic)
        if route is None:
            if quiet:
                return []
            raise ClientError(f"topic {unwrap(self.topic, self.namespace)} has no route: create it first "
                              f"(message.type=LITE)")
        names = {q.broker_name for q in route.queue_datas if q.perm & 4}
        out = []
        for b in route.broker_datas:
            if b.broker_name in names and b.master_addr:
                out.append(b.master_addr)
                if self.started and b.broker_name not in self._pollers:
                    task = asyncio.get_running_loop().create_task(self._poll(b.broker_name))
                    self._pollers[b.broker_name] = task
        return sorted(out)

    async def _sync(self) -> None:
        """The whole set to every master (RocketMQ's full sync): renews the subscription, restores it anywhere
        it was lost."""
        async with self._lock:
            await self._ctl_all(self._entry("COMPLETE_ADD", list(self._lites)))

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sync_interval)
            try:
                await self._sync()
            except (ClientError, RemotingError) as exc:
                log.warning("lite subscription sync of group %s failed: %s", self.group, exc)

    def _told_to_unsubscribe(self, header: NotifyUnsubscribeLiteRequestHeader) -> None:
        if header.client_id == self.client.client_id and header.consumer_group == self.group:
            if self._lites.pop(header.lite_topic, "absent") is None:
                log.info("lite topic %s is read by another consumer of group %s now", header.lite_topic, self.group)

    # == what the client instance asks (heartbeats) ==================================================
    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, ConsumeType.CONSUME_POP, MessageModel.CLUSTERING,
                            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                            [build_subscription(self.topic, MessageSelector.by_tag("*"))])

    def subscribed_topics(self) -> list[str]:
        return [self.topic]

    async def do_rebalance(self) -> bool:
        return True  # (nothing to own: the brokers hand out what each pop gets)

    async def persist_offsets(self) -> None:
        return None  # (acks settle messages)

    # == popping =====================================================================================
    async def _poll(self, broker: str) -> None:
        failures = 0
        while self.started:
            free = self.max_in_flight - len(self._running) - self._reserved
            if free <= 0:
                self._space.clear()
                await self._space.wait()
                continue
            addr = self.client.find_broker_addr(broker)
            if addr is None:
                await asyncio.sleep(1.0)
                continue
            # (each broker's loop a fair share of the slots: one that pops everything starves no other)
            n = min(free, MAX_POP, max(1, self.max_in_flight // max(1, len(self._pollers))))
            self._reserved += n
            try:
                msgs = await self.client.api.pop_lite_message(
                    addr, broker, self.client.client_id, self.group, self.topic, n,
                    int(self.invisible_duration * 1000), int(self.await_duration * 1000))
                failures = 0
            except (ClientError, RemotingError) as exc:
                failures += 1
                log.log(logging.WARNING if failures == 1 else logging.DEBUG, "lite pop from %s failed: %s",
                        broker, exc)
                await asyncio.sleep(min(5.0, 0.2 * 2 ** min(failures, 5)))
                continue
            finally:
                self._reserved -= n
                self._space.set()  # (slots an empty pop held are free again for every loop)
            for m in msgs:
                if self.namespace:
                    m.topic = unwrap(m.topic, self.namespace)
                lite = m.lite_topic or ""
                t = asyncio.get_running_loop().create_task(self._handle(m, addr, self._last_of.get(lite)))
                self._last_of[lite] = t
                self._running.add(t)
                t.add_done_callback(functools.partial(self._done, lite))

    def _done(self, lite: str, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._last_of.get(lite) is task:  # (the lite topic's last message handled: a next pop starts afresh)
            del self._last_of[lite]
            self._failed.discard(lite)
        self._space.set()

    async def _handle(self, m: MessageExt, addr: str, before: asyncio.Task[None] | None) -> None:
        """One message, after the one before it of its lite topic (a lite topic is consumed in order). After a
        failure, what follows it in its lite topic is given back unread: the broker hands them out again after
        the failed one, in order."""
        assert self._listener is not None
        if before is not None:
            await asyncio.wait([before])
        lite = m.lite_topic or ""
        ok = False
        if lite in self._failed:
            log.debug("%s follows a failed message of lite topic %s: given back", m.msg_id, lite)
        else:
            try:
                result = self._listener(m) if inspect.iscoroutinefunction(self._listener) else \
                    await asyncio.get_running_loop().run_in_executor(self._pool, self._listener, m)
                if inspect.isawaitable(result):
                    result = await result
                ok = result is None or result is True or result in _SUCCESS
                if not ok and result is not False and result not in _RETRY:
                    log.warning("listener returned %r for %s: taken as a failure (return None or a "
                                "ConsumeStatus)", result, m.msg_id)
            except Exception as exc:
                log.info("listener failed on %s (reconsumed %d times): %s", m.msg_id, m.reconsume_times, exc)
            if not ok:
                self._failed.add(lite)
        try:
            await self._settle(m, addr, ok)
        except (ClientError, RemotingError) as exc:
            log.warning("settling %s failed (it comes back after its invisible time): %s", m.msg_id, exc)

    async def _settle(self, m: MessageExt, addr: str, ok: bool) -> None:
        r = receipt_of(m)
        lite = m.lite_topic
        if ok:
            await self.client.api.ack_message(addr, self.group, self.topic, r, lite_topic=lite)
        else:
            delay = self.retry_delays[min(m.reconsume_times, len(self.retry_delays) - 1)]
            await self.client.api.change_invisible_time(addr, self.group, self.topic, r, int(delay * 1000),
                                                        lite_topic=lite)

    def _spawn(self, coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)


__all__ = ["LitePushConsumer", "MAX_POP"]
