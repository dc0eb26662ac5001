"""An asyncio client for etcd's v3 API through its JSON gateway (etcd 3.4+), on the standard library alone.

Every call is one HTTP/1.1 POST of a JSON body to ``/v3/<service>/<method>``; keys and values travel base64
encoded, int64 fields come back as strings, and a field left out means 0 (or empty). ``/v3/lease/keepalive`` is
a streaming RPC: one POST carrying one request answers ``{"result": {...}}`` (chunked), and an unknown or
expired lease answers a result without ``TTL``.

Connections are kept alive and reused (a few idle ones per client). A call that cannot connect to an endpoint
tries the next one; a call whose connection fails after its request was sent goes on to the next endpoint only
when it changes nothing (range, lease keepalive), else it fails with :class:`EtcdUnavailable` saying its outcome
is unknown. ``timeout`` bounds each attempt on one endpoint.

::

    client = EtcdClient(["127.0.0.1:2379"])
    ok = (await client.txn([Compare.version(b"k", "=", 0)], [Op.put(b"k", b"v")], [Op.get(b"k")])).succeeded
    await client.close()
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_RESPONSE_BYTES = 4 << 20
"""The default bound on one response body; a longer one is refused."""

_MAX_HEADER_BYTES = 64 << 10
_MAX_IDLE_CONNECTIONS = 4
_GRPC_UNAVAILABLE = 14

CompareOp = Literal["=", "!=", "<", ">"]
_COMPARE_RESULTS: dict[str, str] = {"=": "EQUAL", "!=": "NOT_EQUAL", "<": "LESS", ">": "GREATER"}


class EtcdError(Exception):
    """etcd refused a request (``code`` is the gRPC status code, 0 where none was given), or answered nonsense."""

    def __init__(self, message: str, code: int = 0, http_status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status


class EtcdUnavailable(EtcdError):
    """No endpoint could be reached or answered in time (or etcd said it is unavailable, e.g. has no leader)."""


# ---------------------------------------------------------------------------------------------------------------
# Value types


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as etcd stores it: revisions are cluster-wide, ``version`` counts the puts since its creation."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease: its id and the TTL (seconds) etcd chose."""

    id: int
    ttl: int


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction; build it with the class methods, e.g. ``Compare.version(key, "=", 0)``."""

    key: bytes
    target: Literal["VALUE", "VERSION", "MOD", "CREATE", "LEASE"]
    op: CompareOp
    operand: int | bytes

    def __post_init__(self) -> None:
        if self.op not in _COMPARE_RESULTS:
            raise ValueError(f"compare operator must be one of {', '.join(_COMPARE_RESULTS)}, not {self.op!r}")

    @classmethod
    def value(cls, key: bytes, op: CompareOp, value: bytes) -> Compare:
        """The key's value compared with ``value`` (an absent key never compares equal)."""
        return cls(key, "VALUE", op, bytes(value))

    @classmethod
    def version(cls, key: bytes, op: CompareOp, version: int) -> Compare:
        """The key's version (0: the key is absent) compared with ``version``."""
        return cls(key, "VERSION", op, int(version))

    @classmethod
    def mod_revision(cls, key: bytes, op: CompareOp, revision: int) -> Compare:
        """The revision of the key's last change compared with ``revision``."""
        return cls(key, "MOD", op, int(revision))

    @classmethod
    def create_revision(cls, key: bytes, op: CompareOp, revision: int) -> Compare:
        """The revision that created the key compared with ``revision`` (0: absent)."""
        return cls(key, "CREATE", op, int(revision))

    @classmethod
    def lease(cls, key: bytes, op: CompareOp, lease_id: int) -> Compare:
        """The lease the key is attached to compared with ``lease_id`` (0: none)."""
        return cls(key, "LEASE", op, int(lease_id))

    def to_json(self) -> dict[str, Any]:
        """The gateway's JSON form of this compare."""
        out: dict[str, Any] = {"key": _b64(self.key), "target": self.target, "result": _COMPARE_RESULTS[self.op]}
        if self.target == "VALUE":
            assert isinstance(self.operand, bytes)
            out["value"] = _b64(self.operand)
        else:
            field_name = {"VERSION": "version", "MOD": "mod_revision", "CREATE": "create_revision",
                          "LEASE": "lease"}[self.target]
            out[field_name] = str(self.operand)
        return out


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a transaction: ``Op.put(key, value, lease=0)``, ``Op.delete(key)`` or ``Op.get(key)``."""

    kind: Literal["put", "delete", "get"]
    key: bytes
    value: bytes = b""
    lease: int = 0

    @classmethod
    def put(cls, key: bytes, value: bytes, lease: int = 0) -> Op:
        """Set ``key`` to ``value``, attached to ``lease`` (0: none)."""
        return cls("put", bytes(key), bytes(value), int(lease))

    @classmethod
    def delete(cls, key: bytes) -> Op:
        """Delete ``key``."""
        return cls("delete", bytes(key))

    @classmethod
    def get(cls, key: bytes) -> Op:
        """Read ``key``."""
        return cls("get", bytes(key))

    def to_json(self) -> dict[str, Any]:
        """The gateway's JSON form of this operation (a ``RequestOp``)."""
        if self.kind == "put":
            put: dict[str, Any] = {"key": _b64(self.key), "value": _b64(self.value)}
            if self.lease:
                put["lease"] = str(self.lease)
            return {"request_put": put}
        if self.kind == "delete":
            return {"request_delete_range": {"key": _b64(self.key)}}
        return {"request_range": {"key": _b64(self.key)}}


