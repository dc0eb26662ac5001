"""Consumer groups: the table sortable by lag, rate and clients; a group's progress per queue (its retry queue
included), its online clients with version and subscription; change its settings; reset its offsets to a time;
delete it."""

from __future__ import annotations

import re
import time
from typing import Any

from aiohttp import web

from sluice.client.admin import AdminError
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.common.naming import is_system_group
from sluice.dashboard.app import (
    NotFound,
    admin_of,
    confirm,
    done,
    form_of,
    is_refusal,
    render,
    require_action,
    session_of,
    state_of,
    url,
)
from sluice.dashboard.format import time_ms
from sluice.dashboard.sampler import GroupRow

SORTS = {"name": lambda g: g.name, "lag": lambda g: -g.lag, "rate": lambda g: -g.rate,
         "inflight": lambda g: -g.inflight, "clients": lambda g: -g.clients}


async def groups(request: web.Request) -> web.Response:
    state = state_of(request)
    rows = await groups_table(request)
    sort = request.query.get("sort", "lag")
    q = request.query.get("q", "").strip()
    show_system = request.query.get("system") == "1"
    listed = [g for g in rows.values() if (show_system or not is_system_group(g.name))
              and (not q or q.lower() in g.name.lower())]
    listed.sort(key=SORTS.get(sort, SORTS["lag"]))
    return render(request, "groups.html", rows=listed, sort=sort if sort in SORTS else "lag", q=q,
                  show_system=show_system, age=time.monotonic() - state.sampler.groups_at,
                  groups_error=state.sampler.groups_error)


FRESH_GROUPS_SECONDS = 10.0  # how long a table made with a visitor's own client serves that visitor's pages


async def groups_table(request: web.Request, *, keep_fresh: bool = True) -> dict[str, GroupRow]:
    """The shared groups table (made with the dashboard's own client) for whoever may see it
    (``may_read_groups``); for anyone else, or where the dashboard's own client may not read the groups, one made
    with the visitor's client, kept for that session a few seconds (a refusal is the page's answer).
    ``keep_fresh``: the page lists groups, so the background keeps the shared table fresh a while."""
    state, session = state_of(request), session_of(request)
    if await state.may_read_groups(session):
        try:
            return await state.sampler.groups_for(await state.own_admin(), keep_fresh=keep_fresh)
        except ClientError as exc:
            if not is_refusal(exc):
                raise
    now = time.monotonic()
    if session.groups_cache is not None and now - session.groups_cache[0] < FRESH_GROUPS_SECONDS:
        return session.groups_cache[1]
    table = await state.sampler.fresh_groups(admin_of(request))
    session.groups_cache = (now, table)
    return table


async def group(request: web.Request) -> web.Response:
    name = request.match_info["group"]
    admin = admin_of(request)
    config = await admin.group_config(name)
    connections = await admin.group_connections(name)
    if config is None and not connections["connections"]:
        raise NotFound(f"There is no consumer group {name}.")
    try:
        progress = (await admin.group_progress(name)).queues
    except AdminError:
        progress = []
    row = (await groups_table(request, keep_fresh=False)).get(name) or GroupRow(name)
    subs = sorted((topic, str(s.get("subString", "*")) if isinstance(s, dict) else str(s))
                  for topic, s in connections["subscriptions"].items())
    return render(request, "group.html", group=name, config=sorted((config or {}).items()), row=row,
                  progress=progress, lag=sum(q.lag for q in progress if not q.topic.startswith("%RETRY%")),
                  retry_lag=sum(q.lag for q in progress if q.topic.startswith("%RETRY%")),
                  inflight=sum(q.inflight for q in progress), ready=sum(q.ready for q in progress),
                  queueing_ms=max((q.queueing_latency_ms for q in progress), default=0),
                  connections=connections["connections"], subscriptions=subs,
                  consume_type=connections.get("consumeType", ""), message_model=connections.get("messageModel", ""),
                  topics=sorted({q.topic for q in progress} | {t for t, _ in subs}))


async def group_data(request: web.Request) -> web.Response:
    """A group's chart series: (time, lag, retry lag, consumed/s, inflight, ready, queueing latency in ms) at each
    refresh of the groups table."""
    name = request.match_info["group"]
    state = state_of(request)
    table = await groups_table(request)
    if await state.may_read_groups(session_of(request)) and table is state.sampler.groups:
        history = list(state.sampler.group_history.get(name, ()))
    else:
        row = table.get(name)
        history = [(time.time(), row.lag, row.retry_lag, row.rate, row.inflight, row.ready, row.queueing_ms)
                   ] if row is not None else []
    points = [[round(t, 1), lag, retry, round(rate, 2), inflight, ready, queueing]
              for t, lag, retry, rate, inflight, ready, queueing in history]
    return web.json_response({"series": {name: points}})


