"""The web dashboard (``sluice dashboard``, and ``sluice dev`` at 127.0.0.1:8080): what RocketMQ Dashboard and
nsqadmin show, over the admin protocol (``sluice.client.admin``). It keeps no state of its own beyond what a restart
may lose: sessions, a few minutes of samples for the charts, re-send progress."""

from sluice._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "Dashboard": "sluice.dashboard.server",
    "DashboardConfig": "sluice.dashboard.config",
})
__all__ = ["Dashboard", "DashboardConfig"]
