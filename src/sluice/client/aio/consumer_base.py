"""What push and pull consumers share: subscriptions, queue allocation, offsets, where to start, one pull."""

from __future__ import annotations

import asyncio
import logging

from sluice.auth.credentials import CredentialsLike
from sluice.client.message import PullResult, PullStatus
from sluice.client.message_selector import MessageSelector
from sluice.client.mq_client import MQClientInstance
from sluice.client.offset_store import LocalFileOffsetStore
from sluice.client.rebalance import AllocateStrategy, get_strategy
from sluice.client.remote_offset_store import RemoteBrokerOffsetStore
from sluice.client.subscription import SUB_ALL, build_subscription, filter_messages
from sluice.common.backoff import RNG, Backoff
from sluice.common.compression import MAX_INFLATED_BODY_SIZE, inflate
from sluice.common.config import ClientConfig
from sluice.common.errors import BrokerResponseError, ClientError, InvalidSubscriptionError, MessageFormatError
from sluice.common.lmq_dispatch import lmq_entries
from sluice.common.message import MessageExt
from sluice.common.message_codec import decode_records
from sluice.common.namespace import unwrap, wrap
from sluice.common.naming import RETRY_GROUP_TOPIC_PREFIX, is_lmq, retry_topic, validate_group, validate_topic
from sluice.common.properties import PROPERTY_RETRY_TOPIC
from sluice.common.structs import (
    MASTER_ID,
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from sluice.common.sysflag import COMPRESSED_FLAG
from sluice.filter import is_tag_type
from sluice.remoting.codes import RequestCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import RemotingError
from sluice.remoting.headers import PullMessageRequestHeader
from sluice.remoting.tls import TlsLike

log = logging.getLogger(__name__)

PULL_RETRY_BASE = 0.1  # the first wait (s) after a failed pull; see ``ConsumerBase.pull_backoff``

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4

_CONSUME_FROM = {"last": ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 "first": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                 "timestamp": ConsumeFromWhere.CONSUME_FROM_TIMESTAMP}
_MODELS = {"clustering": MessageModel.CLUSTERING, "broadcasting": MessageModel.BROADCASTING}


def parse_consume_from(value: str | ConsumeFromWhere) -> ConsumeFromWhere:
    if isinstance(value, ConsumeFromWhere):
        return value
    v = value.lower().replace("consume_from_", "").replace("_offset", "")
    if v not in _CONSUME_FROM:
        raise ValueError(f"consume_from must be 'last', 'first' or 'timestamp', not {value!r}")
    return _CONSUME_FROM[v]


def parse_message_model(value: str | MessageModel) -> MessageModel:
    if isinstance(value, MessageModel):
        return value
    if value.lower() not in _MODELS:
        raise ValueError(f"message_model must be 'clustering' or 'broadcasting', not {value!r}")
    return _MODELS[value.lower()]


class ConsumerBase:
    consume_type = ConsumeType.CONSUME_PASSIVELY

    def __init__(self, group: str, config: ClientConfig, message_model: str | MessageModel,
                 consume_from: str | ConsumeFromWhere, consume_timestamp: int | None,
                 allocate: str | AllocateStrategy, credentials: CredentialsLike | None = None,
                 tls: TlsLike | None = None) -> None:
        validate_group(group)
        # With a namespace the group and its topics are ``ns%name`` on the brokers (RocketMQ's withNamespace);
        # messages and queues are handed out under their names without it.
        self.namespace = config.namespace
        self.group = group = wrap(config.namespace, group)
        validate_group(group)
        self.config = config
        self.message_model = parse_message_model(message_model)
        self.consume_from = parse_consume_from(consume_from)
        if self.consume_from is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP and consume_timestamp is None:
            raise ValueError("consume_from='timestamp' needs consume_timestamp (ms since the epoch)")
        self.consume_timestamp = consume_timestamp or 0
        self.strategy = get_strategy(allocate) if isinstance(allocate, str) else allocate
        self.client = MQClientInstance(config, credentials, tls)
        self.subscriptions: dict[str, SubscriptionData] = {}
        # Queue → the broker id its last pull's answer suggested for the next (RocketMQ pullFromWhichNodeTable).
        self._pull_from: dict[MessageQueue, int] = {}
        self.offset_store: RemoteBrokerOffsetStore | LocalFileOffsetStore
        if self.message_model is MessageModel.CLUSTERING:
            self.offset_store = RemoteBrokerOffsetStore(self.client, group)
        else:
            # Keyed by ip@instance_name, stable across restarts: give each broadcasting consumer of a group on
            # one machine its own instance_name.
            ip = self.client.client_id.split("@")[0]
            self.offset_store = LocalFileOffsetStore(group, f"{ip}@{config.instance_name}", config.offset_store_dir)
        self.started = False

    @property
    def clustering(self) -> bool:
        return self.message_model is MessageModel.CLUSTERING

    def _add_subscription(self, topic: str, expression: str | MessageSelector | None,
                          filter: str | None = None) -> SubscriptionData:
        validate_topic(topic)
        topic = wrap(self.namespace, topic)
        validate_topic(topic)
        if filter:  # the contest spec's "key=value": an SQL92 subscription
            if isinstance(expression, MessageSelector) or expression not in (None, "", SUB_ALL):
                raise InvalidSubscriptionError(f"subscribe to {topic} with a tag expression or a selector, or with "
                                               "filter=, not both (write the condition in SQL92 to combine them)")
            expression = MessageSelector.by_key_value(filter)
        sub = build_subscription(topic, expression)
        self.subscriptions[topic] = sub
        return sub

    def named_queue(self, mq: MessageQueue) -> MessageQueue:
        """``mq`` as the brokers know it (its topic in this consumer's namespace)."""
        if not self.namespace:
            return mq
        return MessageQueue(wrap(self.namespace, mq.topic), mq.broker_name, mq.queue_id)

    def user_queue(self, mq: MessageQueue) -> MessageQueue:
        """``mq`` as this consumer's caller names it (without the namespace)."""
        if not self.namespace:
            return mq
        return MessageQueue(unwrap(mq.topic, self.namespace), mq.broker_name, mq.queue_id)

    # == what the client instance asks ================================================================
    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, self.consume_type, self.message_model, self.consume_from,
                            list(self.subscriptions.values()))

    def subscribed_topics(self) -> list[str]:
        return list(self.subscriptions)

    def _register_retry_subscription(self) -> None:
        if self.clustering and self.subscriptions:
            rt = retry_topic(self.group)
            if rt not in self.subscriptions:
                self.subscriptions[rt] = build_subscription(rt, "*")

    async def start_client(self) -> None:
        """Join: start the client instance, learn the subscribed topics' routes, heartbeat to their brokers."""
        self.offset_store.load()
        self.client.consumers[self.group] = self  # type: ignore[assignment]
        await self.client.start()
        self.started = True
        for topic in self.subscriptions:
            try:
                await self.client.update_route(topic)
            except Exception as exc:  # the topic may not exist yet: rebalancing retries
                log.warning("no route for %s yet: %s", topic, exc)
        try:
            await self.check_client_in_broker()
        except BaseException:
            self.started = False
            self.client.consumers.pop(self.group, None)
            await self.client.shutdown()
            raise
        await self.client.send_heartbeat_to_all()

    async def check_client_in_broker(self) -> None:
        """Ask a broker of each topic subscribed with an SQL92 filter whether it can apply it (as the Java client
        does at start): ``BrokerResponseError`` when it cannot (property filters off, an expression it refuses)."""
        for sub in self.subscriptions.values():
            if is_tag_type(sub.expression_type):
                continue
            route = self.client.routes.get(sub.topic)
            addr = next((a for b in route.broker_datas if (a := b.select_addr())), None) if route else None
            if addr is not None:
                await self.client.api.check_client_config(addr, self.group, self.client.client_id, sub)

    # == queue allocation =============================================================================
    async def allocate(self, topic: str) -> list[MessageQueue] | None:
        """This consumer's queues of ``topic``; None when the answer is unknown right now (no route yet)."""
        try:
            route = await self.client.update_route(topic)
        except Exception as exc:
            log.info("route of %s unavailable for rebalance: %s", topic, exc)
            route = self.client.routes.get(topic)
        if route is None:
            return None
        mq_all = route.subscribe_queues(topic)
        if not self.clustering:
            return mq_all
        addrs = [a for b in route.broker_datas if (a := b.select_addr())]
        if not addrs:
            return None
        cids = await self.client.api.get_consumer_id_list(addrs[RNG.randrange(len(addrs))], self.group)
        if not cids:
            return None
        return self.strategy.allocate(self.group, self.client.client_id, mq_all, cids)

    # == offsets ======================================================================================
    async def read_offset_from_store(self, mq: MessageQueue) -> int:
        store = self.offset_store
        if isinstance(store, RemoteBrokerOffsetStore):
            # A timestamp start must not be overridden by the broker's "new group on a young queue → 0" rule.
            by_time = self.consume_from is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
            return await store.read_from_store(mq, zero_if_not_found=not by_time)
        return store.read_offset(mq)

    async def persist_offset(self, mq: MessageQueue) -> None:
        store = self.offset_store
        if isinstance(store, RemoteBrokerOffsetStore):
            await store.persist(mq)
        else:  # the file is fsynced: in a thread, not on the event loop
            await asyncio.to_thread(store.persist, mq)

    async def persist_all_offsets(self, mqs: list[MessageQueue], raise_errors: bool = False) -> None:
        """Commit the offsets in memory of ``mqs``; a broker's failure is logged, or raised with ``raise_errors``
        (a local file's always is)."""
        store = self.offset_store
        if isinstance(store, RemoteBrokerOffsetStore):
            await store.persist_all(mqs, raise_errors)
        else:
            await asyncio.to_thread(store.persist_all, mqs)

    async def broker_addr(self, mq: MessageQueue) -> str:
        return await self.client.master_addr_of(mq)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """Where a newly assigned queue starts: the committed offset, else as ``consume_from`` says."""
        last = await self.read_offset_from_store(mq)
        if last >= 0:
            return last
        is_retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        cfw = self.consume_from
        if cfw is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET or is_retry and \
                cfw is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
            return 0
        addr = await self.broker_addr(mq)
        if cfw is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP and not is_retry:
            return await self.client.api.search_offset(addr, mq, self.consume_timestamp)
        return await self.client.api.get_max_offset(addr, mq)

    def pull_backoff(self) -> Backoff:
        """The waits between the failed pulls of one queue: doubling from 100 ms, with full jitter, up to
        ``pull_time_delay_millis_when_exception``."""
        cap = self.config.pull_time_delay_millis_when_exception / 1000
        return Backoff(min(PULL_RETRY_BASE, cap), cap)

    # == one pull =====================================================================================
    async def pull(self, mq: MessageQueue, offset: int, max_nums: int, suspend: bool,
                   commit_offset: int = -1) -> PullResult:
        """PULL_MESSAGE for ``mq`` from ``offset``; messages come filtered by tag, retry topics renamed back."""
        found = self.client.find_subscribe_addr(mq.broker_name, self._pull_from.get(mq, MASTER_ID))
        if found is None:
            await self.client.learn_addrs_of(mq.topic)
            found = self.client.find_subscribe_addr(mq.broker_name, self._pull_from.get(mq, MASTER_ID))
            if found is None:
                raise ClientError(f"broker {mq.broker_name} of {mq} has no known address")
        addr, slave = found
        req, sub, timeout = self._pull_command(mq, offset, max_nums, suspend, -1 if slave else commit_offset)
        try:
            resp = await self.client.remoting.invoke(addr, req, timeout)
        except RemotingError:
            self.pull_failed(mq)
            raise
        return await self.inflated(self._pull_result(resp, mq, offset, sub, addr))

    def pull_failed(self, mq: MessageQueue) -> None:
        """A pull of ``mq`` got no answer: its broker may be gone (a slave then serves the reads, or is promoted),
        so the route is fetched again soon rather than at the next poll."""
        if is_lmq(mq.topic):  # (no route: its broker may have moved, as the name server's broker list says)
            self.client.refresh_broker_addrs_soon()
        else:
            self.client.refresh_route_soon(mq.topic)

    def start_pull(self, mq: MessageQueue, offset: int, max_nums: int, commit_offset: int = -1) -> StartedPull | None:
        """A suspended ``pull`` sent now (not at the end of the loop turn) when the broker's address and an
        open connection to it are at hand; None otherwise (then ``pull``). The caller awaits the response with
        ``StartedPull.response`` and decodes it with ``finish``, or gives it up with ``abandon``."""
        found = self.client.find_subscribe_addr(mq.broker_name, self._pull_from.get(mq, MASTER_ID))
        if found is None:
            return None
        addr, slave = found
        # Offsets are committed to the master: a slave would only drop the commit (RocketMQ clears the flag).
        req, sub, timeout = self._pull_command(mq, offset, max_nums, True, -1 if slave else commit_offset)
        started = self.client.remoting.start_request(addr, req, timeout)
        if started is None:
            return None
        conn, fut = started
        return StartedPull(self, conn, fut, req.opaque, mq, offset, sub, addr)

    def _pull_command(self, mq: MessageQueue, offset: int, max_nums: int, suspend: bool,
                      commit_offset: int) -> tuple[RemotingCommand, SubscriptionData, int]:
        """The PULL_MESSAGE request, the subscription it carries, and its timeout in ms."""
        sub = self.subscriptions.get(mq.topic) or build_subscription(mq.topic, "*")
        sys_flag = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if suspend else 0)
        if commit_offset > 0:
            sys_flag |= PULL_FLAG_COMMIT_OFFSET
        cfg = self.config
        ext = PullMessageRequestHeader(self.group, mq.topic, mq.queue_id, offset, max_nums, sys_flag, commit_offset,
                                       cfg.broker_suspend_max_time_millis, sub.sub_string, sub.sub_version,
                                       sub.expression_type).encode()
        timeout = cfg.consumer_timeout_millis_when_suspend if suspend else cfg.consumer_pull_timeout_millis
        return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), sub, timeout

    def _pull_result(self, resp: RemotingCommand, mq: MessageQueue, offset: int, sub: SubscriptionData,
                     addr: str) -> PullResult:
        status = PullStatus.from_response_code(resp.code)
        if status is None:
            raise BrokerResponseError(resp.code, resp.remark, addr)
        e = resp.ext_fields
        result = PullResult(status, int(e.get("nextBeginOffset", offset)), int(e.get("minOffset", 0)),
                            int(e.get("maxOffset", 0)), [], int(e.get("suggestWhichBrokerId", 0)))
        # The broker says where the next pull of the queue goes: a slave while the master's data is cold, back
        # to the master once it is hot again.
        self._pull_from[mq] = result.suggest_which_broker_id
        if status is PullStatus.FOUND and resp.body:
            msgs: list[MessageExt] = filter_messages(sub, decode_records(resp.body))
            if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                for m in msgs:
                    m.topic = m.properties.get(PROPERTY_RETRY_TOPIC, m.topic)
            elif is_lmq(mq.topic):  # (its place in the light queue, not in the topic it was sent to)
                for m in msgs:
                    for name, lmq_offset in lmq_entries(m.topic, m.properties):
                        if name == mq.topic:
                            m.queue_id, m.queue_offset = mq.queue_id, lmq_offset
            if self.namespace:  # (sent back under its wrapped name again: ``named``)
                for m in msgs:
                    m.topic = unwrap(m.topic, self.namespace)
            result.messages = msgs
        return result


    @staticmethod
    async def inflated(result: PullResult) -> PullResult:
        """``result`` with the bodies its producers zlib-compressed inflated, in a thread: a large body takes
        milliseconds to inflate, which the event loop would owe every other queue."""
        if any(m.sys_flag & COMPRESSED_FLAG for m in result.messages):
            await asyncio.to_thread(_inflate_bodies, result.messages)
        return result


