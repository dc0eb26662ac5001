"""The dashboard's web application: sessions and login, CSRF on every action, templates with everything escaped,
error pages instead of tracebacks, and the pages (``sluice.dashboard.pages``) routed."""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn
from urllib.parse import quote, urlencode

import jinja2
from aiohttp import web

from sluice.client.admin import Admin, AdminError
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.dashboard.config import DashboardConfig
from sluice.dashboard.format import FILTERS
from sluice.dashboard.sampler import Sampler
from sluice.dashboard.sessions import COOKIE, Session, SessionStore
from sluice.remoting.errors import RemotingError

log = logging.getLogger(__name__)

NO_PERMISSION = 16
ANONYMOUS_RECHECK_SECONDS = 5.0
CLUSTER_READER_RECHECK_SECONDS = 30.0
# Pages anyone may open (ACL on or off): logging in, and the files every page needs.
_OPEN_PATHS = ("/login", "/logout", "/static/")
# RocketMQ's (and Sluice's) remarks for a request whose signature does not name a known, enabled user.
_AUTHENTICATION_REMARKS = re.compile(r"^(username cannot be null\.|check signature failed\.|User:.* is (not found|"
                                     r"disabled)\.)$")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class NotFound(Exception):
    """What a page is about does not exist: a 404 page saying so."""


class Refused(Exception):
    """The visitor may not do this: a 403 page (logged)."""


class BadRequest(Exception):
    """What was sent cannot be read: a 400 page."""


def is_authentication_refusal(exc: BaseException) -> bool:
    return isinstance(exc, BrokerResponseError) and exc.code == NO_PERMISSION \
        and bool(_AUTHENTICATION_REMARKS.match(exc.remark.strip()))


def is_refusal(exc: BaseException) -> bool:
    return isinstance(exc, BrokerResponseError) and exc.code == NO_PERMISSION


