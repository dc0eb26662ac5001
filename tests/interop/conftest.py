"""Fixtures of the interop tests: the real RocketMQ C++ client (PyPI ``rocketmq==0.4.4``) against Sluice.

The wheel bundles ``librocketmq.so`` (rocketmq-client-cpp 1.2.x) behind ctypes. It lives in a virtualenv of its
own, never the project's (its module name ``rocketmq`` clashes with other packages), created on first use and
reused afterwards: ``$SLUICE_INTEROP_VENV``, else ``$XDG_CACHE_HOME/sluice-interop/venv-rocketmq-0.4.4`` (default
``~/.cache``; the name follows the requirement, so another version gets a venv of its own). Creating it needs the
wheel from PyPI once (pip honours ``$PIP_INDEX_URL`` / ``$PIP_FIND_LINKS`` for a mirror or a directory of wheels).
When pip cannot get the wheel (offline, PyPI unreachable, no wheel for this platform) the C++ tests skip with that
reason — unless ``$SLUICE_REQUIRE_CPP`` is set: then they fail, as CI's must not skip silently. Any other setup
failure (no ``venv`` module, ``librocketmq.so`` not loading) fails them.

The client scripts in ``clients/`` run as child processes of the test, one ``$HOME`` each (the library writes its
logs under ``$HOME/logs/rocketmq-cpp``, broadcasting offsets under ``$HOME/.rocketmq_offsets``), and write what they
sent or received as JSON lines. Every process ends by itself; one still running when its test ends is killed by its
PID. A process that exits non-zero or dies of a signal fails the test.

``sluice`` is a name server and one broker in this process (``tests/conftest.py``); at the end of each test it
asserts that neither answered any request with REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.broker.broker_controller import BrokerController
from sluice.remoting.codes import RequestCode
from tests.conftest import Cluster
from tests.interop.java_clients import JavaAdmin, JavaBuild, JavaClients

ROCKETMQ_REQUIREMENT = "rocketmq==0.4.4"
CLIENTS = Path(__file__).parent / "clients"
# Short delay levels: a message sent back after a failed consume (level 3 on its first retry) returns in moments.
DELAY_LEVELS = "100ms 200ms 300ms 500ms 1s 2s 3s"


# == the dedicated virtualenv ========================================================================
def venv_dir() -> Path:
    """``$SLUICE_INTEROP_VENV``, else the user's cache directory, else ``.interop-venv`` in the checkout."""
    override = os.environ.get("SLUICE_INTEROP_VENV")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice-interop"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable home (some CI runners)
        return Path(__file__).resolve().parents[2] / ".interop-venv"
    return cache / ("venv-" + ROCKETMQ_REQUIREMENT.replace("==", "-"))


def cpp_required() -> bool:
    """``$SLUICE_REQUIRE_CPP`` set: a wheel pip cannot get fails the C++ tests instead of skipping them."""
    return bool(os.environ.get("SLUICE_REQUIRE_CPP"))


class WheelUnavailable(RuntimeError):
    """pip could not get the wheel: no network, PyPI (or the configured index) unreachable, or no wheel for this
    platform."""


# What pip says when it could not reach an index or found no matching file there.
_DOWNLOAD_FAILURES = ("No matching distribution found", "Could not find a version that satisfies",
                      "NewConnectionError", "Temporary failure in name resolution", "Name or service not known",
                      "Network is unreachable", "Max retries exceeded", "ConnectTimeoutError", "ReadTimeoutError",
                      "ProxyError", "Connection refused", "SSLError")


def _setup_step(what: str, argv: list[str], timeout: float, download: bool = False) -> None:
    """Run one step; RuntimeError with its output when it fails (WheelUnavailable for a failed ``download``)."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise (WheelUnavailable if download else RuntimeError)(f"{what} failed: {exc}") from None
    except OSError as exc:
        raise RuntimeError(f"{what} failed: {exc}") from None
    if r.returncode != 0:
        out = f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        if download and any(sign in out for sign in _DOWNLOAD_FAILURES):
            raise WheelUnavailable(f"{what} failed: pip could not download it\n{out}")
        raise RuntimeError(f"{what} failed (exit code {r.returncode}):\n{out}")


def _usable(python: Path, requirement: str, check: str) -> bool:
    """The venv's Python imports the client (``check``), of the required version."""
    dist, version = requirement.split("==")
    probe = f"import importlib.metadata as m; {check}; assert m.version({dist!r}) == {version!r}"
    try:
        _setup_step("loading the cached client", [str(python), "-c", probe], 60)
    except RuntimeError:
        return False
    return True


