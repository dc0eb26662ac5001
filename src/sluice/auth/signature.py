"""How RocketMQ's clients sign a request, and how a server checks it: sans-IO, no state.

Remoting (``AclClientRPCHook`` / ``AclUtils``): the ext fields, ``AccessKey`` (and ``SecurityToken``) included, sorted
by name, their values joined with nothing between, then the body; HMAC-SHA1 keyed by the secret, base64, in
``Signature``. gRPC (the 5.x clients): ``authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time,
Signature=<hex>``, the HMAC-SHA1 of the ``x-mq-date-time`` value (``yyyyMMdd'T'HHmmss'Z'``, UTC).
"""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import hmac
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
# Pre-4.9.3 clients add this field after signing: a server leaves it out of what it checks for them.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
V4_9_3 = 399

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
ALGORITHM = "MQv2-HMAC-SHA1"


Content = tuple[bytes | memoryview, ...]  # the parts signed, in order (not joined: a body is not copied)

_SHA1_BLOCK = 64
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


class HmacSha1Key:
    """One secret's HMAC-SHA1 (RFC 2104) with its padded key hashed once: each digest starts from copies of the inner
    and outer hash states instead of hashing the key again, and skips the algorithm look-up OpenSSL 3's one-shot
    HMAC makes on every call. The same bytes as ``hmac.digest(secret, content, "sha1")``; no repr shows the secret.
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret: str) -> None:
        key = secret.encode("utf-8")
        if len(key) > _SHA1_BLOCK:
            key = hashlib.sha1(key).digest()
        key = key.ljust(_SHA1_BLOCK, b"\0")
        self._inner = hashlib.sha1(key.translate(_IPAD))
        self._outer = hashlib.sha1(key.translate(_OPAD))

    def digest(self, content: Content | bytes) -> bytes:
        inner = self._inner.copy()
        if isinstance(content, bytes):
            inner.update(content)
        else:
            for part in content:  # (a large body is hashed where it is, not copied)
                inner.update(part)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def base64(self, content: Content | bytes) -> str:
        return binascii.b2a_base64(self.digest(content), newline=False).decode("ascii")

    def matches(self, content: Content | bytes, signature: str | None) -> bool:
        """Constant-time: whether ``signature`` (base64) is the content's HMAC-SHA1 under this key."""
        if signature is None:
            return False
        return hmac.compare_digest(self.base64(content).encode("ascii"), signature.encode("utf-8", "replace"))


def hmac_sha1_base64(secret: str, content: Content | bytes) -> str:
    return HmacSha1Key(secret).base64(content)


# The order a request's fields are signed in depends on their names only: kept per tuple of names as the request
# holds them (a client sends the same names in the same order every time), for requests of a usual size, bounded.
_Fields = Callable[[Mapping[str, str]], Sequence[str]]
_SIGNED_FIELDS: dict[tuple[tuple[str, ...], bool], _Fields] = {}
_SIGNED_FIELDS_SIZE = 1024
_SIGNED_FIELDS_MAX_NAMES = 64


def _no_fields(ext: Mapping[str, str]) -> Sequence[str]:
    return ()


def _signed_fields(names: tuple[str, ...], legacy: bool) -> _Fields:
    """What picks a request's signed values, in order: every field but ``Signature`` (and, for a pre-4.9.3 client,
    ``_UNIQUE_KEY_QUERY``) sorted by name."""
    signed = [k for k in sorted(names) if k != SIGNATURE and not (legacy and k == UNIQUE_KEY_QUERY)]
    if not signed:
        return _no_fields
    if len(signed) == 1:
        only = signed[0]
        return lambda ext: (ext[only],)
    return operator.itemgetter(*signed)


def remoting_content(ext_fields: Mapping[str, str], body: bytes | memoryview | None,
                     version: int | None = None) -> Content:
    """What a remoting request's signature covers."""
    legacy = version is not None and version <= V4_9_3 and UNIQUE_KEY_QUERY in ext_fields
    names = tuple(ext_fields)
    if len(names) > _SIGNED_FIELDS_MAX_NAMES:
        values = _signed_fields(names, legacy)(ext_fields)
    else:
        key = (names, legacy)
        fields = _SIGNED_FIELDS.get(key)
        if fields is None:
            fields = _signed_fields(names, legacy)
            if len(_SIGNED_FIELDS) >= _SIGNED_FIELDS_SIZE:
                _SIGNED_FIELDS.clear()
            _SIGNED_FIELDS[key] = fields
        values = fields(ext_fields)
    head = "".join(values).encode("utf-8", "replace")  # (a lone surrogate: "?", as Java's getBytes writes it)
    return (head, body) if body else (head,)


