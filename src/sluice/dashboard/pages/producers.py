"""Producers: the connections of a producer group on each broker (client id, address, language, version)."""

from __future__ import annotations

from aiohttp import web

from sluice.dashboard.app import admin_of, render


async def producers(request: web.Request) -> web.Response:
    group = request.query.get("group", "").strip()
    connections = await admin_of(request).producer_connections(group) if group else []
    return render(request, "producers.html", group=group, connections=connections)


def routes(router: web.UrlDispatcher) -> None:
    router.add_get("/producers", producers)
