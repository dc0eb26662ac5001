"""Running the dashboard: ``Dashboard(config).start()`` serves it on ``config.host:config.port`` from the event loop
it runs in (``sluice dashboard`` alone, or inside ``sluice dev``); ``stop()`` ends it and its clients."""

from __future__ import annotations

import logging

from aiohttp import web

from sluice.dashboard.app import DashboardState, build_app
from sluice.dashboard.config import DashboardConfig

log = logging.getLogger(__name__)


class Dashboard:
    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self.state = DashboardState(config)
        self.app = build_app(self.state)
        self._runner: web.AppRunner | None = None
        self.port = config.port

    @property
    def address(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    async def start(self) -> Dashboard:
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.config.host, self.config.port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        server = site._server  # (the port the system chose for port 0)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self.state.sampler.start()
        log.info("dashboard serving %s (name server %s)", self.address, self.config.namesrv)
        return self

    async def stop(self) -> None:
        await self.state.sampler.stop()
        await self.state.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