class DashboardState:
    """What the pages share: the settings, the sessions, the sampler, the admin clients."""

    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self.secret = secrets.token_bytes(32)  # a restart logs everyone out
        self.sessions = SessionStore(self.secret, config.session_idle_seconds, config.max_sessions)
        self.sampler = Sampler(self.own_admin, config.sample_seconds, config.history_seconds,
                               config.groups_refresh_seconds)
        self._own_admin: Admin | None = None
        self._anon_admin: Admin | None = None
        self._gate = "unknown"
        self._gate_checked = 0.0
        self._gate_probe: asyncio.Future[str] | None = None
        self.jobs: dict[str, Any] = {}  # background actions (dead-letter re-sends) by key
        self.dlq_state_dir: str | None = config.state_dir  # (a temporary directory is made on first use)
        self.templates = jinja2.Environment(loader=jinja2.PackageLoader("sluice.dashboard", "templates"),
                                            autoescape=True, undefined=jinja2.StrictUndefined,
                                            trim_blocks=True, lstrip_blocks=True)
        self.templates.filters.update(FILTERS)

    async def own_admin(self) -> Admin:
        """The dashboard's own client (its credentials, if given): the sampler's, never a visitor's."""
        if self._own_admin is None:
            self._own_admin = Admin(self.config.namesrv, credentials=self.config.credentials, tls=self.config.tls)
        return self._own_admin

    def admin_for(self, session: Session) -> Admin:
        """A visitor's client: signed as the user logged in, unsigned for anyone else."""
        if session.username is None:
            if self._anon_admin is None:
                self._anon_admin = Admin(self.config.namesrv, tls=self.config.tls)
            return self._anon_admin
        if session.admin is None:
            session.admin = Admin(self.config.namesrv, credentials=(session.username, session.password or ""),
                                  tls=self.config.tls)
        admin: Admin = session.admin
        return admin

    async def anonymous_gate(self) -> str:
        """``open`` where the cluster serves requests nobody signed (ACL off), ``closed`` where a broker refuses
        them, ``unknown`` where no broker answered: asked of every master at most every few seconds. Anything but
        ``open`` keeps an anonymous visitor from every page but the login (fails closed)."""
        if time.monotonic() - self._gate_checked < ANONYMOUS_RECHECK_SECONDS:
            return self._gate
        if self._gate_probe is None or self._gate_probe.done():
            self._gate_probe = asyncio.ensure_future(self._probe_gate())
        if self._gate_checked:  # (the last verdict while a new one is asked: a hung broker stalls no page)
            return self._gate
        return await asyncio.shield(self._gate_probe)

    async def _probe_gate(self) -> str:
        admin = self.admin_for(Session(""))
        gate = "unknown"
        try:
            brokers = await asyncio.wait_for(admin.brokers(), 5)
            answers = await asyncio.gather(*(asyncio.wait_for(admin.broker_runtime_info(a), 5)
                                             for a in brokers.values()), return_exceptions=True)
            if any(is_refusal(a) for a in answers if isinstance(a, BaseException)):
                gate = "closed"
            elif any(not isinstance(a, BaseException) for a in answers):
                gate = "open"
        except (ClientError, RemotingError, TimeoutError, OSError):
            pass
        self._gate, self._gate_checked = gate, time.monotonic()
        return gate

    @property
    def gate_open(self) -> bool:
        return self._gate == "open"

    async def may_read_shared(self, session: Session) -> bool:
        """Whether a visitor may be shown what the dashboard gathered with its own client (the charts' samples,
        the groups table): anyone where the cluster's ACL is off, a super user, and a user the brokers let read
        the cluster (a signed runtime-info request, asked again every 30 s); never on another's word."""
        if session.username is None:
            return await self.anonymous_gate() == "open"
        if session.super_user:
            return True
        now = time.monotonic()
        if session.cluster_reader is not None and now - session.cluster_reader[1] < CLUSTER_READER_RECHECK_SECONDS:
            return session.cluster_reader[0]
        admin = self.admin_for(session)
        allowed = session.cluster_reader[0] if session.cluster_reader is not None else False
        try:
            brokers = await asyncio.wait_for(admin.brokers(), 5)
            answers = await asyncio.gather(*(asyncio.wait_for(admin.broker_runtime_info(a), 5)
                                             for a in brokers.values()), return_exceptions=True)
            if any(is_refusal(a) for a in answers if isinstance(a, BaseException)):
                allowed = False
            elif any(not isinstance(a, BaseException) for a in answers):
                allowed = True  # (else no broker answered: the verdict stays as it was)
        except (ClientError, RemotingError, TimeoutError, OSError):
            pass
        session.cluster_reader = (allowed, now)
        return allowed

    async def may_read_groups(self, session: Session) -> bool:
        """Whether a visitor may be shown the groups table the dashboard made with its own client (every group's
        lag): anyone where the cluster's ACL is off, and super users; a group's lag needs rights on the group and
        its topics, which no single probe shows."""
        if session.username is None:
            return await self.anonymous_gate() == "open"
        return session.super_user

    async def close(self) -> None:
        for job in list(self.jobs.values()):
            job.stop()
        await asyncio.gather(*(job.wait(10) for job in list(self.jobs.values())))
        for s in self.sessions.take_evicted():
            await _close_admin(s)
        for admin in (self._own_admin, self._anon_admin):
            if admin is not None:
                await admin.close()
        self._own_admin = self._anon_admin = None

    async def reap_sessions(self) -> None:
        for s in self.sessions.take_evicted():
            await _close_admin(s)


async def _close_admin(session: Session) -> None:
    if session.admin is not None:
        admin, session.admin = session.admin, None
        try:
            await admin.close()
        except Exception:  # (closing a client never fails a page)
            log.debug("closing a session's admin client", exc_info=True)


STATE = web.AppKey("state", DashboardState)
SESSION = web.RequestKey("session", Session)
NEW_SESSION = web.RequestKey("new_session", Session)  # set by a login or logout: the cookie to send back


def state_of(request: web.Request) -> DashboardState:
    return request.app[STATE]


