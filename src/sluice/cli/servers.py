"""``sluice dev``, ``sluice namesrv``, ``sluice broker``: run servers in the foreground until Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from typing import Any

from sluice.common.config import BrokerConfig, NamesrvConfig, ProxyConfig
from sluice.common.config_loader import ConfigError, load, load_toml, server_tables
from sluice.common.platform import server_platform_error
from sluice.common.runtime import tune_gc_for_throughput

DEV_STORE = ".sluice"
LOG_LEVELS = ("debug", "info", "warning", "error")
FLUSH_MODES = ("sync", "async")
FLUSH_HELP = "sync: fsync before each ack; async: flush in the background (default async)"


def setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def require_server_platform(command: str) -> None:
    """Exit with one line where the servers cannot run, before anything is imported or created for them."""
    reason = server_platform_error()
    if reason is not None:
        raise SystemExit(f"sluice {command}: {reason}")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()


def run_until_signalled(start: Any, stop: Any) -> int:
    """Run ``await start()``, print readiness, wait for SIGINT / SIGTERM, then ``await stop()``."""

    async def main() -> None:
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)
        await start()
        tune_gc_for_throughput()
        try:
            await done.wait()
        finally:
            print("sluice: stopping", file=sys.stderr, flush=True)
            await stop()

    with asyncio.Runner(loop_factory=_new_loop) as runner:
        runner.run(main())
    return 0


def _config_file(path: str | None) -> dict[str, Any]:
    return load_toml(path) if path else {}


WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def announced_ip(bind_host: str) -> str:
    """The address to tell clients for a server bound to ``bind_host``: itself, or for a wildcard (every
    interface) the machine's address on its default route (127.0.0.1 without one) — never 0.0.0.0."""
    if bind_host not in WILDCARD_HOSTS:
        return bind_host
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: picks the outgoing interface, sends nothing
            ip = s.getsockname()[0]
        except OSError:
            return "127.0.0.1"
    return ip if ip and ip != "0.0.0.0" else "127.0.0.1"


def _table(data: dict[str, Any], name: str, where: str) -> tuple[dict[str, Any], str]:
    return dict(server_tables(data, where).get(name, {})), f"{where} [{name}]" if where != "flags" else where


def namesrv_config(args: argparse.Namespace, data: dict[str, Any], where: str) -> NamesrvConfig:
    table, origin = _table(data, "namesrv", where)
    sources: dict[str, str] = {}
    if getattr(args, "host", None):
        table["host"], sources["host"] = args.host, "--host"
    if getattr(args, "namesrv_port", None) is not None:
        flag = "--port" if getattr(args, "func", None) is cmd_namesrv else "--namesrv-port"
        table["port"], sources["port"] = args.namesrv_port, flag
    return load(NamesrvConfig, table, origin, sources)


def broker_config(args: argparse.Namespace, data: dict[str, Any], where: str) -> BrokerConfig:
    """The broker's config: the file's [broker] and [store] tables, then the flags; all checked together."""
    tables = server_tables(data, where)
    broker = dict(tables.get("broker", {}))
    origin = f"{where} [broker]" if where != "flags" else where
    sources: dict[str, str] = {}
    nested = broker.pop("store", {})
    if not isinstance(nested, dict):
        raise ConfigError(f"{origin}: store must be a table ([store]), not {nested!r}")
    store = dict(nested)
    if "store" in tables:
        sources["store"] = f"{where} [store]"
    for key in tables.get("store", {}):
        sources[f"store.{key}"] = f"{where} [store]"
    store.update(tables.get("store", {}))
    if getattr(args, "store", None):
        store["store_path_root_dir"], sources["store.store_path_root_dir"] = os.path.abspath(args.store), "--store"
    if getattr(args, "flush", None):
        store["flush_disk_type"], sources["store.flush_disk_type"] = args.flush, "--flush"
    if getattr(args, "broker_port", None) is not None:
        flag = "--port" if getattr(args, "func", None) is cmd_broker else "--broker-port"
        broker["listen_port"], sources["listen_port"] = args.broker_port, flag
    if getattr(args, "host", None):
        broker["listen_host"], sources["listen_host"] = args.host, "--host"
        if args.host not in WILDCARD_HOSTS:
            broker["broker_ip"], sources["broker_ip"] = args.host, "--host"
    if getattr(args, "namesrv", None):
        broker["namesrv_addr"], sources["namesrv_addr"] = args.namesrv, "--namesrv"
    if getattr(args, "broker_name", None):
        broker["broker_name"], sources["broker_name"] = args.broker_name, "--broker-name"
    for flag, key in (("role", "broker_role"), ("broker_id", "broker_id"), ("ha_port", "ha_listen_port"),
                      ("ha_master", "ha_master_address"), ("etcd", "controller_etcd_endpoints")):
        value = getattr(args, flag, None)
        if value is not None:
            broker[key], sources[key] = value, "--" + flag.replace("_", "-")
    if "broker_ip" not in broker and broker.get("listen_host") in WILDCARD_HOSTS:
        broker["broker_ip"] = announced_ip(broker["listen_host"])  # bound everywhere: announce a real address
    if store:
        broker["store"] = store
    return load(BrokerConfig, broker, origin, sources)


