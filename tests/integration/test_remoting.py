"""The remoting layer over real sockets: a RemotingServer and RemotingClients (or raw sockets) on 127.0.0.1.

Every scenario runs on both the stock asyncio loop and uvloop (the broker runs on uvloop), and fails if the
loop reported an unhandled error (an exception nobody retrieved, a callback that raised).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from sluice.common.config import RemotingConfig
from sluice.remoting import (
    Connection,
    RemotingClient,
    RemotingCommand,
    RemotingConnectError,
    RemotingServer,
    RemotingTimeoutError,
    RequestCode,
    RequestDispatcher,
    ResponseCode,
)
from sluice.remoting.codec import decode_frame, encode_command_bytes
from sluice.remoting.codes import ONEWAY_FLAG, RESPONSE_FLAG, SerializeType
from sluice.remoting.connection import RequestHandler, no_handler
from sluice.remoting.deferred_response import DeferredResponse

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
    uvloop = None

# Request codes served by the test servers (not RocketMQ's: anything the dispatcher is told about works).
ECHO = 1001
HOLD = 1002
BOOM = 1003
ABOOM = 1004
NOTE = 1005
ANOTE = 1006
LATE = 1007
KICK = 1008
BIG = 1009
SLOW_BIG = 1010
FRESH = 1011
UNKNOWN = 9999

Scenario = Coroutine[Any, Any, Any]


# == harness ==========================================================================================


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request) -> Callable[..., Any]:
    """``run(coro)``: run a scenario on a fresh loop, within ``timeout`` seconds, with no unhandled errors."""
    if request.param == "uvloop":
        if uvloop is None:
            pytest.skip("uvloop is not installed")
        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop

    def _run(scenario: Scenario, timeout: float = 10.0) -> Any:
        errors: list[dict] = []
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.get_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
            result = runner.run(asyncio.wait_for(scenario, timeout))
            gc.collect()  # "exception was never retrieved" is reported when a future is collected
            runner.run(asyncio.sleep(0))
        assert not errors, errors
        return result

    return _run


@contextlib.asynccontextmanager
async def serving(handler: RequestHandler, config: RemotingConfig | None = None) -> AsyncIterator[RemotingServer]:
    server = RemotingServer(handler, config or RemotingConfig())
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def client_of(config: RemotingConfig | None = None,
                    handler: RequestHandler = no_handler) -> AsyncIterator[RemotingClient]:
    client = RemotingClient(config or RemotingConfig(), handler)
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def raw_client(server: RemotingServer) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def dispatcher(handlers: dict[int, RequestHandler]) -> RequestDispatcher:
    d = RequestDispatcher()
    d.register(ECHO, echo)
    for code, handler in handlers.items():
        d.register(code, handler)
    return d


def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
    return req.response(ResponseCode.SUCCESS, "echo", dict(req.ext_fields), bytes(req.body))


def frame(cmd: RemotingCommand) -> bytes:
    return encode_command_bytes(cmd)


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, RemotingCommand]:
    """The next frame: (serialize type from the wire, decoded command)."""
    (length,) = struct.unpack(">I", await reader.readexactly(4))
    body = await reader.readexactly(length)
    return body[0], decode_frame(body)


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(0.005)


async def server_conn_of(server: RemotingServer, local: tuple[str, int]) -> Connection:
    """The server's Connection for the client socket bound to ``local``."""
    addr = f"{local[0]}:{local[1]}"
    await wait_until(lambda: any(c.remote_addr == addr for c in server.connections), what="accept")
    return next(c for c in server.connections if c.remote_addr == addr)


async def assert_eof(reader: asyncio.StreamReader, timeout: float = 10.0) -> None:
    """The peer closed the connection (orderly or by reset), within ``timeout``."""
    try:
        rest = await asyncio.wait_for(reader.read(), timeout)
    except ConnectionResetError:
        return
    assert rest == b""


# == request / response ===============================================================================


def test_request_gets_its_response_with_the_same_opaque(run):
    async def scenario():
        async with serving(dispatcher({})) as server, client_of() as client:
            req = RemotingCommand.request(ECHO, {"topic": "T", "queueId": "3"}, body=b"hello")
            resp = await client.invoke(server.address, req, 2000)
            assert resp.code == ResponseCode.SUCCESS
            assert resp.is_response and not resp.is_oneway
            assert resp.opaque == req.opaque
            assert resp.remark == "echo"
            assert resp.ext_fields == {"topic": "T", "queueId": "3"}
            assert bytes(resp.body) == b"hello"
            assert resp.serialize_type is SerializeType.JSON

    run(scenario())


