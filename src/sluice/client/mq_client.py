"""MQClientInstance: what producers and consumers share — routes, heartbeats, rebalance and offset timers.

One instance per producer or consumer object (each has its own client id), running on an asyncio loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec

from sluice.auth.credentials import CredentialsLike, signing_hook
from sluice.client.broker_select import FoundBroker, admin_addr, publish_addr, subscribe_addr
from sluice.client.message_id import local_ipv4
from sluice.client.mq_client_api import MQClientAPI
from sluice.client.request_reply import ReplyWaiters, reply_from_push
from sluice.common import fastjson
from sluice.common.backoff import Backoff
from sluice.common.config import ClientConfig
from sluice.common.config_loader import SettingError, load
from sluice.common.errors import ClientError, InvalidNameError, MessageFormatError, NameServerUnavailableError
from sluice.common.message import MessageExt
from sluice.common.message_codec import decode_record
from sluice.common.namespace import unwrap, validate_namespace
from sluice.common.naming import is_lmq
from sluice.common.properties import PROPERTY_PRODUCER_GROUP
from sluice.common.service import AsyncService
from sluice.common.structs import MASTER_ID, ConsumerData, HeartbeatData, MessageQueue, TopicRouteData
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import BadRequestError, RemotingError
from sluice.remoting.headers import (
    CheckTransactionStateRequestHeader,
    NotifyUnsubscribeLiteRequestHeader,
    ReplyMessageRequestHeader,
)
from sluice.remoting.tls import TlsLike, client_tls

log = logging.getLogger(__name__)

_instance_counter = itertools.count(1)


def build_client_id(instance_name: str) -> str:
    """``ip@pid#n`` (RocketMQ's ``ip@instanceName``, the instance name made unique per object in the process)."""
    ip = ".".join(str(b) for b in local_ipv4())
    name = f"{os.getpid()}#{next(_instance_counter)}" if instance_name == "DEFAULT" else instance_name
    return f"{ip}@{name}"


def client_config(config: ClientConfig | None, namesrv: str | None, settings: dict[str, Any],
                  what: str) -> ClientConfig:
    """A new config: ``config`` (or the defaults) with ``namesrv`` and keyword ``settings`` applied, every value
    checked (``SettingError`` names the setting and what it takes). ``config`` itself is never changed, so one
    config can serve several clients."""
    data = msgspec.to_builtins(config) if config is not None else {}
    if namesrv is not None:
        data["namesrv_addr"] = namesrv
    data.update(settings)
    cfg = load(ClientConfig, data, f"{what} setting", error=SettingError)
    if cfg.namespace:
        try:
            validate_namespace(cfg.namespace)
        except InvalidNameError as exc:
            raise SettingError(f"{what} setting namespace: {exc}") from None
    return cfg


class ConsumerInner(Protocol):
    group: str

    def consumer_data(self) -> ConsumerData: ...

    def subscribed_topics(self) -> list[str]: ...

    async def do_rebalance(self) -> bool: ...

    async def persist_offsets(self) -> None: ...


# The first waits (s) before a failed rebalance or route refresh is tried again; they double per failure in a
# row, with full jitter, up to the rebalance interval and the name server poll interval.
REBALANCE_RETRY_BASE = 0.2
ROUTE_RETRY_BASE = 0.5
# A failed request to a broker asks the name server for the topic's route again at most this often (s): a
# master that fails over is found within about a second, and a dead one does not flood the name server.
ROUTE_REFRESH_MIN_INTERVAL = 1.0