def sign_remoting(ext_fields: dict[str, str], body: bytes | memoryview | None, access_key: str,
                  secret_key: str | HmacSha1Key, security_token: str | None = None) -> None:
    """Add ``AccessKey`` (and ``SecurityToken``) and ``Signature`` to ``ext_fields``, as ``AclClientRPCHook``
    (``secret_key``: the secret, or its ``HmacSha1Key`` kept between requests)."""
    key = secret_key if isinstance(secret_key, HmacSha1Key) else HmacSha1Key(secret_key)
    ext_fields[ACCESS_KEY] = access_key
    if security_token is not None:
        ext_fields[SECURITY_TOKEN] = security_token
    ext_fields.pop(SIGNATURE, None)
    ext_fields[SIGNATURE] = key.base64(remoting_content(ext_fields, body))


def signature_matches(secret: str, content: Content | bytes, signature: str | None) -> bool:
    """Constant-time: whether ``signature`` (base64) is the content's HMAC-SHA1 under ``secret``."""
    if signature is None or not secret:
        return False
    return HmacSha1Key(secret).matches(content, signature)


# == gRPC ========================================================================================
def grpc_date_time(now: float | None = None) -> str:
    return time.strftime(DATE_TIME_FORMAT, time.gmtime(time.time() if now is None else now))


def grpc_authorization(access_key: str, secret_key: str, date_time: str) -> str:
    """The ``authorization`` header value a 5.x client sends with ``x-mq-date-time: date_time``."""
    mac = hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), hashlib.sha1).hexdigest().upper()
    return f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME}, Signature={mac}"


@dataclass(frozen=True, slots=True)
class GrpcCredential:
    username: str | None
    signature: str | None  # base64, as the remoting one
    content: bytes


class MalformedAuthorization(ValueError):
    """An ``authorization`` header RocketMQ's parser refuses; the message is its remark."""


def parse_grpc_authorization(authorization: str | None, date_time: str | None) -> GrpcCredential:
    """RocketMQ's ``DefaultAuthenticationContextBuilder`` for gRPC metadata; no header → no username."""
    if not authorization:
        return GrpcCredential(None, None, b"")
    if not date_time:
        raise MalformedAuthorization("datetime is null.")
    parts = authorization.split(" ", 1)
    if len(parts) != 2:
        raise MalformedAuthorization("authentication header is incorrect.")
    username: str | None = None
    signature: str | None = None
    for item in parts[1].split(","):
        kv = item.strip().split("=", 1)
        if len(kv) != 2:
            raise MalformedAuthorization(f"authentication keyValues length is incorrect, actual length={len(kv)}.")
        if kv[0] == "Credential":
            username = kv[1].split("/")[0]
        elif kv[0] == "Signature":
            try:
                signature = base64.b64encode(binascii.unhexlify(kv[1])).decode("ascii")
            except (binascii.Error, ValueError):
                raise MalformedAuthorization("create authentication context error.") from None
    return GrpcCredential(username, signature, date_time.encode("utf-8"))


# RocketMQ's clients write their local time followed by a literal "Z" (Java's SimpleDateFormat with no zone, Python's
# datetime.now()): a stamp is their clock shifted by their zone's offset, UTC-12 to UTC+14.
_ZONE_BEHIND, _ZONE_AHEAD = 12 * 3600, 14 * 3600


def grpc_date_time_age(date_time: str, now: float | None = None) -> float | None:
    """How far ``date_time`` lies outside the window a client's clock can write now (0: inside it); None when it
    is not a date RocketMQ's clients write. The window is a day wide: the clients' zones."""
    try:
        stamp = calendar.timegm(time.strptime(date_time, DATE_TIME_FORMAT))
    except ValueError:
        return None
    now = time.time() if now is None else now
    return max(0.0, now - _ZONE_BEHIND - stamp, stamp - now - _ZONE_AHEAD)