def _when(text: str) -> int:
    """The reset form's time: a time (``time_ms``), ``earliest`` (0: the oldest kept) or ``latest`` (-1: the end)."""
    text = text.strip()
    special = {"earliest": 0, "latest": -1, "-1": -1}
    if text in special:
        return special[text]
    try:
        return time_ms(text)
    except ValueError as exc:
        raise AdminError(f"{exc}, earliest or latest") from None


async def reset(request: web.Request) -> web.Response:
    name = request.match_info["group"]
    require_action(request, "reset offsets")
    fields = await form_of(request, "an offset reset")
    topic, when = fields.get("topic", "").strip(), fields.get("time", "").strip()
    try:
        ts = _when(when)
    except AdminError as exc:
        session_of(request).flash("error", str(exc))
        raise web.HTTPSeeOther(url(f"/groups/{name}")) from None
    if fields.get("confirmed") != "1":
        return confirm(request, f"Reset group {name}'s offsets on topic {topic} to {when}?", fields,
                       "Its consumers read again from there (or skip ahead) at their next pull.")
    moved = await admin_of(request).reset_offset(name, topic, ts)
    state_of(request).sampler.groups_at = 0.0
    done(request, url(f"/groups/{name}"), f"Group {name} on {topic}: {len(moved)} queue(s) reset.")


# The group settings the page changes (RocketMQ's SubscriptionGroupConfig names, mqadmin updateSubGroup's).
INT_SETTINGS = {"retryMaxTimes": (-1, 1_000), "retryQueueNums": (1, 64)}
BOOL_SETTINGS = ("consumeEnable", "consumeBroadcastEnable", "consumeMessageOrderly", "consumeFromMinEnable")


def _settings_asked(fields: dict[str, str]) -> dict[str, int | bool]:
    """The settings the form asks for, typed; AdminError naming the first that is out of range."""
    asked: dict[str, int | bool] = {}
    for key, (low, high) in INT_SETTINGS.items():
        text = fields.get(key, "").strip()
        if not (re.fullmatch(r"-?[0-9]{1,9}", text) and low <= int(text) <= high):
            raise AdminError(f"{key} must be a whole number from {low} to {high}, not {text[:20]!r}")
        asked[key] = int(text)
    for key in BOOL_SETTINGS:
        asked[key] = fields.get(key) == "true"
    return asked


async def settings(request: web.Request) -> web.Response:
    name = request.match_info["group"]
    require_action(request, "change group settings")
    fields = await form_of(request, "a group settings change")
    here = url(f"/groups/{name}")
    admin = admin_of(request)
    current = await admin.group_config(name)
    if current is None:
        raise NotFound(f"There is no consumer group {name}.")
    try:
        asked = _settings_asked(fields)
    except AdminError as exc:
        session_of(request).flash("error", str(exc))
        raise web.HTTPSeeOther(here) from None
    changes: dict[str, Any] = {k: v for k, v in asked.items() if current.get(k) != v}
    if not changes:
        done(request, here, f"Group {name}: nothing to change.")
    said = ", ".join(f"{k} {str(current.get(k)).lower()} → {str(v).lower()}" for k, v in changes.items())
    if fields.get("confirmed") != "1":
        return confirm(request, f"Change group {name}'s settings: {said}?", fields,
                       "Every master of the cluster takes the change; its consumers see it at their next request.")
    try:
        where = await admin.update_group(name, must_exist=True, **changes)
    except (AdminError, BrokerResponseError) as exc:
        if is_refusal(exc):
            raise
        why = (exc.remark or str(exc)) if isinstance(exc, BrokerResponseError) else str(exc)
        session_of(request).flash("error", f"Group {name}'s settings may not have changed on every broker: {why}")
        raise web.HTTPSeeOther(here) from None
    done(request, here, f"Group {name}: {said} on {', '.join(sorted(where)) or 'no broker'}.")


async def delete(request: web.Request) -> web.Response:
    name = request.match_info["group"]
    require_action(request, "delete groups")
    fields = await form_of(request, "a group deletion")
    if fields.get("confirmed") != "1":
        return confirm(request, f"Delete consumer group {name}?", fields,
                       "Its config and committed offsets go from every broker.")
    where = await admin_of(request).delete_group(name)
    state_of(request).sampler.groups.pop(name, None)
    done(request, "/groups", f"Group {name} was deleted from {', '.join(sorted(where)) or 'no broker'}.")


def routes(router: web.UrlDispatcher) -> None:
    router.add_get("/groups", groups)
    router.add_get("/groups/{group}", group)
    router.add_get("/api/groups/{group}", group_data)
    router.add_post("/groups/{group}/reset", reset)
    router.add_post("/groups/{group}/delete", delete)
    router.add_post("/groups/{group}/settings", settings)