def test_held_request_does_not_hold_up_fast_requests_on_the_same_connection(run):
    async def scenario():
        release = asyncio.Event()
        held_started = asyncio.Event()

        async def hold(conn, req):
            held_started.set()
            await release.wait()
            return req.response(ResponseCode.SUCCESS, "held")

        async with serving(dispatcher({HOLD: hold})) as server, client_of() as client:
            held = asyncio.ensure_future(client.invoke(server.address, RemotingCommand.request(HOLD), 5000))
            await asyncio.wait_for(held_started.wait(), 2)

            # All answered while the held one still waits (held up behind it, they would time out instead).
            fast = await asyncio.gather(*(
                client.invoke(server.address, RemotingCommand.request(ECHO, {"i": str(i)}), 5000)
                for i in range(100)))
            assert [r.ext_fields["i"] for r in fast] == [str(i) for i in range(100)]
            assert not held.done()
            assert len(server.connections) == 1  # all of it on one shared connection
            (server_conn,) = server.connections
            assert server_conn.inflight == 1

            release.set()
            resp = await asyncio.wait_for(held, 2)
            assert resp.remark == "held"

    run(scenario())


def test_oneway_request_runs_its_handler_and_gets_no_response(run):
    async def scenario():
        seen: list[str] = []
        note_ran = asyncio.Event()

        def note(conn, req):
            seen.append(req.ext_fields["x"])
            note_ran.set()
            return req.response(ResponseCode.SUCCESS, "must not be sent")

        async def anote(conn, req):
            await asyncio.sleep(0.01)
            seen.append(req.ext_fields["x"])
            note_ran.set()
            return req.response(ResponseCode.SUCCESS, "must not be sent either")

        async with serving(dispatcher({NOTE: note, ANOTE: anote})) as server:
            async with raw_client(server) as (reader, writer):
                writer.write(frame(RemotingCommand.request(NOTE, {"x": "sync"}, oneway=True)))
                writer.write(frame(RemotingCommand.request(ANOTE, {"x": "async"}, oneway=True)))
                await wait_until(lambda: len(seen) == 2, what="both oneway handlers ran")
                (server_conn,) = server.connections
                await wait_until(lambda: server_conn.inflight == 0, what="both oneway handlers finished")
                # Answers leave in order: one written for a oneway request would come before the probes'.
                probes = [RemotingCommand.request(ECHO) for _ in range(2)]
                for probe in probes:
                    writer.write(frame(probe))
                answers = [(await asyncio.wait_for(read_frame(reader), 10))[1] for _ in probes]
                assert [a.opaque for a in answers] == [p.opaque for p in probes]  # nothing for the oneway ones
            assert sorted(seen) == ["async", "sync"]

            note_ran.clear()
            async with client_of() as client:
                await client.invoke_oneway(server.address, RemotingCommand.request(NOTE, {"x": "client"}))
                await asyncio.wait_for(note_ran.wait(), 10)
                assert seen[-1] == "client"

    run(scenario())


