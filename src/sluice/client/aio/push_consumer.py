"""The asyncio push consumer (RocketMQ DefaultMQPushConsumer): rebalanced queues pulled for you, messages handed
to a listener concurrently or in order, offsets committed as the smallest unfinished message.

A listener may be a plain function (run on a thread pool of ``consume_thread_nums`` threads) or a coroutine
function (awaited on the loop). It gets a list of ``MessageExt`` and returns a ``ConsumeStatus`` (orderly:
``ConsumeOrderlyStatus``); returning None counts as success, raising as a failure.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from sluice.auth.credentials import CredentialsLike
from sluice.client.aio.consumer_base import ConsumerBase, StartedPull
from sluice.client.aio.producer import Producer
from sluice.client.aio.trace_dispatcher import TraceDispatcher
from sluice.client.message import ConsumeOrderlyStatus, ConsumeStatus, PullStatus
from sluice.client.message_selector import MessageSelector
from sluice.client.mq_client import client_config
from sluice.client.process_queue import ProcessQueue
from sluice.client.rebalance import AllocateStrategy
from sluice.client.trace import ConsumeReturnType, TraceContext, sub_after_context, sub_before_context
from sluice.common.config import ClientConfig
from sluice.common.decimal_text import is_long
from sluice.common.errors import ClientError, OffsetStoreError
from sluice.common.message import MessageExt
from sluice.common.namespace import unwrap, wrap
from sluice.common.structs import ConsumeFromWhere, MessageModel, MessageQueue
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import RemotingError
from sluice.remoting.tls import TlsLike

if TYPE_CHECKING:
    from sluice.client.otel import Instrumentation

log = logging.getLogger(__name__)

Listener = Callable[[list[MessageExt]], Any]

# A batch that cannot be sent back is consumed again locally after this long (RocketMQ: 5 s).
CONSUME_LATER_DELAY = 5.0
# What a listener's answer is called in a ConsumeMessageDirectlyResult.
_DIRECT_RESULTS: dict[object, str] = {
    None: "CR_SUCCESS", ConsumeStatus.CONSUME_SUCCESS: "CR_SUCCESS", ConsumeStatus.RECONSUME_LATER: "CR_LATER",
    ConsumeOrderlyStatus.SUCCESS: "CR_SUCCESS", ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: "CR_LATER"}

# The delay level a message whose listener timed out goes back with (RocketMQ cleanExpiredMsg: level 3, 10 s).
CONSUME_TIMEOUT_DELAY_LEVEL = 3


class PushConsumer(ConsumerBase):
    """Subscribe, register a listener, ``await start()``; messages arrive until ``await shutdown()``."""

    def __init__(self, group: str, namesrv: str | None = None, *,
                 message_model: str | MessageModel = MessageModel.CLUSTERING,
                 consume_from: str | ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp: int | None = None, allocate: str | AllocateStrategy = "AVG",
                 orderly: bool = False, config: ClientConfig | None = None,
                 credentials: CredentialsLike | None = None, tls: TlsLike | None = None,
                 **settings: Any) -> None:
        super().__init__(group, client_config(config, namesrv, settings, "consumer"), message_model, consume_from,
                         consume_timestamp, allocate, credentials, tls)
        self.orderly = orderly
        self._listener: Listener | None = None
        self._listener_async = False
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._consume_tasks: set[asyncio.Task[None]] = set()
        # Concurrent listener calls under way: id -> (queue, its cache, messages, when the call began).
        self._inflight: dict[int, tuple[MessageQueue, ProcessQueue, list[MessageExt], float]] = {}
        self._inflight_ids = itertools.count()
        # Keyed by process queue, not queue: a queue dropped and taken again gets a new ProcessQueue, which must
        # not wait for the old one's task (that one only notices the drop after its listener call).
        self._orderly_tasks: dict[ProcessQueue, asyncio.Task[None]] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._consume_sem: asyncio.Semaphore | None = None
        self._timers: list[asyncio.Task[None]] = []
        self._rebalance_lock = asyncio.Lock()
        # With ``enable_trace``: each listener call is recorded in the trace topic (docs/trace.md).
        self.trace = TraceDispatcher(group, "CONSUMER", self.config, Producer, credentials, tls) \
            if self.config.enable_trace else None
        # With ``enable_otel``: a process span per listener call, the child of the message's trace context.
        self.otel: Instrumentation | None = None
        if self.config.enable_otel:
            from sluice.client.otel import Instrumentation  # (an optional dependency, loaded only when asked for)

            self.otel = Instrumentation(group)

    # == configuration ===============================================================================
    def subscribe(self, topic: str, expression: str | MessageSelector | None = "*", *,
                  filter: str | None = None) -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` ("*" or "TagA || TagB"), or that a
        ``MessageSelector.by_sql(...)`` selects, or whose properties match ``filter="key=value"``."""
        self._add_subscription(topic, expression, filter)
        if self.started:
            self._register_retry_subscription()
            self.client.rebalance_now(heartbeat=True)

    def register_listener(self, fn: Listener) -> Listener:
        if not callable(fn):
            raise TypeError("the listener must be callable")
        self._listener = fn
        self._listener_async = inspect.iscoroutinefunction(fn)
        return fn

    listener = register_listener  # usable as a decorator: @consumer.listener

    # == lifecycle ===================================================================================
    async def start(self) -> PushConsumer:
        if self.started:
            return self
        if self._listener is None:
            raise ClientError("register a listener before starting the consumer")
        if not self.subscriptions:
            raise ClientError("subscribe to at least one topic before starting the consumer")
        self._register_retry_subscription()
        self._executor = ThreadPoolExecutor(self.config.consume_thread_nums,
                                            thread_name_prefix=f"sluice-consume-{self.group}")
        self._consume_sem = asyncio.Semaphore(self.config.consume_thread_nums)
        await self.start_client()
        if self.trace is not None and not await self.trace.start():
            self.trace = None  # (a trace is never worth the consumer: it runs without one, as Java's)
        if self.orderly and self.clustering:
            self._timers.append(asyncio.get_running_loop().create_task(self._renew_locks_loop()))
        if not self.orderly:
            self._timers.append(asyncio.get_running_loop().create_task(self._clean_expired_loop()))
        self.client.rebalance_now()
        return self

    async def shutdown(self) -> None:
        """Stop pulling, let running listeners finish, commit offsets, release queue locks, leave the group."""
        if not self.started:
            return
        self.started = False
        for t in self._timers:
            t.cancel()
        await asyncio.gather(*self._timers, return_exceptions=True)
        self.client.consumers.pop(self.group, None)
        held = list(self.process_queues.items())  # (a rebalance under way may drop one while the calls finish)
        mqs = [mq for mq, _ in held]
        for mq in mqs:
            task = self._pull_tasks.pop(mq, None)
            if task is not None:
                task.cancel()
        # The listener calls under way finish while their queues are still held, so that what they consumed is
        # committed below (RocketMQ 5's awaitTerminationMillisWhenShutdown; a dropped queue commits nothing): a
        # consumer stopped right after its listener returned must not hand those messages out again.
        pending = list(self._consume_tasks) + list(self._orderly_tasks.values())
        if pending:
            await asyncio.wait(pending, timeout=max(self.config.consumer_pull_timeout_millis / 1000, 1.0))
        for _, pq in held:
            pq.dropped = True
        await self.persist_all_offsets(mqs)
        if self.orderly and self.clustering:
            await self._unlock(mqs)
        self.process_queues.clear()
        self.client.consumers[self.group] = self  # listed once more so that unregistering covers the group
        await self.client.shutdown()
        self.client.consumers.pop(self.group, None)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self.trace is not None:
            await self.trace.shutdown()

    async def __aenter__(self) -> PushConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # == rebalance ===================================================================================
    async def do_rebalance(self) -> bool:
        """Take this member's share of every subscribed topic's queues; False when some topic could not be
        allocated yet (no route, no member list): the client tries again soon, backing off."""
        async with self._rebalance_lock:
            incomplete = False
            for topic in list(self.subscriptions):
                mine = await self.allocate(topic)
                if mine is None:
                    incomplete = True
                    continue
                await self._update_process_queues(topic, set(mine))
            return not incomplete

    async def _update_process_queues(self, topic: str, mine: set[MessageQueue]) -> None:
        for mq in [m for m in self.process_queues if m.topic == topic and m not in mine]:
            await self._drop_queue(mq)
        for mq in sorted(mine - set(self.process_queues)):
            if not self.started:
                return
            pq = ProcessQueue()
            self.process_queues[mq] = pq
            self.offset_store.remove(mq)
            self._pull_tasks[mq] = asyncio.get_running_loop().create_task(self._pull_loop(mq, pq))
            log.info("group %s now consumes %s", self.group, mq)

    async def _drop_queue(self, mq: MessageQueue) -> None:
        pq = self.process_queues.pop(mq)
        pq.dropped = True
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()
        orderly_task = self._orderly_tasks.get(pq)
        if orderly_task is not None:  # let the listener call in progress finish before unlocking
            await asyncio.wait([orderly_task], timeout=self.config.consumer_pull_timeout_millis / 1000)
        await self.persist_offset(mq)
        self.offset_store.remove(mq)
        if self.orderly and self.clustering:
            await self._unlock([mq])
        log.info("group %s no longer consumes %s", self.group, mq)

    async def _restart_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        """Go on at ``offset`` with a fresh process queue (RocketMQ drops the process queue, too): the messages of
        ``pq`` are dropped unconsumed, what its listener calls still finish commits nothing, and nothing it
        remembers (its largest offset) can push a commit past ``offset``. An orderly listener call in progress
        ends first, so that two never run on one queue."""
        pq.dropped = True
        orderly_task = self._orderly_tasks.get(pq)
        if orderly_task is not None:
            await asyncio.wait([orderly_task], timeout=self.config.consumer_pull_timeout_millis / 1000)
        self.offset_store.update_offset(mq, offset)
        if self.process_queues.get(mq) is pq and self.started:  # else a rebalance took the queue away meanwhile
            fresh = ProcessQueue()
            fresh.locked, fresh.last_lock_timestamp = pq.locked, pq.last_lock_timestamp
            self.process_queues[mq] = fresh
            self._pull_tasks[mq] = asyncio.get_running_loop().create_task(self._pull_loop(mq, fresh, offset))
        try:
            await self.persist_offset(mq)
        except (ClientError, RemotingError, OSError, OffsetStoreError) as exc:  # the periodic persist retries it
            log.warning("cannot persist the new offset %d of %s yet: %s", offset, mq, exc)

    async def persist_offsets(self) -> None:
        await self.persist_all_offsets(list(self.process_queues))

    # == pulling =====================================================================================
    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, start: int | None = None) -> None:
        """Pull ``mq`` into ``pq`` until the queue is dropped. A concurrent consumer sends the next pull as
        soon as an answer with messages arrives, before decoding it (RocketMQ pulls again right after a pull's
        callback too): the broker serves the next pull while this one is decoded, instead of the two
        processes taking turns. Flow control then counts the undecoded answer as a full batch of messages, with
        its body bytes and its offsets. ``start``: the offset to begin at (else the committed one)."""
        cfg = self.config
        offset: int | None = start
        size_limit = cfg.pull_threshold_size_for_queue * 1024 * 1024
        started: StartedPull | None = None  # the next pull, already sent
        backoff = self.pull_backoff()
        try:
            while not pq.dropped:
                try:
                    if self.orderly and self.clustering and (not pq.locked or pq.is_lock_expired()):
                        if not await self._lock_one(mq, pq):
                            await asyncio.sleep(cfg.lock_retry_interval / 1000)
                            continue
                        offset = None  # the previous owner may have committed since
                    if offset is None:
                        offset = await self.compute_pull_from_where(mq)
                        if self.clustering:
                            self.offset_store.update_offset(mq, offset)
                    if started is None:
                        if self._flow_controlled(pq, size_limit):
                            await asyncio.sleep(cfg.pull_time_delay_millis_when_flow_control / 1000)
                            continue
                        result = await self.pull(mq, offset, cfg.pull_batch_size, suspend=True,
                                                 commit_offset=self._pull_commit_offset(mq, pq))
                    else:
                        current, started = started, None
                        resp = await current.response()
                        if pq.dropped:
                            break
                        started = self._pull_ahead(mq, pq, resp, offset, size_limit)
                        result = await self.inflated(current.finish(resp))
                    backoff.succeed()
                    if pq.dropped:
                        break
                    if result.status is PullStatus.FOUND and result.messages:
                        if pq.put_messages(result.messages) or not self.orderly:
                            self._dispatch(mq, pq, result.messages)
                    elif result.status is PullStatus.OFFSET_ILLEGAL:
                        log.warning("offset %d of %s is out of range or was reset (min %d, max %d): continuing at %d",
                                    offset, mq, result.min_offset, result.max_offset, result.next_begin_offset)
                        await self._restart_queue(mq, pq, result.next_begin_offset)
                        break
                    elif pq.msg_count == 0:
                        self.offset_store.update_offset(mq, result.next_begin_offset, increase_only=True)
                    offset = result.next_begin_offset
                    if started is None and not self.orderly and result.status is PullStatus.FOUND:
                        started = self._pull_ahead_after(mq, pq, offset, size_limit)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if started is not None:
                        started.abandon()
                        started = None
                    if pq.dropped:
                        break
                    wait = backoff.fail()
                    log.info("pull of %s failed: %s; retrying in %d ms", mq, exc, wait * 1000)
                    await asyncio.sleep(wait)
        finally:
            if started is not None:
                started.abandon()

    def _flow_controlled(self, pq: ProcessQueue, size_limit: int, undecoded: int = 0, undecoded_bytes: int = 0,
                         next_offset: int | None = None) -> bool:
        """Whether ``pq`` holds too much to pull more. An answer not yet added counts with ``undecoded``
        messages, ``undecoded_bytes`` of body and offsets up to ``next_offset`` (exclusive)."""
        cfg = self.config
        if pq.msg_count + undecoded > cfg.pull_threshold_for_queue or pq.msg_size + undecoded_bytes > size_limit:
            return True
        if self.orderly:
            return False
        return (pq.max_span if next_offset is None else pq.span_with(next_offset)) > 2000

    def _pull_commit_offset(self, mq: MessageQueue, pq: ProcessQueue) -> int:
        pq.last_pull_timestamp = time.monotonic()
        return self.offset_store.read_offset(mq) if self.clustering else -1

    def _pull_ahead(self, mq: MessageQueue, pq: ProcessQueue, resp: RemotingCommand, offset: int,
                    size_limit: int) -> StartedPull | None:
        """The next pull, sent before ``resp`` (an answer with messages) is decoded; None when it may not go
        yet (orderly, flow control, no open connection) — then the loop pulls the ordinary way."""
        if self.orderly or resp.code != ResponseCode.SUCCESS or not resp.body:
            return None
        next_offset = resp.ext_fields.get("nextBeginOffset")
        if next_offset is None or not is_long(next_offset) or int(next_offset) <= offset:
            return None
        if self._flow_controlled(pq, size_limit, self.config.pull_batch_size, len(resp.body), int(next_offset)):
            return None
        return self.start_pull(mq, int(next_offset), self.config.pull_batch_size, self._pull_commit_offset(mq, pq))

    def _pull_ahead_after(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int,
                          size_limit: int) -> StartedPull | None:
        """After a pull answered the ordinary way: the next one sent at once, so the loop's following turn
        takes the pull-ahead path."""
        if self._flow_controlled(pq, size_limit):
            return None
        return self.start_pull(mq, next_offset, self.config.pull_batch_size, self._pull_commit_offset(mq, pq))

    # == consuming ===================================================================================
    def _dispatch(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        loop = asyncio.get_running_loop()
        if self.orderly:
            # A task that has returned (found the queue empty) may not have run its done callback yet: it
            # counts as gone, or the messages just put would wait for a dispatch that never comes.
            task = self._orderly_tasks.get(pq)
            if task is None or task.done():
                task = loop.create_task(self._consume_orderly(mq, pq))
                self._orderly_tasks[pq] = task
                task.add_done_callback(functools.partial(self._orderly_task_done, mq, pq))
            return
        n = max(1, self.config.consume_message_batch_max_size)
        for i in range(0, len(msgs), n):
            task = loop.create_task(self._consume_concurrently(mq, pq, msgs[i:i + n]))
            self._consume_tasks.add(task)
            task.add_done_callback(self._consume_tasks.discard)

    def _orderly_task_done(self, mq: MessageQueue, pq: ProcessQueue, task: asyncio.Task[None]) -> None:
        if self._orderly_tasks.get(pq) is task:  # not a newer task of the same queue
            del self._orderly_tasks[pq]
        if task.cancelled() or task.exception() is None:
            return
        # Nothing may strand the queue: what was taken goes back, and consuming starts again in a moment.
        log.error("consuming %s in order failed; its messages will be consumed again", mq, exc_info=task.exception())
        pq.rollback()
        asyncio.get_running_loop().call_later(self.config.suspend_current_queue_time_millis / 1000,
                                              self._dispatch_later, mq, pq, [])

    async def _call_listener(self, msgs: list[MessageExt]) -> Any:
        fn = self._listener
        assert fn is not None
        if self.otel is not None:
            return await self._call_listener_in_span(fn, msgs)
        if self._listener_async:
            return await fn(msgs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, msgs)

    async def _call_listener_in_span(self, fn: Listener, msgs: list[MessageExt]) -> Any:
        otel = self.otel
        assert otel is not None
        span = otel.start_process(msgs)
        try:
            if self._listener_async:
                status = await otel.await_in_span(span, fn, msgs)
            else:
                status = await asyncio.get_running_loop().run_in_executor(self._executor, otel.in_span(span, fn),
                                                                          msgs)
        except BaseException as exc:
            otel.end_process(span, False, exc, "EXCEPTION")
            raise
        ok = status is None or status is ConsumeStatus.CONSUME_SUCCESS or status is ConsumeOrderlyStatus.SUCCESS
        otel.end_process(span, ok, None, "RETURNNULL" if status is None else getattr(status, "name", str(status)))
        return status

    def _trace_before(self, msgs: list[MessageExt]) -> TraceContext | None:
        if self.trace is None:
            return None
        ctx = sub_before_context(self.group, msgs)
        if ctx is not None:
            self.trace.append(ctx)
        return ctx

    def _trace_after(self, before: TraceContext, msgs: list[MessageExt], status: object, raised: bool,
                     began: float, *ok: object) -> None:
        """The SubAfter record of a listener call (how it ended named as RocketMQ's ConsumeReturnType)."""
        assert self.trace is not None
        if raised:
            how = ConsumeReturnType.EXCEPTION
        elif status is None:
            how = ConsumeReturnType.RETURNNULL
        elif (time.monotonic() - began) * 1000 >= self.config.consume_timeout_millis:
            how = ConsumeReturnType.TIME_OUT
        elif status in ok:
            how = ConsumeReturnType.SUCCESS
        else:
            how = ConsumeReturnType.FAILED
        success = not raised and (status is None or status in ok)
        self.trace.append(sub_after_context(before, len(msgs), success, how))

    async def consume_message_directly(self, msg: MessageExt) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY (the dashboard's "resend to this consumer", ``mqadmin queryMsgById -d``): the
        listener called on ``msg`` outside the queues, nothing committed or sent back; RocketMQ's
        ConsumeMessageDirectlyResult."""
        t0 = time.monotonic()
        msg.topic = unwrap(msg.topic, self.namespace)
        try:
            status = await self._call_listener([msg])
        except Exception as exc:
            result, remark = "CR_THROW_EXCEPTION", f"{type(exc).__name__}: {exc}"
        else:
            result = _DIRECT_RESULTS.get(status, "CR_RETURN_NULL")  # (None: a success, as in the queues)
            remark = ""
        return {"order": self.orderly, "autoCommit": True, "consumeResult": result, "remark": remark,
                "spentTimeMills": int((time.monotonic() - t0) * 1000)}

    async def _consume_concurrently(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """One listener call and what follows from its answer. Whatever goes wrong after the call, the messages
        are neither lost nor stranded in the process queue: they are consumed again later."""
        try:
            await self._consume_concurrently_once(mq, pq, msgs)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("consuming %d message(s) of %s failed; they will be consumed again", len(msgs), mq)
            asyncio.get_running_loop().call_later(CONSUME_LATER_DELAY, self._dispatch_later, mq, pq, msgs)

    async def _consume_concurrently_once(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        assert self._consume_sem is not None
        async with self._consume_sem:
            if pq.dropped or not self.started:  # (stopping: only the calls already under way finish)
                return
            key = next(self._inflight_ids)
            began = time.monotonic()
            self._inflight[key] = (mq, pq, msgs, began)  # (consume_timeout_millis: _clean_expired)
            before = self._trace_before(msgs)
            raised = False
            try:
                status = await self._call_listener(msgs)
            except Exception:
                log.exception("listener of group %s failed on %d message(s) of %s", self.group, len(msgs), mq)
                status, raised = ConsumeStatus.RECONSUME_LATER, True
            finally:
                self._inflight.pop(key, None)
        if before is not None:
            self._trace_after(before, msgs, status, raised, began, ConsumeStatus.CONSUME_SUCCESS)
        if status is None:
            status = ConsumeStatus.CONSUME_SUCCESS
        elif status is not ConsumeStatus.CONSUME_SUCCESS and status is not ConsumeStatus.RECONSUME_LATER:
            log.error("listener of group %s returned %r, not a ConsumeStatus: its %d message(s) of %s will be "
                      "consumed again (RECONSUME_LATER)", self.group, status, len(msgs), mq)
            status = ConsumeStatus.RECONSUME_LATER
        done = msgs
        if status is ConsumeStatus.RECONSUME_LATER:
            if self.clustering:
                failed = [m for m in msgs if not await self._send_back(mq, m, 0)]
                if failed:
                    failed_ids = {id(m) for m in failed}
                    done = [m for m in msgs if id(m) not in failed_ids]
                    for m in failed:
                        m.reconsume_times += 1
                    asyncio.get_running_loop().call_later(CONSUME_LATER_DELAY, self._dispatch_later, mq, pq, failed)
            else:
                log.warning("broadcasting group %s dropped %d message(s) of %s its listener failed on", self.group,
                            len(msgs), mq)
        offset = pq.remove_messages(done)
        if offset >= 0 and not pq.dropped:
            self.offset_store.update_offset(mq, offset, increase_only=True)

    async def _clean_expired_loop(self) -> None:
        """Every so often, what listeners have held for longer than ``consume_timeout_millis`` goes back."""
        timeout = self.config.consume_timeout_millis / 1000
        while True:
            await asyncio.sleep(min(max(timeout / 4, 0.05), 60.0))
            now = time.monotonic()
            for key, (mq, pq, msgs, began) in list(self._inflight.items()):
                if now - began <= timeout:
                    continue
                try:
                    if await self._clean_expired(mq, pq, msgs, timeout):
                        self._inflight.pop(key, None)
                except Exception:  # one call's failure must not stop the others' cleaning
                    log.exception("cleaning the expired messages of %s failed", mq)

    async def _clean_expired(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt],
                             timeout: float) -> bool:
        """``msgs``, whose listener call has run for longer than ``timeout`` (RocketMQ's cleanExpiredMsg): sent
        back with delay level 3 (a clustering group: redelivered later, to this or another member) and taken off
        the queue's cache, so that its offset moves on; a broadcasting consumer drops them, as it drops those its
        listener fails on. False when one could not be sent back (tried again at the next round)."""
        for msg in msgs:
            if pq.dropped:
                return True
            if not pq.contains_message(msg):
                continue
            if self.clustering and not await self._send_back(mq, msg, CONSUME_TIMEOUT_DELAY_LEVEL):
                return False
            log.warning("the listener of group %s has held message %s of %s for over %.0f ms: %s", self.group,
                        msg.msg_id, mq, timeout * 1000,
                        "sent back for a later retry" if self.clustering else "dropped (broadcasting)")
            offset = pq.remove_messages([msg])
            if offset >= 0 and not pq.dropped:
                self.offset_store.update_offset(mq, offset, increase_only=True)
        return True

    def _dispatch_later(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if not pq.dropped and self.started:
            self._dispatch(mq, pq, msgs)

    async def _send_back(self, mq: MessageQueue, msg: MessageExt, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK: the broker stores a delayed copy in the group's retry topic."""
        try:
            # The master (a slave takes no writes), else the broker that stored it (RocketMQ likewise).
            addr = self.client.find_publish_addr(mq.broker_name) or msg.store_host
            await self.client.api.consumer_send_message_back(
                addr, self.group, msg.commit_log_offset, delay_level, msg.msg_id, wrap(self.namespace, msg.topic),
                self.config.max_reconsume_times)
            return True
        except (ClientError, RemotingError) as exc:
            log.warning("cannot send message %s back for a later retry: %s", msg.msg_id, exc)
            return False

    async def _consume_orderly(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        cfg = self.config
        while not pq.dropped and self.started:
            if self.clustering and (not pq.locked or pq.is_lock_expired()):
                await asyncio.sleep(0.1)  # the pull loop re-locks the queue
                continue
            msgs = pq.take_messages(max(1, cfg.consume_message_batch_max_size))
            if not msgs:
                return
            # No consume timeout here, as in RocketMQ: an orderly queue's messages wait for its listener.
            began, before, raised = time.monotonic(), self._trace_before(msgs), False
            try:
                status = await self._call_listener(msgs)
            except Exception:
                log.exception("orderly listener of group %s failed on %s", self.group, mq)
                status, raised = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT, True
            if before is not None:
                self._trace_after(before, msgs, status, raised, began, ConsumeOrderlyStatus.SUCCESS,
                                  ConsumeStatus.CONSUME_SUCCESS)
            if status is None or status is ConsumeOrderlyStatus.SUCCESS or status is ConsumeStatus.CONSUME_SUCCESS:
                offset = pq.commit()
            else:
                if not isinstance(status, ConsumeOrderlyStatus | ConsumeStatus):
                    log.error("orderly listener of group %s returned %r, not a ConsumeOrderlyStatus: its %d "
                              "message(s) of %s will be consumed again (SUSPEND_CURRENT_QUEUE_A_MOMENT)",
                              self.group, status, len(msgs), mq)
                exhausted = [m for m in msgs if m.reconsume_times >= cfg.max_reconsume_times]
                if exhausted and self.clustering and all([await self._send_back(mq, m, -1) for m in exhausted]):
                    exhausted_ids = {id(m) for m in exhausted}
                    pq.make_message_to_consume_again([m for m in msgs if id(m) not in exhausted_ids])
                    if len(exhausted) == len(msgs):
                        offset = pq.commit()
                    else:
                        offset = -1
                else:
                    for m in msgs:
                        m.reconsume_times += 1
                    pq.make_message_to_consume_again(msgs)
                    offset = -1
                if offset < 0:
                    await asyncio.sleep(cfg.suspend_current_queue_time_millis / 1000)
            if offset >= 0 and not pq.dropped:
                self.offset_store.update_offset(mq, offset)

    # == queue locks (orderly, clustering) ===========================================================
    async def _lock_one(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        try:
            addr = await self.broker_addr(mq)
            locked = await self.client.api.lock_batch_mq(addr, self.group, self.client.client_id, [mq])
        except (ClientError, RemotingError) as exc:
            log.info("cannot lock %s: %s", mq, exc)
            return False
        if mq in locked:
            pq.locked = True
            pq.last_lock_timestamp = time.monotonic()
            return True
        return False

    async def _renew_locks_loop(self) -> None:
        while self.started:  # not ``while True``: see MQClientInstance._every
            await asyncio.sleep(self.config.rebalance_lock_interval / 1000)
            by_broker: dict[str, list[MessageQueue]] = {}
            for mq, pq in self.process_queues.items():
                if pq.locked:
                    by_broker.setdefault(mq.broker_name, []).append(mq)
            for mqs in by_broker.values():
                try:
                    locked = set(await self.client.api.lock_batch_mq(await self.broker_addr(mqs[0]), self.group,
                                                                     self.client.client_id, mqs))
                except (ClientError, RemotingError) as exc:
                    log.info("lock renewal failed: %s", exc)
                    continue
                now = time.monotonic()
                for mq in mqs:
                    held = self.process_queues.get(mq)
                    if held is not None:
                        held.locked = mq in locked
                        if held.locked:
                            held.last_lock_timestamp = now

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for group_mqs in by_broker.values():
            try:
                await self.client.api.unlock_batch_mq(await self.broker_addr(group_mqs[0]), self.group,
                                                      self.client.client_id, group_mqs)
            except (ClientError, RemotingError) as exc:
                log.info("unlock failed: %s", exc)