def cmd_namesrv(args: argparse.Namespace) -> int:
    require_server_platform("namesrv")
    from sluice.namesrv import NamesrvController

    setup_logging(args.log_level)
    ns = NamesrvController(namesrv_config(args, _config_file(args.config), args.config or "flags"))

    async def start() -> None:
        await ns.start()
        print(f"sluice name server ready on {ns.address}", flush=True)

    return run_until_signalled(start, ns.stop)


def cmd_broker(args: argparse.Namespace) -> int:
    require_server_platform("broker")
    from sluice.broker.broker_runner import BrokerRunner

    setup_logging(args.log_level)
    cfg = broker_config(args, _config_file(args.config), args.config or "flags")
    if not cfg.namesrv_addrs:
        raise ConfigError("the broker needs a name server: --namesrv host:port (or namesrv_addr in [broker])")
    runner = BrokerRunner(cfg)

    async def start() -> None:
        await runner.start()
        broker = runner.broker
        assert broker is not None  # (start() registered it: routed before "ready" when a name server answers)
        print(f"sluice broker {cfg.broker_name} ready on {broker.broker_addr} (store {cfg.store.store_path_root_dir}, "
              f"{cfg.store.flush_disk_type.value}, {broker.role.value}, name servers {cfg.namesrv_addr})", flush=True)

    return run_until_signalled(start, runner.stop)


