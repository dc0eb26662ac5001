"""A real etcd for the tests: ``/usr/bin/etcd`` (Debian's etcd-server) as a child process on 127.0.0.1.

``EtcdServer(root, name)`` is one single-member cluster with its data dir under ``root``, client and peer URLs on
free ports and its log in ``root/<name>.log``; ``start()`` waits until it answers ``/health``, ``stop()`` ends it
by PID (SIGTERM, SIGKILL after 5 s). The ``etcd_server`` fixture (registered in tests/conftest.py) yields the
endpoint of one that lives for the test. Without an etcd binary the tests skip, unless ``$SLUICE_REQUIRE_ETCD``
is set (CI): then they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.etcd.etcd_process import EtcdServer, etcd_binary


def etcd_required() -> bool:
    """``$SLUICE_REQUIRE_ETCD`` set: a missing etcd fails the tests instead of skipping them."""
    return os.environ.get("SLUICE_REQUIRE_ETCD", "") not in ("", "0")


def require_etcd() -> str:
    """The etcd binary; skips the test where there is none (fails it if ``$SLUICE_REQUIRE_ETCD`` is set)."""
    binary = etcd_binary()
    if binary is None:
        reason = "etcd is not installed (scripts/ensure_etcd.sh installs Debian's etcd-server)"
        if etcd_required():
            pytest.fail(f"{reason}; $SLUICE_REQUIRE_ETCD is set, so the etcd tests may not skip", pytrace=False)
        pytest.skip(reason)
    return binary


@pytest.fixture
def etcd_server(tmp_path: Path) -> Iterator[str]:
    """The endpoint (``127.0.0.1:<port>``) of a fresh single-member etcd, stopped when the test ends."""
    server = EtcdServer(tmp_path, binary=require_etcd())
    try:
        yield server.start()
    finally:
        server.stop()
