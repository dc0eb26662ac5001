"""One client connection as a group registry sees it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sluice.remoting.connection import Connection


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(slots=True)
class ClientChannelInfo:
    client_id: str
    conn: Connection
    language: str = "OTHER"
    version: int = 0
    last_update: int = field(default_factory=monotonic_ms)
    user: str | None = None  # the user who signed its registration (with authentication on)