def late_answer(release: asyncio.Event, answered: asyncio.Event) -> RequestHandler:
    """A handler that answers "late" once ``release`` is set, setting ``answered`` as it does."""

    async def late(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        await release.wait()
        answered.set()
        return req.response(ResponseCode.SUCCESS, "late")

    return late


def test_request_timeout_raises_and_the_late_response_is_dropped(run):
    async def scenario():
        release, late_sent = asyncio.Event(), asyncio.Event()
        async with serving(dispatcher({LATE: late_answer(release, late_sent)})) as server, client_of() as client:
            conn = await client.connection(server.address)
            t0 = time.monotonic()
            with pytest.raises(RemotingTimeoutError) as err:
                await client.invoke(server.address, RemotingCommand.request(LATE), timeout_ms=100)
            assert time.monotonic() - t0 >= 0.09
            assert not late_sent.is_set()  # raised at its deadline, not when the answer came
            assert isinstance(err.value, TimeoutError)
            assert not conn._pending

            release.set()
            await asyncio.wait_for(late_sent.wait(), 10)
            # Answers come in order: once the next request's answer is here, the late one arrived (and matched
            # nothing) before it.
            resp = await client.invoke(server.address, RemotingCommand.request(ECHO, {"after": "1"}), 10_000)
            assert resp.ext_fields == {"after": "1"} and resp.remark == "echo"
            assert not conn.closed
            assert not conn._pending
            assert await client.connection(server.address) is conn

    run(scenario())


def test_started_request_is_on_the_wire_before_the_loop_turn_ends(run):
    async def scenario():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        addr = f"127.0.0.1:{listener.getsockname()[1]}"
        try:
            async with client_of() as client:
                conn_task = asyncio.ensure_future(client.connection(addr))
                peer, _ = await asyncio.get_running_loop().run_in_executor(None, listener.accept)
                conn = await conn_task
                with peer:
                    peer.settimeout(2)
                    req = RemotingCommand.request(ECHO, {"n": "1"})
                    started = client.start_request(addr, req, 2000)
                    assert started is not None and started[0] is conn
                    # No await since: the loop has not run, so only an immediate write can have sent it.
                    (length,) = struct.unpack(">I", peer.recv(4, socket.MSG_WAITALL))
                    got = decode_frame(peer.recv(length, socket.MSG_WAITALL))
                    assert got.code == ECHO and got.opaque == req.opaque
                    answer = got.response(ResponseCode.SUCCESS, "echo")
                    answer.opaque = got.opaque
                    answer.flag |= RESPONSE_FLAG
                    peer.sendall(frame(answer))
                    resp = await asyncio.wait_for(conn.response_of(req.opaque, started[1]), 2)
                    assert resp.remark == "echo" and not conn._pending and not conn._deadlines
        finally:
            listener.close()

    run(scenario())


def test_abandoned_request_is_forgotten_and_its_late_answer_dropped(run):
    async def scenario():
        release, answered = asyncio.Event(), asyncio.Event()
        async with serving(dispatcher({LATE: late_answer(release, answered)})) as server, client_of() as client:
            conn = await client.connection(server.address)
            req = RemotingCommand.request(LATE)
            started = client.start_request(server.address, req, 10_000)
            assert started is not None
            conn.abandon(req.opaque, started[1])
            assert not conn._pending and not conn._deadlines and started[1].cancelled()
            release.set()
            await asyncio.wait_for(answered.wait(), 10)
            # The answer arrives (before the next one: in order) and matches nothing.
            resp = await client.invoke(server.address, RemotingCommand.request(ECHO), 10_000)
            assert resp.remark == "echo"
            assert not conn.closed
            # A started request on a connection that then closes: abandoning it retrieves the failure.
            release.clear()
            other_req = RemotingCommand.request(LATE)
            other = client.start_request(server.address, other_req, 10_000)
            assert other is not None
            conn.abort()
            await wait_until(lambda: other[1].done(), what="the close failing the request")
            assert isinstance(other[1].exception(), RemotingConnectError)  # failed by the close ...
            conn.abandon(other_req.opaque, other[1])  # ... and given up: nothing left to report
        assert client.start_request(server.address, RemotingCommand.request(ECHO), 2000) is None  # closed

    run(scenario())


def test_each_pending_request_times_out_at_its_own_deadline(run):
    async def scenario():
        release = asyncio.Event()

        async def late(conn, req):
            await release.wait()
            return req.response(ResponseCode.SUCCESS, "late")

        async with serving(dispatcher({LATE: late})) as server, client_of() as client:
            conn = await client.connection(server.address)
            patient = asyncio.ensure_future(
                client.invoke(server.address, RemotingCommand.request(LATE), timeout_ms=60_000))
            await wait_until(lambda: len(conn._pending) == 1, what="the patient request on the wire")
            t0 = time.monotonic()
            with pytest.raises(RemotingTimeoutError, match=f"code {LATE} within 0.100 s"):
                await client.invoke(server.address, RemotingCommand.request(LATE), timeout_ms=100)
            # Not held until the earlier, longer (60 s) deadline: raised at its own.
            assert 0.09 <= time.monotonic() - t0 < 30
            assert not patient.done()
            release.set()
            assert (await patient).remark == "late"
            assert not conn._pending and not conn._deadlines

    run(scenario(), timeout=90)


def test_unknown_request_code_is_answered_request_code_not_supported(run):
    async def scenario():
        d = dispatcher({})
        async with serving(d) as server, client_of() as client:
            resp = await client.invoke(server.address, RemotingCommand.request(UNKNOWN), 2000)
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert resp.remark == f" request type {UNKNOWN} not supported"
            assert d.unsupported_seen == {UNKNOWN: 1}
            # and a bare server (no dispatcher) says the same
        async with serving(no_handler) as server, client_of() as client:
            resp = await client.invoke(server.address, RemotingCommand.request(RequestCode.SEND_MESSAGE), 2000)
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert resp.remark == f" request type {int(RequestCode.SEND_MESSAGE)} not supported"

    run(scenario())


@pytest.mark.parametrize("code", [BOOM, ABOOM], ids=["sync-handler", "async-handler"])
def test_handler_error_is_answered_system_error_and_the_connection_stays_usable(run, code):
    async def scenario():
        def boom(conn, req):
            raise ValueError("field 'queueId' must be an integer")

        async def aboom(conn, req):
            await asyncio.sleep(0)
            raise ValueError("field 'queueId' must be an integer")

        async with serving(dispatcher({BOOM: boom, ABOOM: aboom})) as server, client_of() as client:
            conn = await client.connection(server.address)
            req = RemotingCommand.request(code)
            resp = await client.invoke(server.address, req, 2000)
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert resp.opaque == req.opaque
            assert "must be an integer" in (resp.remark or "")
            resp = await client.invoke(server.address, RemotingCommand.request(ECHO, {"still": "ok"}), 2000)
            assert resp.ext_fields == {"still": "ok"}
            assert await client.connection(server.address) is conn and not conn.closed

    run(scenario())


# == bad input ========================================================================================

MAX_FRAME = 64 * 1024
_BAD_HEADER = b'{"code":10,"opaque":'
BAD_FRAMES = {
    "bad-json-header": struct.pack(">II", 4 + len(_BAD_HEADER), len(_BAD_HEADER)) + _BAD_HEADER,
    "header-not-an-object": struct.pack(">II", 4 + 2, 2) + b"[]",
    "header-length-past-frame": struct.pack(">II", 4 + 3, 100) + b"abc",
    "unknown-serialize-type": struct.pack(">II", 4 + 2, (7 << 24) | 2) + b"{}",
    "frame-shorter-than-header-word": struct.pack(">I", 2) + b"xx",
    # only the length word: the server must refuse it without waiting for (or buffering) the body
    "oversized-frame": struct.pack(">I", MAX_FRAME + 1),
}


@pytest.mark.parametrize("bad", list(BAD_FRAMES.values()), ids=list(BAD_FRAMES))
def test_bad_frame_closes_only_that_connection(run, bad):
    async def scenario():
        config = RemotingConfig(max_frame_size=MAX_FRAME)
        async with serving(dispatcher({}), config) as server, client_of(config) as other:
            other_conn = await other.connection(server.address)
            assert (await other.invoke(server.address, RemotingCommand.request(ECHO), 2000)).remark == "echo"

            async with raw_client(server) as (reader, writer):
                probe = RemotingCommand.request(ECHO)
                writer.write(frame(probe))  # a good request first: answered
                _, resp = await asyncio.wait_for(read_frame(reader), 2)
                assert resp.opaque == probe.opaque
                assert len(server.connections) == 2

                writer.write(bad)
                await assert_eof(reader)
                await wait_until(lambda: len(server.connections) == 1, what="bad connection dropped")

            # the other client's connection is untouched and still served
            resp = await other.invoke(server.address, RemotingCommand.request(ECHO, {"n": "2"}), 2000)
            assert resp.ext_fields == {"n": "2"}
            assert await other.connection(server.address) is other_conn and not other_conn.closed
            # and the server still accepts new connections
            async with client_of(config) as fresh:
                resp = await fresh.invoke(server.address, RemotingCommand.request(ECHO, {"n": "3"}), 2000)
                assert resp.ext_fields == {"n": "3"}

    run(scenario())


# == connection lifetime ==============================================================================


def test_server_closes_idle_connections_but_not_busy_or_waiting_ones(run):
    async def scenario():
        release = asyncio.Event()
        answered = asyncio.Event()
        idle_limit = 1.0  # the busy client talks every 0.05 s: twenty times as often

        config = RemotingConfig(channel_max_idle_time_seconds=idle_limit)  # type: ignore[arg-type]
        async with (serving(dispatcher({LATE: late_answer(release, answered)}), config) as server,
                    client_of() as idle, client_of() as busy, client_of() as waiting):
            # The waiting client's request goes first: when the idle connection (used after it) is closed, the
            # server has seen the waiting one idle for longer than the limit too.
            held = asyncio.ensure_future(waiting.invoke(server.address, RemotingCommand.request(LATE), 60_000))
            await wait_until(lambda: len(server.connections) == 1 and next(iter(server.connections)).inflight,
                             what="the waiting request in the server")
            idle_conn = await idle.connection(server.address)
            await idle.invoke(server.address, RemotingCommand.request(ECHO), 10_000)
            t0 = time.monotonic()

            async def keep_busy() -> set[Connection]:
                used = set()
                while not idle_conn.closed:
                    await busy.invoke(server.address, RemotingCommand.request(ECHO), 10_000)
                    used.add(await busy.connection(server.address))
                    await asyncio.sleep(0.05)
                return used

            busy_task = asyncio.ensure_future(keep_busy())
            await wait_until(lambda: idle_conn.closed, timeout=30.0, what="idle connection closed")
            assert time.monotonic() - t0 >= idle_limit / 2  # not at once: only once idle for the limit

            assert len(await busy_task) == 1  # one connection, never closed under it
            release.set()
            resp = await held  # in flight for longer than the idle limit: not cut off
            assert resp.remark == "late"

            # a closed connection is replaced on next use
            resp = await idle.invoke(server.address, RemotingCommand.request(ECHO, {"again": "1"}), 10_000)
            assert resp.ext_fields == {"again": "1"}
            assert await idle.connection(server.address) is not idle_conn

    run(scenario(), timeout=60)


def test_idle_connection_is_closed_even_when_its_peer_stopped_reading(run):
    async def scenario():
        def big(conn, req):
            return req.response(ResponseCode.SUCCESS, body=bytes(200 * 1024))

        config = RemotingConfig(channel_max_idle_time_seconds=0.3)  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        async with serving(dispatcher({BIG: big}), config) as server:
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.setblocking(False)
                await loop.sock_connect(sock, (server.host, server.port))
                conn = await server_conn_of(server, sock.getsockname())
                conn.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
                await loop.sock_sendall(sock, frame(RemotingCommand.request(BIG)))
                await wait_until(lambda: conn.transport.get_write_buffer_size() > 0, what="reply stuck")
                # a graceful close would wait forever to flush the reply to this peer
                await wait_until(lambda: conn.closed, timeout=30.0, what="idle non-reader closed")
                assert not server.connections

    run(scenario(), timeout=60)


def test_server_stop_fails_client_invocations_and_refuses_new_connections(run):
    async def scenario():
        started = asyncio.Event()

        async def hold(conn, req):
            started.set()
            await asyncio.Event().wait()

        server = RemotingServer(dispatcher({HOLD: hold}))
        await server.start("127.0.0.1", 0)
        async with client_of(RemotingConfig(connect_timeout_millis=500)) as client:
            call = asyncio.ensure_future(client.invoke(server.address, RemotingCommand.request(HOLD), 60_000))
            await asyncio.wait_for(started.wait(), 10)
            await server.stop()
            with pytest.raises(RemotingConnectError):  # failed by the close, long before its 60 s timeout
                await asyncio.wait_for(call, 30)
            assert not server.connections
            with pytest.raises(RemotingConnectError):
                await client.invoke(server.address, RemotingCommand.request(ECHO), 1000)

    run(scenario(), timeout=60)


@pytest.mark.parametrize("closer", ["server", "client-connection", "client-shutdown"])
def test_closing_a_connection_fails_inflight_invocations_at_once(run, closer):
    async def scenario():
        started = 0
        cancelled = 0

        async def hold(conn, req):
            nonlocal started, cancelled
            started += 1
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled += 1
                raise

        def kick(conn, req):
            conn.close()

        async with serving(dispatcher({HOLD: hold, KICK: kick})) as server, client_of() as client:
            calls = [asyncio.ensure_future(client.invoke(server.address, RemotingCommand.request(HOLD), 60_000))
                     for _ in range(5)]
            await wait_until(lambda: started == 5, what="5 held requests")
            if closer == "server":
                await client.invoke_oneway(server.address, RemotingCommand.request(KICK))
            elif closer == "client-connection":
                client.close_connection(server.address)
            else:
                await client.close()
            # Failed by the close (a RemotingConnectError), long before their 60 s timeout.
            results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 30)
            assert all(isinstance(r, RemotingConnectError) for r in results), results
            # the server gave up the handlers of the gone connection
            await wait_until(lambda: cancelled == 5 and not server.connections, what="server-side cleanup")

            if closer == "client-shutdown":
                with pytest.raises(RemotingConnectError):
                    await client.invoke(server.address, RemotingCommand.request(ECHO), 10_000)
            else:  # the client reconnects on next use
                resp = await client.invoke(server.address, RemotingCommand.request(ECHO, {"n": "1"}), 10_000)
                assert resp.ext_fields == {"n": "1"}

    run(scenario(), timeout=60)