def cmd_dev(args: argparse.Namespace) -> int:
    """Name server and broker in one process, on 127.0.0.1, with the store in ./.sluice."""
    require_server_platform("dev")
    from sluice.broker.broker_controller import BrokerController
    from sluice.namesrv import NamesrvController

    setup_logging(args.log_level)
    data = _config_file(args.config)
    where = args.config or "flags"
    store = os.path.abspath(args.store or DEV_STORE)
    args.store = store
    nscfg = namesrv_config(args, data, where)
    nscfg.kv_config_path = os.path.join(store, "namesrv", "kvConfig.json")
    bcfg = broker_config(args, data, where)
    bcfg.auto_create_topic_enable = True
    if args.no_property_filter:
        bcfg.enable_property_filter = False
    elif "enable_property_filter" not in server_tables(data, where).get("broker", {}):
        bcfg.enable_property_filter = True  # (a dev node filters by SQL92 and key=value; RocketMQ's broker: off)
    if args.grpc_port is not None and not 0 <= args.grpc_port <= 65535:
        raise ConfigError(f"--grpc-port {args.grpc_port}: a port is 0 to 65535")
    if not 0 <= args.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port {args.metrics_port}: a port is 0 to 65535")
    if not args.no_dashboard and not 0 <= args.dashboard_port <= 65535:
        raise ConfigError(f"--dashboard-port {args.dashboard_port}: a port is 0 to 65535")
    fast = bcfg.fast_listen_port if bcfg.fast_channel_enabled else 0
    for flag, port in (("--grpc-port", None if args.no_grpc else args.grpc_port),
                       ("--metrics-port", None if args.no_metrics else args.metrics_port),
                       ("--dashboard-port", None if args.no_dashboard else args.dashboard_port),
                       ("--namesrv-port", nscfg.port)):
        if fast and port == fast:
            raise ConfigError(f"{flag} {port} is the broker's fast channel port (its listen_port - 2, where "
                              "RocketMQ clients with vipChannelEnabled send): choose another port, or set "
                              "fast_channel_enabled = false in [broker]")
    # One endpoint serves the name server's, the broker's and the front's metrics (--metrics-port).
    nscfg.metrics_exporter_type = bcfg.metrics_exporter_type = "DISABLE"
    secured = bcfg.authentication_enabled or bcfg.authorization_enabled
    if secured and not args.no_grpc and bcfg.inner_client_authentication_credentials is None:
        raise ConfigError(f"{where} [broker]: authentication_enabled / authorization_enabled with the gRPC front need "
                          "inner_client_authentication_credentials = { access_key, secret_key } (what the front "
                          "signs its requests to the broker with), or --no-grpc")
    if nscfg.tls_server_mode == "enforcing" and not bcfg.tls_enable:
        raise ConfigError(f"{where}: [namesrv] tls_server_mode = \"enforcing\" needs [broker] tls_enable = true (the "
                          "broker registers with the name server over TLS then)")
    if args.ha:
        return _dev_ha(args, nscfg, bcfg, store)
    ns = NamesrvController(nscfg)
    broker: BrokerController | None = None
    front: list[Any] = []
    exporters: list[Any] = []

    async def start() -> None:
        nonlocal broker
        await ns.start()
        bcfg.namesrv_addr = f"{announced_ip(nscfg.host)}:{ns.port}"
        broker = BrokerController(bcfg)
        try:
            await broker.start()  # (registered within: routes exist before "ready", clients may send at once)
            grpc_line = ""
            if not args.no_grpc:
                from sluice.proxy.messaging_service import serve

                auth, inner = _front_auth(bcfg, broker)
                server, service, port = await serve(bcfg.namesrv_addr, nscfg.host, args.grpc_port, auth=auth,
                                                    credentials=inner, tls=broker.tls,
                                                    broker_tls=_front_broker_tls(bcfg))
                front[:] = [server, service]
                grpc_line = (f"\n  gRPC         {nscfg.host}:{port} (RocketMQ 5 clients; TLS "
                             f"{bcfg.tls_server_mode})")
            if not args.no_metrics:
                from sluice.common.metrics_exporter import MetricsExporter
                from sluice.proxy.proxy_metrics_manager import ProxyMetricsManager

                collectors: list[Any] = [ns.metrics(), broker.metrics]
                if front:
                    collectors.append(ProxyMetricsManager(f"{nscfg.host}:{port}", bcfg.broker_cluster_name))
                try:
                    exporter = await MetricsExporter(collectors, nscfg.host,
                                                     args.metrics_port).start()
                except OSError as exc:
                    raise OSError(exc.errno, f"--metrics-port {args.metrics_port}: {exc.strerror} (another port, "
                                             "0 for any free one, or --no-metrics)") from exc
                exporters.append(exporter)
                grpc_line += f"\n  metrics      {exporter.address} (Prometheus)"
            if not args.no_dashboard:
                from sluice.cli.dashboard_command import start_dashboard

                own = bcfg.inner_client_authentication_credentials  # (what it samples the broker with)
                dashboard = await start_dashboard(
                    bcfg.namesrv_addr, nscfg.host, args.dashboard_port, flag="--dashboard-port",
                    credentials=(own.access_key, own.secret_key) if secured and own is not None else None,
                    tls=_front_broker_tls(bcfg))
                exporters.append(dashboard)
                grpc_line += f"\n  dashboard    {dashboard.address}"
        except BaseException:
            for exporter in exporters:
                await exporter.stop()
            if broker is not None:
                await broker.stop()
            await ns.stop()
            raise
        print(f"sluice dev ready\n  name server  {bcfg.namesrv_addr}\n  broker       {broker.broker_addr} "
              f"({bcfg.broker_name}, {bcfg.store.flush_disk_type.value}){grpc_line}\n  store        {store}\n"
              f"Ctrl-C stops it.", flush=True)

    async def stop() -> None:
        for exporter in exporters:
            await exporter.stop()
        if front:
            from sluice.proxy.messaging_service import stop as stop_front

            await stop_front(*front)
        if broker is not None:
            await broker.stop()
        await ns.stop()

    return run_until_signalled(start, stop)


def _front_broker_tls(bcfg: BrokerConfig) -> Any:
    """What ``sluice dev``'s gRPC front speaks to its broker in the same process: the broker's own client TLS
    (tls_enable), or, where the broker enforces TLS, TLS without checking its certificate (over the loopback)."""
    from sluice.remoting.tls import client_context, inner_client_tls

    if bcfg.tls_enable:
        return inner_client_tls(bcfg, "[broker]")
    return client_context(verify=False) if bcfg.tls_server_mode == "enforcing" else None


