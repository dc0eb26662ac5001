"""The gRPC port with TLS on: grpcio cannot tell TLS from plaintext on one port (RocketMQ's proxy can, in Netty), so
this front takes the public port, tells them apart by the first byte (``sluice.remoting.tls.TlsAcceptor``: the
same modes, certificates, reloading and client authentication as the remoting ports), ends TLS, and pipes the
bytes to grpcio's plaintext listener on a loopback port of its own.

grpcio then sees every client as coming from the loopback; ``peer()`` gives back the real address of the client
behind a loopback connection (ACL 2.0's source-IP rules need it). docs/benchmarks.md has what the hop costs.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import cast

from sluice.remoting.server import connection_limit
from sluice.remoting.tls import HANDSHAKE_TIMEOUT, ServerTls, TlsAcceptor, bind_socket

log = logging.getLogger(__name__)

# Bytes buffered toward a side that does not read before the other side's reading pauses (back-pressure).
HIGH_WATER = 1 << 20
LOW_WATER = 256 << 10
# After its client left, a loopback connection waits this long (s) for grpcio to close it, then is aborted.
HALF_CLOSED_TIMEOUT = 30.0
# Descriptors per client connection: its own, the front's to grpcio, and grpcio's end of that.
FDS_PER_CONNECTION = 3


class _Pipe(asyncio.Protocol):
    """One direction's reader and the other's writer: what one side sends, the other is written."""

    def __init__(self, on_closed: asyncio.Future[None] | None = None, half_close_other: bool = False) -> None:
        self.transport: asyncio.Transport | None = None
        self.half_close_other = half_close_other
        self.other: _Pipe | None = None
        self._early: list[bytes] = []  # arrived before the other side was connected
        self._on_closed = on_closed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # (uvloop's are not its subclasses)
        transport.set_write_buffer_limits(HIGH_WATER, LOW_WATER)
        if self._early:
            early, self._early = self._early, []
            for chunk in early:
                transport.write(chunk)

    def data_received(self, data: bytes) -> None:
        other = self.other
        if other is None:
            return
        if other.transport is None:
            other._early.append(data)
        elif not other.transport.is_closing():
            other.transport.write(data)

    def eof_received(self) -> bool | None:
        return False  # (closes this side; connection_lost closes the other)

    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None and not self.other.transport.is_closing():
            self.other.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        other = self.other.transport if self.other is not None else None
        if other is not None and not other.is_closing():
            if self.half_close_other and other.can_write_eof():
                # The client left: grpcio is told (EOF) and closes first, so that the loopback port stays this
                # connection's until grpcio can serve nothing more of it (no other process can take it meanwhile).
                other.write_eof()
                asyncio.get_running_loop().call_later(HALF_CLOSED_TIMEOUT, other.abort)
            else:
                other.close()  # (after what it still has to write)
        if self._on_closed is not None and not self._on_closed.done():
            self._on_closed.set_result(None)


class GrpcTlsFront:
    """The public gRPC port in permissive or enforcing mode, in front of grpcio's loopback listener."""

    def __init__(self, tls: ServerTls, backend_port: int, name: str = "gRPC front",
                 max_connections: int = 10_000) -> None:
        self.tls = tls
        self.backend_port = backend_port
        self.name = name
        self.acceptor: TlsAcceptor | None = None
        # The local port of a loopback connection to grpcio → the address of the client it carries.
        self._peers: dict[int, str] = {}
        self._transports: set[asyncio.Transport] = set()
        self._opening = 0  # connections in their handshake or connecting to grpcio
        self.max_connections = min(max_connections, connection_limit(10 ** 9) // FDS_PER_CONNECTION)

    @property
    def connections(self) -> int:
        return len(self._peers)

    async def start(self, host: str, port: int) -> int:
        listening = bind_socket(host, port)
        self.acceptor = TlsAcceptor(self.tls, self._connected, self.name,
                                    capacity=lambda: self.max_connections - len(self._peers) - self._opening)
        self.acceptor.start(listening)
        return int(listening.getsockname()[1])

    async def _connected(self, sock: socket.socket, ctx: ssl.SSLContext | None) -> None:
        if len(self._peers) + self._opening >= self.max_connections:
            raise OSError(f"{self.max_connections} connections are open (the limit)")
        self._opening += 1
        try:
            await self._open(sock, ctx)
        finally:
            self._opening -= 1

    async def _open(self, sock: socket.socket, ctx: ssl.SSLContext | None) -> None:
        loop = asyncio.get_running_loop()
        peer = sock.getpeername()
        outer = _Pipe(half_close_other=True)
        closed: asyncio.Future[None] = loop.create_future()
        inner = _Pipe(closed)
        outer.other, inner.other = inner, outer
        # The client's TLS first: one that fails it never gets a loopback connection (nor an address entry).
        await loop.connect_accepted_socket(lambda: outer, sock, ssl=ctx,
                                           ssl_handshake_timeout=HANDSHAKE_TIMEOUT if ctx else None)
        assert outer.transport is not None
        self._transports.add(outer.transport)
        try:
            backend, _ = await loop.create_connection(lambda: inner, "127.0.0.1", self.backend_port)
        except BaseException:
            outer.transport.abort()
            self._transports.discard(outer.transport)
            raise
        local_port = backend.get_extra_info("sockname")[1]
        # (set before this task yields: no call of this connection can reach a handler before)
        self._peers[local_port] = _grpc_peer(peer)
        self._transports.add(backend)

        def forget(_: asyncio.Future[None]) -> None:
            self._peers.pop(local_port, None)  # (grpcio's end is closed: nothing more is served from it)
            self._transports.discard(backend)
            if outer.transport is not None:
                self._transports.discard(outer.transport)

        closed.add_done_callback(forget)
        if outer.transport.is_closing():  # (the client left during the connect)
            outer.connection_lost(None)

    def peer(self, grpc_peer: str) -> str | None:
        """grpcio's ``context.peer()`` of a call → that of the client behind the loopback connection; None for a
        call that did not come through this front (straight to grpcio's port): it must be refused."""
        if not grpc_peer.startswith("ipv4:127.0.0.1:"):
            return None
        port = grpc_peer.rpartition(":")[2]
        return self._peers.get(int(port)) if port.isdigit() else None

    def stop_accepting(self) -> None:
        if self.acceptor is not None:
            self.acceptor.close()
            self.acceptor = None

    def close(self) -> None:
        """Stop accepting and drop every connection at once (a client that does not read is not waited for)."""
        self.stop_accepting()
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()


def _grpc_peer(address: tuple[str, int] | tuple[str, int, int, int]) -> str:
    host, port = address[0], address[1]
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


__all__ = ["GrpcTlsFront"]
