"""``sluice bench produce | consume | e2e``: throughput and latency through a real broker (RocketMQ's benchmark
scripts, in spirit). A progress line every few seconds on stderr; results as text or one JSON line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sluice.bench.pacer import pace
from sluice.client.aio import Producer, PushConsumer, SimpleConsumer
from sluice.client.message import ConsumeStatus, Message, SendResult
from sluice.common.message import MessageExt
from sluice.common.runtime import tune_gc_for_throughput

PROGRESS_EVERY = 5.0


@dataclass(slots=True)
class BenchOptions:
    namesrv: str = "127.0.0.1:9876"
    topic: str = "BenchmarkTest"
    group: str = "benchmark_consumer"
    size: int = 128
    count: int | None = None
    duration: float | None = None
    concurrency: int = 64
    batch: int = 1
    mode: str = "sync"
    rate: float = 5_000
    listen: bool = False  # pop: SimpleConsumer.listen, ``concurrency`` messages in flight
    json: bool = False
    progress_every: float = PROGRESS_EVERY
    extra: dict[str, Any] = field(default_factory=dict)


def percentiles_ms(samples_s: list[float] | np.ndarray) -> dict[str, float]:
    """p50 / p99 / p99.9 / max of latencies given in seconds, in milliseconds."""
    a = np.asarray(samples_s, dtype=np.float64) * 1000
    if a.size == 0:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "p999_ms": 0.0, "max_ms": 0.0}
    p50, p99, p999 = np.percentile(a, [50, 99, 99.9])
    return {"p50_ms": round(float(p50), 3), "p99_ms": round(float(p99), 3), "p999_ms": round(float(p999), 3),
            "max_ms": round(float(a.max()), 3)}


class Progress:
    """Prints ``label: N msgs, X msgs/s (last interval)`` every few seconds on stderr."""

    def __init__(self, label: str, every: float) -> None:
        self.label = label
        self.every = every
        self.count = 0
        self._last_n = 0
        self._last_t = time.perf_counter()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.every > 0:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            now = time.perf_counter()
            rate = (self.count - self._last_n) / (now - self._last_t)
            print(f"{self.label}: {self.count} msgs, {rate:,.0f} msgs/s", file=sys.stderr, flush=True)
            self._last_n, self._last_t = self.count, now

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


CONSUME_IDLE_END = 5.0  # seconds without a message after which a consume run has drained its backlog


def _done(opts: BenchOptions, n: int, t0: float) -> bool:
    if opts.count is not None:
        return n >= opts.count
    return time.perf_counter() - t0 >= (opts.duration or 10.0)


# == produce ========================================================================================
async def bench_produce(opts: BenchOptions) -> dict[str, Any]:
    body = os.urandom(opts.size // 2 + 1).hex()[: opts.size].encode()
    rts: list[float] = []
    failures = 0
    sent = 0
    progress = Progress("produce", opts.progress_every)
    async with Producer("benchmark_producer", namesrv=opts.namesrv, **opts.extra) as producer:
        await producer.send(Message(opts.topic, body))  # creates the topic, warms the route
        t0 = time.perf_counter()
        progress.start()

        def one_send() -> Awaitable[Any]:
            if opts.batch > 1:
                return producer.send_batch([Message(opts.topic, body) for _ in range(opts.batch)])
            if opts.mode == "oneway":
                return producer.send_oneway(Message(opts.topic, body))
            if opts.mode == "async":
                return producer.send_async(Message(opts.topic, body))
            return producer.send(Message(opts.topic, body))

        async def worker() -> None:
            """sync / oneway: each of ``concurrency`` senders awaits its send before the next."""
            nonlocal sent, failures
            while not _done(opts, sent, t0):
                sent += opts.batch
                start = time.perf_counter()
                try:
                    await one_send()
                except Exception:
                    failures += opts.batch
                    continue
                rts.append(time.perf_counter() - start)
                progress.count += opts.batch

        async def pump() -> None:
            """async: one loop starts sends without awaiting them (callbacks count the results), keeping at
            most ``concurrency`` requests in flight, as RocketMQ's benchmark bounds its async sends."""
            nonlocal sent, failures
            window = asyncio.Semaphore(opts.concurrency)
            loop = asyncio.get_running_loop()
            pending: set[asyncio.Future[Any]] = set()

            def done(fut: asyncio.Future[Any], start: float) -> None:
                nonlocal failures
                window.release()
                pending.discard(fut)
                if fut.cancelled() or fut.exception() is not None:
                    failures += opts.batch
                    return
                rts.append(time.perf_counter() - start)
                progress.count += opts.batch

            while not _done(opts, sent, t0):
                await window.acquire()
                sent += opts.batch
                start = time.perf_counter()
                fut = asyncio.ensure_future(one_send(), loop=loop)
                pending.add(fut)
                fut.add_done_callback(functools.partial(done, start=start))
            if pending:
                await asyncio.wait(pending)

        if opts.mode == "async":
            await pump()
        else:
            await asyncio.gather(*(worker() for _ in range(opts.concurrency)))
        elapsed = time.perf_counter() - t0
        progress.stop()
    ok = sent - failures
    return {"bench": "produce", "mode": opts.mode, "size": opts.size, "batch": opts.batch,
            "concurrency": opts.concurrency, "messages": ok, "failures": failures, "seconds": round(elapsed, 3),
            "tps": round(ok / elapsed, 1), "mb_per_s": round(ok * opts.size / elapsed / 1e6, 2),
            "send_rt": percentiles_ms(rts)}


