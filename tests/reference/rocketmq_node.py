"""Apache RocketMQ as a reference node: its name server and one broker, from Maven Central, on 127.0.0.1.

Both run from the classpath of the Java interop build (``tests/interop/java_clients.py``: ``rocketmq-namesrv`` and
``rocketmq-broker`` of the same release as the client), each in its own JVM with a small heap, their store, config
and logs (``home/<server>/logs/rocketmqlogs``) under one directory. Every socket binds 127.0.0.1: the remoting servers
through ``bindAddress``; the HA port, which RocketMQ always binds on every interface, is not opened
(``LoopbackOnlyHAService``: the reference node has no slaves).

With ``proxy={...}`` it also runs RocketMQ's proxy in cluster mode for the gRPC (5.x) clients, its settings those of
``rmq-proxy.json`` (``ReferenceProxy``: RocketMQ's, its gRPC port bound to 127.0.0.1), at ``proxy_endpoint``.

``RocketMQNode(build, root).start()`` waits until the broker is routed by the name server (and the proxy serves);
``stop()`` ends them (SIGTERM, RocketMQ's shutdown hooks, then SIGKILL after a grace period), always by the PIDs it
started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from sluice.client.admin import Admin
from tests.interop.java_clients import JavaBuild

NAMESRV_JVM = ("-Xms128m", "-Xmx256m", "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow")
PROXY_JVM = ("-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow")
BROKER_JVM = ("-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxDirectMemorySize=1g", "-XX:-OmitStackTraceInFastThrow")


def free_port(base_needs: tuple[int, ...] = (0,)) -> int:
    """A port P such that P + d is free for every d in ``base_needs`` (the broker also takes P - 2)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if all(_port_free(port + d) for d in base_needs):
            return port
    raise RuntimeError("no free port found")


