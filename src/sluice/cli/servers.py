"""``sluice dev``, ``sluice namesrv``, ``sluice broker``: run servers in the foreground until Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

from sluice.common.config import BrokerConfig, FlushDiskType, MessageStoreConfig, NamesrvConfig
from sluice.common.config_loader import ConfigError, load_toml, update_from_dict
from sluice.common.runtime import tune_gc_for_throughput

DEV_STORE = ".sluice"


def setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


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


def namesrv_config(args: argparse.Namespace, data: dict[str, Any], where: str) -> NamesrvConfig:
    cfg = NamesrvConfig()
    update_from_dict(cfg, data.get("namesrv", {}), f"{where} [namesrv]")
    if getattr(args, "host", None):
        cfg.host = args.host
    if getattr(args, "namesrv_port", None) is not None:
        cfg.port = args.namesrv_port
    return cfg


def broker_config(args: argparse.Namespace, data: dict[str, Any], where: str) -> BrokerConfig:
    cfg = BrokerConfig(store=MessageStoreConfig())
    update_from_dict(cfg, data.get("broker", {}), f"{where} [broker]")
    if "store" in data:
        update_from_dict(cfg.store, data["store"], f"{where} [store]")
    if getattr(args, "store", None):
        cfg.store.store_path_root_dir = os.path.abspath(args.store)
    if getattr(args, "flush", None):
        try:
            cfg.store.flush_disk_type = FlushDiskType.parse(args.flush)
        except ValueError as exc:
            raise ConfigError(f"--flush: {exc}") from None
    if getattr(args, "broker_port", None) is not None:
        cfg.listen_port = args.broker_port
    if getattr(args, "host", None):
        cfg.listen_host = cfg.broker_ip = args.host
    if getattr(args, "namesrv", None):
        cfg.namesrv_addr = args.namesrv
    if getattr(args, "broker_name", None):
        cfg.broker_name = args.broker_name
    return cfg


def cmd_namesrv(args: argparse.Namespace) -> int:
    from sluice.namesrv import NamesrvController

    setup_logging(args.log_level)
    ns = NamesrvController(namesrv_config(args, _config_file(args.config), args.config or "flags"))

    async def start() -> None:
        await ns.start()
        print(f"sluice name server ready on {ns.address}", flush=True)

    return run_until_signalled(start, ns.stop)


def cmd_broker(args: argparse.Namespace) -> int:
    from sluice.broker.broker_controller import BrokerController

    setup_logging(args.log_level)
    cfg = broker_config(args, _config_file(args.config), args.config or "flags")
    if not cfg.namesrv_addrs:
        raise ConfigError("the broker needs a name server: --namesrv host:port (or namesrv_addr in [broker])")
    broker = BrokerController(cfg)

    async def start() -> None:
        await broker.start()
        await broker.register_broker_all()  # routed before "ready" when a name server answers (else it retries)
        print(f"sluice broker {cfg.broker_name} ready on {broker.broker_addr} (store {cfg.store.store_path_root_dir}, "
              f"{cfg.store.flush_disk_type.value}, name servers {cfg.namesrv_addr})", flush=True)

    return run_until_signalled(start, broker.stop)


def cmd_dev(args: argparse.Namespace) -> int:
    """Name server and broker in one process, on 127.0.0.1, with the store in ./.sluice."""
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
    ns = NamesrvController(nscfg)
    broker: BrokerController | None = None

    async def start() -> None:
        nonlocal broker
        await ns.start()
        bcfg.namesrv_addr = ns.address
        broker = BrokerController(bcfg)
        try:
            await broker.start()
            await broker.register_broker_all()  # routes exist before "ready": clients may send at once
        except BaseException:
            await ns.stop()
            raise
        print(f"sluice dev ready\n  name server  {ns.address}\n  broker       {broker.broker_addr} "
              f"({bcfg.broker_name}, {bcfg.store.flush_disk_type.value})\n  store        {store}\n"
              f"Ctrl-C stops it.", flush=True)

    async def stop() -> None:
        if broker is not None:
            await broker.stop()
        await ns.stop()

    return run_until_signalled(start, stop)


def add_server_commands(sub: Any) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="TOML file with [namesrv], [broker] and [store] tables")
        p.add_argument("--log-level", default="info", help="debug, info, warning or error (default info)")

    dev = sub.add_parser("dev", help="run a name server and a broker in one process (store in ./.sluice)")
    common(dev)
    dev.add_argument("--store", help=f"store directory (default ./{DEV_STORE})")
    dev.add_argument("--flush", help="sync or async (default async)")
    dev.add_argument("--namesrv-port", type=int, default=9876, help="name server port (default 9876)")
    dev.add_argument("--broker-port", type=int, default=10911, help="broker port (default 10911)")
    dev.add_argument("--host", default="127.0.0.1", help="address to bind and announce (default 127.0.0.1)")
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
    br.add_argument("--flush", help="sync or async (default async)")
    br.add_argument("--port", dest="broker_port", type=int, help="port (default 10911)")
    br.add_argument("--host", help="address to bind and announce (default 127.0.0.1)")
    br.add_argument("--broker-name", help="broker name (default broker-a)")
    br.set_defaults(func=cmd_broker)