def test_connect_to_a_closed_port_fails_every_waiting_caller(run):
    async def scenario():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            addr = f"127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: connections are refused
            async with client_of() as client:
                results = await asyncio.gather(
                    *(client.invoke(addr, RemotingCommand.request(ECHO), 1000) for _ in range(5)),
                    return_exceptions=True)
                assert all(isinstance(r, RemotingConnectError) for r in results), results

    run(scenario())


@contextlib.contextmanager
def unanswered_port() -> Any:
    """A listening port whose accept queue is full: a new connect hangs (Linux drops the SYN)."""
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(0)
        fillers = []
        try:
            for _ in range(4):
                f = socket.socket()
                f.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    f.connect(lst.getsockname())
                fillers.append(f)
            yield f"127.0.0.1:{lst.getsockname()[1]}"
        finally:
            for f in fillers:
                f.close()


def test_connect_timeout_raises_remoting_connect_error(run):
    async def scenario():
        with unanswered_port() as addr:
            async with client_of(RemotingConfig(connect_timeout_millis=200)) as client:
                t0 = time.monotonic()
                with pytest.raises(RemotingConnectError, match="timed out"):  # the connect's, not the request's
                    await client.invoke(addr, RemotingCommand.request(ECHO), 30_000)
                assert 0.15 <= time.monotonic() - t0 < 20

    run(scenario())


