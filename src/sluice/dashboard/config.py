"""The dashboard's settings."""

from __future__ import annotations

from dataclasses import dataclass

from sluice.auth.credentials import CredentialsLike
from sluice.remoting.tls import TlsLike


@dataclass(slots=True)
class DashboardConfig:
    """``namesrv``: the name server(s) it asks (``host:port;host:port``); ``host`` / ``port``: where it listens.

    ``credentials``: the dashboard's own user (ACL on), with which it samples the brokers for the charts; without
    it, the charts fill while someone logged in looks at the overview. ``read_only`` hides and refuses every action.
    """

    namesrv: str
    host: str = "127.0.0.1"
    port: int = 8080
    credentials: CredentialsLike | None = None
    tls: TlsLike | None = None
    read_only: bool = False
    sample_seconds: float = 5.0  # how often the brokers' runtime info is sampled for the charts
    history_seconds: float = 600.0  # how much of it the charts show
    groups_refresh_seconds: float = 10.0  # the consumer-group table (lag of every group) is this old at most
    session_idle_seconds: float = 1800.0
    max_sessions: int = 1000
    body_preview_bytes: int = 16 * 1024  # a body longer than this is shown cut, with a download link
    list_limit: int = 2000  # rows of a message query or a dead-letter list
    state_dir: str | None = None  # dead-letter re-sends' cursor and record (default ~/.sluice/dlq, as the CLI's)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"dashboard port {self.port}: a port is 0 to 65535")
        for name in ("sample_seconds", "history_seconds", "groups_refresh_seconds", "session_idle_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"dashboard {name} {getattr(self, name)}: must be above 0")
