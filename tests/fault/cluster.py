"""A broker group in controller mode spread over network namespaces (``tests.fault.netns``): etcd, a name server
and three ``sluice broker --etcd`` processes, each on a host of its own, and the clients (``tests.fault.load``) on
another; the test cuts a host off and heals it. Every process is ended by PID at ``close()``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from sluice.etcd.etcd_process import etcd_binary
from tests.fault.netns import Network

GROUP = "broker-ha"
BROKER_PORT, HA_PORT, NAMESRV_PORT, ETCD_PORT = 10911, 10912, 9876, 2379


class NetCluster:
    def __init__(self, root: Path, brokers: int = 3, lease_ttl_ms: int = 2000) -> None:
        self.root = root
        self.ids = list(range(1, brokers + 1))
        self.lease_ttl_ms = lease_ttl_ms
        self.net = Network(["etcd", "namesrv", *(f"b{i}" for i in self.ids), "client"])
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def etcd(self) -> str:
        return f"{self.net.address('etcd')}:{ETCD_PORT}"

    @property
    def namesrv(self) -> str:
        return f"{self.net.address('namesrv')}:{NAMESRV_PORT}"

    def broker_address(self, i: int) -> str:
        return f"{self.net.address(f'b{i}')}:{BROKER_PORT}"

    # == processes ===================================================================================
    def _spawn(self, host: str, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.root / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(self.net.prefix(host) + argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.procs[name] = proc
        return proc

    def start(self, timeout: float = 90) -> None:
        binary = etcd_binary()
        assert binary is not None
        ip = self.net.address("etcd")
        client_url, peer_url = f"http://{ip}:{ETCD_PORT}", f"http://{ip}:{ETCD_PORT + 1}"
        self._spawn("etcd", "etcd", [binary, "--name", "etcd", "--data-dir", str(self.root / "etcd.data"),
                                     "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                                     "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                                     "--initial-cluster", f"etcd={peer_url}", "--initial-cluster-state", "new",
                                     "--logger", "zap", "--log-level", "warn", "--log-outputs", "stderr"])
        self._wait(lambda: self._etcd_healthy(), 30, "etcd healthy")
        self._spawn("namesrv", "namesrv", [sys.executable, "-m", "sluice.cli.main", "namesrv", "--host",
                                           self.net.address("namesrv"), "--port", str(NAMESRV_PORT)])
        for i in self.ids:
            self.start_broker(i)
        self.wait_in_sync(len(self.ids), timeout)

    def start_broker(self, i: int) -> None:
        config = self.root / f"broker-{i}.toml"
        config.write_text(f"[broker]\ncontroller_lease_ttl = {self.lease_ttl_ms}\nregister_name_server_period = 5000\n"
                          "[store]\nmapped_file_size_commit_log = 8388608\nmax_hash_slot_num = 100000\n"
                          "max_index_num = 400000\nmapped_file_size_consume_queue = 2000000\n")
        self._spawn(f"b{i}", f"broker-{i}",
                    [sys.executable, "-m", "sluice.cli.main", "broker", "--config", str(config), "--namesrv",
                     self.namesrv, "--host", self.net.address(f"b{i}"), "--port", str(BROKER_PORT), "--ha-port",
                     str(HA_PORT), "--store", str(self.root / f"b{i}"), "--broker-name", GROUP, "--broker-id",
                     str(i), "--role", "SYNC_MASTER", "--etcd", self.etcd])

    def start_load(self, topic: str, senders: int = 8) -> Path:
        out = self.root / f"load-{topic}"
        out.mkdir()
        self._spawn("client", f"load-{topic}", [sys.executable, "-m", "tests.fault.load", "--namesrv", self.namesrv,
                                                 "--topic", topic, "--out", str(out), "--senders", str(senders),
                                                 "--etcd", self.etcd, "--group-name", GROUP])
        self._wait(lambda: (out / "started").exists(), 60, "the load started")
        return out

    def stop_load(self, out: Path, timeout: float = 180) -> dict[str, Any]:
        (out / "stop").write_text("stop")
        try:
            self._wait(lambda: (out / "result.json").exists(), timeout, "the load's result")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its log ends:\n{self.log_tail(out.name)}") from None
        return json.loads((out / "result.json").read_text())

    def close(self) -> None:
        self.net.heal_all()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.net.close()

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    @staticmethod
    def _wait(cond: Any, timeout: float, what: str) -> float:
        t0 = time.monotonic()
        while not cond():
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"{what}: not within {timeout} s")
            time.sleep(0.05)
        return time.monotonic() - t0

    # == the controller's view (asked from the client host) ==========================================
    def _etcd_healthy(self) -> bool:
        def ask() -> bool:
            try:
                with urllib.request.urlopen(f"http://{self.etcd}/health", timeout=1) as r:
                    return json.loads(r.read()).get("health") == "true"
            except (OSError, ValueError):
                return False

        return self.net.call_in("client", ask)

    def state(self) -> tuple[dict[str, Any] | None, list[int]]:
        """The group's master and in-sync set as etcd has them (its JSON gateway, from the client host)."""
        import base64

        def get(key: str) -> Any:
            body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
            req = urllib.request.Request(f"http://{self.etcd}/v3/kv/range", body, method="POST")
            with urllib.request.urlopen(req, timeout=2) as r:
                kvs = json.loads(r.read()).get("kvs") or []
            return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None

        def ask() -> tuple[dict[str, Any] | None, list[int]]:
            prefix = f"/sluice/DefaultCluster/{GROUP}/"
            leader, sss = get(prefix + "leader"), get(prefix + "syncStateSet")
            return leader, (sss or {}).get("members", [])

        return self.net.call_in("client", ask)

    def master(self) -> int:
        leader, _ = self.state()
        assert leader is not None, "the group has no master"
        return int(leader["brokerId"])

    def wait_new_master(self, old: int, timeout: float) -> int:
        new = -1

        def elected() -> bool:
            nonlocal new
            leader, _ = self.state()
            new = int(leader["brokerId"]) if leader is not None else -1
            return new not in (-1, old)

        self._wait(elected, timeout, f"a master other than {old}")
        return new

    def wait_in_sync(self, n: int, timeout: float) -> float:
        def synced() -> bool:
            leader, members = self.state()
            return leader is not None and len(members) >= n

        try:
            return self._wait(synced, timeout, f"{n} brokers in sync")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; state {self.state()}") from None
