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
import time
from collections.abc import Mapping
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


# Bodies up to this size are joined to the fields and hashed in one call (hmac.digest: C, no hmac object); larger
# ones are fed to an hmac object part by part, not copied.
_JOIN_BELOW = 64 * 1024


def hmac_sha1_base64(secret: str, content: Content | bytes) -> str:
    key = secret.encode("utf-8")
    if isinstance(content, bytes):
        digest = hmac.digest(key, content, "sha1")
    elif len(content) == 1:
        digest = hmac.digest(key, content[0], "sha1")
    elif len(content[1]) < _JOIN_BELOW:
        digest = hmac.digest(key, b"".join(content), "sha1")
    else:
        mac = hmac.new(key, None, hashlib.sha1)
        for part in content:
            mac.update(part)
        digest = mac.digest()
    return base64.b64encode(digest).decode("ascii")


def remoting_content(ext_fields: Mapping[str, str], body: bytes | memoryview | None,
                     version: int | None = None) -> Content:
    """What a remoting request's signature covers."""
    if version is not None and version <= V4_9_3 and UNIQUE_KEY_QUERY in ext_fields:
        text = "".join([ext_fields[k] for k in sorted(ext_fields) if k != SIGNATURE and k != UNIQUE_KEY_QUERY])
    else:
        text = "".join([ext_fields[k] for k in sorted(ext_fields) if k != SIGNATURE])
    head = text.encode("utf-8", "replace")  # (a lone surrogate: "?", as Java's getBytes writes it)
    return (head, body) if body else (head,)


def sign_remoting(ext_fields: dict[str, str], body: bytes | memoryview | None, access_key: str, secret_key: str,
                  security_token: str | None = None) -> None:
    """Add ``AccessKey`` (and ``SecurityToken``) and ``Signature`` to ``ext_fields``, as ``AclClientRPCHook``."""
    ext_fields[ACCESS_KEY] = access_key
    if security_token is not None:
        ext_fields[SECURITY_TOKEN] = security_token
    ext_fields.pop(SIGNATURE, None)
    ext_fields[SIGNATURE] = hmac_sha1_base64(secret_key, remoting_content(ext_fields, body))


def signature_matches(secret: str, content: Content | bytes, signature: str | None) -> bool:
    """Constant-time: whether ``signature`` (base64) is the content's HMAC-SHA1 under ``secret``."""
    if signature is None or not secret:
        return False
    expected = hmac_sha1_base64(secret, content).encode("ascii")
    return hmac.compare_digest(expected, signature.encode("utf-8", "replace"))


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
