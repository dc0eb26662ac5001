"""Authentication and authorization of one request (RocketMQ's ``AuthenticationEvaluator`` and
``AuthorizationEvaluator`` with their default, stateless providers), over the users and ACLs in memory.

Authentication recomputes the request's HMAC with the user's secret (constant-time comparison); each user's prepared
key is kept until the users or ACLs change (``generation``) or its secret does. Authorization picks, per (resource,
actions), the most specific rule of the user's ACL; super users pass. Decisions are cached per user, resource,
actions and source address until the users or ACLs change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sluice.auth.audit import AuditLog
from sluice.auth.authorization_context_builder import AuthorizationContext
from sluice.auth.model import (
    Acl,
    Action,
    AuthenticationError,
    AuthorizationError,
    Decision,
    Resource,
    User,
    UserStatus,
    UserType,
    deciding_entry,
)
from sluice.auth.signature import Content, HmacSha1Key

DECISION_CACHE_SIZE = 10_000
KEY_CACHE_SIZE = 10_000


class AuthMetadata(Protocol):
    """The users and ACLs the checks read: a broker's own (``AuthMetadataManager``), or a standalone front's copy
    of its brokers' (``sluice.proxy.auth_metadata_cache``). ``generation`` changes with them."""

    generation: int

    def get_user(self, username: str) -> User | None: ...

    def get_acl(self, subject: str) -> Acl | None: ...


def parse_whitelist(text: str) -> frozenset[str]:
    return frozenset(item.strip() for item in text.split(",") if item.strip())


class Authenticator:
    def __init__(self, metadata: AuthMetadata, audit: AuditLog, whitelist: frozenset[str] = frozenset()) -> None:
        self.metadata = metadata
        self.audit = audit
        self.whitelist = whitelist
        self._keys: dict[str, tuple[str, HmacSha1Key]] = {}  # username → (its secret, the key prepared from it)
        self._generation = -1

    def _key(self, user: User) -> HmacSha1Key:
        if self._generation != self.metadata.generation:
            self._keys.clear()
            self._generation = self.metadata.generation
        kept = self._keys.get(user.username)
        if kept is not None and kept[0] == user.password:
            return kept[1]
        key = HmacSha1Key(user.password)
        if len(self._keys) >= KEY_CACHE_SIZE:
            self._keys.clear()
        self._keys[user.username] = (user.password, key)
        return key

    def authenticate(self, username: str | None, signature: str | None, content: Content | bytes,
                     rpc_code: str) -> User | None:
        """The user a request is signed by; ``AuthenticationError`` with RocketMQ's remark when it is not. None for a
        whitelisted request code."""
        if rpc_code in self.whitelist:
            return None
        if not username:
            raise AuthenticationError("username cannot be null.")
        user = self.metadata.get_user(username)
        try:
            if user is None:
                raise AuthenticationError(f"User:{username} is not found.")
            if user.user_status is UserStatus.DISABLE:
                raise AuthenticationError(f"User:{username} is disabled.")
            if signature is None or not user.password or not self._key(user).matches(content, signature):
                raise AuthenticationError("check signature failed.")
        except AuthenticationError:
            self.audit.authentication(username, signature, False)
            raise
        self.audit.authentication(username, signature, True)
        return user


class Authorizer:
    def __init__(self, metadata: AuthMetadata, audit: AuditLog, whitelist: frozenset[str] = frozenset()) -> None:
        self.metadata = metadata
        self.audit = audit
        self.whitelist = whitelist
        self._cache: dict[tuple[str, Resource, tuple[Action, ...], str], str | None] = {}
        self._generation = -1

    def authorize(self, username: str | None, contexts: Sequence[AuthorizationContext], source_ip: str,
                  rpc_code: str) -> None:
        """``AuthorizationError`` with RocketMQ's remark for the first check that fails."""
        if not contexts or rpc_code in self.whitelist:
            return
        if not username:
            raise AuthorizationError("Authorization failed. Please verify your access rights and try again.")
        if self._generation != self.metadata.generation:
            self._cache.clear()
            self._generation = self.metadata.generation
        subject = f"User:{username}"
        for ctx in contexts:
            key = (username, ctx.resource, ctx.actions, source_ip)
            try:
                refusal = self._cache[key]
            except KeyError:
                refusal = self._decide(username, subject, ctx, source_ip)
                if len(self._cache) >= DECISION_CACHE_SIZE:
                    self._cache.clear()
                self._cache[key] = refusal
            self.audit.authorization(subject, refusal is None, ctx.actions, source_ip, ctx.resource, rpc_code)
            if refusal is not None:
                raise AuthorizationError(refusal)

    def _decide(self, username: str, subject: str, ctx: AuthorizationContext, source_ip: str) -> str | None:
        """None when allowed, else the remark."""
        user = self.metadata.get_user(username)
        if user is None:
            return f"User:{username} not found."
        if user.user_type is UserType.SUPER:
            return None
        where = f"{subject} has no permission to access {ctx.resource.key} from {source_ip}"
        acl = self.metadata.get_acl(subject)
        entry = None if acl is None else deciding_entry(acl, ctx.resource, ctx.actions, source_ip)
        if entry is None:
            return f"{where}, no matched policies."
        if entry.decision is Decision.DENY:
            return f"{where}, the decision is deny."
        return None