def test_caller_giving_up_on_a_connect_does_not_cancel_the_others(run):
    async def scenario():
        with unanswered_port() as addr:
            # A connect timeout long enough that the two callers are surely waiting on it when the first leaves.
            async with client_of(RemotingConfig(connect_timeout_millis=3000)) as client:
                first = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(ECHO), 30_000))
                await wait_until(lambda: addr in client._connecting, what="the first caller's connect")
                second = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(ECHO), 30_000))
                # One loop turn: the second task's first step runs, and with no await before it, reaches the
                # wait on the connect under way.
                await asyncio.sleep(0)
                assert not second.done()
                first.cancel()
                with pytest.raises(RemotingConnectError, match="timed out"):
                    await second  # the shared connect ran on and timed out: not a CancelledError
                assert first.cancelled()

    run(scenario())


# == server to client =================================================================================


def test_server_sends_requests_to_a_connected_client(run):
    async def scenario():
        registered: list[Connection] = []
        notified: list[str] = []
        notify_ran = asyncio.Event()

        def heart_beat(conn, req):
            registered.append(conn)
            return req.response(ResponseCode.SUCCESS)

        async def running_info(conn, req):
            await asyncio.sleep(0.01)
            return req.response(ResponseCode.SUCCESS, ext_fields={"group": req.ext_fields["consumerGroup"]},
                                body=b'{"properties":{}}')

        def ids_changed(conn, req):
            notified.append(req.ext_fields["consumerGroup"])
            notify_ran.set()

        client_side = RequestDispatcher()
        client_side.register(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
        client_side.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ids_changed)
        client_side.register(ECHO, echo)

        async with (serving(dispatcher({RequestCode.HEART_BEAT: heart_beat})) as server,
                    client_of(handler=client_side) as client):
            await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT), 2000)
            (conn,) = registered
            assert conn.server_side

            req = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G1"})
            resp = await conn.invoke(req, 2.0)
            assert resp.code == ResponseCode.SUCCESS and resp.opaque == req.opaque
            assert resp.ext_fields == {"group": "G1"} and bytes(resp.body) == b'{"properties":{}}'

            await conn.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                             {"consumerGroup": "G1"}))
            await asyncio.wait_for(notify_ran.wait(), 2)
            assert notified == ["G1"]

            resp = await conn.invoke(RemotingCommand.request(UNKNOWN), 2.0)
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

            # both directions at once on the one connection
            ups = [client.invoke(server.address, RemotingCommand.request(ECHO, {"up": str(i)}), 3000)
                   for i in range(50)]
            downs = [conn.invoke(RemotingCommand.request(ECHO, {"down": str(i)}), 3.0) for i in range(50)]
            results = await asyncio.gather(*ups, *downs)
            assert [r.ext_fields for r in results] == (
                [{"up": str(i)} for i in range(50)] + [{"down": str(i)} for i in range(50)])
            assert len(server.connections) == 1

    run(scenario())


