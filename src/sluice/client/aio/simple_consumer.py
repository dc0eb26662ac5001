"""The SimpleConsumer (RocketMQ 5's, over the remoting POP protocol): no queues to own and no offsets to commit.

``receive`` pops messages, which stay invisible to the group's other consumers for ``invisible_duration``; each
must then be settled: ``ack`` (done; NSQ's FIN), ``change_invisible_duration`` (more time; NSQ's TOUCH) or
``nack`` (again after a delay; NSQ's REQ). A message neither acknowledged nor given more time before its
invisible duration passes comes back, with ``reconsume_times`` + 1 — to this consumer or another one of the
group — and into ``%DLQ%<group>`` after the group's ``retryMaxTimes``. ``listen`` is a push-style loop on top.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import inspect
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any

from sluice.auth.credentials import CredentialsLike
from sluice.client.message_selector import MessageSelector
from sluice.client.mq_client import MQClientInstance, client_config
from sluice.client.subscription import build_subscription, matches
from sluice.common.config import ClientConfig
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.common.extra_info import (
    KEY_SEPARATOR,
    PROPERTY_POP_CK,
    Receipt,
    ReceiptError,
)
from sluice.common.message import MessageExt
from sluice.common.namespace import unwrap, wrap
from sluice.common.naming import validate_group, validate_topic
from sluice.common.structs import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel
from sluice.remoting.codes import RequestCode
from sluice.remoting.errors import RemotingError
from sluice.remoting.tls import TlsLike

log = logging.getLogger(__name__)

MAX_RECEIVE = 32
ACK_LINGER = 0.001  # listen(): how long an ack waits for others to leave with it
# RocketMQ's push consumer in POP mode retries a failed message after these many seconds (by reconsume times).
NACK_BACKOFF = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)

Listener = Callable[[MessageExt], Any]


def receipt_of(msg: MessageExt) -> Receipt:
    """The receipt handle a received message carries (``ClientError`` for a message not received by POP)."""
    text = msg.get_property(PROPERTY_POP_CK)
    if text is None:
        raise ClientError("the message has no receipt handle: it was not received by a SimpleConsumer")
    try:
        return Receipt.parse(text)
    except ReceiptError as exc:
        raise ClientError(f"the message's receipt handle is malformed: {exc}") from None


class SimpleConsumer:
    """``c = SimpleConsumer("group", namesrv=...); c.subscribe("topic"); await c.start();
    for m in await c.receive(16): ...; await c.ack(m)``.

    ``orderly``: FIFO — a queue is handed out again only once every message received from it is settled or its
    invisible duration passed, and an unsettled message comes back before anything after it."""

    def __init__(self, group: str, namesrv: str | None = None, *, invisible_duration: float = 60.0,
                 await_duration: float = 15.0, consume_from_first: bool = False, orderly: bool = False,
                 config: ClientConfig | None = None, credentials: CredentialsLike | None = None,
                 tls: TlsLike | None = None, **settings: Any) -> None:
        validate_group(group)
        _check_duration("invisible_duration", invisible_duration)
        if await_duration < 0:
            raise ClientError(f"await_duration must be >= 0, not {await_duration}")
        self.config = client_config(config, namesrv, settings, "consumer")
        # With a namespace the group and its topics are ``ns%name`` on the brokers; messages are handed out under
        # their names without it.
        self.namespace = self.config.namespace
        self.group = wrap(self.namespace, group)
        validate_group(self.group)
        self.invisible_duration = invisible_duration
        self.await_duration = await_duration
        self.init_mode = 0 if consume_from_first else 1
        self.orderly = orderly
        self.client = MQClientInstance(self.config, credentials, tls)
        self.subscriptions: dict[str, MessageSelector] = {}
        self._turn = itertools.count()
        self.started = False

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Receive from ``topic`` the messages ``expression`` selects (tags ``"a || b"``, or a MessageSelector)."""
        validate_topic(topic)
        topic = wrap(self.namespace, topic)
        validate_topic(topic)
        self.subscriptions[topic] = expression if isinstance(expression, MessageSelector) else \
            MessageSelector.by_tag(expression)

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(wrap(self.namespace, topic), None)

    async def start(self) -> SimpleConsumer:
        if not self.started:
            # Heartbeats say the group is online (CONSUME_POP), as a RocketMQ 5 simple consumer's do: its
            # connections and the consumer gauges show it.
            self.client.consumers[self.group] = self
            await self.client.start()
            self.started = True
        return self

    async def shutdown(self) -> None:
        if self.started:
            self.started = False
            await self.client.shutdown()  # (unregisters the group from every broker)
            self.client.consumers.pop(self.group, None)

    # == what the client instance asks (heartbeats) ==================================================
    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, ConsumeType.CONSUME_POP, MessageModel.CLUSTERING,
                            ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET if self.init_mode == 0 else
                            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                            [build_subscription(t, s) for t, s in self.subscriptions.items()])

    def subscribed_topics(self) -> list[str]:
        return list(self.subscriptions)

    async def do_rebalance(self) -> bool:
        return True  # (nothing to own: the broker hands out what each pop gets)

    async def persist_offsets(self) -> None:
        return None  # (nothing to commit: acks settle messages)

    async def __aenter__(self) -> SimpleConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # == receive =====================================================================================
    async def receive(self, max_messages: int = MAX_RECEIVE, invisible_duration: float | None = None,
                      wait: float | None = None) -> list[MessageExt]:
        """Up to ``max_messages`` (1..32) messages of the subscribed topics, waiting up to ``wait`` seconds
        (``await_duration``) for one to arrive; each is invisible to the group for ``invisible_duration``
        seconds unless settled before."""
        if not self.started:
            raise ClientError("start() the consumer first")
        if not 1 <= max_messages <= MAX_RECEIVE:
            raise ClientError(f"max_messages must be within 1..{MAX_RECEIVE}, not {max_messages}")
        invisible = self.invisible_duration if invisible_duration is None else invisible_duration
        _check_duration("invisible_duration", invisible)
        wait = self.await_duration if wait is None else wait
        if not self.subscriptions:
            raise ClientError("subscribe() to a topic first")
        places = await self._places()
        if not places:
            await asyncio.sleep(min(wait, 1.0))
            return []
        start = next(self._turn) % len(places)
        order = places[start:] + places[:start]
        failure: ClientError | None = None
        for i, (topic, broker) in enumerate(order):
            last = i == len(order) - 1
            try:  # (a broker that is down must not keep the others from being read)
                msgs = await self._pop(topic, broker, max_messages, invisible, wait if last else 0.0)
            except ClientError as exc:
                if isinstance(exc, BrokerResponseError) or len(order) == 1:
                    raise
                log.warning("receive from broker %s failed: %s", broker, exc)
                failure = exc
                continue
            if msgs:
                return msgs
        if failure is not None and all(self.client.find_broker_addr(b) is None for _, b in order):
            raise failure
        return []

    async def _places(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for topic in self.subscriptions:
            route = await self.client.get_route(topic)
            if route is None:
                continue
            names = {q.broker_name for q in route.queue_datas if q.perm & 4}
            out += [(topic, b.broker_name) for b in route.broker_datas if b.broker_name in names and b.master_addr]
        return out

    async def _pop(self, topic: str, broker: str, max_messages: int, invisible: float,
                   wait: float) -> list[MessageExt]:
        addr = self.client.find_broker_addr(broker)
        if addr is None:
            return []
        selector = self.subscriptions[topic]
        sub = build_subscription(topic, selector)
        try:
            msgs = await self.client.api.pop_message(addr, broker, self.group, topic, selector.expression_type,
                                                     selector.expression, max_messages, int(invisible * 1000),
                                                     int(wait * 1000), self.init_mode, self.orderly)
        except RemotingError as exc:
            raise ClientError(f"broker {addr}: {exc}") from exc
        kept: list[MessageExt] = []
        for m in msgs:
            if self.namespace:  # (settled under its wrapped name again)
                m.topic = unwrap(m.topic, self.namespace)
            if sub.expression_type != "TAG" or matches(sub, m.tags):
                kept.append(m)
            else:  # a tag-hash collision the broker could not tell apart: not ours, settle it
                await self._settle_quietly(m)
        return kept

    async def _settle_quietly(self, msg: MessageExt) -> None:
        try:
            await self.ack(msg)
        except ClientError as exc:
            log.debug("acking a message filtered out failed: %s", exc)

    # == settle ======================================================================================
    async def ack(self, msg: MessageExt) -> None:
        """The message is done: it will not come back (``BrokerResponseError`` NO_MESSAGE when its receipt
        expired: it was already put back for redelivery)."""
        r = receipt_of(msg)
        try:
            await self.client.api.ack_message(self._addr_of(r), self.group, wrap(self.namespace, msg.topic), r)
        except RemotingError as exc:
            raise ClientError(f"broker {r.broker_name}: {exc}") from exc

    async def ack_many(self, msgs: list[MessageExt]) -> None:
        """Acknowledge several messages in one BATCH_ACK_MESSAGE per broker (what one ``ack`` each does, cheaper).
        Receipts that expired are skipped; ``BrokerResponseError`` NO_MESSAGE when none of a broker's was open."""
        # Receipts of one pop of one queue differ only in their last field (the offset): parsed once per head.
        heads: dict[tuple[str, str], list[str]] = {}  # (topic, receipt up to its offset) → offsets
        for m in msgs:
            text = m.get_property(PROPERTY_POP_CK)
            if text is None:
                receipt_of(m)  # (raises: not received by POP)
                continue
            head, _, offset = text.rpartition(KEY_SEPARATOR)
            heads.setdefault((m.topic, head), []).append(offset)
        per_broker: dict[str, dict[tuple[str, str, int, int, int, int, int], list[int]]] = {}
        for (topic, head), texts in heads.items():
            try:
                r = Receipt.parse(f"{head}{KEY_SEPARATOR}{texts[0]}")
                offsets = [r.queue_offset, *(Receipt.offset_field(t) for t in texts[1:])]
            except ReceiptError as exc:
                raise ClientError(f"the message's receipt handle is malformed: {exc}") from None
            key = (wrap(self.namespace, topic), r.retry, r.queue_id, r.ck_offset, r.pop_time, r.invisible_time,
                   r.revive_qid)
            per_broker.setdefault(r.broker_name, {}).setdefault(key, []).extend(offsets)
        for broker, groups in per_broker.items():
            acks = []
            for (topic, retry, queue_id, start, pop_time, invisible, revive_qid), offsets in groups.items():
                bits = 0
                for o in offsets:
                    if o < start:
                        raise ClientError(f"receipt offset {o} lies before its checkpoint's {start}")
                    bits |= 1 << (o - start)
                raw = bits.to_bytes((bits.bit_length() + 7) // 8, "little")  # java.util.BitSet.toByteArray
                acks.append({"c": self.group, "t": topic, "r": retry, "so": start, "q": queue_id,
                             "rq": revive_qid, "pt": pop_time, "it": invisible, "b": base64.b64encode(raw).decode()})
            body = json.dumps({"acks": acks, "brokerName": broker}, separators=(",", ":")).encode()
            addr = self.client.find_broker_addr(broker)
            if addr is None:
                raise ClientError(f"no address known for broker {broker} of the receipt handles")
            try:
                await self.client.api.invoke_ok(addr, RequestCode.BATCH_ACK_MESSAGE, {}, body)
            except RemotingError as exc:
                raise ClientError(f"broker {addr}: {exc}") from exc

    async def change_invisible_duration(self, msg: MessageExt, duration: float, *, suspend: bool = False) -> None:
        """The message stays invisible ``duration`` seconds from now (then comes back unless settled); its
        receipt handle is renewed in place. ``suspend`` (RocketMQ 5.5): its coming back is not counted as a
        delivery (``reconsume_times`` stays; it cannot be dead-lettered by it)."""
        _check_duration("duration", duration)
        r = receipt_of(msg)
        try:
            renewed = await self.client.api.change_invisible_time(self._addr_of(r), self.group,
                                                                  wrap(self.namespace, msg.topic), r,
                                                                  int(duration * 1000), suspend=suspend)
        except RemotingError as exc:
            raise ClientError(f"broker {r.broker_name}: {exc}") from exc
        msg.properties[PROPERTY_POP_CK] = str(renewed)

    async def nack(self, msg: MessageExt, delay: float | None = None) -> None:
        """Consume the message again after ``delay`` seconds (by default RocketMQ's backoff for its reconsume
        times: 10 s, 30 s, 1 min ...)."""
        if delay is None:
            delay = NACK_BACKOFF[min(msg.reconsume_times, len(NACK_BACKOFF) - 1)]
        await self.change_invisible_duration(msg, delay)

    def _addr_of(self, r: Receipt) -> str:
        addr = self.client.find_broker_addr(r.broker_name)
        if addr is None:
            raise ClientError(f"no address known for broker {r.broker_name} of the receipt handle")
        return addr

    # == push style ==================================================================================
    async def listen(self, listener: Listener, *, max_in_flight: int = 32, stop: asyncio.Event | None = None) -> None:
        """Receive and hand each message to ``listener`` (a function or coroutine function) until ``stop`` is set
        (or the task is cancelled), at most ``max_in_flight`` at once (NSQ's RDY): a listener that returns acks
        the message, one that raises nacks it with the backoff."""
        if max_in_flight < 1:
            raise ClientError(f"max_in_flight must be >= 1, not {max_in_flight}")
        running: set[asyncio.Task[None]] = set()
        stop = stop or asyncio.Event()

        acks = _AckBatcher(self)

        async def handle(m: MessageExt) -> None:
            try:
                try:
                    try:
                        result = listener(m)
                        if inspect.isawaitable(result):
                            await result
                    finally:
                        acks.listening -= 1
                except Exception as exc:
                    log.info("listener failed on %s (reconsumed %d times): %s", m.msg_id, m.reconsume_times, exc)
                    await self.nack(m)
                else:
                    await acks.ack(m)
            except ClientError as exc:
                log.warning("settling %s failed: %s", m.msg_id, exc)

        loop = asyncio.get_running_loop()
        try:
            while not stop.is_set():
                free = max_in_flight - len(running)
                if free <= 0:
                    await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    msgs = await self.receive(min(free, MAX_RECEIVE), wait=min(self.await_duration, 1.0))
                except ClientError as exc:
                    log.warning("receive failed: %s", exc)
                    await asyncio.sleep(1.0)
                    continue
                acks.listening += len(msgs)
                for m in msgs:
                    t = loop.create_task(handle(m))
                    running.add(t)
                    t.add_done_callback(running.discard)
        finally:
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            await acks.close()


class _AckBatcher:
    """``listen``'s acks: those of listener calls that end together leave as one BATCH_ACK_MESSAGE per broker (at
    most ``MAX_RECEIVE``; sent once no other listener call is under way, or after ``ACK_LINGER`` s) instead of an
    ACK_MESSAGE each; each caller waits for its own batch's answer, so a message counts as in flight until its
    ack is answered."""

    def __init__(self, consumer: SimpleConsumer) -> None:
        self.consumer = consumer
        self.listening = 0  # listener calls handed out and not yet returned
        self.batches: dict[str, tuple[list[MessageExt], asyncio.Future[None], asyncio.TimerHandle]] = {}
        self.sending: set[asyncio.Task[None]] = set()

    async def ack(self, msg: MessageExt) -> None:
        text = msg.get_property(PROPERTY_POP_CK)
        if text is None or text.count(KEY_SEPARATOR) != 7:  # (not a receipt: ack says what is wrong)
            await self.consumer.ack(msg)
            return
        broker = text.split(KEY_SEPARATOR)[5]
        batch = self.batches.get(broker)
        if batch is None and self.listening <= 0:  # alone: nothing to wait for
            await self.consumer.ack(msg)
            return
        if batch is None:
            loop = asyncio.get_running_loop()
            batch = self.batches[broker] = ([], loop.create_future(),
                                            loop.call_later(ACK_LINGER, self._flush, broker))
        batch[0].append(msg)
        if len(batch[0]) >= MAX_RECEIVE or self.listening <= 0:
            self._flush(broker)
        await asyncio.shield(batch[1])

    def _flush(self, broker: str) -> None:
        batch = self.batches.pop(broker, None)
        if batch is None:
            return
        msgs, done, timer = batch
        timer.cancel()
        task = asyncio.ensure_future(self._send(msgs, done))
        self.sending.add(task)
        task.add_done_callback(self.sending.discard)
        task.add_done_callback(functools.partial(_settle_cancelled, done))

    async def _send(self, msgs: list[MessageExt], done: asyncio.Future[None]) -> None:
        try:
            await self.consumer.ack_many(msgs)
        except BaseException as exc:  # (every caller waits on ``done``: it is always settled)
            if not done.done():
                done.set_exception(exc if isinstance(exc, ClientError) else ClientError(f"ack failed: {exc!r}"))
            done.exception()  # (seen: a caller cancelled meanwhile leaves nobody to read it)
            if not isinstance(exc, Exception):
                raise
        else:
            if not done.done():
                done.set_result(None)

    async def close(self) -> None:
        """Send what waits, and wait for every ack under way (``listen`` returns after its acks)."""
        for broker in list(self.batches):
            self._flush(broker)
        if self.sending:
            await asyncio.gather(*self.sending, return_exceptions=True)


def _settle_cancelled(done: asyncio.Future[None], _task: asyncio.Task[None]) -> None:
    """A send task ended: its batch's callers are answered even when it was cancelled before it began."""
    if not done.done():
        done.set_exception(ClientError("the ack was cancelled"))
        done.exception()


def _check_duration(name: str, seconds: float) -> None:
    if not 0 <= seconds <= 12 * 3600:
        raise ClientError(f"{name} must be within 0 .. 43200 s, not {seconds}")


__all__ = ["NACK_BACKOFF", "SimpleConsumer", "receipt_of"]
