"""The remoting server: accepts connections and hands their requests to one handler."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable

from sluice.common.config import RemotingConfig
from sluice.common.platform import open_file_limit
from sluice.remoting.connection import Connection, RequestHandler
from sluice.remoting.rpc_latency import RpcLatency
from sluice.remoting.tls import HANDSHAKE_TIMEOUT, ServerTls, TlsAcceptor, bind_socket

log = logging.getLogger(__name__)


# File descriptors kept for everything but client connections: store segments, consume queues, index files.
RESERVED_FILES = 256


def connection_limit(configured: int) -> int:
    """``configured``, but never so many that connections could take the descriptors the process needs."""
    soft = open_file_limit()
    if soft is None:  # (Windows, or unlimited: no such limit to stay under)
        return configured
    return max(1, min(configured, soft - RESERVED_FILES))


class _Refused(asyncio.Protocol):
    """A connection over the limit: closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()  # type: ignore[attr-defined]


class RemotingServer:
    """Listens on ``host:port`` (port 0 = any free port); closes connections idle past the configured time."""

    def __init__(self, handler: RequestHandler, config: RemotingConfig | None = None, name: str = "server",
                 on_close: Callable[[Connection], None] | None = None, tls: ServerTls | None = None) -> None:
        self.handler = handler
        self.tls = tls  # None: plaintext only (tls_server_mode = "disabled")
        self.acceptor: TlsAcceptor | None = None
        self.on_close = on_close
        self.config = config or RemotingConfig()
        self.name = name
        self.connections: set[Connection] = set()
        self._server: asyncio.Server | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self.host = ""
        self.port = 0
        self.refused = 0  # connections closed at once because the limit was reached
        self.accepted = 0  # connections taken since the start
        # Servers of the same process whose connections count against the same limit (a broker's two ports).
        self.peers: list[RemotingServer] = []
        self.rpc_latency = RpcLatency()  # every answer's time (the metrics endpoint exports it)
        self._refused_logged = -1e9

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if self.on_close is not None:
            self.on_close(conn)

    def _protocol(self) -> Connection:
        return Connection(self.handler, self.config, on_close=self._closed, server_side=True,
                          rpc_latency=self.rpc_latency)

    async def start(self, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None) -> int:
        """Listen on ``host:port``, or on ``sock`` when given (bound already, e.g. to learn the port early)."""
        loop = asyncio.get_running_loop()

        limit = connection_limit(self.config.max_connections)

        def open_connections() -> int:
            return len(self.connections) + sum(len(p.connections) for p in self.peers)

        def factory() -> asyncio.Protocol:
            if open_connections() >= limit:
                now = time.monotonic()
                if now - self._refused_logged > 10:
                    self._refused_logged = now
                    log.warning("%s: refusing connections: %d are open, the limit (max_connections, and the open "
                                "files this process may have)", self.name, open_connections())
                self.refused += 1
                return _Refused()
            conn = self._protocol()
            self.connections.add(conn)
            self.accepted += 1
            return conn

        if self.tls is not None:
            async def connected(accepted: socket.socket, ctx: ssl.SSLContext | None) -> None:
                protocol = factory()
                if isinstance(protocol, _Refused):  # over the limit: no handshake spent on it
                    accepted.close()
                    return
                try:
                    await loop.connect_accepted_socket(lambda: protocol, accepted, ssl=ctx,
                                                       ssl_handshake_timeout=HANDSHAKE_TIMEOUT if ctx else None)
                except BaseException:
                    # A failed handshake never calls connection_lost: the connection was never made.
                    if isinstance(protocol, Connection):
                        self.connections.discard(protocol)
                    raise

            listening = sock if sock is not None else bind_socket(host, port)
            # Connections still to send their first byte hold descriptors too: they share the limit.
            self.acceptor = TlsAcceptor(self.tls, connected, self.name,
                                        capacity=lambda: limit - open_connections())
            self.acceptor.start(listening)
            bound = listening.getsockname()
        elif sock is not None:
            self._server = await loop.create_server(factory, sock=sock, backlog=1024)
            bound = self._server.sockets[0].getsockname()
        else:
            self._server = await loop.create_server(factory, host, port, reuse_address=True, backlog=1024)
            bound = self._server.sockets[0].getsockname()
        self.host, self.port = bound[0], bound[1]
        self._idle_task = loop.create_task(self._close_idle())
        return self.port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _close_idle(self) -> None:
        limit = self.config.channel_max_idle_time_seconds
        while True:
            await asyncio.sleep(min(10.0, max(limit / 4, 0.05)))
            now = time.monotonic()
            for conn in list(self.connections):
                if now - conn.last_active > limit and conn.inflight == 0:
                    if conn.transport is not None and conn.transport.is_closing():
                        conn.abort()  # closed on an earlier scan, still flushing to a peer that does not read
                        continue
                    log.info("%s: closing connection from %s, idle for %.0f s", self.name, conn.remote_addr,
                             now - conn.last_active)
                    conn.close()

    async def stop(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        if self.acceptor is not None:
            self.acceptor.close()
            self.acceptor = None
            for conn in list(self.connections):
                conn.close()
            deadline = time.monotonic() + 5
            while self.connections and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            for conn in list(self.connections):
                conn.abort()
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.close()
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except TimeoutError:
                for conn in list(self.connections):
                    conn.abort()
            self._server = None
