"""Hosts for fault tests: network namespaces on one bridge, whose links the test cuts and heals.

``Network(["etcd", "namesrv", "b1", ...])`` makes a namespace per host, each with one address on a private
subnet (10.<n>.0.0/24, chosen per run), joined by a bridge that lives in a namespace of its own: nothing is bound
or routed outside namespaces the test made. ``cut(a, b)`` drops every packet between two hosts both ways
(blackhole routes, so TCP connections hang as they do when a switch fails, rather than being refused); ``heal``
puts them back. Processes run in a host with ``prefix(host) + argv``; ``call_in(host, fn)`` runs a function there
on a thread of this process (setns applies to the calling thread only). ``close()`` deletes every namespace.
Needs root and iproute2; ``require_netns()`` skips (or, with ``$SLUICE_REQUIRE_FAULT``, fails) where there are
none.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
PREFIX = "slf"  # namespace names: slf<pid>-<host>


def fault_tests_required() -> bool:
    """``$SLUICE_REQUIRE_FAULT`` set (CI): a missing tool fails the fault tests instead of skipping them."""
    return os.environ.get("SLUICE_REQUIRE_FAULT", "") not in ("", "0")


def skip_or_fail(reason: str) -> None:
    if fault_tests_required():
        pytest.fail(f"{reason}; $SLUICE_REQUIRE_FAULT is set, so the fault tests may not skip", pytrace=False)
    pytest.skip(reason)


def require_netns() -> None:
    if os.geteuid() != 0:
        skip_or_fail("network namespaces need root")
    if shutil.which("ip") is None:
        skip_or_fail("iproute2's ip is not installed")


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {r.stderr.strip()}")


def remove_stale_namespaces() -> None:
    """Namespaces an earlier run left behind (its process killed before it could delete them)."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX) or "-" not in name:
            continue
        pid = name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


class Network:
    """Hosts on one bridge; ``address(host)`` is each one's IPv4 address."""

    def __init__(self, hosts: Sequence[str]) -> None:
        remove_stale_namespaces()
        pid = os.getpid()
        self.tag = f"{PREFIX}{pid}"
        subnet = 16 + pid % 200  # 10.<subnet>.0.0/24: namespaces are private, this only eases reading logs
        self.hosts = list(hosts)
        self.addresses = {h: f"10.{subnet}.0.{i + 2}" for i, h in enumerate(self.hosts)}
        self.hub = f"{self.tag}-hub"
        self._made: list[str] = []
        self._cuts: set[tuple[str, str]] = set()
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def address(self, host: str) -> str:
        return self.addresses[host]

    def _build(self) -> None:
        _ip("netns", "add", self.hub)
        self._made.append(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            ns = self.ns(host)
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            # The pair is made inside the host's namespace with its other end in the hub's: nothing of it ever
            # appears in the namespace this process runs in.
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"h{i}", "netns", self.hub)
            _ip("-n", self.hub, "link", "set", f"h{i}", "master", "br0")
            _ip("-n", self.hub, "link", "set", f"h{i}", "up")
            _ip("-n", ns, "addr", "add", f"{self.addresses[host]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def prefix(self, host: str) -> list[str]:
        """The argv prefix that runs a command in ``host``."""
        return ["ip", "netns", "exec", self.ns(host)]

    # == faults ======================================================================================
    def cut(self, a: str, b: str) -> None:
        """No packet between ``a`` and ``b``, either way."""
        if (a, b) in self._cuts:
            return
        _ip("-n", self.ns(a), "route", "add", "blackhole", f"{self.addresses[b]}/32")
        _ip("-n", self.ns(b), "route", "add", "blackhole", f"{self.addresses[a]}/32")
        self._cuts |= {(a, b), (b, a)}

    def heal(self, a: str, b: str) -> None:
        if (a, b) not in self._cuts:
            return
        _ip("-n", self.ns(a), "route", "del", "blackhole", f"{self.addresses[b]}/32")
        _ip("-n", self.ns(b), "route", "del", "blackhole", f"{self.addresses[a]}/32")
        self._cuts -= {(a, b), (b, a)}

    def isolate(self, host: str, others: Sequence[str]) -> None:
        for other in others:
            self.cut(host, other)

    def heal_all(self) -> None:
        for a, b in list(self._cuts):
            self.heal(a, b)

    # == running things there ========================================================================
    def call_in(self, host: str, fn: Callable[[], T], timeout: float = 60) -> T:
        """``fn()`` on a new thread of this process that has entered ``host``'s namespace (its sockets, and those
        of threads it starts, are that host's)."""
        out: list[T] = []
        err: list[BaseException] = []

        def run() -> None:
            try:
                fd = os.open(f"/run/netns/{self.ns(host)}", os.O_RDONLY)
                try:
                    libc = ctypes.CDLL(None, use_errno=True)
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {self.ns(host)} failed")
                finally:
                    os.close(fd)
                out.append(fn())
            except BaseException as exc:  # handed to the caller
                err.append(exc)

        t = threading.Thread(target=run, name=f"netns-{host}", daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            raise TimeoutError(f"a call in {host} took over {timeout} s")
        if err:
            raise err[0]
        return out[0]

    def close(self) -> None:
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self._made.clear()
