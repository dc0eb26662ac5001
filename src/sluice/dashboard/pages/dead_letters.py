"""Dead letters: a group's, by original topic and one by one; re-sent (one, the chosen, or all) at a chosen rate in
the background with its progress on the page, each message once (``sluice.client.dead_letters``'s record and
cursor); exported as JSON lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from sluice.client.admin import Admin, AdminError
from sluice.client.dead_letters import (
    DEFAULT_STATE_DIR,
    DeadLetter,
    DeadLetterResend,
    ResendProgress,
    dead_letter_count,
    dead_letters,
)
from sluice.common.errors import InvalidNameError
from sluice.common.naming import dlq_topic, validate_group
from sluice.dashboard.app import (
    BadRequest,
    admin_of,
    confirm,
    form_of,
    render,
    require_action,
    session_of,
    state_of,
    url,
)

log = logging.getLogger(__name__)
MAX_RATE = 10_000.0
MIN_RATE = 0.1


@dataclass(slots=True, frozen=True)
class LetterRow:
    """What the list shows of a dead letter (never its body: a DLQ may hold many large ones)."""

    msg_id: str
    offset_msg_id: str
    original_topic: str
    failures: int
    dead_since: int
    tags: str | None
    keys: list[str]

    @classmethod
    def of(cls, d: DeadLetter) -> LetterRow:
        m = d.message
        return cls(m.msg_id, m.offset_msg_id, d.original_topic or "", m.reconsume_times, m.store_timestamp, m.tags,
                   m.keys)


class ResendJob:
    """One re-send, run in a thread of its own with its own event loop and client: its record and cursor are
    written and fsynced per message, which must not stall the loop the dashboard shares with a broker in
    ``sluice dev``. The page reads its progress; ``stop`` ends it after the message under way."""

    def __init__(self, group: str, what: str, namesrv: str, credentials: Any, tls: Any, state_dir: str,
                 msg_ids: set[str] | None, rate: float) -> None:
        self.group = group
        self.what = what
        self.progress: ResendProgress | None = None
        self.error = ""
        self.started = time.time()
        self.finished: float | None = None
        self._args = (namesrv, credentials, tls, state_dir, msg_ids, rate)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resend: DeadLetterResend | None = None
        self._stopping = threading.Event()  # (a Stop before the run has begun is kept for it)
        self._thread = threading.Thread(target=self._main, name=f"dlq-resend-{group}", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception as exc:  # (said on the page; the record and cursor keep what was done)
            self.error = str(exc) or type(exc).__name__
            log.warning("dashboard: re-sending %s's dead letters stopped: %s", self.group, self.error)
        finally:
            self.finished = time.time()

    async def _run(self) -> None:
        namesrv, credentials, tls, state_dir, msg_ids, rate = self._args
        self._loop = asyncio.get_running_loop()
        async with Admin(namesrv, credentials=credentials, tls=tls) as admin:
            resend = DeadLetterResend(admin, self.group, state_dir, msg_ids=msg_ids, rate=rate)
            self._resend = resend
            if self._stopping.is_set():
                resend.stop()
            try:
                self.progress = await resend.run(self._update)
            finally:
                resend.close()

    def _update(self, progress: ResendProgress) -> None:
        self.progress = progress

    @property
    def running(self) -> bool:
        return self.finished is None

    def stop(self) -> None:
        self._stopping.set()
        loop, resend = self._loop, self._resend
        if loop is not None and resend is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # (its loop ended meanwhile)
                loop.call_soon_threadsafe(resend.stop)

    async def wait(self, timeout: float) -> None:
        await asyncio.to_thread(self._thread.join, timeout)

    def to_json(self) -> dict[str, Any]:
        p = self.progress
        return {"group": self.group, "what": self.what, "running": self.running, "error": self.error,
                "total": p.total if p else None, "looked": p.looked if p else 0, "resent": p.resent if p else 0,
                "skipped": p.skipped if p else 0, "failed": p.failed if p else 0}


def _group(request: web.Request) -> str:
    group = request.match_info.get("group") or request.query.get("group", "")
    group = group.strip()
    if group:
        try:
            validate_group(group)
        except InvalidNameError as exc:
            raise BadRequest(str(exc)) from None
    return group


async def _letters(admin: Admin, group: str, limit: int) -> tuple[list[LetterRow], int]:
    """The first ``limit`` dead letters (read), and how many there are (counted from the queues' offsets)."""
    total = await dead_letter_count(admin, group)
    shown: list[LetterRow] = []
    async for d in dead_letters(admin, group):
        shown.append(LetterRow.of(d))
        if len(shown) >= limit:
            break
    return shown, total


async def page(request: web.Request) -> web.Response:
    group = _group(request)
    state = state_of(request)
    admin = admin_of(request)
    letters: list[LetterRow] = []
    total, error = 0, ""
    by_topic: dict[str, int] = {}
    with_dlq: list[str] = []
    shown_all = True
    if group:
        try:
            letters, total = await _letters(admin, group, state.config.list_limit)
        except AdminError as exc:
            error = str(exc)
        for d in letters:
            by_topic[d.original_topic or "?"] = by_topic.get(d.original_topic or "?", 0) + 1
        shown_all = len(letters) >= total
    else:
        topics = await admin.list_topics()
        with_dlq = sorted(t[len("%DLQ%"):] for t in topics if t.startswith("%DLQ%"))
    job = state.jobs.get(f"dlq:{group}")
    return render(request, "dead_letters.html", group=group, letters=letters, total=total, error=error,
                  by_topic=sorted(by_topic.items()), groups=with_dlq, job=job.to_json() if job else None,
                  shown_all=shown_all,
                  dlq_topic=dlq_topic(group) if group else "")


async def progress(request: web.Request) -> web.Response:
    job = state_of(request).jobs.get(f"dlq:{_group(request)}")
    return web.json_response(job.to_json() if job else {})


async def resend(request: web.Request) -> web.Response:
    group = _group(request)
    require_action(request, "re-send dead letters")
    fields = await form_of(request, "a dead-letter re-send")
    ids = [str(v) for v in (await request.post()).getall("id", []) if str(v).strip()]
    everything = fields.get("all") == "1"
    back = url("/dlq", group=group)
    rate_text = fields.get("rate", "").strip() or "50"
    try:
        rate = float(rate_text)
        if not MIN_RATE <= rate <= MAX_RATE:
            raise ValueError
    except ValueError:
        session_of(request).flash("error", f"rate {rate_text[:40]!r}: give messages a second, from {MIN_RATE} to "
                                          f"{MAX_RATE:,.0f}")
        raise web.HTTPSeeOther(back) from None
    if not ids and not everything:
        session_of(request).flash("error", "Choose the dead letters to re-send, or re-send them all.")
        raise web.HTTPSeeOther(back)
    state = state_of(request)
    key = f"dlq:{group}"
    running = state.jobs.get(key)
    if running is not None and running.running:
        session_of(request).flash("error", f"A re-send of {group}'s dead letters is running already.")
        raise web.HTTPSeeOther(back)
    what = f"all dead letters of {group}" if everything else f"{len(ids)} dead letter(s) of {group}"
    if fields.get("confirmed") != "1":
        return confirm(request, f"Re-send {what} at {rate:g} a second?", fields,
                       "Each goes to the group's retry topic: its consumers get it again, as a message of its "
                       "original topic; no other group sees it. A message is never re-sent twice.",
                       lists={"id": ids}, back=back)
    state_dir = state.dlq_state_dir or DEFAULT_STATE_DIR
    session = session_of(request)
    credentials = (session.username, session.password or "") if session.username else state.config.credentials
    state.jobs[key] = ResendJob(group, what, state.config.namesrv, credentials, state.config.tls, state_dir,
                                set(ids) if ids else None, rate)
    session_of(request).flash("ok", f"Re-sending {what} at {rate:g} a second; the progress is below.")
    raise web.HTTPSeeOther(back)


async def stop(request: web.Request) -> web.Response:
    group = _group(request)
    require_action(request, "stop re-sends")
    await form_of(request, "stopping a re-send")
    job = state_of(request).jobs.get(f"dlq:{group}")
    if job is not None and job.running:
        job.stop()
        session_of(request).flash("ok", f"The re-send of {group}'s dead letters stops after the message under way.")
    raise web.HTTPSeeOther(url("/dlq", group=group))


async def export(request: web.Request) -> web.StreamResponse:
    """Every dead letter of the group as JSON lines (its fields and its body as text or base64)."""
    group = _group(request)
    admin = admin_of(request)
    letters = dead_letters(admin, group)
    first = await _first(letters)  # (an unknown group is an error page, not an empty download)
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson",
                                           "Content-Disposition": f'attachment; filename="{group}.dlq.jsonl"'})
    await response.prepare(request)
    d = first
    while d is not None:
        await response.write((json.dumps(_line(d), ensure_ascii=False) + "\n").encode())
        d = await _first(letters)
    await response.write_eof()
    return response


async def _first(letters: AsyncIterator[DeadLetter]) -> DeadLetter | None:
    try:
        return await letters.__anext__()
    except StopAsyncIteration:
        return None


def _line(d: DeadLetter) -> dict[str, Any]:
    import base64

    out = d.to_json()
    m = d.message
    out["offsetMsgId"] = m.offset_msg_id
    out["properties"] = m.properties
    try:
        out["body"] = bytes(m.body).decode("utf-8")
    except UnicodeDecodeError:
        out["bodyBase64"] = base64.b64encode(bytes(m.body)).decode()
    return out


def routes(router: web.UrlDispatcher) -> None:
    router.add_get("/dlq", page)
    router.add_get("/dlq/{group}/progress", progress)
    router.add_post("/dlq/{group}/resend", resend)
    router.add_post("/dlq/{group}/stop", stop)
    router.add_get("/dlq/{group}/export", export)