def consumer_running_info(client: MQClientInstance, consumer: Any) -> bytes:
    """RocketMQ's ConsumerRunningInfo of ``consumer``: its properties and subscriptions and, for a push consumer,
    each queue's cache and committed offset (``mqTable``, keyed by MessageQueue objects as fastjson writes it)."""
    now_ms, now_mono = int(time.time() * 1000), time.monotonic()
    data = consumer.consumer_data()
    props = {"clientId": client.client_id, "language": "PYTHON", "timestamp": str(now_ms),
             "PROP_NAMESERVER_ADDR": ";".join(client.config.namesrv_addrs),
             "PROP_CONSUME_TYPE": getattr(getattr(data, "consume_type", None), "name", ""),
             "PROP_CONSUME_ORDERLY": "true" if getattr(consumer, "orderly", False) else "false",
             "PROP_CLIENT_VERSION": "V5_5_0"}
    table: dict[fastjson.ObjectKey, dict[str, Any]] = {}
    for mq, pq in sorted(getattr(consumer, "process_queues", {}).items(), key=lambda kv: (kv[0].topic,
                                                                                          kv[0].queue_id)):
        store = getattr(consumer, "offset_store", None)
        low = pq.min_offset()
        table[fastjson.ObjectKey({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic})] = {
            "commitOffset": store.read_offset(mq) if store is not None else -1,
            "cachedMsgMinOffset": low if low is not None else 0, "cachedMsgMaxOffset": max(pq.max_offset_put, 0),
            "cachedMsgCount": pq.msg_count, "cachedMsgSizeInMiB": pq.msg_size >> 20,
            "transactionMsgMinOffset": 0, "transactionMsgMaxOffset": 0, "transactionMsgCount": 0,
            "locked": pq.locked, "tryUnlockTimes": pq.try_unlock_times, "droped": pq.dropped,
            "lastLockTimestamp": now_ms - int((now_mono - pq.last_lock_timestamp) * 1000),
            "lastPullTimestamp": now_ms - int((now_mono - pq.last_pull_timestamp) * 1000),
            "lastConsumeTimestamp": now_ms - int((now_mono - pq.last_consume_timestamp) * 1000)}
    return fastjson.dumps({"properties": props, "subscriptionSet": [s.to_json() for s in data.subscriptions],
                           "mqTable": table, "statusTable": {}})


