"""TLS as RocketMQ speaks it: a server mode per port, certificates that follow their files, mutual TLS, and a
self-signed certificate where none is configured (RocketMQ's test mode), so that a RocketMQ 5 client with its
defaults (TLS on, any certificate trusted) connects to ``sluice dev`` unchanged.

``tls_server_mode`` (RocketMQ's ``tls.server.mode``):
  - ``disabled``: plaintext only; a TLS hello is refused as any malformed frame is.
  - ``permissive`` (RocketMQ's default): TLS and plaintext on one port, told apart by the first byte a client
    sends, as RocketMQ's Netty ``HandshakeHandler`` does: 0x16 opens a TLS record (a handshake); a remoting frame
    starts with its length, whose first byte is 0 below 16 MiB, and an HA frame with its type (1 to 5).
  - ``enforcing``: TLS only; a plaintext connection is closed at its first byte.

The server's context is made anew when its certificate, key or trust file changes (checked at most once a second,
at an accept): new connections get the new certificate, open ones keep theirs. A changed file that does not load
(caught half-written, say) leaves the last good context in use, with a warning.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from sluice.common.config_loader import ConfigError

log = logging.getLogger(__name__)

TLS_HANDSHAKE_RECORD = 0x16
# A client that connects and says nothing is closed after this long (s); a TLS handshake must end within it too.
FIRST_BYTE_TIMEOUT = 10.0
HANDSHAKE_TIMEOUT = 10.0
RELOAD_CHECK_INTERVAL = 1.0
SELF_SIGNED_DAYS = 365


class TlsMode(enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class ClientAuth(enum.Enum):
    """Whether a TLS server asks its clients for a certificate (RocketMQ's ``tls.server.need.client.auth``)."""

    NONE = "none"
    OPTIONAL = "optional"  # asked for; one that is sent must be trusted, none is fine
    REQUIRE = "require"  # mutual TLS: a client without a trusted certificate is refused in the handshake


class TlsServerSettings(Protocol):
    """What a server's config holds of TLS (``sluice.common.config.TlsSettings``)."""

    @property
    def tls_server_mode(self) -> str: ...

    @property
    def tls_server_cert_path(self) -> str: ...

    @property
    def tls_server_key_path(self) -> str: ...

    @property
    def tls_server_key_password(self) -> str: ...

    @property
    def tls_server_trust_cert_path(self) -> str: ...

    @property
    def tls_server_need_client_auth(self) -> str: ...


class TlsClientSettings(Protocol):
    """What a server's config holds of the TLS its own client connections use (to a name server, a master)."""

    @property
    def tls_enable(self) -> bool: ...

    @property
    def tls_client_cert_path(self) -> str: ...

    @property
    def tls_client_key_path(self) -> str: ...

    @property
    def tls_client_key_password(self) -> str: ...

    @property
    def tls_client_trust_cert_path(self) -> str: ...

    @property
    def tls_client_auth_server(self) -> bool: ...


class TlsError(ConfigError):
    """A TLS setting or file that cannot be used; the message names the setting and the file."""


def _signature(paths: Iterable[str]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((0, 0, 0))
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


def self_signed(directory: str, hosts: Iterable[str] = (), name: str = "server") -> tuple[str, str]:
    """A self-signed certificate and its key in ``directory`` (``self-signed.pem``, ``self-signed.key``, the key
    owner-only), made once and kept, so that a client can pin it; made anew when it expires or does not name one of
    ``hosts`` (besides localhost, 127.0.0.1 and ::1, which it always names). Returns the two paths."""
    cert_path = os.path.join(directory, "self-signed.pem")
    key_path = os.path.join(directory, "self-signed.key")
    names = sorted({"localhost", "127.0.0.1", "::1", *(h for h in hosts if h and h not in ("0.0.0.0", "::"))})
    os.makedirs(directory, mode=0o700, exist_ok=True)
    # Servers sharing the directory (two proxies on the default one) make one pair between them, never a key of
    # one with the certificate of another.
    with open(os.path.join(directory, ".lock"), "a") as lock:
        try:
            import fcntl
        except ImportError:  # (Windows: no server runs there)
            fcntl = None  # type: ignore[assignment]
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        if _self_signed_usable(cert_path, key_path, names):
            return cert_path, key_path
        _make_self_signed(cert_path, key_path, names, name)
    return cert_path, key_path


def _make_self_signed(cert_path: str, key_path: str, names: list[str], name: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    # A subject of its own (a client trusting several of these finds each by its subject).
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                            f"sluice {name} {socket.gethostname()} {os.urandom(4).hex()}"[:64]),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Sluice (test mode: configure a certificate)")])
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            # (what a strict verifier, Python 3.13's default context among them, wants of a pinned certificate)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write_atomically(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()), 0o600)
    _write_atomically(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    log.info("TLS: made a self-signed certificate for %s in %s (test mode: configure tls_server_cert_path and "
             "tls_server_key_path for production)", ", ".join(names), cert_path)


def _self_signed_usable(cert_path: str, key_path: str, names: list[str]) -> bool:
    if not (os.path.exists(cert_path) and os.path.exists(key_path)):
        return False
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        with open(cert_path, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
        with open(key_path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), None)
        der, spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        pair = key.public_key().public_bytes(der, spki) == cert.public_key().public_bytes(der, spki)
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        named = {str(v) for v in alt.get_values_for_type(x509.IPAddress)} | set(alt.get_values_for_type(x509.DNSName))
        fresh = cert.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    except Exception:  # (unreadable or not a certificate: made anew)
        return False
    return pair and fresh and all(str(ipaddress.ip_address(n)) in named if _is_ip(n) else n in named for n in names)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _write_atomically(path: str, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tls-")
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class ServerTls:
    """One server port's TLS: its mode and a context that follows its files."""

    def __init__(self, mode: TlsMode, cert_path: str, key_path: str, key_password: str = "",
                 trust_cert_path: str = "", client_auth: ClientAuth = ClientAuth.NONE, name: str = "server",
                 self_signed_dir: str = "", hosts: Iterable[str] = ()) -> None:
        """Without ``cert_path``, a self-signed certificate is made in ``self_signed_dir`` at the first TLS
        connection (so a server that never sees one never pays for it); the other files are loaded now, so that a
        wrong setting stops the start."""
        self.mode = mode
        self.cert_path = cert_path
        self.key_path = key_path
        self.key_password = key_password
        self.trust_cert_path = trust_cert_path
        self.client_auth = client_auth
        self.name = name
        self.reloads = 0  # contexts made after the first (a changed file)
        self._self_signed_dir = self_signed_dir
        self._hosts = tuple(hosts)
        self._files: list[str] = []
        self._signature: tuple[tuple[int, int, int], ...] = ()
        self._checked = time.monotonic()
        self._context: ssl.SSLContext | None = None
        self._loading = threading.Lock()
        if client_auth is not ClientAuth.NONE and not trust_cert_path:
            raise TlsError(f"{name}: tls_server_need_client_auth = {client_auth.value!r} needs "
                           "tls_server_trust_cert_path (the CA certificates a client's certificate is checked against)")
        if trust_cert_path and not os.access(trust_cert_path, os.R_OK):
            raise TlsError(f"{name}: tls_server_trust_cert_path {trust_cert_path!r}: no such readable file")
        if cert_path:
            self._load()

    def due(self) -> bool:
        """Whether the next ``context()`` may read files (the first one, or the look for changed files)."""
        return self._context is None or time.monotonic() - self._checked >= RELOAD_CHECK_INTERVAL

    @property
    def loaded(self) -> bool:
        """Whether a context is there already (else the first ``context()`` may make a certificate: disk work)."""
        return self._context is not None

    def _load(self) -> ssl.SSLContext:
        with self._loading:
            if self._context is not None:
                return self._context
            return self._load_locked()

    def _load_locked(self) -> ssl.SSLContext:
        if not self.cert_path:
            self.cert_path, self.key_path = self_signed(self._self_signed_dir, self._hosts, self.name)
        self._files = [p for p in (self.cert_path, self.key_path, self.trust_cert_path) if p]
        self._signature = _signature(self._files)
        self._context = self._build()
        return self._context

    @property
    def files(self) -> list[str]:
        return list(self._files)

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_path, self.key_path, self.key_password or None)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"{self.name}: tls_server_cert_path {self.cert_path!r} with tls_server_key_path "
                           f"{self.key_path!r}: cannot load the certificate and its key: {exc}") from None
        if self.client_auth is not ClientAuth.NONE:
            try:
                ctx.load_verify_locations(self.trust_cert_path)
            except (OSError, ssl.SSLError) as exc:
                raise TlsError(f"{self.name}: tls_server_trust_cert_path {self.trust_cert_path!r}: cannot load: "
                               f"{exc}") from None
            ctx.verify_mode = ssl.CERT_REQUIRED if self.client_auth is ClientAuth.REQUIRE else ssl.CERT_OPTIONAL
        # HTTP/2 for the gRPC front's TLS (its clients insist on ALPN "h2"); remoting clients send no ALPN.
        ctx.set_alpn_protocols(["h2"])
        return ctx

    def context(self) -> ssl.SSLContext:
        """The context for a new connection: made anew first if a file changed since the last look."""
        if self._context is None:
            return self._load()
        now = time.monotonic()
        if now - self._checked >= RELOAD_CHECK_INTERVAL:
            self._checked = now
            sig = _signature(self._files)
            if sig != self._signature:
                self._signature = sig
                try:
                    self._context = self._build()
                except TlsError as exc:
                    log.warning("TLS: %s; still serving the certificate loaded before", exc)
                else:
                    self.reloads += 1
                    log.info("TLS: %s: certificate files changed; new connections get the new ones", self.name)
        return self._context


def server_tls(settings: TlsServerSettings, name: str, self_signed_dir: str,
               hosts: Iterable[str] = ()) -> ServerTls | None:
    """The TLS of a server port from its settings; None when disabled. ``TlsError`` names what cannot be used."""
    try:
        mode = TlsMode(settings.tls_server_mode)
        client_auth = ClientAuth(settings.tls_server_need_client_auth)
    except ValueError as exc:
        raise TlsError(f"{name}: {exc}") from None
    if mode is TlsMode.DISABLED:
        return None
    cert, key = settings.tls_server_cert_path, settings.tls_server_key_path
    if bool(cert) != bool(key):
        raise TlsError(f"{name}: tls_server_cert_path and tls_server_key_path are set together or not at all")
    return ServerTls(mode, cert, key, settings.tls_server_key_password, settings.tls_server_trust_cert_path,
                     client_auth, name, self_signed_dir, hosts)


def client_context(cafile: str | None = None, certfile: str | None = None, keyfile: str | None = None,
                   password: str | None = None, verify: bool = True, cadata: str | None = None) -> ssl.SSLContext:
    """A client context: the server's certificate checked against ``cafile`` (else the system's CAs) and its name,
    unless ``verify`` is False (RocketMQ's default, ``tls.client.authServer=false``: encrypted, not authenticated);
    ``cadata``: the CA certificates as PEM text instead of a file; ``certfile``/``keyfile`` for mutual TLS."""
    ctx = ssl.create_default_context(cafile=cafile, cadata=cadata) if verify \
        else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile:
        ctx.load_cert_chain(certfile, keyfile or None, password or None)
    return ctx


TlsLike = bool | ssl.SSLContext


def client_tls(tls: TlsLike | None) -> ssl.SSLContext | None:
    """A client's ``tls=`` argument as a context: True checks the server against the system's CAs and its name;
    an ``ssl.SSLContext`` is used as it is (a private CA, a pinned certificate, a client certificate)."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return client_context()
    if isinstance(tls, ssl.SSLContext):
        return tls
    raise TypeError(f"tls must be True, False or an ssl.SSLContext, not {type(tls).__name__}")


def inner_client_tls(settings: TlsClientSettings, name: str) -> ssl.SSLContext | None:
    """The context of a server's own client connections (``tls_enable``), None when off."""
    if not settings.tls_enable:
        return None
    try:
        return client_context(settings.tls_client_trust_cert_path or None, settings.tls_client_cert_path or None,
                              settings.tls_client_key_path or None, settings.tls_client_key_password or None,
                              settings.tls_client_auth_server)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"{name}: tls_client_cert_path / tls_client_key_path / tls_client_trust_cert_path: cannot "
                       f"load: {exc}") from None


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to ``host:port`` (port 0 picks a free one)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


async def _first_byte(sock: socket.socket, timeout: float) -> int | None:
    """The first byte the peer sent, left in the socket; None when it closed or said nothing in time."""
    loop = asyncio.get_running_loop()
    fd = sock.fileno()
    deadline = loop.time() + timeout
    while True:
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            return None
        else:
            return data[0] if data else None
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _set_once, readable)
        try:
            await asyncio.wait_for(readable, max(0.0, deadline - loop.time()))
        except TimeoutError:
            return None
        finally:
            loop.remove_reader(fd)


