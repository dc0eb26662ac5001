"""Sessions: a random id in a signed cookie, the rest (who logged in, their admin client) in memory, bounded and
expired when idle. A restart logs everyone out, which is all the state the dashboard keeps.

Every form carries a CSRF token derived from the session id and the dashboard's secret: a new session (at login
and logout) makes every older token stale."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

COOKIE = "sluice_session"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(slots=True)
class Session:
    sid: str
    username: str | None = None  # None: anonymous (the cluster runs without ACL, or no one logged in yet)
    password: str | None = None
    super_user: bool = False
    admin: Any = None  # the session's Admin (signed as its user), made on first use
    last_seen: float = field(default_factory=time.monotonic)
    flashes: list[tuple[str, str]] = field(default_factory=list)  # (kind, text) shown once by the next page
    cluster_reader: tuple[bool, float] | None = None  # may it read the cluster (signed probe), and when asked
    groups_cache: tuple[float, Any] | None = None  # a groups table made with its own client, and when

    def flash(self, kind: str, text: str) -> None:
        if len(self.flashes) < 20:
            self.flashes.append((kind, text))

    def take_flashes(self) -> list[tuple[str, str]]:
        out, self.flashes = self.flashes, []
        return out


class SessionStore:
    def __init__(self, secret: bytes, idle_seconds: float, max_sessions: int) -> None:
        self._secret = secret
        self.idle_seconds = idle_seconds
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self.evicted: list[Session] = []  # whose admin clients the server closes

    def _sign(self, what: str) -> str:
        return _b64(hmac.new(self._secret, what.encode(), hashlib.sha256).digest()[:18])

    def cookie_value(self, session: Session) -> str:
        return f"{session.sid}.{self._sign('sid:' + session.sid)}"

    def csrf_token(self, session: Session) -> str:
        return self._sign("csrf:" + session.sid)

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf_token(session).encode(),
                                                   str(token).encode("utf-8", "replace"))

    def get(self, cookie: str | None) -> Session | None:
        """The live session a cookie names, or None (unsigned, forged, expired or unknown)."""
        if not cookie or "." not in cookie:
            return None
        sid, _, sig = cookie.partition(".")
        if not hmac.compare_digest(self._sign("sid:" + sid).encode(), sig.encode("utf-8", "replace")):
            return None
        session = self._sessions.get(sid)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_seen > self.idle_seconds:
            self.drop(session)
            return None
        session.last_seen = now
        self._sessions.move_to_end(sid)
        return session

    def new(self) -> Session:
        """A new anonymous session; when the store is full the oldest anonymous one makes room (a flood of
        visitors without a cookie never logs anyone out), a logged-in one only when there is no anonymous one."""
        self.expire()
        if len(self._sessions) >= self.max_sessions:
            victim = next((sid for sid, s in self._sessions.items() if s.username is None), None)
            if victim is None:
                victim = next(iter(self._sessions))
            self.evicted.append(self._sessions.pop(victim))
        session = Session(_b64(secrets.token_bytes(24)))
        self._sessions[session.sid] = session
        return session

    def limit_user(self, username: str, keep: int = 20) -> None:
        """At most ``keep`` sessions of one user (each holds a client and its connections): the oldest go."""
        mine = [s for s in self._sessions.values() if s.username == username]
        for old in mine[:max(len(mine) - keep, 0)]:
            self.drop(old)

    def drop(self, session: Session) -> None:
        if self._sessions.pop(session.sid, None) is not None:
            self.evicted.append(session)

    def expire(self) -> None:
        now = time.monotonic()
        while self._sessions:
            sid, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_seen <= self.idle_seconds:
                break
            del self._sessions[sid]
            self.evicted.append(oldest)

    def take_evicted(self) -> list[Session]:
        out, self.evicted = self.evicted, []
        return out

    def __len__(self) -> int:
        return len(self._sessions)