class MQClientInstance(AsyncService):
    def __init__(self, config: ClientConfig, credentials: CredentialsLike | None = None,
                 tls: TlsLike | None = None) -> None:
        super().__init__()
        self.config = config
        self.client_id = build_client_id(config.instance_name)
        # With credentials, every request is signed (ACL 2.0: brokers with authentication on need it).
        self.remoting = RemotingClient(config.remoting, handler=self._handle_server_request,
                                       request_hook=signing_hook(credentials), tls=client_tls(tls))
        self.api = MQClientAPI(self.remoting, config.namesrv_addrs)
        self.routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.producer_groups: set[str] = set()
        # Producer group → what answers a broker's CHECK_TRANSACTION_STATE (broker address, header, message).
        self.transaction_checkers: dict[str, Callable[[str, CheckTransactionStateRequestHeader, MessageExt], None]] = {}
        self.publish_topics: set[str] = set()
        # Told of each NOTIFY_UNSUBSCRIBE_LITE a broker sends (a gRPC front relays it to its client).
        self.on_unsubscribe_lite: Callable[[NotifyUnsubscribeLiteRequestHeader], None] | None = None
        self.consumers: dict[str, ConsumerInner] = {}
        self.replies = ReplyWaiters()  # this client's requests waiting for their replies
        self._rebalance_now = asyncio.Event()
        self._heartbeat_first = False  # see rebalance_now
        self._route_fetches: dict[str, asyncio.Future[TopicRouteData | None]] = {}
        self._route_fetched_at: dict[str, float] = {}  # topic → monotonic time its last fetch started
        # The brokers' addresses asked of the name server (light queues, which have no route): under way, when.
        self._addrs_fetch: asyncio.Future[None] | None = None
        self._addrs_fetched_at = -ROUTE_REFRESH_MIN_INTERVAL
        self.namesrv_lost = False  # no name server answers: routes come from the cache meanwhile
        self.running = False

    # == lifecycle ===================================================================================
    async def start(self) -> None:
        if self.running:
            return
        if not self.config.namesrv_addrs:
            raise ClientError("no name server address: set namesrv, e.g. '127.0.0.1:9876'")
        self.running = True
        self._spawn(self._route_loop())
        self._spawn(self._every(self.config.heartbeat_broker_interval, self.send_heartbeat_to_all))
        self._spawn(self._rebalance_loop())
        if self.consumers:
            self._spawn(self._every(self.config.persist_consumer_offset_interval, self.persist_all_offsets))

    async def shutdown(self) -> None:
        if not self.running:
            return
        self.running = False
        self._rebalance_now.set()
        await self.stop()
        for fetch in list(self._route_fetches.values()):
            fetch.cancel()
        await self.unregister_everywhere()
        await self.remoting.close()

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[object]]) -> None:
        # ``while self.running``, not ``while True``: on Python 3.11 a cancel that meets a request's response
        # can be swallowed (asyncio.wait_for in Connection.invoke), and the loop must still end at shutdown.
        while self.running:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await fn()
            except Exception as exc:  # a timer must outlive one failed round
                log.warning("%s failed: %s", getattr(fn, "__name__", fn), exc)

    # == routes ======================================================================================
    async def update_route(self, topic: str) -> TopicRouteData | None:
        """Fetch ``topic``'s route from the name server; None when it has none (cached route dropped).

        Callers that come while a fetch of the topic is under way share its answer: one request, not one per
        waiting send, and no send that waited for the route is overtaken by one made after it was known."""
        pending = self._route_fetches.get(topic) or self._start_route_fetch(topic)
        return await asyncio.shield(pending)  # a caller that gives up does not cancel it for the others

    def _start_route_fetch(self, topic: str) -> asyncio.Future[TopicRouteData | None]:
        pending = asyncio.ensure_future(self._fetch_route(topic))
        self._route_fetches[topic] = pending
        self._route_fetched_at[topic] = time.monotonic()
        pending.add_done_callback(lambda f: self._route_fetched(topic, f))
        return pending

    def refresh_route_soon(self, topic: str) -> asyncio.Future[TopicRouteData | None] | None:
        """After a broker of ``topic`` failed a request (gone, or no longer the master): fetch the route now
        rather than at the next poll, unless a fetch is under way (returned) or one started less than
        ``ROUTE_REFRESH_MIN_INTERVAL`` ago (None). The caller may await the returned fetch; nobody has to."""
        pending = self._route_fetches.get(topic)
        if pending is not None or not self.running:
            return pending
        if time.monotonic() - self._route_fetched_at.get(topic, -ROUTE_REFRESH_MIN_INTERVAL) \
                < ROUTE_REFRESH_MIN_INTERVAL:
            return None
        log.debug("refreshing the route of %s after a failed request", topic)
        return self._start_route_fetch(topic)

    def route_fetch_in_flight(self, topic: str) -> asyncio.Future[TopicRouteData | None] | None:
        return self._route_fetches.get(topic)

    def _route_fetched(self, topic: str, fut: asyncio.Future[TopicRouteData | None]) -> None:
        if self._route_fetches.get(topic) is fut:
            del self._route_fetches[topic]
        if not fut.cancelled():
            fut.exception()  # retrieved: every caller may have gone

    async def _fetch_route(self, topic: str) -> TopicRouteData | None:
        try:
            route = await self.api.get_topic_route(topic, self.config.send_msg_timeout)
        except NameServerUnavailableError as exc:
            self._namesrv_unavailable(exc)
            cached = self.routes.get(topic)
            if cached is None:
                raise
            return cached
        self._namesrv_answers()
        if route is None:
            self.routes.pop(topic, None)
            return None
        known = set(self.heartbeat_addrs())
        for b in route.broker_datas:
            self.broker_addrs[b.broker_name] = dict(b.broker_addrs)
        # (A slave promoted in place is new to a producer, which heartbeats masters only.)
        new = set(self.heartbeat_addrs()) - known
        if new and self.running and (self.consumers or self.producer_groups):
            # Brokers learn of us before we pull from them (they answer GET_CONSUMER_LIST_BY_GROUP with it).
            await self.send_heartbeat(sorted(new))
        # Known only now: a send made during the heartbeat waits for this fetch as the earlier ones do.
        self.routes[topic] = route
        return route

    def _namesrv_unavailable(self, exc: Exception) -> None:
        if not self.namesrv_lost:
            self.namesrv_lost = True
            log.warning("%s; working from the cached routes of %d topics until one answers", exc, len(self.routes))

    def _namesrv_answers(self) -> None:
        if self.namesrv_lost:
            self.namesrv_lost = False
            log.warning("a name server answers again: routes are fresh")

    async def _route_loop(self) -> None:
        """Refresh every route each ``poll_name_server_interval``; while no name server answers, sooner, backing
        off with jitter up to that interval."""
        interval = self.config.poll_name_server_interval / 1000
        backoff = Backoff(min(ROUTE_RETRY_BASE, interval), interval)
        wait = interval
        while self.running:  # see _every
            await asyncio.sleep(wait)
            try:
                await self.update_all_routes()
            except Exception as exc:  # a timer must outlive one failed round
                log.warning("route refresh failed: %s", exc)
            if self.namesrv_lost:
                wait = backoff.fail()
            else:
                backoff.succeed()
                wait = interval

    async def get_route(self, topic: str) -> TopicRouteData | None:
        route = self.routes.get(topic)
        return route if route is not None else await self.update_route(topic)

    async def update_all_routes(self) -> None:
        topics = set(self.publish_topics)
        for c in self.consumers.values():
            topics.update(c.subscribed_topics())
        for topic in sorted(topics):
            try:
                await self.update_route(topic)
            except NameServerUnavailableError:
                return  # said once, by _namesrv_unavailable; the next round comes sooner
            except (ClientError, RemotingError) as exc:
                log.info("route refresh of %s failed: %s", topic, exc)
            if self.namesrv_lost:
                return

    def find_broker_addr(self, broker_name: str, broker_id: int = MASTER_ID) -> str | None:
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        return addrs.get(broker_id) or addrs.get(MASTER_ID) or next(iter(addrs.values()))

    def find_publish_addr(self, broker_name: str) -> str | None:
        """Where a send to ``broker_name`` goes: its master, or nowhere."""
        return publish_addr(self.broker_addrs.get(broker_name))

    def find_subscribe_addr(self, broker_name: str, broker_id: int = MASTER_ID) -> FoundBroker | None:
        """Where a pull goes: ``broker_id`` when the group has it, else its master, else a slave."""
        return subscribe_addr(self.broker_addrs.get(broker_name), broker_id)

    async def master_addr_of(self, mq: MessageQueue) -> str:
        """Where offset commits and queries of ``mq`` go: its master, else (while it has none) a slave of its
        group; the route is refreshed once if the group has no known address."""
        found = admin_addr(self.broker_addrs.get(mq.broker_name))
        if found is None:
            await self.learn_addrs_of(mq.topic)
            found = admin_addr(self.broker_addrs.get(mq.broker_name))
        if found is None:
            raise ClientError(f"broker {mq.broker_name} of {mq} has no known address")
        return found[0]

    async def learn_addrs_of(self, topic: str) -> None:
        """Learn where ``topic``'s brokers are: from its route; a light queue (``%LMQ%...``), which has none, from
        the name server's list of every broker."""
        if not is_lmq(topic):
            await self.update_route(topic)
            return
        await self._learn_broker_addrs()

    def refresh_broker_addrs_soon(self) -> None:
        """A light queue's broker failed a request: ask the name server where the brokers are now, unless a fetch
        is under way or started less than ``ROUTE_REFRESH_MIN_INTERVAL`` ago."""
        if self._addrs_fetch is not None and not self._addrs_fetch.done() or not self.running:
            return
        now = time.monotonic()
        if now - self._addrs_fetched_at < ROUTE_REFRESH_MIN_INTERVAL:
            return
        self._addrs_fetched_at = now
        self._addrs_fetch = asyncio.ensure_future(self._learn_broker_addrs())
        self._addrs_fetch.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _learn_broker_addrs(self) -> None:
        info = await self.api.get_cluster_info()
        table = info.get("brokerAddrTable") if isinstance(info, dict) else None
        for name, data in (table or {}).items():
            addrs = data.get("brokerAddrs") if isinstance(data, dict) else None
            if isinstance(addrs, dict) and addrs:
                self.broker_addrs[str(name)] = {int(k): str(v) for k, v in addrs.items() if str(k).isdigit()}

    def master_addrs(self) -> list[str]:
        return sorted({a[MASTER_ID] for a in self.broker_addrs.values() if MASTER_ID in a})

    # == heartbeats ==================================================================================
    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(self.client_id, sorted(self.producer_groups),
                             [c.consumer_data() for c in self.consumers.values()])

    def heartbeat_addrs(self) -> list[str]:
        """Masters; with consumers also the slaves they may pull from (RocketMQ sendHeartbeatToAllBroker)."""
        if self.consumers:
            return sorted({a for m in self.broker_addrs.values() for a in m.values()})
        return self.master_addrs()

    async def send_heartbeat_to_all(self) -> None:
        await self.send_heartbeat(self.heartbeat_addrs())

    async def send_heartbeat(self, addrs: list[str]) -> None:
        hb = self.heartbeat_data()
        if not hb.producer_groups and not hb.consumers:
            return

        async def one(addr: str) -> None:
            try:
                await self.api.send_heartbeat(addr, hb)
            except (ClientError, RemotingError) as exc:
                log.info("heartbeat to %s failed: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in addrs))

    async def unregister_everywhere(self) -> None:
        addrs = sorted({a for m in self.broker_addrs.values() for a in m.values()})

        async def one(addr: str, producer: str, consumer: str) -> None:
            try:
                await self.api.unregister_client(addr, self.client_id, producer, consumer)
            except (ClientError, RemotingError) as exc:
                log.info("unregister from %s failed: %s", addr, exc)

        calls = [one(a, g, "") for a in addrs for g in self.producer_groups]
        calls += [one(a, "", g) for a in addrs for g in self.consumers]
        await asyncio.gather(*calls)

    # == consumers ===================================================================================
    def rebalance_now(self, heartbeat: bool = False) -> None:
        """Rebalance at once; ``heartbeat``: after telling the brokers this client's subscriptions (they changed:
        a broker filters retried messages by the subscriptions it was told, as RocketMQ's client does)."""
        self._heartbeat_first = self._heartbeat_first or heartbeat
        self._rebalance_now.set()

    async def _rebalance_loop(self) -> None:
        backoff = Backoff(REBALANCE_RETRY_BASE, max(REBALANCE_RETRY_BASE, self.config.rebalance_interval / 1000))
        while self.running:  # see _every
            self._rebalance_now.clear()
            if self._heartbeat_first:
                self._heartbeat_first = False
                await self.send_heartbeat_to_all()
            if await self.do_rebalance():
                backoff.succeed()
                wait = self.config.rebalance_interval / 1000
            else:  # e.g. the route of the retry topic our first heartbeat made is moments away
                wait = backoff.fail()
            if not self.running:
                break
            # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel that arrives as the event
            # is set, and this loop would then outlive shutdown().
            try:
                async with asyncio.timeout(wait):
                    await self._rebalance_now.wait()
            except TimeoutError:
                pass

    async def do_rebalance(self) -> bool:
        """Every consumer's rebalance; False when one failed or could not allocate every topic yet."""
        complete = True
        for c in list(self.consumers.values()):
            try:
                complete = await c.do_rebalance() and complete
            except Exception as exc:
                log.warning("rebalance of group %s failed: %s", c.group, exc, exc_info=not isinstance(
                    exc, (ClientError, RemotingError)))
                complete = False
        return complete

    async def persist_all_offsets(self) -> None:
        for c in list(self.consumers.values()):
            await c.persist_offsets()

    def _check_transaction_state(self, conn: Connection, req: RemotingCommand) -> None:
        try:
            msg = decode_record(bytes(req.body))
        except MessageFormatError as exc:
            log.warning("broker %s asked about a transaction with a malformed message: %s", conn.remote_addr, exc)
            return
        try:
            header = CheckTransactionStateRequestHeader.decode(req.ext_fields)
        except BadRequestError as exc:
            log.warning("broker %s asked about a transaction without its offsets: %s", conn.remote_addr, exc)
            return
        group = msg.properties.get(PROPERTY_PRODUCER_GROUP, "")
        checker = self.transaction_checkers.get(group)
        if checker is None:
            log.warning("broker %s asked about transaction %s of producer group %s, which has no transaction "
                        "producer here", conn.remote_addr, msg.uniq_key, group)
            return
        checker(conn.remote_addr, header, msg)

    def _handle_server_request(self, conn: Connection,
                               req: RemotingCommand) -> RemotingCommand | None | Awaitable[RemotingCommand]:
        """Requests brokers send to clients."""
        if req.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            log.debug("broker %s: membership of group %s changed", conn.remote_addr,
                      req.ext_fields.get("consumerGroup"))
            self.rebalance_now()
            return None
        if req.code == RequestCode.CHECK_TRANSACTION_STATE:
            self._check_transaction_state(conn, req)
            return None  # one-way: the answer is an END_TRANSACTION of its own
        if req.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            group = req.ext_fields.get("consumerGroup", "")
            c = self.consumers.get(group)
            if c is None:
                return req.response(ResponseCode.SYSTEM_ERROR, "The Consumer Group not exist in this consumer")
            return req.response(ResponseCode.SUCCESS, body=consumer_running_info(self, c))
        if req.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            return self._consume_message_directly(req)
        if req.code == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT:
            return self._receive_reply_message(conn, req)
        if req.code == RequestCode.NOTIFY_UNSUBSCRIBE_LITE and self.on_unsubscribe_lite is not None:
            try:
                self.on_unsubscribe_lite(NotifyUnsubscribeLiteRequestHeader.decode(req.ext_fields))
            except BadRequestError as exc:
                log.warning("a lite unsubscribe notice from %s cannot be read: %s", conn.remote_addr, exc)
            return None
        return req.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")

    def _receive_reply_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """A reply to one of this client's requests, pushed by the broker its responder sent it to."""
        try:
            reply = reply_from_push(ReplyMessageRequestHeader.decode(req.ext_fields), bytes(req.body),
                                    self.config.max_message_size)
        except (BadRequestError, MessageFormatError) as exc:
            log.warning("a reply message from %s cannot be read: %s", conn.remote_addr, exc)
            return req.response(ResponseCode.SYSTEM_ERROR, "process reply message fail")
        reply.topic = unwrap(reply.topic, self.config.namespace)
        self.replies.deliver(reply)
        return req.response(ResponseCode.SUCCESS)

    def _consume_message_directly(self, req: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        """A stored message a broker hands to this client's listener for its group (RocketMQ's
        ConsumeMessageDirectlyResult answers); only a push consumer has a listener to call."""
        group = req.ext_fields.get("consumerGroup", "")
        c = self.consumers.get(group)
        direct = getattr(c, "consume_message_directly", None)
        if direct is None:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"The Consumer Group <{group}> not exist in this consumer, or it has no listener")
        try:
            msg = decode_record(bytes(req.body or b""))
        except MessageFormatError as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, f"the message is malformed: {exc}")

        async def run() -> RemotingCommand:
            result = await direct(msg)
            return req.response(ResponseCode.SUCCESS, body=fastjson.dumps(result))
        return run()