# == flow control =====================================================================================


def test_reader_that_never_reads_is_paused_then_disconnected_while_others_are_served(run):
    async def scenario():
        payload = bytes(100 * 1024)
        handled: list[int] = []

        def big(conn, req):
            handled.append(req.code)
            return req.response(ResponseCode.SUCCESS, body=payload)

        release = asyncio.Event()

        async def slow_big(conn, req):
            handled.append(req.code)
            await release.wait()
            return req.response(ResponseCode.SUCCESS, body=payload)

        def counted_echo(conn, req):
            handled.append(req.code)
            return echo(conn, req)

        config = RemotingConfig(write_buffer_high=64 * 1024, write_buffer_low=16 * 1024,
                                write_buffer_max=1024 * 1024)
        loop = asyncio.get_running_loop()
        async with serving(dispatcher({BIG: big, SLOW_BIG: slow_big, ECHO: counted_echo}), config) as server, \
                client_of() as other:
            with socket.socket() as sock:
                # small kernel buffers on both ends, so the replies pile up in the server's transport
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.setblocking(False)
                await loop.sock_connect(sock, (server.host, server.port))
                conn = await server_conn_of(server, sock.getsockname())
                conn.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

                # 12 held requests (replies later) and 4 answered at once: 400 KiB > write_buffer_high
                await loop.sock_sendall(sock, b"".join(
                    [frame(RemotingCommand.request(SLOW_BIG)) for _ in range(12)]
                    + [frame(RemotingCommand.request(BIG)) for _ in range(4)]))
                await wait_until(lambda: len(handled) == 16, what="16 requests handled")
                await wait_until(lambda: not conn.transport.is_reading(), what="reading paused")
                assert not conn.closed
                assert conn.transport.get_write_buffer_size() < config.write_buffer_max

                # paused: more requests stay unread ...
                await loop.sock_sendall(sock, b"".join(frame(RemotingCommand.request(ECHO)) for _ in range(5)))

                # ... while another client is served normally (its request, sent after them, is answered: had the
                # server read the paused connection's, it would have handled them first)
                resp = await other.invoke(server.address, RemotingCommand.request(ECHO, {"n": "1"}), 10_000)
                assert resp.ext_fields == {"n": "1"}
                assert len(handled) == 17 and not conn.closed  # 16 + the other client's echo

                # the held replies (1.2 MiB more) pass write_buffer_max: the non-reader is cut off
                release.set()
                await wait_until(lambda: conn.closed, timeout=30.0, what="non-reading peer disconnected")
                assert conn not in server.connections
                assert len(handled) == 17  # the five unread requests never were

            resp = await other.invoke(server.address, RemotingCommand.request(ECHO, {"n": "2"}), 10_000)
            assert resp.ext_fields == {"n": "2"}

    run(scenario(), timeout=60)