def _front_auth(bcfg: BrokerConfig, broker: Any) -> tuple[Any, tuple[str, str] | None]:
    """The gRPC front's checks over the broker's own users and rules, and the inner credentials it signs with,
    when the broker has ACL on; (None, None) when not."""
    if not (bcfg.authentication_enabled or bcfg.authorization_enabled):
        return None, None
    from sluice.auth.audit import AuditLog
    from sluice.auth.evaluator import Authenticator, Authorizer, parse_whitelist
    from sluice.proxy.grpc_auth import GrpcAuth

    audit = AuditLog()
    metadata = broker.auth_metadata
    auth = GrpcAuth(Authenticator(metadata, audit, parse_whitelist(bcfg.authentication_whitelist))
                    if bcfg.authentication_enabled else None,
                    Authorizer(metadata, audit, parse_whitelist(bcfg.authorization_whitelist))
                    if bcfg.authorization_enabled else None)
    inner = bcfg.inner_client_authentication_credentials
    assert inner is not None
    return auth, (inner.access_key, inner.secret_key)


def _dev_ha(args: argparse.Namespace, nscfg: NamesrvConfig, bcfg: BrokerConfig, store: str) -> int:
    """``sluice dev --ha``: a name server, an etcd (a child process) and three brokers of one group in controller
    mode, SYNC_MASTER, in this process (docs/ha.md)."""
    from pathlib import Path

    from sluice.broker.broker_runner import BrokerRunner
    from sluice.common.config import BrokerRole
    from sluice.etcd.etcd_process import EtcdServer, etcd_binary
    from sluice.namesrv import NamesrvController

    binary = etcd_binary()
    if binary is None:
        raise ConfigError("--ha needs etcd: install Debian's etcd-server (apt-get install etcd-server, or "
                          "scripts/ensure_etcd.sh)")
    if not 0 < bcfg.listen_port <= 65535 - 22:
        raise ConfigError(f"--broker-port {bcfg.listen_port}: --ha needs a fixed port (brokers take it, +10 and +20)")
    ns = NamesrvController(nscfg)
    etcd = EtcdServer(Path(store) / "etcd", binary=binary)
    runners: list[BrokerRunner] = []
    dashboards: list[Any] = []

    async def start() -> None:
        loop = asyncio.get_running_loop()
        endpoint = await loop.run_in_executor(None, etcd.start)
        await ns.start()
        namesrv = f"{announced_ip(nscfg.host)}:{ns.port}"
        for i in (1, 2, 3):
            cfg = bcfg.replace(broker_id=i, listen_port=bcfg.listen_port + 10 * (i - 1), ha_listen_port=0,
                               broker_role=BrokerRole.SYNC_MASTER, controller_etcd_endpoints=endpoint,
                               namesrv_addr=namesrv,
                               store=bcfg.store.replace(store_path_root_dir=os.path.join(store, f"broker-{i}")))
            runners.append(await BrokerRunner(cfg).start())
        async with asyncio.timeout(60):
            while not any(r.broker is not None and r.broker.role.is_master for r in runners):
                await asyncio.sleep(0.05)
        lines = "\n".join(f"  broker {r.config.broker_id}     {r.config.broker_ip}:{r.config.listen_port} "
                          f"(HA {r.config.ha_port})" for r in runners)
        if not args.no_dashboard:
            from sluice.cli.dashboard_command import start_dashboard

            dashboards.append(await start_dashboard(namesrv, nscfg.host, args.dashboard_port,
                                                    flag="--dashboard-port"))
            lines += f"\n  dashboard    {dashboards[0].address}"
        print(f"sluice dev --ha ready\n  name server  {namesrv}\n  etcd         {endpoint}\n{lines}\n"
              f"  group        {bcfg.broker_name}, SYNC_MASTER, the master elected among the three\n"
              f"  store        {store}\nCtrl-C stops it.", flush=True)

    async def stop() -> None:
        for d in dashboards:
            await d.stop()
        for r in runners:
            await r.stop()
        await ns.stop()
        await asyncio.get_running_loop().run_in_executor(None, etcd.stop)

    return run_until_signalled(start, stop)


