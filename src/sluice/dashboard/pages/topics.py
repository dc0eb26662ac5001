"""Topics: every topic with its kind (searchable and filtered), a topic's queues, route and consumer groups (and a
lite parent's lite topics: pages/lite.py); create, update and delete with a confirmation; send a test message."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sluice.client.admin import AdminError, parse_perm
from sluice.client.message import Message
from sluice.common.attributes import TOPIC_MESSAGE_TYPES
from sluice.common.errors import ClientError, InvalidNameError, MessageFormatError
from sluice.common.naming import (
    DLQ_GROUP_TOPIC_PREFIX,
    LMQ_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    is_system_topic,
    validate_topic,
)
from sluice.common.structs import TopicConfig
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
    url,
)
from sluice.dashboard.pages.groups import groups_table
from sluice.dashboard.pages.lite import is_lite_parent, lite_view
from sluice.dashboard.sampler import GroupRow
from sluice.remoting.errors import RemotingError

KINDS = ("normal", "fifo", "delay", "transaction", "priority", "lite", "retry", "dlq", "system")
PERMS = {2: "W", 4: "R", 6: "RW", 0: "-"}
MAX_TEST_BODY = 64 * 1024


@dataclass(slots=True)
class TopicRow:
    name: str
    kind: str
    queues: int = 0  # write queues summed over the brokers
    perm: str = ""
    brokers: list[str] = field(default_factory=list)
    message_type: str = "NORMAL"


def kind_of(config: TopicConfig, system_names: set[str]) -> str:
    name = config.topic_name
    if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "retry"
    if name.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "dlq"
    if is_system_topic(name) or name in system_names:  # (the delay and half-message topics among them)
        return "system"
    mt = config.message_type.upper()
    if mt == "FIFO" or config.order:
        return "fifo"
    return {"DELAY": "delay", "TRANSACTION": "transaction", "PRIORITY": "priority", "LITE": "lite"}.get(mt, "normal")


async def topic_rows(request: web.Request) -> tuple[list[TopicRow], bool]:
    """Every topic every master holds (one request per master); whether that is all there is to know (a user
    without Get on the cluster gets the name server's list: names and the kinds they tell)."""
    admin = admin_of(request)
    info = await admin.cluster_info()
    system_names = set(info.cluster_addr_table) | set(info.broker_addr_table)
    masters = {name: b.master_addr for name, b in info.broker_addr_table.items() if b.master_addr}
    try:
        tables = await asyncio.gather(*(admin.api.get_all_topic_config(a) for a in masters.values()))
    except ClientError as exc:
        if not is_refusal(exc):
            raise
        names = await admin.list_topics()
        return [TopicRow(n, kind_of(TopicConfig(n), system_names), perm="?") for n in sorted(names)
                if not n.startswith(LMQ_PREFIX)], False
    rows: dict[str, TopicRow] = {}
    for bname, table in zip(masters, tables, strict=True):
        for name, raw in ((table or {}).get("topicConfigTable") or {}).items():
            if str(name).startswith(LMQ_PREFIX):
                continue  # (light queues are many and have a page of their own in the CLI: sluice lite)
            try:
                config = TopicConfig.from_json(raw)
            except (KeyError, ValueError, TypeError):
                continue
            row = rows.get(config.topic_name)
            if row is None:
                row = rows[config.topic_name] = TopicRow(config.topic_name, kind_of(config, system_names),
                                                         perm=PERMS.get(config.perm & 6, str(config.perm)),
                                                         message_type=config.message_type)
            row.queues += config.write_queue_nums
            row.brokers.append(bname)
    return [rows[n] for n in sorted(rows)], True


async def topics(request: web.Request) -> web.Response:
    rows, complete = await topic_rows(request)
    q, kind = request.query.get("q", "").strip(), request.query.get("kind", "")
    counts = {k: sum(1 for r in rows if r.kind == k) for k in KINDS}
    if kind in KINDS:
        rows = [r for r in rows if r.kind == kind]
    elif kind != "all":
        rows = [r for r in rows if r.kind not in ("retry", "dlq", "system")]
        kind = ""
    if q:
        rows = [r for r in rows if q.lower() in r.name.lower()]
    return render(request, "topics.html", rows=rows, q=q, kind=kind, kinds=KINDS, counts=counts, complete=complete,
                  message_types=[t for t in TOPIC_MESSAGE_TYPES if t not in ("UNSPECIFIED", "MIXED")])


async def topic(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    admin = admin_of(request)
    route = await admin.api.get_topic_route(name)
    if route is None:
        raise NotFound(f"There is no topic {name}.")
    status = await admin.topic_status(name)
    table: dict[str, GroupRow] = {}
    with contextlib.suppress(AdminError, ClientError, RemotingError, OSError, TimeoutError):
        table = await asyncio.wait_for(groups_table(request, keep_fresh=False), 10)
    groups = [(g, g.topic_lag.get(name, 0)) for g in table.values() if name in g.topics or name in g.offset_topics]
    refreshing = request.headers.get("X-Refresh")  # (which region of the page: the others' work is skipped)
    lite = None
    if refreshing in (None, "lite-status") and await is_lite_parent(admin, name, route):
        lite = await lite_view(admin, name, "" if refreshing else request.query.get("lite", ""))
    return render(request, "topic.html", topic=name, route=route, queues=status, groups=groups,
                  total=sum(q.messages for q in status), lite=lite)


def _int_field(fields: dict[str, str], key: str, default: int) -> int:
    text = fields.get(key, "").strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise AdminError(f"{key} {text[:40]!r} is not a whole number")
    return int(text)


async def create(request: web.Request) -> web.Response:
    require_action(request, "create topics")
    fields = await form_of(request, "a topic creation")
    name = fields.get("topic", "").strip()
    perm = fields.get("perm", "RW")
    mtype = fields.get("message_type", "NORMAL")
    try:
        queues = _int_field(fields, "queues", 8)
        try:
            validate_topic(name)
        except InvalidNameError as exc:
            raise AdminError(str(exc)) from None
        parse_perm(perm)
        if mtype not in TOPIC_MESSAGE_TYPES:
            raise AdminError(f"message type {mtype!r} is not one of {', '.join(TOPIC_MESSAGE_TYPES)}")
    except AdminError as exc:
        session_of(request).flash("error", str(exc))
        raise web.HTTPSeeOther("/topics") from None
    if fields.get("confirmed") != "1":
        return confirm(request, f"Create or update topic {name} with {queues} queues per broker, permission {perm}, "
                                f"message type {mtype}?", fields)
    try:
        where = await admin_of(request).create_topic(name, queues, perm, order=mtype == "FIFO",
                                                     message_type=mtype)
    except AdminError as exc:
        session_of(request).flash("error", f"Topic {name} was not created: {exc}")
        raise web.HTTPSeeOther("/topics") from None
    done(request, url(f"/topics/{name}"), f"Topic {name} is on {', '.join(sorted(where))}.")


async def update(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    require_action(request, "update topics")
    fields = await form_of(request, "a topic update")
    perm = fields.get("perm", "RW")
    if fields.get("confirmed") != "1":
        return confirm(request, f"Set topic {name}'s permission to {perm}?", fields,
                       "Clients may no longer send (W) or read (R) what the permission leaves out.")
    where = await admin_of(request).update_topic_perm(name, perm)
    done(request, url(f"/topics/{name}"), f"Topic {name}'s permission is {perm} on {', '.join(sorted(where))}.")


async def delete(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    require_action(request, "delete topics")
    fields = await form_of(request, "a topic deletion")
    if fields.get("confirmed") != "1":
        return confirm(request, f"Delete topic {name}?", fields,
                       "Its route goes at once; its messages are no longer served.")
    where = await admin_of(request).delete_topic(name)
    done(request, "/topics", f"Topic {name} was deleted from {', '.join(sorted(where)) or 'the name server'}.")


async def send(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    require_action(request, "send messages")
    fields = await form_of(request, "a test message")
    body = fields.get("body", "").encode()
    back = url(f"/topics/{name}")
    try:
        if len(body) > MAX_TEST_BODY:
            raise AdminError(f"a test message's body is at most {MAX_TEST_BODY} bytes")
        msg = Message(name, body, tags=fields.get("tags") or None, keys=fields.get("keys") or None)
    except (AdminError, MessageFormatError, InvalidNameError, ValueError) as exc:
        session_of(request).flash("error", f"Not sent: {exc}")
        raise web.HTTPSeeOther(back) from None
    admin = admin_of(request)
    results: list[Any] = []
    sender = admin.send(msg)
    try:
        async for r in sender:
            results.append(r)
    finally:
        await sender.aclose()
    r = results[0]
    done(request, url(f"/topics/{name}"),
         f"Sent: message {r.msg_id} ({r.status.name}) "
         f"to {r.queue.broker_name} queue {r.queue.queue_id} at offset {r.queue_offset}.")


def routes(router: web.UrlDispatcher) -> None:
    router.add_get("/topics", topics)
    router.add_post("/topics", create)
    router.add_get("/topics/{topic}", topic)
    router.add_post("/topics/{topic}/perm", update)
    router.add_post("/topics/{topic}/delete", delete)
    router.add_post("/topics/{topic}/send", send)