@pytest.mark.parametrize("cap", [1, 4])
@pytest.mark.parametrize("answer", ["task", "deferred"])
def test_inflight_cap_pauses_reading_until_handlers_finish(run, cap, answer):
    async def scenario():
        release = asyncio.Event()
        started = 0
        deferred: list[DeferredResponse] = []

        async def hold_task(conn, req):
            nonlocal started
            started += 1
            await release.wait()
            return req.response(ResponseCode.SUCCESS, ext_fields=dict(req.ext_fields))

        def hold_deferred(conn, req):
            nonlocal started
            started += 1
            d = DeferredResponse()
            deferred.append(d)
            if release.is_set():
                asyncio.get_running_loop().call_soon(
                    d.resolve, lambda: req.response(ResponseCode.SUCCESS, ext_fields=dict(req.ext_fields)))
            else:
                asyncio.ensure_future(release.wait()).add_done_callback(lambda _: d.resolve(
                    lambda: req.response(ResponseCode.SUCCESS, ext_fields=dict(req.ext_fields))))
            return d

        hold = hold_task if answer == "task" else hold_deferred

        config = RemotingConfig(max_inflight_requests=cap)
        async with (serving(dispatcher({HOLD: hold}), config) as server, client_of() as client,
                    client_of() as other):
            calls = []
            client_conn = await client.connection(server.address)
            for i in range(10):
                calls.append(asyncio.ensure_future(
                    client.invoke(server.address, RemotingCommand.request(HOLD, {"i": str(i)}), 30_000)))
                if i < cap:
                    await wait_until(lambda i=i: started == i + 1, what=f"request {i} handled")
            await wait_until(lambda: len(client_conn._pending) == 10, what="all ten requests sent")

            # Others are unaffected; and their request, sent after the ten, is answered: had the server read the
            # rest of the ten, it would have handled them by then.
            resp = await other.invoke(server.address, RemotingCommand.request(ECHO), 10_000)
            assert resp.remark == "echo"
            assert started == cap  # the rest wait unread in the socket

            release.set()
            results = await asyncio.wait_for(asyncio.gather(*calls), 30)
            assert [r.ext_fields["i"] for r in results] == [str(i) for i in range(10)]
            assert started == 10

    run(scenario())


def test_deferred_responses_are_answered_when_resolved_in_any_order(run):
    async def scenario():
        held: dict[str, DeferredResponse] = {}
        requests: dict[str, RemotingCommand] = {}

        def defer(conn, req):
            d = DeferredResponse()
            held[req.ext_fields["i"]] = d
            requests[req.ext_fields["i"]] = req
            return d

        def boom() -> RemotingCommand:
            raise ValueError("no answer")

        async with serving(dispatcher({HOLD: defer})) as server, client_of() as client:
            calls = [asyncio.ensure_future(client.invoke(server.address, RemotingCommand.request(HOLD, {"i": str(i)}),
                                                         3000)) for i in range(3)]
            await wait_until(lambda: len(held) == 3, what="three requests handled")
            (conn,) = server.connections
            assert conn.inflight == 3  # a connection waiting on answers is not idle
            held["2"].resolve(lambda: requests["2"].response(ResponseCode.SUCCESS, "two"))
            held["2"].resolve(lambda: requests["2"].response(ResponseCode.SUCCESS, "again"))  # once only
            held["0"].resolve(boom)
            assert (await asyncio.wait_for(calls[2], 2)).remark == "two"
            failed = await asyncio.wait_for(calls[0], 2)
            assert failed.code == ResponseCode.SYSTEM_ERROR and "no answer" in (failed.remark or "")
            assert not calls[1].done() and conn.inflight == 1
            held["1"].resolve(lambda: requests["1"].response(ResponseCode.SUCCESS, "one"))
            assert (await asyncio.wait_for(calls[1], 2)).remark == "one"
            assert conn.inflight == 0
            resp = await client.invoke(server.address, RemotingCommand.request(ECHO), 2000)  # still usable
            assert resp.remark == "echo"

    run(scenario())


def test_deferred_response_resolved_inside_its_handler_is_sent_when_bound(run):
    async def scenario():
        def answer_at_once(conn, req):
            d = DeferredResponse()
            d.resolve(lambda: req.response(ResponseCode.SUCCESS, "at once"))
            return d

        async with serving(dispatcher({HOLD: answer_at_once})) as server, client_of() as client:
            resp = await client.invoke(server.address, RemotingCommand.request(HOLD), 2000)
            assert resp.remark == "at once"
            (conn,) = server.connections
            assert conn.inflight == 0

    run(scenario())


def test_large_bodies_round_trip_through_write_pauses(run):
    async def scenario():
        config = RemotingConfig(write_buffer_high=256 * 1024, write_buffer_low=64 * 1024,
                                write_buffer_max=64 * 1024 * 1024)
        async with serving(dispatcher({}), config) as server, client_of(config) as client:
            bodies = [bytes([i]) * (2 * 1024 * 1024 + i) for i in range(10)]
            resps = await asyncio.gather(*(
                client.invoke(server.address, RemotingCommand.request(ECHO, {"i": str(i)}, body=b), 10_000)
                for i, b in enumerate(bodies)))
            for i, (b, resp) in enumerate(zip(bodies, resps, strict=True)):
                assert resp.ext_fields == {"i": str(i)} and bytes(resp.body) == b
            (conn,) = server.connections
            assert conn.transport.is_reading() and not conn.closed  # reading resumed after the pauses
            resp = await client.invoke(server.address, RemotingCommand.request(ECHO, {"after": "1"}), 2000)
            assert resp.ext_fields == {"after": "1"}

    run(scenario())


