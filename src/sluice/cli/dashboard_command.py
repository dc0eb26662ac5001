"""``sluice dashboard``: the web dashboard over a running cluster; ``start_dashboard`` also serves ``sluice dev``'s."""

from __future__ import annotations

import argparse
import errno
import logging
from typing import Any

from sluice.cli.command import cli_credentials, namesrv_of
from sluice.cli.servers import LOG_LEVELS, run_until_signalled, setup_logging
from sluice.common.config_loader import ConfigError

DEFAULT_PORT = 8080
log = logging.getLogger(__name__)


async def start_dashboard(namesrv: str, host: str, port: int, *, credentials: Any = None, tls: Any = None,
                          read_only: bool = False, flag: str = "--port", state_dir: str | None = None) -> Any:
    """A started ``Dashboard``; a port that is taken is an error naming ``flag``."""
    from sluice.dashboard import Dashboard, DashboardConfig

    if not 0 <= port <= 65535:
        raise ConfigError(f"{flag} {port}: a port is 0 to 65535")
    dashboard = Dashboard(DashboardConfig(namesrv, host, port, credentials=credentials, tls=tls,
                                          read_only=read_only, state_dir=state_dir))
    if host not in ("127.0.0.1", "localhost", "::1") and not read_only:
        log.warning("dashboard on %s: anyone who reaches it may act on the cluster unless its ACL is on (then a "
                    "login is asked) or --read-only is given", host)
    try:
        return await dashboard.start()
    except OSError as exc:
        await dashboard.stop()
        if exc.errno == errno.EADDRINUSE:
            raise OSError(exc.errno, f"{flag} {port}: the port is in use (another port, or 0 for any free one)") \
                from exc
        raise


def cmd_dashboard(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    dashboard: list[Any] = []

    async def start() -> None:
        d = await start_dashboard(namesrv_of(args), args.host, args.port, credentials=cli_credentials(),
                                  read_only=args.read_only, state_dir=args.dlq_state)
        dashboard.append(d)
        print(f"sluice dashboard ready on {d.address} (name server {namesrv_of(args)})", flush=True)

    async def stop() -> None:
        for d in dashboard:
            await d.stop()

    return run_until_signalled(start, stop)


def add_dashboard_command(sub: Any) -> None:
    p = sub.add_parser("dashboard", help="serve the web dashboard (docs/dashboard.md)")
    p.add_argument("--namesrv", help="name server address(es), host:port;host:port (default $SLUICE_NAMESRV or "
                   "127.0.0.1:9876)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--read-only", action="store_true", help="show, never act (no create, delete, reset, re-send)")
    p.add_argument("--dlq-state", metavar="DIR", help="where dead-letter re-sends keep their cursor and record "
                   "(default ~/.sluice/dlq, as sluice dlq resend: a message is re-sent once by either)")
    p.add_argument("--log-level", default="info", type=str.lower, choices=LOG_LEVELS,
                   help="log lines at this level and above (default info)")
    p.set_defaults(func=cmd_dashboard)
