"""The overview: every broker's role and state, messages in and out per second, stored bytes, the last minutes as
charts, and the alerts (a broker silent, pushing back, read-only or nearly full, a slave behind, a group lagging)."""

from __future__ import annotations

from aiohttp import web

from sluice.dashboard.app import admin_of, render, session_of, state_of
from sluice.dashboard.sampler import BrokerSample


async def samples_for(request: web.Request) -> tuple[list[BrokerSample], bool]:
    """The latest samples, and whether they are the shared ones (with their history): those a visitor may see
    (``may_read_shared``), made now with the visitor's client where the dashboard's own may not sample; for anyone
    else, fresh ones made with the visitor's client, kept nowhere (a refusal is the page's answer)."""
    state = state_of(request)
    sampler = state.sampler
    if not await state.may_read_shared(session_of(request)):
        fresh = await sampler.sample(admin_of(request), record=False)
        return sorted(fresh, key=lambda s: (s.cluster, s.name, s.broker_id)), False
    if sampler.refused or not sampler.latest:
        await sampler.sample(admin_of(request))
    return sorted(sampler.latest.values(), key=lambda s: (s.cluster, s.name, s.broker_id)), True


async def overview(request: web.Request) -> web.Response:
    samples, shared = await samples_for(request)
    state = state_of(request)
    groups = state.sampler.groups if state.sampler.groups_at and await state.may_read_groups(session_of(request)) \
        else {}
    alerts = state.sampler.alerts(groups=await state.may_read_groups(session_of(request))) if shared \
        else [a for s in samples for a in s.alerts()]
    return render(request, "overview.html", samples=samples, alerts=alerts,
                  put_rate=sum(s.put_rate for s in samples if s.broker_id == 0),
                  get_rate=sum(s.get_rate for s in samples),
                  stored=sum(s.stored_bytes for s in samples if s.broker_id == 0),
                  groups=len(groups), sample_seconds=state.config.sample_seconds,
                  refused=state.sampler.refused if session_of(request).username is None else "")


async def overview_data(request: web.Request) -> web.Response:
    """The charts' series: per broker, (time, in/s, out/s, stored bytes) of the last minutes."""
    samples, shared = await samples_for(request)
    sampler = state_of(request).sampler
    history = sampler.history if shared else {s.key: [s] for s in samples}
    series = {key: [[round(s.at, 1), round(s.put_rate, 2), round(s.get_rate, 2), s.stored_bytes] for s in h
                    if not s.error] for key, h in sorted(history.items())}
    return web.json_response({"series": series})


def routes(router: web.UrlDispatcher) -> None:
    router.add_get("/", overview)
    router.add_get("/api/overview", overview_data)