def session_of(request: web.Request) -> Session:
    return request[SESSION]


def admin_of(request: web.Request) -> Admin:
    return state_of(request).admin_for(session_of(request))


def may_act(request: web.Request) -> bool:
    """Actions are for everyone where ACL is off (no one logged in), for super users where it is on."""
    state, session = state_of(request), session_of(request)
    if state.config.read_only:
        return False
    return session.username is None or session.super_user


def require_action(request: web.Request, what: str) -> None:
    if not may_act(request):
        session = session_of(request)
        who = session.username or "anonymous"
        reason = "the dashboard is read-only" if state_of(request).config.read_only \
            else f"user {who} is not a super user"
        log.warning("dashboard: refused %s to %s (%s) from %s", what, who, reason, request.remote)
        raise Refused(f"You may not {what}: {reason}.")


async def form_of(request: web.Request, action: str) -> dict[str, str]:
    """The posted fields, once its CSRF token is checked (a stale or missing one is refused and logged)."""
    try:
        data = await request.post()
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("The form could not be read (it is not UTF-8 text).") from None
    fields = {k: str(v) for k, v in data.items() if isinstance(v, str)}
    state, session = state_of(request), session_of(request)
    if not state.sessions.csrf_ok(session, fields.get("csrf")):
        log.warning("dashboard: refused %s from %s: stale or missing CSRF token", action, request.remote)
        raise Refused("This form has expired (its security token is stale); load the page again and retry.")
    return fields


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    state, session = state_of(request), session_of(request)
    page = state.templates.get_template(template).render(
        session=session, csrf=state.sessions.csrf_token(session), may_act=may_act(request),
        flashes=[] if request.headers.get("X-Refresh") else session.take_flashes(), path=request.path,
        read_only=state.config.read_only, now=time.time(), url=url, static_url=_static_url(request),
        namesrv=state.config.namesrv if session.username or state.gate_open else "", **context)
    return web.Response(text=page, status=status, content_type="text/html", charset="utf-8")


def _static_url(request: web.Request) -> Callable[[str], str]:
    resource = request.app.router["static"]

    def static_url(name: str) -> str:
        return str(resource.url_for(filename=name))

    return static_url


def url(path: str, **query: Any) -> str:
    """A path with its segments quoted (names may hold ``%``) and a query string."""
    quoted = "/".join(quote(part, safe="") for part in path.split("/"))
    q = {k: v for k, v in query.items() if v not in (None, "")}
    return quoted + ("?" + urlencode(q) if q else "")


def done(request: web.Request, where: str, text: str) -> NoReturn:
    """An action finished: say what it did on the page it sends the visitor to."""
    session_of(request).flash("ok", text)
    raise web.HTTPSeeOther(where)


def confirm(request: web.Request, question: str, fields: dict[str, str], detail: str = "",
            lists: dict[str, list[str]] | None = None, back: str | None = None) -> web.Response:
    """The confirmation step of an action: the same form again (``lists``: fields given many times), with
    ``confirmed`` set, posted to the same (still quoted) path; ``back``: where Cancel goes (default: the page the
    action belongs to)."""
    kept = {k: v for k, v in fields.items() if k not in ("csrf", "confirmed")}
    many = [(k, v) for k, values in (lists or {}).items() for v in values]
    action = request.rel_url.raw_path  # (decoded, a name holding %2D would name another topic)
    if back is None:
        back = action.rsplit("/", 1)[0] if action.count("/") > 1 else action
    return render(request, "confirm.html", question=question, detail=detail, action=action, fields=kept,
                  many=many, back=back)


