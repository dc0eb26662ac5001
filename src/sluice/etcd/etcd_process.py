"""A single-member etcd in a child process on 127.0.0.1 (Debian's etcd-server), for ``sluice dev --ha`` and the
tests: data dir and log under a folder, client and peer URLs on free ports; ``start()`` waits until it answers
``/health``, ``stop()`` ends it by PID (SIGTERM, SIGKILL after 5 s)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

START_TIMEOUT = 20.0
STOP_TIMEOUT = 5.0


def etcd_binary() -> str | None:
    """The etcd to run: ``/usr/bin/etcd`` or whatever ``etcd`` is on PATH; None if neither exists."""
    if os.access("/usr/bin/etcd", os.X_OK):
        return "/usr/bin/etcd"
    return shutil.which("etcd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class EtcdServer:
    """One single-member etcd cluster in a child process."""

    def __init__(self, root: Path, name: str = "etcd0", binary: str | None = None,
                 tls: tuple[str, str, str] | None = None) -> None:
        """``tls``: (certificate, key, CA) paths: clients speak https and must show a certificate the CA
        signed (``--client-cert-auth``); the certificate serves both ends of the health check, so it must allow
        server and client authentication."""
        self.tls = tls
        found = binary or etcd_binary()
        if found is None:
            raise RuntimeError("no etcd binary: install Debian's etcd-server (scripts/ensure_etcd.sh)")
        self.binary = found
        self.root = root
        self.name = name
        self.data_dir = root / f"{name}.data"
        self.log = root / f"{name}.log"
        self.client_port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:<client port>`` (``https://127.0.0.1:<port>`` with TLS)."""
        return f"https://127.0.0.1:{self.client_port}" if self.tls else f"127.0.0.1:{self.client_port}"

    def start(self) -> str:
        """Start it (a few times over if a free port was taken meanwhile) and wait until it is healthy; its
        endpoint."""
        problem = ""
        self.root.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            self.client_port, peer_port = free_port(), free_port()
            scheme = "https" if self.tls else "http"
            client_url, peer_url = f"{scheme}://127.0.0.1:{self.client_port}", f"http://127.0.0.1:{peer_port}"
            tls_flags = ([] if self.tls is None else
                         ["--cert-file", self.tls[0], "--key-file", self.tls[1], "--trusted-ca-file", self.tls[2],
                          "--client-cert-auth"])
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [self.binary, "--name", self.name, "--data-dir", str(self.data_dir),
                     "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                     "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                     "--initial-cluster", f"{self.name}={peer_url}", "--initial-cluster-state", "new",
                     "--logger", "zap", "--log-level", "warn", "--log-outputs", "stderr", *tls_flags],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            problem = self._wait_healthy()
            if not problem:
                return self.endpoint
            self.stop()
            shutil.rmtree(self.data_dir, ignore_errors=True)
        raise RuntimeError(f"etcd did not start: {problem}\n{self.log_tail()}")

    def _wait_healthy(self) -> str:
        """'' once ``/health`` says true; else why not (it exited, or 20 s passed)."""
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        url = f"{self.endpoint}/health" if self.tls else f"http://{self.endpoint}/health"
        context = None
        if self.tls is not None:
            context = ssl.create_default_context(cafile=self.tls[2])
            context.load_cert_chain(self.tls[0], self.tls[1])
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"etcd exited with {self.proc.returncode}"
            try:
                with urllib.request.urlopen(url, timeout=1, context=context) as response:
                    if json.loads(response.read()).get("health") == "true":
                        return ""
            except (OSError, ValueError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        return f"not healthy within {START_TIMEOUT:.0f} s"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 5 s."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""