@dataclass(frozen=True, slots=True)
class OpResponse:
    """What one operation of a transaction answered: ``kvs`` for a get, ``deleted`` for a delete."""

    kind: Literal["put", "delete", "get"]
    revision: int
    kvs: tuple[KeyValue, ...] = ()
    deleted: int = 0


@dataclass(frozen=True, slots=True)
class TxnResult:
    """A transaction's outcome: whether the compares held (so ``success`` ran, else ``failure``), the revision
    after it, and one response per operation that ran."""

    succeeded: bool
    revision: int
    responses: list[OpResponse] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------
# JSON helpers


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not text:
        return b""
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError) as exc:
        raise EtcdError(f"etcd answered a field that is not base64: {text!r:.80}") from exc


def _int(obj: dict[str, Any], name: str) -> int:
    raw = obj.get(name)
    if raw is None or raw == "":
        return 0
    try:
        return int(raw)
    except (TypeError, ValueError) as exc:
        raise EtcdError(f"etcd answered a non-integer {name}: {raw!r:.80}") from exc


def _revision(obj: dict[str, Any]) -> int:
    header = obj.get("header")
    return _int(header, "revision") if isinstance(header, dict) else 0


def _key_value(obj: Any) -> KeyValue:
    if not isinstance(obj, dict):
        raise EtcdError(f"etcd answered a key-value that is not an object: {obj!r:.80}")
    return KeyValue(key=_unb64(obj.get("key")), value=_unb64(obj.get("value")),
                    create_revision=_int(obj, "create_revision"), mod_revision=_int(obj, "mod_revision"),
                    version=_int(obj, "version"), lease=_int(obj, "lease"))


def _kvs(obj: dict[str, Any]) -> list[KeyValue]:
    kvs = obj.get("kvs") or []
    if not isinstance(kvs, list):
        raise EtcdError("etcd answered 'kvs' that is not a list")
    return [_key_value(kv) for kv in kvs]


def _op_response(obj: Any) -> OpResponse:
    if isinstance(obj, dict):
        if isinstance(obj.get("response_range"), dict):
            r = obj["response_range"]
            return OpResponse("get", _revision(r), kvs=tuple(_kvs(r)))
        if isinstance(obj.get("response_put"), dict):
            return OpResponse("put", _revision(obj["response_put"]))
        if isinstance(obj.get("response_delete_range"), dict):
            r = obj["response_delete_range"]
            return OpResponse("delete", _revision(r), deleted=_int(r, "deleted"))
    raise EtcdError(f"etcd answered a transaction response of no known kind: {obj!r:.120}")


