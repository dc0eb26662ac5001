"""A client's credentials (RocketMQ's ``SessionCredentials``), and the hook that signs each remoting request with
them (``AclClientRPCHook``). The secret never appears in a repr, a log line or an error."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from sluice.auth.signature import HmacSha1Key, sign_remoting
from sluice.remoting.command import RemotingCommand


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.access_key, str) or not isinstance(self.secret_key, str):
            raise TypeError("credentials are (access_key, secret_key) strings")
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need a non-empty access key and secret key")


# What a client takes: credentials, an (access key, secret key) pair, or a function returning either (called for
# every request: a provider may rotate them).
CredentialsLike = Credentials | tuple[str, str] | Callable[[], Credentials | tuple[str, str]]


def as_credentials(value: Credentials | tuple[str, str]) -> Credentials:
    if isinstance(value, Credentials):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return Credentials(value[0], value[1])
    raise TypeError("credentials must be Credentials, an (access_key, secret_key) pair, or a function returning one")


def signing_hook(credentials: CredentialsLike | None) -> Callable[[RemotingCommand], None] | None:
    """The request hook of a client with ``credentials`` (None: requests go unsigned). The secret's HMAC key is
    prepared once (a provider's: again whenever the secret it returns changes)."""
    if credentials is None:
        return None
    if callable(credentials) and not isinstance(credentials, (Credentials, tuple)):
        provider = credentials
        last: list[tuple[str, HmacSha1Key]] = []  # (the secret, its key): the provider's latest

        def sign_provided(request: RemotingCommand) -> None:
            c = as_credentials(provider())
            kept = last[0] if last else None  # (read once: another thread may replace it meanwhile)
            if kept is None or kept[0] != c.secret_key:
                kept = (c.secret_key, HmacSha1Key(c.secret_key))
                last[:] = [kept]
            sign_remoting(request.ext_fields, request.body, c.access_key, kept[1], c.security_token)
        return sign_provided
    fixed = as_credentials(credentials)
    key = HmacSha1Key(fixed.secret_key)

    def sign(request: RemotingCommand) -> None:
        sign_remoting(request.ext_fields, request.body, fixed.access_key, key, fixed.security_token)
    return sign


def credentials_from_environment(environ: dict[str, str] | None = None) -> Credentials | None:
    """``SLUICE_ACCESS_KEY`` and ``SLUICE_SECRET_KEY`` (both, or neither)."""
    env = os.environ if environ is None else environ
    ak, sk = env.get("SLUICE_ACCESS_KEY", ""), env.get("SLUICE_SECRET_KEY", "")
    if not ak and not sk:
        return None
    if not ak or not sk:
        raise ValueError("set both SLUICE_ACCESS_KEY and SLUICE_SECRET_KEY, or neither")
    return Credentials(ak, sk)


def is_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` is reachable from this machine only."""
    import ipaddress
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