def cmd_proxy(args: argparse.Namespace) -> int:
    """The gRPC front for RocketMQ 5 clients, in front of the brokers a name server routes to."""
    require_server_platform("proxy")
    from sluice.proxy.messaging_service import serve, stop

    setup_logging(args.log_level)
    if args.grpc_port is not None and not 0 <= args.grpc_port <= 65535:
        raise ConfigError(f"--port {args.grpc_port}: a port is 0 to 65535")
    data = _config_file(args.config)
    table, origin = _table(data, "proxy", args.config or "flags")
    pcfg = load(ProxyConfig, table, origin)
    from sluice.remoting.tls import inner_client_tls, server_tls

    tls = server_tls(pcfg, origin, pcfg.self_signed_dir, (args.host,))
    broker_tls = inner_client_tls(pcfg, origin)
    secured = pcfg.authentication_enabled or pcfg.authorization_enabled
    inner = pcfg.inner_client_authentication_credentials
    if secured and inner is None:
        raise ConfigError(f"{origin}: authentication_enabled / authorization_enabled need "
                          "inner_client_authentication_credentials = { access_key, secret_key } (what the front copies "
                          "the brokers' users and ACLs with, and signs its requests to them with)")
    from sluice.auth.credentials import is_loopback

    if not is_loopback(args.host) and not pcfg.authentication_enabled:
        logging.getLogger("sluice.proxy").warning(
            "sluice proxy listens on %s with authentication off: anyone who reaches it may send, consume and "
            "administer (authentication_enabled in [proxy], docs/security.md)", args.host)
    running: list[Any] = []
    exporters: list[Any] = []

    async def start() -> None:
        auth, signing = None, None
        if secured:
            assert inner is not None
            from sluice.auth.audit import AuditLog
            from sluice.auth.credentials import signing_hook
            from sluice.auth.evaluator import Authenticator, Authorizer, parse_whitelist
            from sluice.client.mq_client_api import MQClientAPI
            from sluice.proxy.auth_metadata_cache import BrokerAuthMetadata
            from sluice.proxy.grpc_auth import GrpcAuth
            from sluice.remoting.client import RemotingClient

            signing = (inner.access_key, inner.secret_key)
            remoting = RemotingClient(request_hook=signing_hook(signing), tls=broker_tls)
            metadata = BrokerAuthMetadata(MQClientAPI(remoting, [a for a in args.namesrv.split(";") if a]),
                                          pcfg.auth_cache_refresh_seconds)
            await metadata.start()
            running.append((metadata, remoting))
            audit = AuditLog()
            auth = GrpcAuth(Authenticator(metadata, audit, parse_whitelist(pcfg.authentication_whitelist))
                            if pcfg.authentication_enabled else None,
                            Authorizer(metadata, audit, parse_whitelist(pcfg.authorization_whitelist))
                            if pcfg.authorization_enabled else None)
        try:
            server, service, port = await serve(args.namesrv, args.host, args.grpc_port, auth=auth,
                                                credentials=signing, tls=tls, broker_tls=broker_tls)
        except BaseException:
            for metadata, remoting in running:
                await metadata.stop()
                await remoting.close()
            raise
        running[:0] = [server, service]
        acl = "on" if secured else "off"
        metrics_line = ""
        if pcfg.metrics_exporter_type == "PROM":
            from sluice.common.metrics_exporter import MetricsExporter
            from sluice.proxy.proxy_metrics_manager import ProxyMetricsManager

            source = ProxyMetricsManager(f"{args.host}:{port}", metrics_label=pcfg.metrics_label)
            exporter = await MetricsExporter([source], pcfg.metrics_prom_exporter_host or args.host,
                                             pcfg.metrics_prom_exporter_port).start()
            exporters.append(exporter)
            metrics_line = f", metrics {exporter.address}"
        print(f"sluice proxy (gRPC, RocketMQ 5 clients; TLS {pcfg.tls_server_mode}, ACL {acl}) ready on "
              f"{args.host}:{port}, name server {args.namesrv}{metrics_line}", flush=True)

    async def halt() -> None:
        for exporter in exporters:
            await exporter.stop()
        if len(running) >= 2:
            await stop(running[0], running[1])
        for item in running[2:]:
            metadata, remoting = item
            await metadata.stop()
            await remoting.close()

    return run_until_signalled(start, halt)