def _set_once(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


Connected = Callable[[socket.socket, ssl.SSLContext | None], Awaitable[None]]


class TlsAcceptor:
    """Accepts on a listening socket for a port with TLS on (permissive or enforcing): each connection's first
    byte says whether it speaks TLS; ``connected`` gets the socket and the context to wrap it in (None:
    plaintext). In enforcing mode a plaintext connection is closed. Connections still silent count against
    ``max_pending``; past it, new ones are closed at once."""

    def __init__(self, tls: ServerTls, connected: Connected, name: str, max_pending: int = 1024,
                 capacity: Callable[[], int] | None = None) -> None:
        """``capacity``: how many more connections the server may hold now (its descriptor budget); connections
        still silent count against it."""
        self.tls = tls
        self.capacity = capacity
        self.connected = connected
        self.name = name
        self.max_pending = max_pending
        self.refused_plaintext = 0
        self.refused_over_limit = 0
        self.tls_connections = 0
        self.plain_connections = 0
        self._pending: set[asyncio.Task[None]] = set()
        self._silent = 0  # of those, the connections still to send their first byte
        self._accepting: asyncio.Task[None] | None = None
        self._listening: socket.socket | None = None
        self._logged = -1e9

    def start(self, listening: socket.socket, backlog: int = 1024) -> None:
        listening.listen(backlog)
        listening.setblocking(False)
        self._listening = listening
        self._accepting = asyncio.get_running_loop().create_task(self._accept())

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listening is not None
        while True:
            try:
                sock, _ = await loop.sock_accept(self._listening)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # EMFILE and the like: wait, as a server loop does
                self._rate_limited_warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            room = self.max_pending if self.capacity is None else min(self.max_pending, self.capacity())
            if self._silent >= room:
                self.refused_over_limit += 1  # (counted before the peer can see it closed)
                sock.close()
                self._rate_limited_warning("closing a connection: %d are still to send their first byte (the "
                                           "limit: max_connections and the open files left)", self._silent)
                continue
            sock.setblocking(False)
            task = loop.create_task(self._sniff(sock))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _sniff(self, sock: socket.socket) -> None:
        self._silent += 1
        try:
            try:
                first = await _first_byte(sock, FIRST_BYTE_TIMEOUT)
            finally:
                self._silent -= 1  # (from here on the server counts it, once it has its handshake)
            if first is None:
                sock.close()
                return
            if first == TLS_HANDSHAKE_RECORD:
                self.tls_connections += 1
                # (loading or reloading reads files and may make a key: off the event loop)
                ctx: ssl.SSLContext | None = (await asyncio.to_thread(self.tls.context) if self.tls.due()
                                              else self.tls.context())
            elif self.tls.mode is TlsMode.ENFORCING:
                self.refused_plaintext += 1
                self._rate_limited_warning("closing a plaintext connection from %s: tls_server_mode is enforcing",
                                           _peer(sock))
                sock.close()
                return
            else:
                self.plain_connections += 1
                ctx = None
            await self.connected(sock, ctx)
        except asyncio.CancelledError:
            sock.close()
            raise
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            log.info("%s: connection from %s failed at its start: %s", self.name, _peer(sock),
                     str(exc) or type(exc).__name__)
            sock.close()
        except Exception:  # a bug of ours: this connection only
            log.exception("%s: connection from %s failed at its start", self.name, _peer(sock))
            sock.close()

    def _rate_limited_warning(self, fmt: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._logged > 10:
            self._logged = now
            log.warning("%s: " + fmt, self.name, *args)

    def close(self) -> None:
        """Stop accepting: the listening socket is closed, connections still sniffed are dropped."""
        if self._accepting is not None:
            self._accepting.cancel()
            self._accepting = None
        for task in list(self._pending):
            task.cancel()
        if self._listening is not None:
            self._listening.close()
            self._listening = None


def _peer(sock: socket.socket) -> str:
    try:
        peer = sock.getpeername()
    except OSError:
        return "?"
    return f"{peer[0]}:{peer[1]}"


__all__ = ["ClientAuth", "ServerTls", "TlsAcceptor", "TlsError", "TlsLike", "TlsMode", "bind_socket", "client_context",
           "client_tls", "inner_client_tls", "self_signed", "server_tls"]
