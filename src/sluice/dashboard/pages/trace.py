"""A message's trace: its send, its transaction's end and each group's listener calls, as a timeline (what
clients with trace on recorded in the trace topic)."""

from __future__ import annotations

from aiohttp import web

from sluice.client.admin import AdminError
from sluice.client.trace import TRACE_TOPIC
from sluice.dashboard.app import admin_of, render


async def trace(request: web.Request) -> web.Response:
    msg_id = request.query.get("id", "").strip()
    topic = request.query.get("trace_topic", "").strip() or TRACE_TOPIC
    steps = []
    if msg_id:
        try:
            steps = await admin_of(request).message_trace(msg_id, topic)
        except AdminError as exc:
            if "no route for topic" not in str(exc):
                raise  # (no trace topic yet: no client has traced anything, which the page says)
    start = min((s.timestamp for s in steps), default=0)
    end = max((s.timestamp + (s.cost_ms or 0) for s in steps), default=0)
    span = max(end - start, 1)
    rows = [{"step": s, "left": (s.timestamp - start) * 100 / span,
             "width": max((s.cost_ms or 0) * 100 / span, 0.8)} for s in steps]
    return render(request, "trace.html", msg_id=msg_id, trace_topic=topic, rows=rows, start=start, span=span)


def routes(router: web.UrlDispatcher) -> None:
    router.add_get("/trace", trace)