# == consume ========================================================================================
async def bench_consume(opts: BenchOptions) -> dict[str, Any]:
    """Read the topic from its first offset: until ``count`` messages, ``duration`` seconds after the first one,
    or the backlog is drained (no message for ``CONSUME_IDLE_END`` s; longer than any pause of a
    healthy consumer, and not counted: the rate runs to the last message). The rate runs from the first message to
    the last."""
    # Delivery latency = callback time - store timestamp, per message: the callback keeps the store
    # timestamps and its own time per batch, and the differences are taken once, at the end.
    stored_ms: list[int] = []
    called_ms: list[tuple[float, int]] = []  # (callback time, messages in that callback)
    got = 0
    finished = asyncio.Event()
    progress = Progress("consume", opts.progress_every)
    t0 = t_last = 0.0
    consumer = PushConsumer(opts.group, namesrv=opts.namesrv, consume_from="first",
                            consume_message_batch_max_size=32, **opts.extra)
    consumer.subscribe(opts.topic)

    @consumer.listener
    async def on_messages(msgs: list[MessageExt]) -> ConsumeStatus:
        nonlocal got, t0, t_last
        t_last = time.perf_counter()
        if not t0:
            t0 = t_last
        called_ms.append((time.time() * 1000, len(msgs)))
        stored_ms.extend([m.store_timestamp for m in msgs])
        got += len(msgs)
        progress.count = got
        if _done(opts, got, t0):
            finished.set()
        return ConsumeStatus.CONSUME_SUCCESS

    await consumer.start()
    progress.start()
    started = time.perf_counter()
    first_wait = (opts.duration or 10.0) + 30
    try:
        while not finished.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), 0.1)
            now = time.perf_counter()
            if not t0 and now - started > first_wait:
                raise TimeoutError(f"no message of topic {opts.topic!r} arrived within {first_wait:.0f} s "
                                   f"(group {opts.group!r} may have read it all before)")
            if t0 and (now - t_last > CONSUME_IDLE_END or opts.count is None and _done(opts, got, t0)):
                break
    finally:
        elapsed = t_last - t0 if t0 else 0.0
        progress.stop()
        await consumer.shutdown()
    calls = np.array(called_ms, dtype=np.float64).reshape(-1, 2)
    called_each = np.repeat(calls[:, 0], calls[:, 1].astype(np.int64))
    lat = (called_each - np.array(stored_ms, dtype=np.float64)) / 1000
    return {"bench": "consume", "messages": got, "seconds": round(elapsed, 3),
            "tps": round(got / elapsed, 1) if elapsed else 0.0, "delivery_latency": percentiles_ms(lat)}


