"""``sluice broker`` in a child process, for tests that kill it or measure it from outside."""

from __future__ import annotations

import random
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_with_fast_channel() -> int:
    """A free port P whose P - 2 is free too: a broker's listen port and its fast (VIP) channel's."""
    for _ in range(200):
        with socket.socket() as main, socket.socket() as fast:
            main.bind(("127.0.0.1", 0))
            port = main.getsockname()[1]
            if port < 1026:
                continue
            try:
                fast.bind(("127.0.0.1", port - 2))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port P with P - 2 free in 200 tries")


def free_ports_below_ephemeral(offsets: tuple[int, ...]) -> int:
    """A base port B, below the kernel's ephemeral range, with every B + offset free: for servers that take fixed
    ports around one base. Ports the kernel hands out (to etcd, to other tests' ``free_port``) come from the
    ephemeral range, so they cannot take one of these between this check and the server's bind."""
    low, high = 20000, 32000
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            high = min(high, int(f.read().split()[0]))
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(low - min(offsets), high - max(offsets))
        free = True
        for off in offsets:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", base + off))
                except OSError:
                    free = False
                    break
        if free:
            return base
    raise RuntimeError(f"no free ports at offsets {offsets} of one base in 500 tries")


class BrokerProcess:
    """A broker on one store in ``root``, with the config file text ``config``: started, killed (SIGKILL) and
    started again at will. ``fixed_port``: the same port every time (producers find it again at its old
    address); else a new one each start."""

    def __init__(self, namesrv: str, root: Path, config: str = "", fixed_port: bool = True) -> None:
        self.namesrv = namesrv
        self.root = root
        self.port = free_port() if fixed_port else 0
        self.config = root / "broker.toml"
        self.config.write_text(config)
        self.proc: subprocess.Popen[str] | None = None
        self.addr = ""
        self.runs = 0

    @property
    def log(self) -> Path:
        return self.root / f"broker-{self.runs}.log"

    def start(self) -> str:
        """Start it; its address once it is ready."""
        self.runs += 1
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sluice.cli.main", "broker", "--config", str(self.config), "--namesrv",
                 self.namesrv, "--port", str(self.port), "--store", str(self.root / "store")],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        assert self.proc.stdout is not None
        ready = re.search(r"ready on (\S+)", self.proc.stdout.readline())
        assert ready, f"broker did not start:\n{self.log.read_text()[-3000:]}"
        self.addr = ready.group(1)
        return self.addr

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._close()

    def stop(self) -> int | None:
        """SIGTERM, then (after 30 s) SIGKILL; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close()
        return self.proc.returncode

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
