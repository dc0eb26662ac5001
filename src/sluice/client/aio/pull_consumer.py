"""The asyncio pull consumer (RocketMQ DefaultLitePullConsumer): ``poll()`` what background pulls fetched.

Queues come from ``subscribe`` (rebalanced across the group, clustering) or ``assign`` (chosen by you).
Each assigned queue is pulled in the background into a bounded buffer; ``poll`` hands out what is there.
With ``auto_commit`` (the default) the position after each polled message is committed every
``persist_consumer_offset_interval`` ms; otherwise call ``commit()``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sluice.auth.credentials import CredentialsLike
from sluice.client.aio.consumer_base import ConsumerBase
from sluice.client.message import PullStatus
from sluice.client.message_selector import MessageSelector
from sluice.client.mq_client import client_config
from sluice.client.rebalance import AllocateStrategy
from sluice.common.config import ClientConfig
from sluice.common.errors import ClientError
from sluice.common.message import MessageExt
from sluice.common.namespace import wrap
from sluice.common.structs import ConsumeFromWhere, ConsumeType, MessageModel, MessageQueue
from sluice.remoting.tls import TlsLike

log = logging.getLogger(__name__)

# Epochs are unique across queue states: batches fetched for a queue before it was dropped (rebalance,
# re-assign) never match the state of the same queue taken again.
_epochs = itertools.count(1)


@dataclass(slots=True)
class _QueueState:
    next_offset: int | None = None  # where the next pull starts (None: not known yet)
    consumed: int = -1  # one past the last polled message
    buffered: int = 0  # messages fetched, not yet polled
    epoch: int = field(default_factory=lambda: next(_epochs))  # changed by seek: older batches are dropped
    paused: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class PullConsumer(ConsumerBase):
    consume_type = ConsumeType.CONSUME_ACTIVELY

    def __init__(self, group: str, namesrv: str | None = None, *, auto_commit: bool = True,
                 message_model: str | MessageModel = MessageModel.CLUSTERING,
                 consume_from: str | ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp: int | None = None, allocate: str | AllocateStrategy = "AVG",
                 config: ClientConfig | None = None,
                 credentials: CredentialsLike | None = None, tls: TlsLike | None = None,
                 **settings: Any) -> None:
        super().__init__(group, client_config(config, namesrv, settings, "consumer"), message_model, consume_from,
                         consume_timestamp, allocate, credentials, tls)
        self.auto_commit = auto_commit
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._assigned_manually = False
        self._pending_assignment: set[MessageQueue] | None = None
        self._ready: asyncio.Queue[tuple[MessageQueue, int, list[MessageExt]]] | None = None
        self._leftover: deque[tuple[MessageQueue, int, list[MessageExt]]] = deque()  # rest of split batches
        self._rebalance_lock = asyncio.Lock()

    # == configuration ===============================================================================
    def subscribe(self, topic: str, expression: str | MessageSelector | None = "*", *,
                  filter: str | None = None) -> None:
        """Consume ``topic`` with queues shared across the group (can't be mixed with ``assign``); ``expression``
        and ``filter`` select messages as in ``PushConsumer.subscribe``."""
        if self._assigned_manually:
            raise ClientError("this consumer uses assign(); subscribe() and assign() cannot be mixed")
        self._add_subscription(topic, expression, filter)
        if self.started:
            self.client.rebalance_now(heartbeat=True)

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of ``topic`` (to pick from for ``assign``)."""
        named = wrap(self.namespace, topic)
        route = await self.client.update_route(named)
        if route is None:
            raise ClientError(f"topic {topic} has no route")
        return [self.user_queue(mq) for mq in route.subscribe_queues(named)]

    async def assign(self, queues: list[MessageQueue], expression: str | MessageSelector | None = "*", *,
                     filter: str | None = None) -> None:
        """Consume exactly these queues (no rebalancing)."""
        if self.subscriptions and not self._assigned_manually:
            raise ClientError("this consumer uses subscribe(); subscribe() and assign() cannot be mixed")
        self._assigned_manually = True
        queues = [self.named_queue(q) for q in queues]
        for topic in {q.topic for q in queues}:
            self._add_subscription(topic, expression, filter)
        if self.started:
            await self._set_queues(set(queues))
        else:
            self._pending_assignment = set(queues)

    def assignment(self) -> set[MessageQueue]:
        return {self.user_queue(mq) for mq in self._queues}

    # == lifecycle ===================================================================================
    async def start(self) -> PullConsumer:
        if self.started:
            return self
        self._ready = asyncio.Queue()
        await self.start_client()
        if self._pending_assignment:
            await self._set_queues(self._pending_assignment)
            self._pending_assignment = None
        if not self._assigned_manually:
            self.client.rebalance_now()
        return self

    async def shutdown(self) -> None:
        if not self.started:
            return
        self.started = False
        for st in self._queues.values():
            if st.task is not None:
                st.task.cancel()
        await self.persist_offsets()  # (a failure is logged: shutting down goes on)
        await self.client.shutdown()
        self.client.consumers.pop(self.group, None)

    async def __aenter__(self) -> PullConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # == rebalance ===================================================================================
    async def do_rebalance(self) -> bool:
        """As ``PushConsumer.do_rebalance``; nothing to do for queues assigned by hand."""
        if self._assigned_manually:
            return True
        async with self._rebalance_lock:
            wanted: set[MessageQueue] = set()
            incomplete = False
            for topic in list(self.subscriptions):
                mine = await self.allocate(topic)
                if mine is None:
                    incomplete = True
                    wanted |= {mq for mq in self._queues if mq.topic == topic}
                else:
                    wanted |= set(mine)
            await self._set_queues(wanted)
            return not incomplete

    async def _set_queues(self, wanted: set[MessageQueue]) -> None:
        for mq in [m for m in self._queues if m not in wanted]:
            st = self._queues.pop(mq)
            if st.task is not None:
                st.task.cancel()
            if self.auto_commit and st.consumed >= 0:
                self.offset_store.update_offset(mq, st.consumed)
            await self.persist_offset(mq)
            self.offset_store.remove(mq)
        for mq in sorted(wanted - set(self._queues)):
            st = _QueueState()
            self._queues[mq] = st
            st.task = asyncio.get_running_loop().create_task(self._pull_loop(mq, st))

    async def persist_offsets(self) -> None:
        if self.auto_commit:
            for mq, st in self._queues.items():
                if st.consumed >= 0:
                    self.offset_store.update_offset(mq, st.consumed)
        await self.persist_all_offsets(list(self._queues))

    # == background pulls ============================================================================
    async def _pull_loop(self, mq: MessageQueue, st: _QueueState) -> None:
        cfg = self.config
        assert self._ready is not None
        me = asyncio.current_task()
        backoff = self.pull_backoff()
        # Not ``while True``: seek and rebalance replace or drop this task by cancelling it, and on Python 3.11 a
        # cancel that meets a request's response is swallowed (asyncio.wait_for in Connection.invoke); a task
        # that went on would pull the queue a second time, and every message would be polled twice.
        while st.task is me and self._queues.get(mq) is st and self.started:
            try:
                if st.next_offset is None:
                    start = await self.compute_pull_from_where(mq)
                    if st.next_offset is None:  # not seeked meanwhile
                        st.next_offset = start
                        st.consumed = start
                    continue
                if st.paused or st.buffered >= cfg.pull_threshold_for_queue:
                    await asyncio.sleep(cfg.pull_time_delay_millis_when_flow_control / 1000)
                    continue
                epoch, offset = st.epoch, st.next_offset
                result = await self.pull(mq, offset, cfg.pull_batch_size, suspend=True)
                backoff.succeed()
                if epoch != st.epoch:
                    continue  # seeked while pulling
                if result.status is PullStatus.FOUND and result.messages:
                    st.buffered += len(result.messages)
                    self._ready.put_nowait((mq, epoch, result.messages))
                elif result.status is PullStatus.OFFSET_ILLEGAL:
                    log.warning("offset %d of %s is out of range: continuing at %d", offset, mq,
                                result.next_begin_offset)
                    if st.buffered == 0:
                        st.consumed = result.next_begin_offset
                elif st.buffered == 0 and result.next_begin_offset > st.consumed:
                    st.consumed = result.next_begin_offset  # skipped filtered-out messages
                st.next_offset = result.next_begin_offset
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                wait = backoff.fail()
                log.info("pull of %s failed: %s; retrying in %d ms", mq, exc, wait * 1000)
                await asyncio.sleep(wait)

    # == the user's side =============================================================================
    async def poll(self, timeout: float = 5.0, max_messages: int | None = None) -> list[MessageExt]:
        """Messages fetched so far (waiting up to ``timeout`` seconds for the first); [] when none arrived."""
        if not self.started or self._ready is None:
            raise ClientError("the consumer is not started: call start() first")
        out: list[MessageExt] = []
        limit = max_messages or self.config.pull_batch_size * 4
        try:
            if self._leftover:
                item = self._leftover.popleft()
            else:
                item = await asyncio.wait_for(self._ready.get(), timeout) if timeout > 0 else \
                    self._ready.get_nowait()
        except (TimeoutError, asyncio.QueueEmpty):
            return out
        while True:
            mq, epoch, msgs = item
            st = self._queues.get(mq)
            if st is not None and st.epoch == epoch:
                room = limit - len(out)
                if len(msgs) > room:  # hand out no more than max_messages; the rest comes first next time
                    self._leftover.appendleft((mq, epoch, msgs[room:]))
                    msgs = msgs[:room]
                st.buffered -= len(msgs)
                st.consumed = max(st.consumed, msgs[-1].queue_offset + 1)
                out.extend(msgs)
                if self.auto_commit:
                    self.offset_store.update_offset(mq, st.consumed, increase_only=True)
            if len(out) >= limit:
                break
            try:
                item = self._leftover.popleft() if self._leftover else self._ready.get_nowait()
            except asyncio.QueueEmpty:
                break
        return out

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Continue ``mq`` from ``offset``: already fetched messages of it are dropped."""
        mq = self.named_queue(mq)
        st = self._queues.get(mq)
        if st is None:
            raise ClientError(f"{mq} is not assigned to this consumer")
        st.epoch = next(_epochs)
        st.next_offset = offset
        st.consumed = offset
        st.buffered = 0
        # Not written to the offset store: with auto_commit the new position is committed from ``consumed``;
        # without it only commit() commits (the store is persisted by the timer and when the queue goes).
        if st.task is not None and not st.task.done():
            # The pull in flight may be held by the broker (long polling) for many seconds: start afresh.
            st.task.cancel()
            st.task = asyncio.get_running_loop().create_task(self._pull_loop(mq, st))

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        mq = self.named_queue(mq)
        self.seek(mq, await self.client.api.get_min_offset(await self.broker_addr(mq), mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        mq = self.named_queue(mq)
        self.seek(mq, await self.client.api.get_max_offset(await self.broker_addr(mq), mq))

    def pause(self, mqs: list[MessageQueue]) -> None:
        for mq in map(self.named_queue, mqs):
            if mq in self._queues:
                self._queues[mq].paused = True

    def resume(self, mqs: list[MessageQueue]) -> None:
        for mq in map(self.named_queue, mqs):
            if mq in self._queues:
                self._queues[mq].paused = False

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Commit ``offsets`` (next offset to consume per queue), or the position after every polled message.
        Raises ``ClientError`` when a broker did not take one (every queue is tried first); committing again
        retries."""
        if offsets is None:
            offsets = {mq: st.consumed for mq, st in self._queues.items() if st.consumed >= 0}
        else:
            offsets = {self.named_queue(mq): off for mq, off in offsets.items()}
        for mq, off in offsets.items():
            self.offset_store.update_offset(mq, off)
        await self.persist_all_offsets(list(offsets), raise_errors=True)

    async def committed(self, mq: MessageQueue) -> int:
        """The offset committed for ``mq`` (-1 when none)."""
        return await self.read_offset_from_store(self.named_queue(mq))