async def bench_pop(opts: BenchOptions) -> dict[str, Any]:
    """Pop the topic from its first offset with a SimpleConsumer, ``batch`` (at most 32) messages a receive,
    ``concurrency`` receivers, every message acknowledged (one BATCH_ACK_MESSAGE a receive); the rate runs from
    the first message to the last ack, until ``count``, ``duration`` or a drained backlog as ``consume``. With
    ``listen``: ``SimpleConsumer.listen`` with ``concurrency`` messages in flight, the rate up to the last message
    handed to the listener."""
    got = 0
    progress = Progress("pop", opts.progress_every)
    t0 = t_last = 0.0
    consumer = SimpleConsumer(opts.group, namesrv=opts.namesrv, consume_from_first=True, await_duration=1.0,
                              credentials=opts.extra.get("credentials"),
                              **opts.extra)
    consumer.subscribe(opts.topic)
    batch = max(1, min(opts.batch if opts.batch > 1 else 32, 32))
    stop = asyncio.Event()

    async def receiver() -> None:
        nonlocal got, t0, t_last
        idle_since = time.perf_counter()
        while not stop.is_set():
            msgs = await consumer.receive(batch, 60.0, wait=1.0)
            now = time.perf_counter()
            if not msgs:
                if t0 and now - idle_since > CONSUME_IDLE_END:
                    stop.set()
                continue
            if not t0:
                t0 = now
            await consumer.ack_many(msgs)
            t_last = idle_since = time.perf_counter()
            got += len(msgs)
            progress.count = got
            if _done(opts, got, t0):
                stop.set()

    def on_message(_m: MessageExt) -> None:
        nonlocal got, t0, t_last
        t_last = time.perf_counter()
        if not t0:
            t0 = t_last
        got += 1
        progress.count = got
        if _done(opts, got, t0):
            stop.set()

    async def idle_end() -> None:  # (listen mode: the backlog is drained once nothing came for a while)
        while not stop.is_set():
            await asyncio.sleep(0.5)
            if t0 and time.perf_counter() - t_last > CONSUME_IDLE_END:
                stop.set()

    await consumer.start()
    progress.start()
    try:
        if opts.listen:  # acks by the listen loop (batched when listener calls end together)
            watch = asyncio.ensure_future(idle_end())
            try:
                await asyncio.wait_for(consumer.listen(on_message, max_in_flight=max(1, opts.concurrency), stop=stop),
                                       (opts.duration or 600) + 60)
            finally:
                watch.cancel()
        else:
            await asyncio.wait_for(asyncio.gather(*(receiver() for _ in range(max(1, min(opts.concurrency, 16))))),
                                   (opts.duration or 600) + 60)
    finally:
        progress.stop()
        await consumer.shutdown()
    elapsed = t_last - t0 if t0 else 0.0
    return {"bench": "pop", "messages": got, "seconds": round(elapsed, 3), "batch": batch, "listen": opts.listen,
            "tps": round(got / elapsed, 1) if elapsed else 0.0}


# == end to end =====================================================================================
async def bench_e2e(opts: BenchOptions) -> dict[str, Any]:
    """Produce at ``rate`` msgs/s for ``duration`` s while consuming; latency = born timestamp → listener."""
    body = b"x" * opts.size
    lat: list[float] = []
    duration = opts.duration or 10.0
    consumer = PushConsumer(opts.group, namesrv=opts.namesrv, consume_from="last", **opts.extra)
    consumer.subscribe(opts.topic)

    @consumer.listener
    async def on_messages(msgs: list[MessageExt]) -> ConsumeStatus:
        now = time.time()
        for m in msgs:
            sent_at = m.get_property("bench_sent")
            if sent_at is not None:  # not the warm-up message
                lat.append(now - float(sent_at))
        return ConsumeStatus.CONSUME_SUCCESS

    sent = 0
    async with Producer("benchmark_producer", namesrv=opts.namesrv,
                        credentials=opts.extra.get("credentials")) as producer:
        # Warm up every queue (the first message creates the topic; the rest make each queue's files) so the
        # run measures a steady state, not the creation of consume-queue files.
        await producer.send(Message(opts.topic, body))
        for mq in (await producer.publish_info(opts.topic)).queues:
            await producer.send(Message(opts.topic, body), queue=mq)
        await consumer.start()
        await asyncio.sleep(2.0)  # let the consumer get its queues
        tasks: set[asyncio.Future[SendResult]] = set()

        def send_one() -> None:
            task = producer.send_async(Message(opts.topic, body, properties={"bench_sent": repr(time.time())}))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        sent = await pace(send_one, opts.rate, duration)
        await asyncio.gather(*tasks, return_exceptions=True)
        deadline = time.perf_counter() + 10
        while len(lat) < sent and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
    await consumer.shutdown()
    return {"bench": "e2e", "rate": opts.rate, "seconds": duration, "sent": sent, "received": len(lat),
            "latency": percentiles_ms(lat)}


