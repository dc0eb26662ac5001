"""Messages: found by topic and time range, by key or by id; one message with its properties, its body (text,
pretty JSON or hex; cut when long, whole as a download) and, for each consumer group of its topic, whether the group
has consumed it; handed again to one online consumer of a group (RocketMQ's CONSUME_MESSAGE_DIRECTLY)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from sluice.client.admin import LONG_MAX, AdminError
from sluice.client.topic_reader import read_messages
from sluice.common.errors import ClientError
from sluice.common.message import MessageExt
from sluice.dashboard.app import (
    NotFound,
    admin_of,
    confirm,
    form_of,
    render,
    require_action,
    session_of,
    state_of,
    url,
)
from sluice.dashboard.format import body_view, time_ms
from sluice.dashboard.pages.groups import groups_table
from sluice.dashboard.sampler import GroupRow
from sluice.remoting.codes import RequestCode
from sluice.remoting.errors import RemotingError
from sluice.remoting.headers.admin import ConsumeMessageDirectlyResultRequestHeader

MAX_STATUS_GROUPS = 50  # groups whose consume status a message page asks for
MAX_SCANNED = 20_000  # messages read at most for one time-range query
MAX_QUERIES = 2  # message queries running at once (each reads up to MAX_SCANNED messages): the rest wait
_QUERIES = asyncio.Semaphore(MAX_QUERIES)


@dataclass(slots=True, frozen=True)
class MessageRow:
    """What the list shows of a message: never its body (a query may match thousands of large ones)."""

    msg_id: str
    offset_msg_id: str
    topic: str
    tags: str | None
    keys: list[str]
    store_timestamp: int
    store_host: str
    queue_id: int
    queue_offset: int
    size: int

    @classmethod
    def of(cls, m: MessageExt) -> MessageRow:
        return cls(m.msg_id, m.offset_msg_id, m.topic, m.tags, m.keys, m.store_timestamp, m.store_host or "",
                   m.queue_id, m.queue_offset, len(m.body))


def _ms(text: str, default: int) -> int:
    if not text.strip():
        return default
    try:
        return time_ms(text)
    except ValueError as exc:
        raise AdminError(str(exc)) from None


async def messages(request: web.Request) -> web.Response:
    q = request.query
    topic, key, msg_id = q.get("topic", "").strip(), q.get("key", "").strip(), q.get("id", "").strip()
    limit = state_of(request).config.list_limit
    found: list[MessageRow] = []
    error, searched = "", False
    admin = admin_of(request)
    try:
        async with _QUERIES:
            if msg_id:
                searched = True
                found = [MessageRow.of(m) for m in await admin.get_message(msg_id, topic or None)]
            elif topic and key:
                searched = True
                found = [MessageRow.of(m) for m in await admin.messages_by_key(topic, key, max_num=min(limit, 64))]
            elif topic:
                searched = True
                now = int(time.time() * 1000)
                begin, end = _ms(q.get("begin", ""), now - 3_600_000), _ms(q.get("end", ""), LONG_MAX)
                scanned = 0
                async for m in read_messages(admin, topic, start=begin):
                    scanned += 1
                    if begin <= m.store_timestamp <= end:
                        found.append(MessageRow.of(m))
                    if len(found) >= limit or scanned >= MAX_SCANNED:
                        break
    except AdminError as exc:
        error = str(exc)
    return render(request, "messages.html", topic=topic, key=key, msg_id=msg_id, begin=q.get("begin", ""),
                  end=q.get("end", ""), found=found, error=error, searched=searched, limit=limit)


async def _one(request: web.Request) -> MessageExt:
    msg_id, topic = request.query.get("id", "").strip(), request.query.get("topic", "").strip()
    if not msg_id:
        raise NotFound("No message id was given.")
    try:
        found = await admin_of(request).get_message(msg_id, topic or None)
    except AdminError as exc:
        raise NotFound(str(exc)) from None
    if not found:
        raise NotFound(f"There is no message {msg_id}.")
    return found[0]


async def message(request: web.Request) -> web.Response:
    m = await _one(request)
    admin = admin_of(request)
    table: dict[str, GroupRow] = {}
    with contextlib.suppress(AdminError, ClientError, RemotingError, OSError, TimeoutError):
        table = await asyncio.wait_for(groups_table(request, keep_fresh=False), 10)
    info = await admin.cluster_info()
    stored_on = next((name for name, b in info.broker_addr_table.items()
                      if m.store_host in b.broker_addrs.values()), None)
    readers = sorted((g for g in table.values() if m.topic in g.offset_topics or m.topic in g.topics),
                     key=lambda g: g.name)[:MAX_STATUS_GROUPS]

    async def state_of_group(g: GroupRow) -> dict[str, Any]:
        state = "no offset yet"
        try:
            progress = await asyncio.wait_for(admin.group_progress(g.name, m.topic), 5)
        except AdminError:  # (no committed offset on the topic)
            pass
        except (ClientError, RemotingError, OSError, TimeoutError):
            state = "unknown"  # (refused, or no answer)
        else:
            for q in progress.queues:
                if q.queue_id == m.queue_id and q.broker_name == stored_on:
                    state = "consumed" if q.consumer_offset > m.queue_offset else "not consumed yet"
        return {"group": g.name, "state": state, "clients": g.clients}

    status = list(await asyncio.gather(*(state_of_group(g) for g in readers)))
    limit = state_of(request).config.body_preview_bytes
    props = sorted(m.properties.items())
    return render(request, "message.html", m=m, body=body_view(bytes(m.body), limit), props=props,
                  consume_status=status, broker=stored_on or m.store_host)


async def body(request: web.Request) -> web.Response:
    """The whole body, as a download (never rendered as a page)."""
    m = await _one(request)
    return web.Response(body=bytes(m.body), content_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{m.offset_msg_id}.bin"'})


async def consume_directly(request: web.Request) -> web.Response:
    require_action(request, "hand messages to consumers")
    fields = await form_of(request, "a message re-send")
    msg_id, topic = fields.get("id", ""), fields.get("topic", "")
    group, client = fields.get("group", "").strip(), fields.get("client", "").strip()
    back = url("/message", id=msg_id, topic=topic)
    admin = admin_of(request)
    found = await admin.get_message(msg_id, topic or None)
    if not found:
        raise NotFound(f"There is no message {msg_id}.")
    m = found[0]
    if not client:
        conns = (await admin.group_connections(group))["connections"]
        if not conns:
            session_of(request).flash("error", f"Group {group} has no consumer online to hand the message to.")
            raise web.HTTPSeeOther(back)
        client = str(conns[0].get("clientId", ""))
    if fields.get("confirmed") != "1":
        fields = {**fields, "client": client}
        return confirm(request, f"Hand message {m.msg_id} to consumer {client} of group {group}?", fields,
                       "Its listener gets the message once more, now; the group's offsets do not move.", back=back)
    header = ConsumeMessageDirectlyResultRequestHeader(group, client, m.offset_msg_id, None, m.topic)
    resp = await admin.api.invoke_ok(m.store_host or "", RequestCode.CONSUME_MESSAGE_DIRECTLY, header.encode(),
                                     timeout_ms=15_000)
    result: dict[str, Any] = {}
    with contextlib.suppress(ValueError):
        result = json.loads(bytes(resp.body or b"{}"))
    outcome = result.get("consumeResult", "answered")
    session_of(request).flash("ok", f"Consumer {client} of {group} was handed message {m.msg_id}: {outcome}.")
    raise web.HTTPSeeOther(back)


def routes(router: web.UrlDispatcher) -> None:
    router.add_get("/messages", messages)
    router.add_get("/message", message)
    router.add_get("/message/body", body)
    router.add_post("/message/consume", consume_directly)
