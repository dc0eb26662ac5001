"""The name server process: route tables and kv config behind a remoting server, plus the expiry scan."""

from __future__ import annotations

import asyncio
import logging
import os

from sluice.auth.credentials import is_loopback
from sluice.auth.inner_credentials_check import InnerCredentialsCheck
from sluice.common.config import NamesrvConfig
from sluice.common.metrics_exporter import MetricsExporter
from sluice.common.service import AsyncService
from sluice.namesrv.default_request_processor import DefaultRequestProcessor, monotonic_ms
from sluice.namesrv.kv_config_manager import KVConfigManager
from sluice.namesrv.namesrv_metrics import NamesrvMetrics
from sluice.namesrv.route_info_manager import BrokerLiveInfo, RouteInfoManager
from sluice.remoting.connection import Connection
from sluice.remoting.dispatcher import RequestDispatcher
from sluice.remoting.server import RemotingServer
from sluice.remoting.tls import server_tls

log = logging.getLogger(__name__)


class NamesrvController(AsyncService):
    """``await start()`` binds ``config.host:config.port`` (0 = any free port); ``await stop()`` ends it all."""

    def __init__(self, config: NamesrvConfig | None = None) -> None:
        super().__init__()
        self.config = config or NamesrvConfig()
        self.route_info = RouteInfoManager(self.config.broker_channel_expired_time)
        self.kv_config = KVConfigManager(self.config.kv_config_path)
        self.processor = DefaultRequestProcessor(self.route_info, self.kv_config,
                                                 watch_connection=self._watch_connection, config=self.config)
        self.dispatcher = RequestDispatcher()
        self.dispatcher.register_processor(self.processor)
        inner = self.config.inner_client_authentication_credentials
        if self.config.authentication_enabled:
            if inner is None:
                raise ValueError("namesrv: authentication_enabled needs inner_client_authentication_credentials "
                                 "(the access_key and secret_key its brokers sign with)")
            self.dispatcher.refusal = InnerCredentialsCheck(inner.access_key, inner.secret_key).refusal
        self.server = RemotingServer(self.dispatcher, self.config.remoting, name="namesrv", tls=server_tls(
            self.config, "namesrv", os.path.join(os.path.dirname(self.config.kv_config_path) or ".", "tls"),
            (self.config.host,)))
        self._watched: set[Connection] = set()
        self._started = False
        self.metrics_exporter: MetricsExporter | None = None

    def metrics(self) -> NamesrvMetrics:
        """Its metrics (``rocketmq_rpc_latency``), to be served by its own endpoint or another's."""
        return NamesrvMetrics(f"{self.config.host}:{self.server.port}", self.server.rpc_latency,
                              self.config.metrics_label)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> NamesrvController:
        """Load the kv config (a corrupt file raises ``StoreConfigError``), listen, start the expiry scan."""
        self.kv_config.load()
        await self.server.start(self.config.host, self.config.port)
        self._started = True
        self._spawn(self._scan_loop(), name="namesrv-scan")
        log.info("name server listening on %s", self.address)
        c = self.config
        if c.metrics_exporter_type == "PROM":
            try:
                self.metrics_exporter = await MetricsExporter([self.metrics()], c.metrics_prom_exporter_host or c.host,
                                                              c.metrics_prom_exporter_port).start()
            except BaseException:  # (a taken port): no name server half started
                await self.stop()
                raise
            log.info("name server metrics at %s", self.metrics_exporter.address)
        if not self.config.authentication_enabled and not is_loopback(self.config.host):
            log.warning("name server listens on %s with authentication off: anyone who reaches the port may "
                        "register brokers and change its KV config (authentication_enabled, docs/security.md)",
                        self.config.host)
        return self

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        await super().stop()
        if self.metrics_exporter is not None:
            await self.metrics_exporter.stop()
        await self.server.stop()
        self._watched.clear()
        await asyncio.get_running_loop().run_in_executor(None, self.kv_config.close)
        log.info("name server on %s stopped", self.address)

    async def __aenter__(self) -> NamesrvController:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # == broker liveness =============================================================================
    def scan_not_active_broker(self) -> list[BrokerLiveInfo]:
        """Drop brokers silent past their expiry time now; close their connections if nothing else uses them."""
        expired = self.route_info.scan_not_active_broker(monotonic_ms())
        still_used = {live.conn_key for live in self.route_info.broker_live_table.values()}
        for live in expired:
            conn = live.conn_key
            if isinstance(conn, Connection) and conn not in still_used:
                conn.close()
        return expired

    async def _scan_loop(self) -> None:
        interval = max(self.config.scan_not_active_broker_interval, 1) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.scan_not_active_broker()
            except Exception:  # the scan must keep running
                log.exception("scan for inactive brokers failed")

    def _watch_connection(self, conn: Connection) -> None:
        if conn in self._watched:
            return
        self._watched.add(conn)
        conn.close_listeners.append(self._on_connection_closed)

    def _on_connection_closed(self, conn: Connection) -> None:
        self._watched.discard(conn)
        self.route_info.on_connection_closed(conn)
