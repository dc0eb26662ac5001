"""The store's writer thread: RocketMQ's send thread pool, its bounded queue and BrokerFastFailure.

An event loop never writes the store itself: appending copies records into mapped pages, and a page the kernel is
writing back (an fsync in progress, a slow or failing disk) makes the writer wait in the kernel until the disk is
done with it. The loop hands its writes here as jobs, run one at a time in the order they came, and hears the
outcome through ``loop.call_soon_threadsafe``: heartbeats, pulls of stored messages, queries and admin requests
keep being answered while the disk crawls.

A job made for a client's request (``expirable``) may be turned down instead of run (``Job.refuse``), without
anything being stored: when it waited in the queue longer than ``wait_time_ms_in_send_queue`` (SYSTEM_BUSY
[TIMEOUT_CLEAN_QUEUE]), when the queue is full ([OVERLOAD]), or when the job running has been at it longer than
``os_page_cache_busy_timeout_ms`` ([PC_SYNCHRONIZED] for a new request, [PCBUSY_CLEAN_QUEUE] for those queued):
back-pressure that the client answers by sending elsewhere. The broker's own writes (delayed and timer messages
coming due, the POP revive service's records, transaction decisions, a slave's copy of its master's log) are never
turned down; what a client's request writes (sends, and the checkpoints and acks of POP requests) may be.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

PC_SYNCHRONIZED = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
# Jobs queued behind one another that run as one (``Job.merges_with``), at most.
MERGE_MAX_JOBS = 16
SWITCH_INTERVAL_S = 0.001  # the interpreter's, for the process that runs a store (see PutService.start)
OVERLOAD = "[OVERLOAD]system busy, start flow control for a while"


class Job(abc.ABC):
    """One write for the store thread."""

    __slots__ = ("created",)
    expirable = False  # a client's request, which back-pressure may turn down instead of running it

    def __init__(self) -> None:
        self.created = time.monotonic()

    @abc.abstractmethod
    def run(self) -> None:
        """On the store thread: do the work and hand the outcome to whoever waits for it."""

    def merges_with(self, other: Job) -> bool:
        """Whether ``other``, queued right behind this job, may run together with it (``run_together``)."""
        return False

    def run_together(self, jobs: list[Job]) -> None:
        """On the store thread: this job and the ones behind it that ``merges_with`` let in, in order (a store
        thread that falls behind catches up in fewer, larger writes)."""
        for job in jobs:
            job.run()

    def refuse(self, remark: str) -> None:  # noqa: B027 - only expirable jobs are refused
        """From any thread: the job will not run; answer SYSTEM_BUSY with ``remark`` (expirable jobs only)."""

    def overdue(self, remark: str) -> None:  # noqa: B027 - only expirable jobs are answered late
        """On the submitter's loop: the job has run for so long that its sender must hear something now (it may
        still be stored); answer SYSTEM_BUSY with ``remark``, and nothing more later."""


class BackPressure:
    """What the broker is pushing back with now, for the runtime info and the CLI: the cause of the episode under
    way ("" when none) and counts since the start. One log line per episode, not per request."""

    __slots__ = ("cause", "since", "refused", "episodes", "quiet_s", "_lock", "_last_refusal")

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s  # an episode ends once nothing was refused for this long
        self.cause = ""
        self.since = 0.0
        self.refused = 0
        self.episodes = 0
        self._lock = threading.Lock()
        self._last_refusal = 0.0

    def note(self, cause: str, detail: str, count: int = 1) -> None:
        now = time.monotonic()
        with self._lock:
            self.refused += count
            self._last_refusal = now
            if self.cause:
                return
            self.cause, self.since = cause, now
            self.episodes += 1
        log.warning("back-pressure: %s (%s); clients are answered SYSTEM_BUSY until it eases", cause, detail)

    def ease(self) -> None:
        """End the episode if nothing was refused for ``quiet_s`` seconds."""
        with self._lock:
            if not self.cause or time.monotonic() - self._last_refusal < self.quiet_s:
                return
            cause, lasted, self.cause = self.cause, time.monotonic() - self.since, ""
        log.warning("back-pressure over (%s), after %.1f s", cause, lasted)

    def describe(self) -> str:
        """The cause of the episode under way, or "none"."""
        self.ease()
        return self.cause or "none"


class PutService:
    """The store thread and its queue: ``start()``, ``submit(job)``, ``stop()``."""

    def __init__(self, capacity: int, wait_in_queue_ms: int, busy_timeout_ms: int, fast_failure: bool,
                 answer_within_ms: int) -> None:
        self.capacity = capacity
        # A client's write still running this long after it came is answered at once (``Job.overdue``): the
        # sender hears from the broker before its own time-out.
        self.answer_within = answer_within_ms / 1000
        self.wait_in_queue = wait_in_queue_ms / 1000
        self.busy_timeout = busy_timeout_ms / 1000
        self.fast_failure = fast_failure
        self.back_pressure = BackPressure(2 * self.busy_timeout)
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._ident = 0
        # When the jobs running now began (monotonic; 0.0: none runs), and those jobs.
        self.running_since = 0.0
        self.running_jobs: list[Job] = []
        self._cleaner: asyncio.TimerHandle | None = None

    # == lifecycle ===================================================================================
    def start(self) -> None:
        # The store thread gives the GIL up at each system call and needs it back to go on; while the event loop
        # runs Python it gets it only when the interpreter's switch interval forces a switch (5 ms by default), a
        # wait every write job pays (docs/benchmarks.md, "The store thread").
        if sys.getswitchinterval() > SWITCH_INTERVAL_S:
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._thread = threading.Thread(target=self._loop, name="sluice-store-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Run what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    @property
    def on_thread(self) -> bool:
        return threading.get_ident() == self._ident

    # == submitting ==================================================================================
    def busy(self) -> float:
        """How long the job running now has run, when that is past ``os_page_cache_busy_timeout_ms`` (RocketMQ's
        isOSPageCacheBusy: the disk keeps the writer waiting); 0.0 otherwise."""
        since = self.running_since
        if not since:
            return 0.0
        running = time.monotonic() - since
        return running if running > self.busy_timeout else 0.0

    def admit(self) -> str:
        """Why a client's new write is turned down now ("" when it is taken)."""
        if not self.fast_failure:
            return ""
        running = self.busy()
        if running:
            self.back_pressure.note("PC_SYNCHRONIZED", f"a store write has been running for {running:.1f} s")
            return PC_SYNCHRONIZED
        return ""

    def submit(self, job: Job, loop: asyncio.AbstractEventLoop | None = None) -> bool:
        """Queue ``job``; False when the queue is full (an expirable job is not queued then). ``loop``: the
        submitter's event loop, which turns down queued requests that wait too long while the thread is stuck."""
        with self._cond:
            if self._stopping:
                return False
            if job.expirable and len(self._jobs) >= self.capacity:
                queued = len(self._jobs)
            else:
                self._jobs.append(job)
                if len(self._jobs) == 1:
                    self._cond.notify()
                queued = -1
        if queued >= 0:
            self.back_pressure.note("OVERLOAD", f"{queued} writes queued")
            return False
        if loop is not None and job.expirable and self.fast_failure and self._cleaner is None:
            self._cleaner = loop.call_later(self.wait_in_queue, self._clean, loop)
        return True

    def _clean(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop, every ``wait_time_ms_in_send_queue`` while requests are queued or one runs (RocketMQ's
        BrokerFastFailure): while a write is stuck, turn down every request queued; otherwise those that waited
        too long; and answer the request running if it came ``answer_within`` ago."""
        self._cleaner = None
        now = time.monotonic()
        stuck = self.busy()
        for job in self.running_jobs:
            if job.expirable and now - job.created >= self.answer_within:
                self.back_pressure.note("PC_SYNCHRONIZED", f"a store write has been running for {stuck:.1f} s")
                job.overdue(f"{PC_SYNCHRONIZED}: the disk has kept this write waiting "
                            f"{int((now - job.created) * 1000)}ms; it may be stored all the same")
        with self._cond:
            jobs = self._jobs
            if stuck:
                gone = [j for j in jobs if j.expirable]
            else:
                gone = [j for j in jobs if j.expirable and now - j.created >= self.wait_in_queue]
            if gone:
                gone_ids = {id(j) for j in gone}
                self._jobs = deque(j for j in jobs if id(j) not in gone_ids)
            left = len(self._jobs)
            pending = any(j.expirable for j in self._jobs) or any(j.expirable for j in self.running_jobs)
        if gone:
            cause = "PCBUSY_CLEAN_QUEUE" if stuck else "TIMEOUT_CLEAN_QUEUE"
            self.back_pressure.note(cause, f"{len(gone)} requests turned down, {left} still queued", len(gone))
            for j in gone:
                waited = int((now - j.created) * 1000)
                j.refuse(f"[{cause}]broker busy, start flow control for a while, period in queue: {waited}ms, "
                         f"size of queue: {left}")
        else:
            self.back_pressure.ease()
        if pending:
            self._cleaner = loop.call_later(self.wait_in_queue / 4, self._clean, loop)

    # == the thread ==================================================================================
    def _loop(self) -> None:
        self._ident = threading.get_ident()
        while True:
            with self._cond:
                while not self._jobs and not self._stopping:
                    self._cond.wait()
                if not self._jobs:
                    return
                first = self._jobs.popleft()
                batch = [first]
                while self._jobs and len(batch) < MERGE_MAX_JOBS and first.merges_with(self._jobs[0]):
                    batch.append(self._jobs.popleft())
                left = len(self._jobs)
            now = time.monotonic()
            ready: list[Job] = []
            for job in batch:
                waited = now - job.created
                if job.expirable and self.fast_failure and waited >= self.wait_in_queue:
                    self.back_pressure.note("TIMEOUT_CLEAN_QUEUE", f"a request waited {waited * 1000:.0f} ms")
                    job.refuse(f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in "
                               f"queue: {int(waited * 1000)}ms, size of queue: {left}")
                else:
                    ready.append(job)
            if not ready:
                continue
            self.running_jobs = ready
            self.running_since = now
            try:
                ready[0].run_together(ready)
            except Exception:  # the jobs answer their own failures; this is a bug, and the thread must live on
                log.exception("a store write failed")
            finally:
                self.running_since = 0.0
                self.running_jobs = []

    def queued(self) -> int:
        return len(self._jobs)

    def head_wait_ms(self) -> int:
        """How long the oldest queued job has waited."""
        with self._cond:
            head = self._jobs[0] if self._jobs else None
        return int((time.monotonic() - head.created) * 1000) if head is not None else 0


class CallJob(Job):
    """A function to run on the store thread, its outcome (or exception) set on an asyncio future."""

    __slots__ = ("fn", "future", "loop")

    def __init__(self, fn: Callable[[], object], loop: asyncio.AbstractEventLoop,
                 future: asyncio.Future[object]) -> None:
        super().__init__()
        self.fn = fn
        self.loop = loop
        self.future = future

    def run(self) -> None:
        try:
            result = self.fn()
        except BaseException as exc:  # handed to the awaiting task
            self._deliver(None, exc)
            return
        self._deliver(result, None)

    def _deliver(self, result: object, exc: BaseException | None) -> None:
        def settle() -> None:
            if self.future.done():
                return
            if exc is not None:
                self.future.set_exception(exc)
            else:
                self.future.set_result(result)

        try:
            self.loop.call_soon_threadsafe(settle)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more


__all__ = ["OVERLOAD", "PC_SYNCHRONIZED", "BackPressure", "CallJob", "Job", "PutService"]
