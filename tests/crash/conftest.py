"""Fixtures of the crash tests: start crash_tool.py processes and make sure none outlives its test."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

TOOL = Path(__file__).with_name("crash_tool.py")

Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """``spawn(*args, log=name)`` runs ``crash_tool.py *args`` with stderr to ``tmp_path/name``.

    Every process still running when the test ends is killed (SIGKILL, by its PID) and reaped.
    """
    procs: list[subprocess.Popen[bytes]] = []

    def _spawn(*args: object, log: str) -> subprocess.Popen[bytes]:
        err = open(tmp_path / log, "wb")
        try:
            p = subprocess.Popen([sys.executable, str(TOOL), *map(str, args)], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=err)
        finally:
            err.close()
        procs.append(p)
        return p

    try:
        yield _spawn
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