def _inflate_bodies(msgs: list[MessageExt]) -> None:
    for m in msgs:
        if m.sys_flag & COMPRESSED_FLAG:  # the producer zlib-compressed the body
            try:
                m.body = inflate(m.body, MAX_INFLATED_BODY_SIZE, f"the body of message {m.msg_id}")
            except MessageFormatError as exc:
                log.warning("%s; delivered as stored", exc)


class StartedPull:
    """A pull request already on the wire (``ConsumerBase.start_pull``)."""

    __slots__ = ("consumer", "conn", "fut", "opaque", "mq", "offset", "sub", "addr")

    def __init__(self, consumer: ConsumerBase, conn: Connection, fut: asyncio.Future[RemotingCommand], opaque: int,
                 mq: MessageQueue, offset: int, sub: SubscriptionData, addr: str) -> None:
        self.consumer = consumer
        self.conn = conn
        self.fut = fut
        self.opaque = opaque
        self.mq = mq
        self.offset = offset
        self.sub = sub
        self.addr = addr

    async def response(self) -> RemotingCommand:
        """The broker's answer, not yet decoded."""
        try:
            return await self.conn.response_of(self.opaque, self.fut)
        except RemotingError:
            self.consumer.pull_failed(self.mq)
            raise

    def finish(self, resp: RemotingCommand) -> PullResult:
        """``resp`` decoded as ``ConsumerBase.pull`` returns it, compressed bodies not yet inflated
        (``ConsumerBase.inflated``)."""
        return self.consumer._pull_result(resp, self.mq, self.offset, self.sub, self.addr)

    def abandon(self) -> None:
        self.conn.abandon(self.opaque, self.fut)