def add_server_commands(sub: Any) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="TOML file with [namesrv], [broker] and [store] tables")
        p.add_argument("--log-level", default="info", type=str.lower, choices=LOG_LEVELS,
                       help="log lines at this level and above (default info)")

    dev = sub.add_parser("dev", help="run a name server and a broker in one process (store in ./.sluice)")
    common(dev)
    dev.add_argument("--store", help=f"store directory (default ./{DEV_STORE})")
    dev.add_argument("--flush", choices=FLUSH_MODES, help=FLUSH_HELP)
    # No defaults here: a flag given wins over --config's value, which wins over the config's own default (the
    # same values: 9876, 10911, 127.0.0.1); a value from the file is used or refused, never silently replaced.
    dev.add_argument("--namesrv-port", type=int, help="name server port (default 9876)")
    dev.add_argument("--broker-port", type=int, help="broker port (default 10911)")
    dev.add_argument("--host", help="address to bind and announce (default 127.0.0.1)")
    dev.add_argument("--grpc-port", type=int, default=8081,
                     help="port of the gRPC front for RocketMQ 5 clients (default 8081; 0: any free port)")
    dev.add_argument("--no-grpc", action="store_true", help="no gRPC front")
    dev.add_argument("--metrics-port", type=int, default=5557,
                     help="port of the Prometheus endpoint, /metrics (default 5557; 0: any free port)")
    dev.add_argument("--no-metrics", action="store_true", help="no Prometheus endpoint")
    dev.add_argument("--dashboard-port", type=int, default=8080,
                     help="port of the web dashboard (default 8080; 0: any free port)")
    dev.add_argument("--no-dashboard", action="store_true", help="no web dashboard")
    dev.add_argument("--no-property-filter", action="store_true", help="no SQL92 / key=value filters (RocketMQ's "
                     "broker default; a dev node has them on)")
    dev.add_argument("--ha", action="store_true", help="three brokers of one group with automatic failover, "
                     "elected through an etcd started as a child process (docs/ha.md; needs etcd installed)")
    dev.set_defaults(func=cmd_dev)

    ns = sub.add_parser("namesrv", help="run a name server")
    common(ns)
    ns.add_argument("--host", help="address to bind (default 127.0.0.1)")
    ns.add_argument("--port", dest="namesrv_port", type=int, help="port (default 9876)")
    ns.set_defaults(func=cmd_namesrv)

    br = sub.add_parser("broker", help="run a broker")
    common(br)
    br.add_argument("--namesrv", help="name server address(es), host:port;host:port")
    br.add_argument("--store", help="store directory (default ~/.sluice/store)")
    br.add_argument("--flush", choices=FLUSH_MODES, help=FLUSH_HELP)
    br.add_argument("--port", dest="broker_port", type=int, help="port (default 10911)")
    br.add_argument("--host", help="address to bind and announce (default 127.0.0.1)")
    br.add_argument("--broker-name", help="broker name (default broker-a)")
    br.add_argument("--role", help="ASYNC_MASTER (default), SYNC_MASTER or SLAVE (docs/ha.md)")
    br.add_argument("--broker-id", type=int, help="0 for a master, 1 or more for a slave (in controller mode: "
                    "this broker's own id in its group, 1 or more)")
    br.add_argument("--ha-port", type=int, help="port a master's slaves connect to (default: --port + 1)")
    br.add_argument("--ha-master", help="a slave's master, host:port of its HA port (default: as the name "
                    "server says)")
    br.add_argument("--etcd", help="controller mode: etcd endpoint(s) host:port;host:port that elect the "
                    "group's master (docs/ha.md)")
    br.set_defaults(func=cmd_broker)

    px = sub.add_parser("proxy", help="run the gRPC front for RocketMQ 5 clients (apache.rocketmq.v2)")
    px.add_argument("--namesrv", default="127.0.0.1:9876", help="name server address(es), host:port;host:port")
    px.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    px.add_argument("--port", dest="grpc_port", type=int, default=8081, help="port (default 8081)")
    px.add_argument("--config", help="TOML file with a [proxy] table (its TLS: docs/security.md)")
    px.add_argument("--log-level", default="info", type=str.lower, choices=LOG_LEVELS,
                    help="log lines at this level and above (default info)")
    px.set_defaults(func=cmd_proxy)
