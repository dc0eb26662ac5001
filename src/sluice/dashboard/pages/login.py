"""Logging in and out (ACL on): the user is checked by the brokers themselves with a signed request."""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import urlsplit

from aiohttp import web

from sluice.client.admin import Admin
from sluice.common.errors import ClientError
from sluice.dashboard.app import (
    NEW_SESSION,
    _close_admin,
    form_of,
    is_authentication_refusal,
    is_refusal,
    render,
    session_of,
    state_of,
)
from sluice.remoting.errors import RemotingError

log = logging.getLogger(__name__)


def _safe_next(target: str | None) -> str:
    """Only a path of this dashboard (never another site) is where a login goes next: no scheme, no host, no
    control character or space a browser would drop (``/\t/example.com`` is ``//example.com`` to it)."""
    if not target or len(target) > 2000 or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in target):
        return "/"
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return "/"
    return target


class LoginThrottle:
    """Failed logins per address: after ``FAILURES`` within ``WINDOW`` seconds that address waits ``WINDOW``
    seconds before its next try (the brokers would answer a guess a millisecond)."""

    FAILURES = 5
    WINDOW = 60.0
    MAX_ADDRESSES = 10_000

    def __init__(self) -> None:
        self._failures: dict[str, list[float]] = {}

    def blocked(self, addr: str) -> bool:
        now = time.monotonic()
        recent = [t for t in self._failures.get(addr, ()) if now - t < self.WINDOW]
        if recent:
            self._failures[addr] = recent
        else:
            self._failures.pop(addr, None)
        return len(recent) >= self.FAILURES

    def failed(self, addr: str) -> None:
        """Counted as a failure: called before the brokers answer (so that many tries at once are held back
        too), undone by ``succeeded``."""
        if len(self._failures) >= self.MAX_ADDRESSES and addr not in self._failures:
            self._failures.pop(next(iter(self._failures)))
        self._failures.setdefault(addr, []).append(time.monotonic())

    def succeeded(self, addr: str) -> None:
        tries = self._failures.get(addr)
        if tries:
            tries.pop()


THROTTLE = web.AppKey("login_throttle", LoginThrottle)


async def login_page(request: web.Request) -> web.Response:
    return render(request, "login.html", next=_safe_next(request.query.get("next")), error="")


async def login(request: web.Request) -> web.Response:
    fields = await form_of(request, "a login")
    state = state_of(request)
    username, password = fields.get("username", "").strip(), fields.get("password", "")
    target = _safe_next(fields.get("next"))
    if not username or not password:
        return render(request, "login.html", status=400, next=target, error="Give a user name and a password.")
    throttle = request.app[THROTTLE]
    addr = request.remote or "?"
    if throttle.blocked(addr):
        log.warning("dashboard: login as %r from %s refused: too many failures", username, addr)
        return render(request, "login.html", status=429, next=target,
                      error=f"Too many failed logins from your address: wait {LoginThrottle.WINDOW:.0f} s.")
    throttle.failed(addr)  # (until the brokers say otherwise)
    admin = Admin(state.config.namesrv, credentials=(username, password), tls=state.config.tls)
    super_user = False
    kept = False
    try:
        try:
            info = await asyncio.wait_for(admin.get_user(username), 10)
            super_user = str((info or {}).get("userType", "")).lower() == "super"
        except ClientError as exc:
            if is_authentication_refusal(exc):
                log.warning("dashboard: failed login as %r from %s", username, addr)
                return render(request, "login.html", status=401, next=target,
                              error="Wrong user name or password, or the user is disabled.")
            if not is_refusal(exc):  # (a normal user may not read users: known, not a super user)
                return render(request, "login.html", status=502, next=target,
                              error=f"The cluster did not answer: {exc}")
        except (RemotingError, TimeoutError, OSError) as exc:
            return render(request, "login.html", status=502, next=target,
                          error=f"The cluster did not answer: {exc or type(exc).__name__}")
        kept = True
        throttle.succeeded(addr)
    finally:
        if not kept:
            await admin.close()
    old = session_of(request)
    state.sessions.drop(old)  # a new session id at login: no token or cookie from before stays good
    session = state.sessions.new()
    session.username, session.password, session.super_user, session.admin = username, password, super_user, admin
    state.sessions.limit_user(username)
    session.flash("ok", f"Logged in as {username}" + (" (super user)." if super_user else " (you may look)."))
    request[NEW_SESSION] = session
    log.info("dashboard: %s logged in from %s", username, request.remote)
    raise web.HTTPSeeOther(target)


async def logout(request: web.Request) -> web.Response:
    await form_of(request, "a logout")
    state, old = state_of(request), session_of(request)
    state.sessions.drop(old)
    await _close_admin(old)
    session = state.sessions.new()
    session.flash("ok", "Logged out.")
    request[NEW_SESSION] = session
    raise web.HTTPSeeOther("/login")


def setup(app: web.Application) -> None:
    app[THROTTLE] = LoginThrottle()


def routes(router: web.UrlDispatcher) -> None:
    router.add_get("/login", login_page)
    router.add_post("/login", login)
    router.add_post("/logout", logout)
