"""The dashboard's pages, a module each; ``register`` routes them all."""

from __future__ import annotations

from aiohttp import web


def register(app: web.Application) -> None:
    from sluice.dashboard.pages import (
        access,
        cluster,
        dead_letters,
        groups,
        login,
        messages,
        overview,
        producers,
        topics,
        trace,
    )

    login.setup(app)
    for page in (login, overview, cluster, topics, groups, producers, messages, dead_letters, trace, access):
        page.routes(app.router)
