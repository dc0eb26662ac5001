"""The cluster: broker groups with their master and slaves, replication (lag, in-sync set, epochs), and each broker's
runtime info and settings, one of which a super user may change."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable
from typing import Any

from aiohttp import web

from sluice.client.admin import LONG_MAX, AdminError
from sluice.common.errors import BrokerResponseError, ClientError
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
from sluice.dashboard.pages.overview import samples_for
from sluice.dashboard.sampler import BrokerSample
from sluice.remoting.errors import RemotingError


async def cluster(request: web.Request) -> web.Response:
    admin = admin_of(request)
    info = await admin.cluster_info()
    samples, _ = await samples_for(request)
    latest = {s.key: s for s in samples}
    clusters: list[dict[str, Any]] = []
    for cname in sorted(info.cluster_addr_table):
        groups = []
        for bname in sorted(info.cluster_addr_table[cname]):
            data = info.broker_addr_table.get(bname)
            if data is None:
                continue
            addrs = sorted(data.broker_addrs.items())
            ha_answer, *epoch_answers = await asyncio.gather(
                _asked(admin.ha_status(data.master_addr)) if data.master_addr else _nothing(),
                *(_asked(admin.broker_epochs(addr)) for _, addr in addrs))
            members: list[tuple[int, str, BrokerSample | None, list[dict[str, Any]]]] = [
                (bid, addr, latest.get(f"{bname}/{bid}"), _epochs(answer))
                for (bid, addr), answer in zip(addrs, epoch_answers, strict=True)]
            groups.append({"name": bname, "members": members, "ha": ha_answer or {}})
        clusters.append({"name": cname, "groups": groups})
    return render(request, "cluster.html", clusters=clusters)


async def _asked(call: Awaitable[dict[str, Any]]) -> dict[str, Any] | None:
    """A broker's answer, or None when it has none within 5 s (the page shows the others)."""
    with contextlib.suppress(AdminError, ClientError, RemotingError, TimeoutError, OSError):
        return await asyncio.wait_for(call, 5)
    return None


async def _nothing() -> None:
    return None


def _epochs(cache: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The epochs of a GET_BROKER_EPOCH_CACHE answer, newest first, the open one's end as None."""
    entries = [dict(e) for e in (cache or {}).get("epochList") or [] if isinstance(e, dict)
               and all(isinstance(e.get(k), int) for k in ("epoch", "startOffset", "endOffset"))]
    for e in entries:
        if e.get("endOffset") == LONG_MAX:
            e["endOffset"] = None
    return entries[::-1]


async def broker(request: web.Request) -> web.Response:
    admin = admin_of(request)
    name, bid_text = request.match_info["name"], request.match_info["id"]
    info = await admin.cluster_info()
    data = info.broker_addr_table.get(name)
    if data is None or not bid_text.isdigit() or int(bid_text) not in data.broker_addrs:
        raise NotFound(f"There is no broker {name} with id {bid_text}.")
    addr = data.broker_addrs[int(bid_text)]
    runtime, config = await asyncio.gather(admin.broker_runtime_info(addr), admin.broker_config(addr))
    return render(request, "broker.html", name=name, broker_id=int(bid_text), addr=addr,
                  runtime=sorted(runtime.items()), config=sorted(config.items()))


async def broker_setting(request: web.Request) -> web.Response:
    """One setting changed on one broker while it runs (UPDATE_BROKER_CONFIG, mqadmin updateBrokerConfig), kept
    for its next start; the broker refuses one it cannot change, naming those it can."""
    name, bid_text = request.match_info["name"], request.match_info["id"]
    require_action(request, "change broker settings")
    fields = await form_of(request, "a broker settings change")
    admin = admin_of(request)
    info = await admin.cluster_info()
    data = info.broker_addr_table.get(name)
    if data is None or not bid_text.isdigit() or int(bid_text) not in data.broker_addrs:
        raise NotFound(f"There is no broker {name} with id {bid_text}.")
    addr, here = data.broker_addrs[int(bid_text)], url(f"/cluster/{name}/{bid_text}")
    key, value = fields.get("key", "").strip(), fields.get("value", "").strip()
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{0,99}", key) or any(c in value for c in "=\r\n") or len(value) > 1000:
        session_of(request).flash("error", "Name the setting by RocketMQ's name (letters and digits, e.g. "
                                           "fileReservedTime) and give a value of one line without '='.")
        raise web.HTTPSeeOther(here)
    if fields.get("confirmed") != "1":
        return confirm(request, f"Set {key} = {value} on broker {name} (id {bid_text}, {addr})?", fields,
                       "It takes effect at once and is kept for the broker's next start.")
    try:
        await admin.update_broker_config(addr, key, value)
    except (AdminError, BrokerResponseError) as exc:
        if is_refusal(exc):
            raise
        why = (exc.remark or str(exc)) if isinstance(exc, BrokerResponseError) else str(exc)
        session_of(request).flash("error", f"{key} was not changed on {name}: {why}")
        raise web.HTTPSeeOther(here) from None
    done(request, here, f"{key} = {value} on broker {name} (id {bid_text}), kept for its next start.")


def routes(router: web.UrlDispatcher) -> None:
    router.add_get("/cluster", cluster)
    router.add_get("/cluster/{name}/{id}", broker)
    router.add_post("/cluster/{name}/{id}/settings", broker_setting)