def _port_free(port: int) -> bool:
    if not 1024 < port < 65536:
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class RocketMQNode:
    """One Apache RocketMQ name server and broker ``broker-a`` of cluster ``DefaultCluster``."""

    def __init__(self, build: JavaBuild, root: Path, *, flush: str = "ASYNC_FLUSH",
                 broker_settings: dict[str, str] | None = None, broker_jvm: tuple[str, ...] = BROKER_JVM,
                 proxy: dict[str, object] | None = None) -> None:
        self.build = build
        self.root = root
        self.flush = flush
        self.broker_settings = broker_settings or {}
        self.broker_jvm = broker_jvm
        self.namesrv_proc: subprocess.Popen[bytes] | None = None
        self.broker_proc: subprocess.Popen[bytes] | None = None
        self.proxy_settings = proxy
        self.proxy_proc: subprocess.Popen[bytes] | None = None
        self.proxy_endpoint = ""
        self.namesrv = ""
        self.broker_addr = ""
        self.broker_name = "broker-a"
        self.cluster = "DefaultCluster"

    # == lifecycle ==================================================================================
    def start(self, timeout: float = 120, attempts: int = 3) -> RocketMQNode:
        """Start both servers; another try (new ports) when one could not bind the port it was given, which
        another process may have taken between its choice and the JVM's start."""
        for attempt in range(attempts):
            try:
                return self._start(timeout)
            except BaseException as exc:
                self.stop()
                if not isinstance(exc, RuntimeError) or "Address already in use" not in str(exc) \
                        or attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> RocketMQNode:
        self.root.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        ns_port = free_port()
        self.namesrv = f"127.0.0.1:{ns_port}"
        (self.root / "namesrv.properties").write_text(f"listenPort={ns_port}\nbindAddress=127.0.0.1\n")
        self.namesrv_proc = self._spawn("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", NAMESRV_JVM,
                                        "-c", str(self.root / "namesrv.properties"))
        port = free_port((-2, 0))
        self.broker_addr = f"127.0.0.1:{port}"
        store = self.root / "store"
        settings = {
            "brokerClusterName": self.cluster, "brokerName": self.broker_name, "brokerId": "0",
            "listenPort": str(port), "bindAddress": "127.0.0.1", "brokerIP1": "127.0.0.1",
            "namesrvAddr": self.namesrv, "storePathRootDir": str(store), "storePathCommitLog": str(store / "commitlog"),
            "flushDiskType": self.flush, "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true",
            # RocketMQ's TransactionMetricsFlushService spins on the clock until its first interval has passed (10 s
            # by default: 10 CPU-s at every start); with one second, one (its metrics file is written each second).
            "transactionMetricFlushInterval": "1000",
            **self.broker_settings,
        }
        (self.root / "broker.properties").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self._wait_output("namesrv", "boot success", deadline)
        self.broker_proc = self._spawn("broker", "org.apache.rocketmq.broker.BrokerStartup", self.broker_jvm,
                                       "-c", str(self.root / "broker.properties"))
        self._wait_output("broker", "boot success", deadline)
        asyncio.run(self._wait_routed(deadline))
        if self.proxy_settings is not None:
            self._start_proxy(self.proxy_settings, deadline)
        return self

    def start_proxy(self, settings: dict[str, object], timeout: float = 120) -> str:
        """RocketMQ's proxy (cluster mode) beside a node already running, for the gRPC clients of one module;
        its endpoint. ``stop_proxy`` ends it."""
        self._start_proxy(settings, time.monotonic() + timeout)
        return self.proxy_endpoint

    def _start_proxy(self, settings: dict[str, object], deadline: float) -> None:
        port = free_port()
        self.proxy_endpoint = f"127.0.0.1:{port}"
        config = {"rocketMQClusterName": self.cluster, "namesrvAddr": self.namesrv, "grpcServerPort": port,
                  **settings}
        (self.root / "rmq-proxy.json").write_text(json.dumps(config))
        self.proxy_proc = self._spawn("proxy", "sluice.interop.ReferenceProxy", PROXY_JVM,
                                      str(self.root / "rmq-proxy.json"))
        self._wait_output("proxy", "reference proxy boot success", deadline)

    def stop_proxy(self, grace: float = 30) -> None:
        proc, self.proxy_proc, self.proxy_endpoint = self.proxy_proc, None, ""
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def _spawn(self, name: str, main_class: str, jvm: tuple[str, ...], *args: str) -> subprocess.Popen[bytes]:
        home = self.root / "home" / name  # RocketMQ logs to $HOME/logs/rocketmqlogs
        home.mkdir(parents=True, exist_ok=True)
        env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
               "ROCKETMQ_HOME": str(self.root)}
        if "JAVA_HOME" in os.environ:
            env["JAVA_HOME"] = os.environ["JAVA_HOME"]
        with open(self.root / f"{name}.out", "wb") as out:
            return subprocess.Popen(self.build.argv(main_class, *args, jvm=jvm + (f"-Duser.home={home}",
                                                                               f"-Drocketmq.home.dir={self.root}")),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=self.root)

    def _wait_output(self, name: str, text: str, deadline: float) -> None:
        proc = {"namesrv": self.namesrv_proc, "broker": self.broker_proc, "proxy": self.proxy_proc}[name]
        assert proc is not None
        out = self.root / f"{name}.out"
        while text not in out.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                what = f"exited with {proc.returncode}" if proc.returncode is not None else "did not start in time"
                raise RuntimeError(f"RocketMQ {name} {what}:\n{out.read_text(errors='replace')[-4000:]}"
                                   f"{self.log_tail(name)}")
            time.sleep(0.1)

    async def _wait_routed(self, deadline: float) -> None:
        async with Admin(self.namesrv) as admin:
            while True:
                with contextlib.suppress(Exception):
                    if self.broker_addr in (await admin.brokers()).values():
                        return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"RocketMQ broker {self.broker_addr} never registered with {self.namesrv}")
                await asyncio.sleep(0.1)

    def stop(self, grace: float = 30) -> None:
        """SIGTERM (RocketMQ's shutdown hooks flush and unregister), SIGKILL after ``grace`` seconds."""
        for proc in (self.proxy_proc, self.broker_proc, self.namesrv_proc):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (self.proxy_proc, self.broker_proc, self.namesrv_proc):
            if proc is None:
                continue
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def log_tail(self, name: str = "broker", chars: int = 3000) -> str:
        log = self.root / "home" / name / "logs" / "rocketmqlogs" / f"{name}.log"
        return f"\n--- {log} ---\n{log.read_text(errors='replace')[-chars:]}" if log.exists() else ""

    @property
    def running(self) -> bool:
        return all(p is not None and p.poll() is None for p in (self.namesrv_proc, self.broker_proc))

    def pids(self) -> list[int]:
        return [p.pid for p in (self.namesrv_proc, self.broker_proc, self.proxy_proc)
                if p is not None and p.poll() is None]

    def __enter__(self) -> RocketMQNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