def ensure_rocketmq_venv(venv: Path, requirement: str = ROCKETMQ_REQUIREMENT,
                         check: str = "import rocketmq.client") -> Path:
    """The venv's Python, after creating the venv and installing ``requirement`` unless a usable one is there
    (``check``: the statement that proves it loads).

    Raises WheelUnavailable when pip cannot get the wheel, RuntimeError for any other failure."""
    python = venv / "bin" / "python"
    ready = venv / ".sluice-interop-ready"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs on one machine build it once
        if python.exists() and _usable(python, requirement, check):  # built earlier (or handed over ready-made)
            return python
        if not os.environ.get("SLUICE_INTEROP_VENV"):  # ours: start afresh; a venv the user named is kept
            shutil.rmtree(venv, ignore_errors=True)
        ready.unlink(missing_ok=True)
        _setup_step(f"creating the virtualenv {venv}", [sys.executable, "-m", "venv", str(venv)], 300)
        _setup_step(f"pip install {requirement} into {venv}",
                    [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement],
                    600, download=True)
        _setup_step(f"loading {requirement} (a system library missing?)", [str(python), "-c", check], 60)
        ready.write_text(requirement + "\n")
        return python


@pytest.fixture(scope="session")
def rocketmq_python() -> Path:
    """The C++ client's Python (set up once per machine). pytest keeps a skip or failure for the session: pip is
    tried once per run."""
    venv = venv_dir()
    try:
        return ensure_rocketmq_venv(venv)
    except WheelUnavailable as exc:
        unavailable, problem = True, str(exc)
    except RuntimeError as exc:
        unavailable, problem = False, str(exc)
    if not unavailable:
        pytest.fail(f"cannot set up the RocketMQ C++ client for the interop tests: {problem}", pytrace=False)
    reason = (f"the RocketMQ C++ client wheel ({ROCKETMQ_REQUIREMENT}, manylinux x86_64) could not be downloaded "
              f"into {venv}: offline, PyPI unreachable, or no wheel for this platform. To run these tests, go "
              "online once (the venv is cached), or point $PIP_INDEX_URL / $PIP_FIND_LINKS at a mirror or a "
              f"directory holding the wheel, or set $SLUICE_INTEROP_VENV to a venv with {ROCKETMQ_REQUIREMENT} "
              "installed")
    if cpp_required():
        pytest.fail(f"{reason}; $SLUICE_REQUIRE_CPP is set, so the C++ tests may not skip\n{problem}",
                    pytrace=False)
    pytest.skip(reason)


# == C++ client processes ===========================================================================
# librocketmq's log lines about rebalancing (rocketmq-client-cpp 1.2.x, Rebalance.cpp): one "client id" line per
# member the rebalance saw, then the queues it starts ("add mq", or "after resume ..." for one it had dropped
# before) and stops ("drop mq") pulling.
_LOG_MEMBER = re.compile(r"\):client id:(\S+) of topic:(\S+)\[doRebalance:")
_LOG_QUEUE = re.compile(r"\):(add mq|drop mq|after resume the pull handle of this pullRequest, its mq is):"
                        r"MessageQueue \[topic=([^,]+), brokerName=[^,]+, queueId=(\d+)\]")
