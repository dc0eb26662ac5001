"""The remoting client: one shared connection per address, requests with timeouts."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable

from sluice.common.backoff import Backoff
from sluice.common.config import RemotingConfig
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection, RequestHandler, no_handler
from sluice.remoting.errors import RemotingConnectError

log = logging.getLogger(__name__)


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address must be host:port, not {addr!r}")
    return host, int(port)


class RemotingClient:
    """Connections to name servers and brokers, made on first use and shared by every request."""

    def __init__(self, config: RemotingConfig | None = None, handler: RequestHandler = no_handler,
                 request_hook: Callable[[RemotingCommand], None] | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.config = config or RemotingConfig()
        self.tls = tls  # every connection made speaks TLS with this context (sluice.remoting.tls.client_tls)
        self.handler = handler
        # Given every request sent (``sluice.auth.credentials.signing_hook``: the signature of ACL 2.0).
        self.request_hook = request_hook
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self._backoffs: dict[str, tuple[Backoff, float]] = {}  # addr → its failures, no connect before (loop time)
        self.closed = False

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        if self.closed:
            raise RemotingConnectError("client is closed")
        pending = self._connecting.get(addr)
        if pending is None:
            failed = self._backoffs.get(addr)
            if failed is not None:
                wait = failed[1] - asyncio.get_running_loop().time()
                if wait > 0:
                    raise RemotingConnectError(f"cannot connect to {addr}: {failed[0].failures} attempts in a row "
                                               f"failed; the next in {wait * 1000:.0f} ms")
            # One connect per address, in its own task: a caller that gives up (is cancelled) neither cancels
            # it for the others nor hands them its CancelledError.
            pending = asyncio.ensure_future(self._connect(addr))
            self._connecting[addr] = pending
            pending.add_done_callback(lambda f: self._connect_done(addr, f))
        return await asyncio.shield(pending)

    def _connect_done(self, addr: str, fut: asyncio.Future[Connection]) -> None:
        if self._connecting.get(addr) is fut:
            del self._connecting[addr]
        if not fut.cancelled():
            fut.exception()  # retrieved: every caller may have gone

    async def _connect(self, addr: str) -> Connection:
        host, port = split_addr(addr)
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: Connection(self.handler, self.config, on_close=self._forget),
                                       host, port, ssl=self.tls, server_hostname=host if self.tls else None),
                self.config.connect_timeout_millis / 1000)
        except (OSError, TimeoutError) as exc:  # (ssl.SSLError is an OSError: a failed handshake)
            self._back_off(addr)
            raise RemotingConnectError(f"cannot connect to {addr}: {str(exc) or 'timed out'}") from None
        self._backoffs.pop(addr, None)
        if self.closed:  # closed while connecting
            conn.close()
            raise RemotingConnectError("client is closed")
        conn.remote_addr = addr
        conn.request_hook = self.request_hook
        self._conns[addr] = conn
        return conn

    def _back_off(self, addr: str) -> None:
        c = self.config
        if c.reconnect_backoff_millis <= 0:
            return
        failed = self._backoffs.get(addr)
        backoff = failed[0] if failed is not None else Backoff(c.reconnect_backoff_millis / 1000,
                                                                c.reconnect_backoff_max_millis / 1000)
        if len(self._backoffs) >= 4096 and failed is None:
            self._backoffs.clear()  # (bounded: addresses come from routes, which may churn)
        self._backoffs[addr] = (backoff, asyncio.get_running_loop().time() + backoff.fail())

    def _forget(self, conn: Connection) -> None:
        if self._conns.get(conn.remote_addr) is conn:
            del self._conns[conn.remote_addr]

    async def invoke(self, addr: str, request: RemotingCommand, timeout_ms: int | None = None) -> RemotingCommand:
        conn = await self.connection(addr)
        return await conn.invoke(request, (timeout_ms or self.config.default_timeout_millis) / 1000)

    def start_request(self, addr: str, request: RemotingCommand,
                      timeout_ms: int | None = None) -> tuple[Connection, asyncio.Future[RemotingCommand]] | None:
        """``Connection.start_request`` on the open connection to ``addr``; None when there is none yet (or it
        cannot take a request without waiting): use ``invoke`` then."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            return None
        fut = conn.start_request(request, (timeout_ms or self.config.default_timeout_millis) / 1000)
        return None if fut is None else (conn, fut)

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        conn = await self.connection(addr)
        await conn.invoke_oneway(request)

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        self.closed = True
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()
        await asyncio.sleep(0)