# == embedded cluster ===============================================================================
def _acl_config(directory: str) -> str:
    path = os.path.join(directory, "acl.toml")
    with open(path, "w") as f:
        f.write("[broker]\nauthentication_enabled = true\nauthorization_enabled = true\n"
                f"init_authentication_user = {{ username = '{ACL_ROOT[0]}', password = '{ACL_ROOT[1]}' }}\n")
    return path


@contextlib.contextmanager
def embedded_cluster(flush: str = "async", config: str | None = None) -> Iterator[str]:
    """A name server + broker child process (``sluice dev``) on free ports with a temporary store
    (``config``: a TOML file of settings, as ``sluice dev --config``)."""
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as store:
        extra = ["--config", config] if config else []
        proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", "dev", "--store", store, "--namesrv-port",
                                 "0", "--broker-port", "0", "--no-grpc", "--metrics-port", "0", "--no-dashboard",
                                 "--flush", flush, "--log-level", "warning", *extra],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            addr = None
            for line in proc.stdout:
                m = re.search(r"name server\s+(\S+)", line)
                if m:
                    addr = m.group(1)
                if "Ctrl-C" in line:
                    break
            if addr is None:
                raise RuntimeError("the embedded broker did not start")
            yield addr
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


BENCHES = {"produce": bench_produce, "consume": bench_consume, "pop": bench_pop, "e2e": bench_e2e}


ACL_ROOT = ("bench-root", "bench-root-secret")
ACL_USER = ("bench", "bench-secret")


async def _grant_bench_user(opts: BenchOptions) -> None:
    """A Normal user allowed the bench topic and any group: what a secured deployment's clients are."""
    from sluice.client.admin import Admin
    from sluice.client.auth_admin import policy_entry

    async with Admin(opts.namesrv, credentials=ACL_ROOT) as admin:
        await admin.create_user(*ACL_USER)
        await admin.create_acl(f"User:{ACL_USER[0]}", [policy_entry(f"Topic:{opts.topic}", "Pub,Sub"),
                                                       policy_entry("Group:*", "Sub")])


def run_bench(name: str, opts: BenchOptions, embedded: bool = False, flush: str = "async",
              acl: bool = False) -> dict[str, Any]:
    """``acl``: the embedded broker with authentication and authorization on, the clients signing as a Normal
    user with rules for the topic and its groups (the cost of ACL 2.0)."""
    import uvloop

    async def go() -> dict[str, Any]:
        tune_gc_for_throughput()
        if acl:
            await _grant_bench_user(opts)
            opts.extra["credentials"] = ACL_USER
        return await BENCHES[name](opts)

    if acl and not embedded:
        raise SystemExit("sluice: --acl benchmarks the --embedded broker only")
    if embedded:
        with tempfile.TemporaryDirectory(prefix="sluice-bench-acl-") as tmp, \
                embedded_cluster(flush, _acl_config(tmp) if acl else None) as addr:
            opts.namesrv = addr
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                result = runner.run(go())
            result["acl"] = acl
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            result = runner.run(go())
    if embedded:
        result["embedded_flush"] = flush
    print(json.dumps(result) if opts.json else format_result(result), flush=True)
    return result


def format_result(r: dict[str, Any]) -> str:
    lines = [f"{r['bench']}:"]
    for k, v in r.items():
        if k == "bench":
            continue
        if isinstance(v, dict):
            v = ", ".join(f"{kk} {vv}" for kk, vv in v.items())
        lines.append(f"  {k:<18} {v}")
    return "\n".join(lines)