@web.middleware
async def security(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Sessions, the pages' errors as pages, and headers that keep scripts and frames to the dashboard's own."""
    state = state_of(request)
    if isinstance(request.match_info.route.resource, web.StaticResource):  # (the same for everyone: no session)
        static = await handler(request)
        static.headers.setdefault("X-Content-Type-Options", "nosniff")
        return static
    session = state.sessions.get(request.cookies.get(COOKIE))
    fresh = session is None
    if session is None:
        session = state.sessions.new()
    request[SESSION] = session
    try:
        response = await _handle(request, handler)
    except web.HTTPException as exc:  # (redirects: a response of their own, so that the cookie can go with it)
        response = web.Response(status=exc.status, text=exc.text, content_type="text/plain")
        if "Location" in exc.headers:
            response.headers["Location"] = exc.headers["Location"]
    if fresh or NEW_SESSION in request:
        s = request.get(NEW_SESSION) or session
        response.set_cookie(COOKIE, state.sessions.cookie_value(s), httponly=True, samesite="Strict", path="/",
                            secure=request.secure)
    response.headers.setdefault("Content-Security-Policy",
                                "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                                "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    if response.headers.get("Content-Type", "").startswith("text/html"):
        response.headers.setdefault("Cache-Control", "no-store")
    if state.sessions.evicted:
        task = asyncio.get_running_loop().create_task(state.reap_sessions())
        _REAPING.add(task)
        task.add_done_callback(_REAPING.discard)
    return response


_REAPING: set[asyncio.Task[None]] = set()  # (held until done: the loop keeps only weak references to tasks)


async def _handle(request: web.Request, handler: Handler) -> web.StreamResponse:
    session = session_of(request)
    try:
        if session.username is None and not request.path.startswith(_OPEN_PATHS):
            gate = await state_of(request).anonymous_gate()
            if gate == "unknown":
                return render(request, "error.html", status=502, title="The cluster does not answer",
                              message="No broker answered the dashboard; it shows nothing until one does (or log "
                                      "in).")
            if gate == "closed":
                session.flash("info", "This cluster runs with ACL on: log in as a Sluice user.")
                raise web.HTTPSeeOther(url("/login", next=request.path_qs))
        return await handler(request)
    except web.HTTPException:
        raise
    except NotFound as exc:
        return render(request, "error.html", status=404, title="Not found", message=str(exc))
    except Refused as exc:
        return render(request, "error.html", status=403, title="Refused", message=str(exc))
    except BadRequest as exc:
        return render(request, "error.html", status=400, title="Bad request", message=str(exc))
    except BrokerResponseError as exc:
        if is_refusal(exc) and session.username is None and not request.path.startswith("/login"):
            session.flash("info", "This cluster runs with ACL on: log in as a Sluice user.")
            raise web.HTTPSeeOther(url("/login", next=request.path_qs)) from None
        if is_refusal(exc):
            log.warning("dashboard: the cluster refused %s %s to %s: %s", request.method, request.path,
                        session.username, exc.remark)
            return render(request, "error.html", status=403, title="Refused by the cluster", message=exc.remark)
        return render(request, "error.html", status=502, title="The cluster answered with an error",
                      message=str(exc))
    except (AdminError, ClientError, RemotingError, TimeoutError, OSError) as exc:
        text = str(exc) or type(exc).__name__
        status = 404 if text.startswith(("no route for topic", "no message", "consumer group")) else 502
        return render(request, "error.html", status=status, title="Not found" if status == 404 else "Cluster error",
                      message=text)
    except Exception:
        log.exception("dashboard: %s %s failed", request.method, request.path)
        return render(request, "error.html", status=500, title="Something went wrong",
                      message="The dashboard failed to make this page; its log says why.")


async def _not_found(request: web.Request) -> web.Response:
    raise NotFound(f"There is no page at {request.path}.")


def build_app(state: DashboardState) -> web.Application:
    from sluice.dashboard.pages import register

    app = web.Application(middlewares=[security], client_max_size=1024 * 1024)
    app[STATE] = state
    app.router.add_static("/static", str(_static_dir()), append_version=True, name="static")
    register(app)
    app.router.add_route("*", "/{tail:.*}", _not_found)
    return app


def _static_dir() -> Any:
    from importlib.resources import files

    return files("sluice.dashboard") / "static"