def prefix_range_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes a range cover every key starting with ``prefix`` (``b"\\0"``: all keys)."""
    end = bytearray(prefix)
    while end and end[-1] == 0xFF:
        end.pop()
    if not end:
        return b"\0"
    end[-1] += 1
    return bytes(end)


def _error_from_body(status: int, body: bytes) -> EtcdError:
    """The error an HTTP error status (or a stream's ``{"error": ...}``) stands for."""
    message, code = "", 0
    try:
        obj = json.loads(body)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict):  # a streaming call's error: {"error": {"grpc_code": .., "message": ..}}
            obj = err
        message = str(obj.get("message") or obj.get("error") or "")
        try:
            code = int(obj.get("code") or obj.get("grpc_code") or 0)
        except (TypeError, ValueError):
            code = 0
    if not message:
        message = body[:200].decode("utf-8", "replace").strip() or f"HTTP status {status}"
    cls = EtcdUnavailable if code == _GRPC_UNAVAILABLE or status == 503 else EtcdError
    return cls(message, code=code, http_status=status)


# ---------------------------------------------------------------------------------------------------------------
# HTTP/1.1


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``"127.0.0.1:2379"``, ``"http://127.0.0.1:2379"`` or ``"https://..."`` → (host, port)."""
    text = endpoint.strip()
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme.lower() not in ("http", "https"):
            raise ValueError(f"etcd endpoint {endpoint!r}: http:// or https:// is supported")
    text = text.rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"etcd endpoint must be host:port or http://host:port, not {endpoint!r}")
    return host.strip("[]"), int(port)


def is_tls_endpoint(endpoint: str) -> bool:
    """Whether ``endpoint`` is spoken to over TLS (``https://``)."""
    return endpoint.strip().lower().startswith("https://")


class _ConnectFailed(Exception):
    """Nothing was sent: the endpoint could not be connected to."""


class _ConnectionLost(Exception):
    """The request may have been sent, and no (whole) response came back."""


class _HttpConnection:
    """One keep-alive HTTP/1.1 connection to one endpoint; one request at a time."""

    def __init__(self, endpoint: str, host: str, port: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.endpoint = endpoint
        self.host_header = f"{host}:{port}".encode("ascii", "replace")
        self.reader = reader
        self.writer = writer
        self.reusable = True

    @classmethod
    async def open(cls, endpoint: str, tls: ssl.SSLContext | None = None) -> _HttpConnection:
        host, port = parse_endpoint(endpoint)
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=_MAX_HEADER_BYTES, ssl=tls,
                                                           server_hostname=host if tls else None)
        except OSError as exc:  # (ssl.SSLError too: a refused certificate)
            raise _ConnectFailed(f"{endpoint}: {exc.strerror or exc}") from exc
        return cls(endpoint, host, port, reader, writer)

    def usable(self) -> bool:
        """Still open, and the server has not closed its side meanwhile (an idle connection to a restarted
        server)."""
        return self.reusable and not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.reusable = False
        self.writer.close()

    async def post(self, path: str, body: bytes, max_body: int) -> tuple[int, bytes]:
        """POST ``body`` to ``path``; the status and the response body (at most ``max_body`` bytes)."""
        head = (b"POST " + path.encode("ascii") + b" HTTP/1.1\r\nHost: " + self.host_header +
                b"\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: " +
                str(len(body)).encode("ascii") + b"\r\n\r\n")
        try:
            self.writer.write(head + body)
            await self.writer.drain()
            status, headers, http10 = await self._read_head()
            if headers.get("transfer-encoding", "").lower() not in ("", "identity"):
                if headers["transfer-encoding"].lower() != "chunked":
                    raise EtcdError(f"{self.endpoint}: unsupported transfer-encoding {headers['transfer-encoding']}")
                data = await self._read_chunked(max_body)
            elif "content-length" in headers:
                length = self._content_length(headers["content-length"])
                if length > max_body:
                    raise self._too_large(max_body)
                data = await self.reader.readexactly(length)
            else:  # the body runs to the end of the connection
                self.reusable = False
                data = await self.reader.read(max_body + 1)
                while len(data) <= max_body and not self.reader.at_eof():
                    more = await self.reader.read(max_body + 1 - len(data))
                    if not more:
                        break
                    data += more
                if len(data) > max_body:
                    raise self._too_large(max_body)
        except (OSError, asyncio.IncompleteReadError, ConnectionError) as exc:
            self.close()
            raise _ConnectionLost(f"{self.endpoint}: connection lost ({exc.__class__.__name__})") from exc
        except asyncio.LimitOverrunError as exc:
            self.close()
            raise EtcdError(f"{self.endpoint}: response header line longer than {_MAX_HEADER_BYTES} bytes") from exc
        except BaseException:
            self.close()  # an error, a timeout or a cancel mid-response: the rest would be read as the next one
            raise
        if http10 or headers.get("connection", "").lower() == "close":
            self.reusable = False
        return status, data

    async def _read_head(self) -> tuple[int, dict[str, str], bool]:
        while True:
            line = await self.reader.readuntil(b"\r\n")
            parts = line.decode("latin-1").split(None, 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise EtcdError(f"{self.endpoint}: not an HTTP/1.x response: {line[:80]!r}")
            status = int(parts[1])
            headers: dict[str, str] = {}
            size = len(line)
            while True:
                line = await self.reader.readuntil(b"\r\n")
                size += len(line)
                if size > _MAX_HEADER_BYTES:
                    raise EtcdError(f"{self.endpoint}: response headers longer than {_MAX_HEADER_BYTES} bytes")
                if line == b"\r\n":
                    break
                name, sep, value = line.decode("latin-1").partition(":")
                if not sep:
                    raise EtcdError(f"{self.endpoint}: malformed response header {line[:80]!r}")
                headers[name.strip().lower()] = value.strip()
            if 100 <= status < 200:  # an interim response: the real one follows
                continue
            return status, headers, parts[0] == "HTTP/1.0"

    def _content_length(self, text: str) -> int:
        if not text.isdigit():
            raise EtcdError(f"{self.endpoint}: bad Content-Length {text!r:.40}")
        return int(text)

    def _too_large(self, max_body: int) -> EtcdError:
        return EtcdError(f"{self.endpoint}: response larger than {max_body} bytes refused")

    async def _read_chunked(self, max_body: int) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = await self.reader.readuntil(b"\r\n")
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise EtcdError(f"{self.endpoint}: bad chunk size {line[:40]!r}") from None
            if size < 0:
                raise EtcdError(f"{self.endpoint}: bad chunk size {line[:40]!r}")
            if size == 0:
                break
            total += size
            if total > max_body:
                raise self._too_large(max_body)
            parts.append(await self.reader.readexactly(size))
            if await self.reader.readexactly(2) != b"\r\n":
                raise EtcdError(f"{self.endpoint}: chunk not followed by CRLF")
        trailer_bytes = 0
        while True:  # trailers (etcd sends Grpc-Trailer-* on errors), up to the empty line
            line = await self.reader.readuntil(b"\r\n")
            trailer_bytes += len(line)
            if trailer_bytes > _MAX_HEADER_BYTES:
                raise EtcdError(f"{self.endpoint}: response trailers longer than {_MAX_HEADER_BYTES} bytes")
            if line == b"\r\n":
                return b"".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# The client


class EtcdClient:
    """etcd's KV, transaction and lease calls over the JSON gateway of any of ``endpoints``.

    ``endpoints``: ``"host:port"``, ``"http://host:port"`` or ``"https://host:port"``, tried in turn when one
    cannot be reached; the client stays on the last one that answered. ``timeout`` (seconds) bounds each attempt on
    one endpoint; ``max_response_bytes`` bounds a response body (a longer one fails the call with
    :class:`EtcdError`). ``tls``: the context for ``https://`` endpoints (etcd's CA, a client certificate for
    ``--client-cert-auth``); without it, the system's CAs.
    """

    def __init__(self, endpoints: Sequence[str], timeout: float = 2.0,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, tls: ssl.SSLContext | None = None) -> None:
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        if not endpoints:
            raise ValueError("EtcdClient needs at least one endpoint")
        for e in endpoints:
            parse_endpoint(e)  # fail here, not on the first call
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout}")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._tls = tls if tls is not None else (ssl.create_default_context()
                                                 if any(is_tls_endpoint(e) for e in endpoints) else None)
        self._current = 0
        self._idle: list[_HttpConnection] = []
        self._busy: set[_HttpConnection] = set()
        self._closed = False

    @property
    def endpoint(self) -> str:
        """The endpoint the next call tries first."""
        return self.endpoints[self._current]

    async def close(self) -> None:
        """Close every connection; later calls fail with :class:`EtcdUnavailable`."""
        self._closed = True
        conns = self._idle + list(self._busy)
        self._idle.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            try:
                await conn.writer.wait_closed()
            except (OSError, ConnectionError):
                pass

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- KV ------------------------------------------------------------------------------------------------------

    async def get(self, key: bytes) -> KeyValue | None:
        """The key, or None where it is absent."""
        kvs = _kvs(await self._call("/v3/kv/range", {"key": _b64(key)}, retry_after_send=True))
        return kvs[0] if kvs else None

    async def get_prefix(self, prefix: bytes) -> list[KeyValue]:
        """Every key starting with ``prefix``, in key order (an empty prefix: every key)."""
        body = {"key": _b64(prefix or b"\0"), "range_end": _b64(prefix_range_end(prefix)),
                "sort_order": "ASCEND", "sort_target": "KEY"}
        return _kvs(await self._call("/v3/kv/range", body, retry_after_send=True))

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        """Set ``key`` to ``value`` (attached to ``lease``, 0: none); the revision of the change."""
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        return _revision(await self._call("/v3/kv/put", body))

    async def delete(self, key: bytes) -> int:
        """Delete ``key``; how many keys were deleted (0 or 1)."""
        return _int(await self._call("/v3/kv/deleterange", {"key": _b64(key)}), "deleted")

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        """If every compare holds run ``success``, else ``failure``, atomically."""
        body = {"compare": [c.to_json() for c in compares], "success": [op.to_json() for op in success],
                "failure": [op.to_json() for op in failure]}
        obj = await self._call("/v3/kv/txn", body)
        responses = obj.get("responses") or []
        if not isinstance(responses, list):
            raise EtcdError("etcd answered transaction 'responses' that is not a list")
        return TxnResult(succeeded=bool(obj.get("succeeded", False)), revision=_revision(obj),
                         responses=[_op_response(r) for r in responses])

    # -- leases --------------------------------------------------------------------------------------------------

    async def lease_grant(self, ttl_seconds: int) -> Lease:
        """A new lease of ``ttl_seconds``; keys put with it are deleted when it expires or is revoked."""
        obj = await self._call("/v3/lease/grant", {"TTL": str(int(ttl_seconds))})
        if obj.get("error"):
            raise EtcdError(str(obj["error"]))
        return Lease(id=_int(obj, "ID"), ttl=_int(obj, "TTL"))

    async def lease_keepalive(self, lease_id: int) -> int:
        """Renew the lease once; its TTL (seconds) from now, 0 where it expired or is unknown."""
        obj = await self._call("/v3/lease/keepalive", {"ID": str(int(lease_id))}, retry_after_send=True,
                               stream=True)
        return _int(obj, "TTL")

    async def lease_revoke(self, lease_id: int) -> None:
        """End the lease now, deleting its keys; :class:`EtcdError` (code 5) where it is unknown."""
        await self._call("/v3/lease/revoke", {"ID": str(int(lease_id))})

    # -- transport -----------------------------------------------------------------------------------------------

    async def _call(self, path: str, body: dict[str, Any], retry_after_send: bool = False,
                    stream: bool = False) -> dict[str, Any]:
        """POST to the current endpoint, going on to the next ones as described in the module docstring."""
        if self._closed:
            raise EtcdUnavailable("the etcd client is closed")
        payload = json.dumps(body, separators=(",", ":")).encode()
        failures: list[str] = []
        n = len(self.endpoints)
        for i in range(n):
            if self._closed:  # closed while this call was going on to the next endpoint
                raise EtcdUnavailable("the etcd client is closed")
            index = (self._current + i) % n
            endpoint = self.endpoints[index]
            try:
                status, data = await self._post(endpoint, path, payload)
            except _ConnectFailed as exc:
                failures.append(str(exc))
                continue
            except _ConnectionLost as exc:
                failures.append(str(exc))
                if not retry_after_send:
                    raise EtcdUnavailable(f"{path}: {exc}: the request may or may not have been applied") from exc
                continue
            result = self._decode(endpoint, status, data, stream)
            if isinstance(result, EtcdUnavailable) and retry_after_send:
                failures.append(f"{endpoint}: {result}")
                continue
            self._current = index
            if isinstance(result, EtcdError):
                raise result
            return result
        raise EtcdUnavailable(f"{path}: no etcd endpoint answered ({'; '.join(failures)})")

    async def _post(self, endpoint: str, path: str, payload: bytes) -> tuple[int, bytes]:
        """One attempt on ``endpoint``, within ``timeout``: :class:`_ConnectFailed` where nothing was sent,
        :class:`_ConnectionLost` where the request went out and no whole answer came back in time."""
        deadline = asyncio.get_running_loop().time() + self.timeout
        conn = self._take_idle(endpoint)
        if conn is None:
            try:
                async with asyncio.timeout_at(deadline):
                    conn = await _HttpConnection.open(endpoint, self._tls if is_tls_endpoint(endpoint) else None)
            except TimeoutError:
                raise _ConnectFailed(f"{endpoint}: no connection within {self.timeout} s") from None
        self._busy.add(conn)
        try:
            async with asyncio.timeout_at(deadline):
                result = await conn.post(path, payload, self.max_response_bytes)
        except TimeoutError:
            raise _ConnectionLost(f"{endpoint}: no answer within {self.timeout} s") from None
        finally:
            self._busy.discard(conn)
        if conn.usable() and not self._closed and len(self._idle) < _MAX_IDLE_CONNECTIONS:
            self._idle.append(conn)
        else:
            conn.close()
        return result

    def _take_idle(self, endpoint: str) -> _HttpConnection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.endpoint == endpoint and conn.usable():
                return conn
            conn.close()  # another endpoint's (we moved on) or closed by the server meanwhile
        return None

    def _decode(self, endpoint: str, status: int, data: bytes, stream: bool) -> dict[str, Any] | EtcdError:
        if status != 200:
            return _error_from_body(status, data)
        try:
            if stream:  # newline-delimited {"result": ...} or {"error": ...}; one request, so the first counts
                line = next((ln for ln in data.split(b"\n") if ln.strip()), b"")
                obj = json.loads(line)
            else:
                obj = json.loads(data)
        except ValueError:
            return EtcdError(f"{endpoint}: etcd answered a body that is not JSON: {data[:80]!r}")
        if not isinstance(obj, dict):
            return EtcdError(f"{endpoint}: etcd answered JSON that is not an object: {data[:80]!r}")
        if stream:
            if "error" in obj:
                return _error_from_body(status, data)
            obj = obj.get("result")
            if not isinstance(obj, dict):
                return EtcdError(f"{endpoint}: etcd's stream answered no result: {data[:80]!r}")
        return obj