class CppClient:
    """One client script running in the rocketmq venv; ``records()`` are the JSON lines it wrote so far."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], out: Path, err: Path, home: Path) -> None:
        self.name = name
        self.proc = proc
        self.out = out
        self.err = err
        self.home = home

    def records(self, event: str | None = None) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        lines = self.out.read_bytes().split(b"\n")[:-1]  # a line is whole once its newline is there
        recs = [json.loads(line) for line in lines]
        return [r for r in recs if event is None or r.get("event") == event]

    def received(self) -> list[dict[str, Any]]:
        return self.records("received")

    def wait(self, timeout: float) -> list[dict[str, Any]]:
        """Wait for the process to end by itself; fail if it does not, or if it did not exit with 0."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"C++ client {self.name} did not end within {timeout} s{self.diagnostics()}") from None
        self.check_exit()
        return self.records()

    def check_exit(self) -> None:
        rc = self.proc.returncode
        if rc is None or rc == 0:
            return
        how = f"died of {signal.Signals(-rc).name}" if rc < 0 else f"exited with {rc}"
        raise AssertionError(f"C++ client {self.name} {how}{self.diagnostics()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def rebalance(self, topic: str) -> tuple[list[str], set[int]] | None:
        """From the library's own log: the group members its latest rebalance of ``topic`` saw, and the queue ids
        of ``topic`` it pulls now (queues added minus queues dropped); None before its first rebalance. The
        wheel reports no allocations itself; the log is written line by line as it goes."""
        members: list[str] | None = None
        in_list = False
        held: set[int] = set()
        for line in self.log_lines():
            m = _LOG_MEMBER.search(line)
            if m and m.group(2) == topic:
                members = members if in_list else []
                members.append(m.group(1))
                in_list = True
                continue
            in_list = False
            m = _LOG_QUEUE.search(line)
            if m and m.group(2) == topic:
                (held.discard if m.group(1) == "drop mq" else held.add)(int(m.group(3)))
        return None if members is None else (members, held)

    def log_lines(self) -> list[str]:
        lines: list[str] = []
        for path in sorted((self.home / "logs" / "rocketmq-cpp").glob("*")):
            lines += path.read_text(errors="replace").split("\n")[:-1]  # whole lines only
        return lines

    def diagnostics(self) -> str:
        err = self.err.read_text(errors="replace")[-3000:] if self.err.exists() else ""
        logs = sorted((self.home / "logs" / "rocketmq-cpp").glob("*"))
        tail = "".join(p.read_text(errors="replace")[-3000:] for p in logs[-1:])
        return f"\n--- stderr ---\n{err}\n--- librocketmq log tail ---\n{tail}"


class CppClients:
    """Starts the scripts of ``clients/``: ``start("push_consumer", topic="t", expect=10, orderly=True)`` passes
    ``--topic t --expect 10 --orderly`` (plus ``--out``); every process is ended when the test ends."""

    def __init__(self, python: Path, root: Path) -> None:
        self.python = python
        self.root = root
        self.started: list[CppClient] = []

    def start(self, script: str, **options: Any) -> CppClient:
        name = f"{script}-{len(self.started)}"
        home = self.root / name
        home.mkdir(parents=True)
        out, err = home / "out.jsonl", home / "stderr.txt"
        argv = [str(self.python), str(CLIENTS / f"{script}.py"), "--out", str(out)]
        for key, value in options.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                argv.append(flag)
            elif value not in (None, False):
                argv += [flag, str(value)]
        env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
        with open(err, "wb") as err_file:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err_file, stderr=subprocess.STDOUT,
                                    env=env, cwd=home)
        client = CppClient(name, proc, out, err, home)
        self.started.append(client)
        return client

    def run(self, script: str, timeout: float = 60, **options: Any) -> list[dict[str, Any]]:
        """Start a script and wait for it to end; its records."""
        return self.start(script, **options).wait(timeout)

    def close(self) -> None:
        for c in self.started:
            c.kill()


