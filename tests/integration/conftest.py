"""Fixtures of the integration tests: ``spawn_broker`` runs a broker as a child process
(``python -m sluice.cli.main broker``) for tests that SIGKILL or SIGSTOP it.

The in-process servers (``cluster``, ``empty_cluster``, ``server_loop``) live in ``tests/conftest.py``; the
interop tests use them too.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


class BrokerProcess:
    def __init__(self, proc: subprocess.Popen[str], addr: str, log: Path) -> None:
        self.proc = proc
        self.addr = addr
        self.log = log

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def cont(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


SpawnBroker = Callable[..., BrokerProcess]


@pytest.fixture
def spawn_broker(tmp_path: Path) -> Iterator[SpawnBroker]:
    """``spawn_broker(namesrv, name)`` → a broker child process; killed (by PID) when the test ends."""
    procs: list[subprocess.Popen[str]] = []

    def spawn(namesrv: str, name: str = "broker-p", *extra: str) -> BrokerProcess:
        log = tmp_path / f"{name}.log"
        err = open(log, "w")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", "broker", "--namesrv", namesrv,
                                     "--port", "0", "--store", str(tmp_path / name), "--broker-name", name, *extra],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        finally:
            err.close()
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"ready on (\S+)", line)
        if not m:
            proc.kill()
            raise AssertionError(f"broker did not start: {line!r}\n{log.read_text()}")
        return BrokerProcess(proc, m.group(1), log)

    try:
        yield spawn
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait(30)
            if p.stdout is not None:
                p.stdout.close()