# == serialize types ==================================================================================


@pytest.mark.parametrize("stype", list(SerializeType), ids=[t.name for t in SerializeType])
def test_response_uses_the_serialize_type_of_its_request(run, stype):
    async def scenario():
        def fresh(conn, req):  # builds its response from scratch, not with req.response()
            return RemotingCommand(ResponseCode.SUCCESS, {"via": "fresh"})

        def boom(conn, req):
            raise RuntimeError("no")

        async with serving(dispatcher({FRESH: fresh, BOOM: boom})) as server:
            async with raw_client(server) as (reader, writer):
                for code, want in [(ECHO, ResponseCode.SUCCESS), (FRESH, ResponseCode.SUCCESS),
                                   (BOOM, ResponseCode.SYSTEM_ERROR),
                                   (UNKNOWN, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)]:
                    req = RemotingCommand.request(code, {"topic": "T", "queueId": "7"}, body=b"xyz")
                    req.serialize_type = stype
                    req.language = "JAVA"
                    writer.write(frame(req))
                    wire_type, resp = await asyncio.wait_for(read_frame(reader), 2)
                    assert wire_type == stype, code
                    assert resp.serialize_type is stype
                    assert resp.code == want and resp.opaque == req.opaque
                    assert resp.flag & RESPONSE_FLAG and not resp.flag & ONEWAY_FLAG
                    if code == ECHO:
                        assert resp.ext_fields == {"topic": "T", "queueId": "7"}
                        assert resp.remark == "echo" and bytes(resp.body) == b"xyz"

            async with client_of() as client:  # the client matches a binary-header response too
                req = RemotingCommand.request(ECHO, {"k": "v"})
                req.serialize_type = stype
                resp = await client.invoke(server.address, req, 2000)
                assert resp.serialize_type is stype and resp.ext_fields == {"k": "v"}

    run(scenario())


# == load =============================================================================================


def test_two_thousand_concurrent_requests_over_four_connections_all_matched(run):
    async def scenario():
        async def shuffled_echo(conn, req):
            i = int(req.ext_fields["i"])
            if i % 3:
                await asyncio.sleep(0.001 * (i % 7))  # answers come back out of order
            return req.response(ResponseCode.SUCCESS, ext_fields={"i": str(i)}, body=bytes(req.body))

        async with serving(dispatcher({HOLD: shuffled_echo})) as server:
            clients = [RemotingClient() for _ in range(4)]
            try:
                reqs = [(clients[i % 4], RemotingCommand.request(HOLD, {"i": str(i)}, body=str(i).encode()))
                        for i in range(2000)]
                resps = await asyncio.gather(*(c.invoke(server.address, r, 5000) for c, r in reqs))
                for (_, req), resp in zip(reqs, resps, strict=True):
                    assert resp.code == ResponseCode.SUCCESS
                    assert resp.opaque == req.opaque
                    assert resp.ext_fields == req.ext_fields
                    assert bytes(resp.body) == bytes(req.body)
                assert len({r.opaque for _, r in reqs}) == 2000
                assert len(server.connections) == 4
            finally:
                for c in clients:
                    await c.close()

    run(scenario())


def test_connections_past_the_limit_are_closed_at_once_and_the_others_keep_serving(run, caplog):
    async def scenario() -> None:
        async with serving(dispatcher({}), RemotingConfig(max_connections=3)) as server:
            async with contextlib.AsyncExitStack() as stack:
                kept = [await stack.enter_async_context(raw_client(server)) for _ in range(3)]
                await wait_until(lambda: len(server.connections) == 3, what="three connections")
                async with raw_client(server) as (reader, _writer):  # the fourth
                    await assert_eof(reader)
                assert server.refused == 1 and len(server.connections) == 3
                for reader, writer in kept:  # the three go on being served
                    writer.write(frame(RemotingCommand.request(ECHO, {"n": "1"})))
                    _, resp = await read_frame(reader)
                    assert resp.code == ResponseCode.SUCCESS
                kept[0][1].close()
                await wait_until(lambda: len(server.connections) == 2, what="a connection gone")
                async with raw_client(server) as (reader, writer):  # room again
                    writer.write(frame(RemotingCommand.request(ECHO)))
                    _, resp = await read_frame(reader)
                    assert resp.code == ResponseCode.SUCCESS

    run(scenario())
    refusals = [r for r in caplog.records if "refusing connections" in r.getMessage()]
    assert len(refusals) == 1 and refusals[0].levelname == "WARNING"


def test_the_connection_limit_leaves_room_for_the_files_the_process_needs():
    import resource

    from sluice.remoting.server import RESERVED_FILES, connection_limit

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        pytest.skip("no open-file limit here")
    assert connection_limit(10) == min(10, soft - RESERVED_FILES)
    assert connection_limit(10**9) == max(1, soft - RESERVED_FILES)