# == Sluice ===========================================================================================
class Sluice:
    """The name server and broker the C++ clients talk to, with a few looks inside the broker."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        # Transactions are checked back within a second or two, not RocketMQ's 6 s + 30 s.
        self.broker: BrokerController = cluster.start_broker(message_delay_level=DELAY_LEVELS, transaction_timeout=1000,
                                                             transaction_check_interval=500)

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr

    def create_topic(self, topic: str, queues: int = 4, attributes: str | None = None) -> None:
        self.cluster.create_topic(topic, queues, attributes=attributes)

    def on_loop(self, fn: Any) -> Any:
        """Run ``fn()`` on the servers' event loop (the broker's state is not thread-safe)."""

        async def call() -> Any:
            return fn()

        return self.cluster.loop.run(call())

    def held_pulls(self, topic: str) -> dict[int, int]:
        """Queue id → pulls the broker holds (long polling) on that queue of ``topic``."""
        return self.on_loop(lambda: self.broker.hold_service.held_queues(topic))

    def group_members(self, group: str) -> list[str]:
        return self.on_loop(lambda: self.broker.consumer_manager.consumer_ids(group))

    def unsupported_requests(self) -> dict[str, dict[str, int]]:
        return unsupported_requests(self.cluster)


def unsupported_requests(cluster: Cluster) -> dict[str, dict[str, int]]:
    """Request codes answered REQUEST_CODE_NOT_SUPPORTED so far, per server."""
    seen = {"namesrv": dict(cluster.namesrv.dispatcher.unsupported_seen)}
    seen |= {b.config.broker_name: dict(b.dispatcher.unsupported_seen) for b in cluster.brokers}
    return {server: {_code_name(c): n for c, n in codes.items()} for server, codes in seen.items() if codes}


def _code_name(code: int) -> str:
    try:
        return f"{RequestCode(code).name} ({code})"
    except ValueError:
        return str(code)


@pytest.fixture
def sluice(empty_cluster: Cluster) -> Iterator[Sluice]:
    s = Sluice(empty_cluster)
    yield s
    unsupported = s.unsupported_requests()
    assert not unsupported, f"Sluice answered REQUEST_CODE_NOT_SUPPORTED to: {unsupported}"


@pytest.fixture
def cpp(rocketmq_python: Path, tmp_path: Path, sluice: Sluice) -> Iterator[CppClients]:
    """C++ client processes (they end before ``sluice`` checks what they sent)."""
    clients = CppClients(rocketmq_python, tmp_path / "cpp")
    try:
        yield clients
    finally:
        clients.close()
    for c in clients.started:  # a crash the test did not look at still fails it
        c.check_exit()


@pytest.fixture
def java(java_build: JavaBuild, tmp_path: Path, sluice: Sluice) -> Iterator[JavaClients]:
    """Java client programs (they end before ``sluice`` checks what they sent)."""
    clients = JavaClients(java_build, tmp_path / "java")
    try:
        yield clients
    finally:
        clients.close()
    for c in clients.started:
        c.check_exit()


@pytest.fixture
def java_admin(java_build: JavaBuild, tmp_path: Path, sluice: Sluice) -> Iterator[JavaAdmin]:
    """``DefaultMQAdminExt`` against the ``sluice`` name server."""
    admin = JavaAdmin(java_build, sluice.namesrv, tmp_path / "java-admin")
    try:
        yield admin
    finally:
        admin.close()


@pytest.fixture
def front(cluster: Cluster) -> Iterator[str]:
    """Sluice's gRPC front (RocketMQ 5 clients) on a free port, in front of the cluster; its endpoint. Its TLS is
    permissive with a self-signed certificate, as ``sluice dev``'s: clients with TLS on or off both get in
    (``cluster.front`` is its service)."""
    from sluice.proxy.messaging_service import serve, stop
    from sluice.remoting.tls import ServerTls, TlsMode

    tls = ServerTls(TlsMode.PERMISSIVE, "", "", name="gRPC front", self_signed_dir=str(cluster.root / "front-tls"))
    server, service, port = cluster.loop.run(serve(cluster.namesrv_addr, "127.0.0.1", 0, tls=tls))
    cluster.front = service
    try:
        yield f"127.0.0.1:{port}"
    finally:
        cluster.loop.run(stop(server, service))


@pytest.fixture
def java_clients(java_build: JavaBuild, tmp_path: Path) -> Iterator[JavaClients]:
    """Java client programs (``JavaClients``) whose processes end with the test."""
    clients = JavaClients(java_build, tmp_path / "java")
    try:
        yield clients
    finally:
        clients.close()


async def stored_messages(namesrv: str, topic: str, credentials: tuple[str, str] | None = None) -> int:
    """How many messages ``topic`` holds (the sum of its queues' max offsets), asked as ``credentials``."""
    from sluice.client.admin import Admin

    async with Admin(namesrv, credentials=credentials) as admin:
        return sum(q.max_offset for q in await admin.topic_status(topic))

