"""One remoting connection: a thin asyncio shell around the sans-IO codec.

Both ends of a connection are the same: either side may send requests (the broker sends
NOTIFY_CONSUMER_IDS_CHANGED to clients) and each side answers the other's. Requests are matched to
responses by ``opaque``. Every incoming request is handled at once, so a request that waits (a held pull)
never holds up the ones behind it.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import cast

from sluice.common.config import RemotingConfig
from sluice.remoting.codec import FrameDecoder, ProtocolError, encode_command
from sluice.remoting.codes import ONEWAY_FLAG, RESPONSE_FLAG, ResponseCode
from sluice.remoting.command import RemotingCommand, next_opaque
from sluice.remoting.deferred_response import DeferredResponse
from sluice.remoting.errors import BadRequestError, ConnectionClosedError, RemotingTimeoutError
from sluice.remoting.rpc_latency import RESULT_ONEWAY, RESULT_SUCCESS, RESULT_WRITE_CHANNEL_FAILED, RpcLatency

log = logging.getLogger(__name__)

HandlerResult = RemotingCommand | None | DeferredResponse | Awaitable[RemotingCommand | None]
RequestHandler = Callable[["Connection", RemotingCommand], HandlerResult]


def no_handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported")


# The longest a connection's backlog of read requests holds the event loop in one turn (s).
SERVE_SLICE = 0.002


class Connection(asyncio.Protocol):
    """A framed, multiplexed remoting connection."""

    def __init__(self, handler: RequestHandler = no_handler, config: RemotingConfig | None = None,
                 on_close: Callable[[Connection], None] | None = None, server_side: bool = False,
                 rpc_latency: RpcLatency | None = None) -> None:
        self.handler = handler
        self.rpc_latency = rpc_latency  # a server's answer times (metrics), None: not counted
        self.config = config or RemotingConfig()
        self.server_side = server_side
        self._on_close = on_close
        self._decoder = FrameDecoder(self.config.max_frame_size)
        self.transport: asyncio.Transport | None = None
        self.remote_addr = ""
        self.local_addr = ""
        self.closed = False
        self.last_active = time.monotonic()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        # RocketMQ's response table scan, without the 1 s granularity: each pending request's deadline, and
        # one timer for the earliest (a request costs a dict entry, not a timer of its own).
        self._deadlines: dict[int, tuple[float, int, float]] = {}  # opaque → (loop time, request code, timeout)
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_at = math.inf
        self._tasks: set[asyncio.Task[None]] = set()
        self._deferred: set[DeferredResponse] = set()  # handed out and not yet resolved
        self._write_paused = False
        self._read_paused_by: set[str] = set()
        self._backlog: collections.deque[RemotingCommand] = collections.deque()  # decoded, not yet served
        self._serving_later = False
        self._after_backlog: list[Callable[[], None]] = []  # run once the requests read so far are served
        self._bad: ProtocolError | None = None  # close once the frames before the bad bytes are served
        self._drained: asyncio.Event | None = None
        self._out: list[bytes | memoryview] = []  # frames written in this loop iteration, sent together (one syscall)
        self._out_frames = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.close_listeners: list[Callable[[Connection], None]] = []
        # Called with each request this side sends, last thing before it is encoded (a client's signature).
        self.request_hook: Callable[[RemotingCommand], None] | None = None

    # == asyncio.Protocol =============================================================================
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's TCPTransport does not subclass asyncio.Transport.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        self._loop = asyncio.get_running_loop()
        transport.set_write_buffer_limits(self.config.write_buffer_high, self.config.write_buffer_low)
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.remote_addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.local_addr = f"{sock[0]}:{sock[1]}" if sock else "?"

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            commands = self._decoder.feed(data)
        except ProtocolError as exc:
            self._bad, commands = exc, exc.decoded  # the frames that came whole before the bad bytes are served
        self._backlog.extend(commands)
        if not self._serving_later:
            self._serve_backlog()

    def _serve_backlog(self) -> None:
        """Serve what was read, a slice of at most ``SERVE_SLICE`` seconds per loop turn: one read can hold
        hundreds of requests, and every other connection waits while the loop serves them. Reading pauses until
        the backlog is served."""
        self._serving_later = False
        backlog = self._backlog
        ends = time.monotonic() + SERVE_SLICE
        try:
            while backlog:
                if self.closed:
                    backlog.clear()
                    return
                cmd = backlog.popleft()
                if cmd.flag & RESPONSE_FLAG:
                    fut = self._pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                else:
                    self._handle_request(cmd)
                # (checked after every request: one batch of a few hundred messages takes a millisecond or more)
                if backlog and time.monotonic() >= ends:
                    self._pause_reading("backlog")
                    self._serving_later = True
                    assert self._loop is not None
                    self._loop.call_soon(self._serve_backlog)
                    return
        finally:
            if self._after_backlog:
                self._run_after_backlog()
        self._resume_reading("backlog")
        if self._bad is not None:
            log.warning("closing connection %s %s: %s", "from" if self.server_side else "to", self.remote_addr,
                        self._bad)
            self.close()

    def after_backlog(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the requests read so far are served (or this turn's slice of them): how a handler
        deals with the requests of one read together (the send processor puts them in one append)."""
        self._after_backlog.append(fn)

    def _run_after_backlog(self) -> None:
        fns, self._after_backlog = self._after_backlog, []
        for fn in fns:
            try:
                fn()
            except Exception:  # one hook's failure must not keep the others (or the connection) from going on
                log.exception("after-backlog hook failed on %s", self.remote_addr)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        err = ConnectionClosedError(f"connection to {self.remote_addr} closed")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        self._deadlines.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for t in list(self._tasks):
            t.cancel()
        deferred, self._deferred = self._deferred, set()
        for d in deferred:
            d.cancel()
        if self._drained is not None:
            self._drained.set()
        if self._on_close is not None:
            self._on_close(self)
        for cb in self.close_listeners:
            try:
                cb(self)
            except Exception:  # a listener's failure must not stop the others
                log.exception("close listener failed")

    def pause_writing(self) -> None:
        self._write_paused = True
        if self.server_side:
            self._pause_reading("write")

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None:
            self._drained.set()
        self._resume_reading("write")

    # == requests from the peer =======================================================================
    def _handle_request(self, req: RemotingCommand) -> None:
        read_at = self.last_active  # when the read that brought it came (RocketMQ times from the decode)
        try:
            result = self.handler(self, req)
        except BadRequestError as exc:
            log.info("bad request code %s from %s: %s", req.code, self.remote_addr, exc)
            result = req.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception as exc:
            log.exception("request code %s from %s failed", req.code, self.remote_addr)
            result = req.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if type(result) is DeferredResponse:
            if self.closed:  # a handler run as the connection went away: nobody to answer
                result.cancel()
                return
            self._deferred.add(result)
            result.read_at = read_at
            result.bind(self, req)  # an answer the handler made already leaves here
            if self.inflight >= self.config.max_inflight_requests:
                self._pause_reading("inflight")
        elif inspect.isawaitable(result):
            task = asyncio.ensure_future(self._finish(req, result, read_at))
            self._tasks.add(task)
            task.add_done_callback(self._task_done)
            if self.inflight >= self.config.max_inflight_requests:
                self._pause_reading("inflight")
        else:
            self._reply(req, cast(RemotingCommand | None, result), read_at)

    def deferred_done(self, deferred: DeferredResponse, req: RemotingCommand, resp: RemotingCommand | None) -> None:
        """A ``DeferredResponse`` this connection bound has its answer: send it."""
        self._deferred.discard(deferred)
        if self.inflight <= self.config.max_inflight_requests // 2:
            self._resume_reading("inflight")
        self._reply(req, resp, deferred.read_at, True)

    async def _finish(self, req: RemotingCommand, pending: Awaitable[RemotingCommand | None],
                      read_at: float) -> None:
        try:
            resp = await pending
        except asyncio.CancelledError:
            raise
        except BadRequestError as exc:
            log.info("bad request code %s from %s: %s", req.code, self.remote_addr, exc)
            resp = req.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception as exc:
            log.exception("request code %s from %s failed", req.code, self.remote_addr)
            resp = req.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        self._reply(req, resp, read_at, True)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        # <=: a cap of 1 must resume at 0
        if self.inflight <= self.config.max_inflight_requests // 2:
            self._resume_reading("inflight")

    def _reply(self, req: RemotingCommand, resp: RemotingCommand | None, read_at: float,
               held: bool = False) -> None:
        if resp is None:
            return
        rpc_latency = self.rpc_latency
        if req.flag & ONEWAY_FLAG:
            if rpc_latency is not None:
                rpc_latency.record(req.code, resp.code, held, RESULT_ONEWAY, read_at)
            return
        resp.opaque = req.opaque
        resp.flag |= RESPONSE_FLAG
        resp.serialize_type = req.serialize_type  # answer in the request's type, as Java does
        written = self.write(resp)
        if rpc_latency is not None:
            rpc_latency.record(req.code, resp.code, held, RESULT_SUCCESS if written else RESULT_WRITE_CHANNEL_FAILED,
                               read_at)

    # == reading back-pressure ========================================================================
    def _pause_reading(self, why: str) -> None:
        if not self._read_paused_by and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self._read_paused_by.add(why)

    def _resume_reading(self, why: str) -> None:
        if why in self._read_paused_by:
            self._read_paused_by.discard(why)
            if not self._read_paused_by and self.transport is not None and not self.closed:
                self.transport.resume_reading()

    # == sending ======================================================================================
    def write(self, cmd: RemotingCommand) -> bool:
        """Queue ``cmd`` for sending; False when the connection is closed.

        Frames written during one event-loop iteration leave together at its end, in one write, up to
        ``write_coalesce_frames`` at a time: 64 answers to 64 requests that arrived in one read cost 8
        syscalls, not 64, and the peer works on the first answers while the broker makes the rest.
        """
        t = self.transport
        if self.closed or t is None or t.is_closing():
            return False
        out = self._out
        if not out:
            assert self._loop is not None
            self._loop.call_soon(self._flush_out)
        out.extend(encode_command(cmd))
        self._out_frames += 1
        if self._out_frames >= self.config.write_coalesce_frames:
            self._flush_out()
        return True

    def _flush_out(self) -> None:
        out, self._out = self._out, []
        self._out_frames = 0
        t = self.transport
        if not out or self.closed or t is None or t.is_closing():
            return
        t.write(out[0] if len(out) == 1 else b"".join(out))
        if t.get_write_buffer_size() > self.config.write_buffer_max:
            log.warning("closing connection to %s: it let %d bytes of unread replies pile up",
                        self.remote_addr, t.get_write_buffer_size())
            self.abort()  # close() would wait, forever, to flush to a peer that does not read

    async def drain(self) -> None:
        """Wait until the peer has read enough of what we wrote (client-side back-pressure)."""
        while self._write_paused and not self.closed:
            if self._drained is None or self._drained.is_set():
                self._drained = asyncio.Event()
            await self._drained.wait()

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``request`` and wait up to ``timeout`` seconds for its response."""
        if self._write_paused:
            await self.drain()
        if self.closed:
            raise ConnectionClosedError(f"connection to {self.remote_addr} is closed")
        return await self.response_of(request.opaque, self._send_request(request, timeout))

    def start_request(self, request: RemotingCommand, timeout: float) -> asyncio.Future[RemotingCommand] | None:
        """Send ``request`` now — not at the end of the loop turn, where ``write`` gathers frames — and return
        the future of its response, to be awaited with ``response_of`` or given up with ``abandon``. None when
        the connection cannot take a request without waiting (closed, or the peer is not reading)."""
        if self._write_paused or self.closed:
            return None
        fut = self._send_request(request, timeout)
        self._flush_out()
        return fut

    def _send_request(self, request: RemotingCommand, timeout: float) -> asyncio.Future[RemotingCommand]:
        if self.request_hook is not None:
            self.request_hook(request)  # (first: a hook that raises leaves nothing pending)
        if request.opaque in self._pending:
            request.opaque = next_opaque()
        loop = self._loop or asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        opaque = request.opaque
        self._pending[opaque] = fut
        deadline = loop.time() + timeout
        self._deadlines[opaque] = (deadline, request.code, timeout)
        if deadline < self._sweep_at:
            self._schedule_sweep(deadline)
        request.flag &= ~(RESPONSE_FLAG | ONEWAY_FLAG)
        self.write(request)
        return fut

    async def response_of(self, opaque: int, fut: asyncio.Future[RemotingCommand]) -> RemotingCommand:
        """The response to the request sent with ``opaque`` (its deadline fails it with a timeout)."""
        try:
            # A plain await, not wait_for: on Python 3.11 wait_for swallows a cancel that arrives together
            # with the response. The sweep fails the future at its deadline.
            return await fut
        finally:
            self._pending.pop(opaque, None)
            self._deadlines.pop(opaque, None)

    def abandon(self, opaque: int, fut: asyncio.Future[RemotingCommand]) -> None:
        """Nobody will wait for a started request's response: forget it (a late response is dropped)."""
        self._pending.pop(opaque, None)
        self._deadlines.pop(opaque, None)
        if not fut.done():
            fut.cancel()
        elif not fut.cancelled():
            fut.exception()  # retrieved: a failure nobody waits for is not an error to report

    def _schedule_sweep(self, when: float) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
        assert self._loop is not None
        self._sweep_at = when
        self._sweep = self._loop.call_at(when, self._sweep_timeouts)

    def _sweep_timeouts(self) -> None:
        """Fail every request past its deadline; set the timer for the earliest one left."""
        self._sweep, self._sweep_at = None, math.inf
        assert self._loop is not None
        now = self._loop.time()
        earliest = math.inf
        for opaque, (deadline, code, timeout) in list(self._deadlines.items()):
            if deadline <= now:
                del self._deadlines[opaque]
                fut = self._pending.get(opaque)
                if fut is not None and not fut.done():
                    fut.set_exception(RemotingTimeoutError(
                        f"no response from {self.remote_addr} to request code {code} within {timeout:.3f} s"))
            elif deadline < earliest:
                earliest = deadline
        if earliest < math.inf:
            self._schedule_sweep(earliest)

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        if self._write_paused:
            await self.drain()
        if self.closed:
            raise ConnectionClosedError(f"connection to {self.remote_addr} is closed")
        request.flag = (request.flag | ONEWAY_FLAG) & ~RESPONSE_FLAG
        if self.request_hook is not None:
            self.request_hook(request)
        self.write(request)

    def close(self) -> None:
        """Close once what was written has been sent."""
        if self.transport is not None and not self.transport.is_closing():
            self._flush_out()
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    @property
    def inflight(self) -> int:
        """Requests handled and not yet answered (tasks and deferred responses)."""
        return len(self._tasks) + len(self._deferred)
