"""Shared fixtures: small store geometries so tests roll segments quickly, and real servers in this process.

``cluster`` runs a name server and brokers on 127.0.0.1 (port 0, stores in tmp_path) on a background event
loop (its own thread, separate from the clients'), so tests can stop and restart them.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop
from hypothesis import settings

from sluice.auth.credentials import signing_hook
from sluice.broker.broker_controller import BrokerController
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.config import BrokerConfig, MessageStoreConfig, NamesrvConfig
from sluice.namesrv import NamesrvController
from sluice.remoting.client import RemotingClient
from sluice.store import MessageStore
from tests.etcd_server import etcd_server  # noqa: F401 (the fixture: a real etcd per test)
from tests.interop.go_clients import GoClients, ensure_go_build, go_missing, go_required
from tests.interop.java_clients import JavaBuild, ensure_java_build, java_required, java_tools_missing

_GROUP_MARKERS = {"interop": "interop", "reference": "reference", "crash": "crash", "spark": "spark",
                  "fault": "fault", "browser": "browser"}
# Run on three workers (pytest-xdist, --dist loadgroup: make test), the tests of each group stay on one worker, in
# turn: the Spark tests (one Spark session, built once), the Java client programs against Sluice, the differential
# tests (one Apache RocketMQ node per worker: all on one), and the multi-process clusters whose timings they check
# (failover, partitions, a slow disk); the rest go wherever there is room. xdist hands out the groups with the most
# tests first, one to a worker, and a worker busy with a group gets nothing else meanwhile. (The Java programs and
# the differential tests were one group: at 820 s it was the whole run's length, the other workers idle at its end.)
_XDIST_GROUPS = {"interop": "jvm", "reference": "reference", "spark": "spark", "ha": "clusters",
                 "fault": "clusters", "browser": "browser"}
# Interop tests that start no JVM (the C++, Go and Python 5.x clients) go wherever there is room: the Java group is
# the suite's longest.
_NO_JVM_INTEROP = ("test_cpp_", "test_python5_", "test_go_")
TESTS_DIR = Path(__file__).resolve().parent

# Hypothesis' deadline (200 ms an example) measures the machine, not the code: on a loaded box (CI's two cores, shared)
# one slow example fails a test as flaky, on any Python. A hang is still pytest-timeout's to catch.
settings.register_profile("sluice", deadline=None)
settings.load_profile("sluice")


_CPU_REPORT = os.environ.get("SLUICE_CPU_REPORT")


if _CPU_REPORT:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        """``SLUICE_CPU_REPORT=FILE``: a JSON line per test with its wall time and the CPU seconds of this process
        and of the child processes it waited for (JVMs, brokers), to find what makes the suite long on two cores
        (``scripts/cpu_report.py FILE`` sums them by file)."""
        t0, s0, c0 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF), \
            resource.getrusage(resource.RUSAGE_CHILDREN)
        yield
        s1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        line = json.dumps({"test": item.nodeid, "wall": round(time.monotonic() - t0, 3), "end": round(time.time(), 1),
                           "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
                           "self": round(s1.ru_utime + s1.ru_stime - s0.ru_utime - s0.ru_stime, 3),
                           "children": round(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime, 3)})
        with open(_CPU_REPORT, "a") as f:
            f.write(line + "\n")


# tryfirst: pytest-xdist reads the xdist_group markers in its own pytest_collection_modifyitems.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test directory's tests carry its marker (``-m "not interop"`` deselects the real-client tests), and,
    under pytest-xdist, their group.

    Matched on the directory right under ``tests/``, not anywhere in the path: a checkout under ``.../spark/``
    must not mark every test ``spark``."""
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        try:
            top = Path(str(item.fspath)).resolve().relative_to(TESTS_DIR).parts[0]
        except (ValueError, IndexError):
            continue
        marker = _GROUP_MARKERS.get(top)
        if marker is not None:
            item.add_marker(marker)
        group = _XDIST_GROUPS.get(top)
        if top == "interop" and Path(str(item.fspath)).name.startswith(_NO_JVM_INTEROP):
            group = None
        if xdist and group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    if xdist:
        # A group of one test (the pipeline demo's: 40 s, most of it waiting on its own JVM) ties with every
        # ungrouped test in xdist's order, and came last of them: it was the run's last 40 s, on one worker of three.
        # First of them, it runs beside the others.
        items.sort(key=lambda item: 0 if _own_group(item) else 1)


def _own_group(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("xdist_group")
    return marker is not None and bool(marker.args) and marker.args[0] not in _XDIST_GROUPS.values()


def pytest_configure(config: pytest.Config) -> None:
    """``--dist loadgroup`` keeps each group on one worker by writing the group into the node id's ``_nodeid``
    (pytest-xdist 3.8); pytest 9.2 keeps the id elsewhere, and the groups are then silently spread over the workers
    (two Spark sessions, Java builds side by side). Say so instead."""
    if config.pluginmanager.hasplugin("xdist") and config.getoption("dist", None) == "loadgroup" \
            and not hasattr(pytest.Item, "_nodeid"):
        raise pytest.UsageError(
            f"pytest-xdist's --dist loadgroup cannot group tests under pytest {pytest.__version__}: "
            "install the pytest that pyproject.toml's test extra names")


@pytest.fixture(scope="session")
def go_build() -> Path:
    """The Go client programs (tests/interop/go), built once per machine (cached)."""
    reason = go_missing()
    if reason is not None:
        if go_required():
            pytest.fail(f"{reason}; $SLUICE_REQUIRE_GO is set, so the Go tests may not skip", pytrace=False)
        pytest.skip(reason)
    try:
        return ensure_go_build()
    except RuntimeError as exc:
        problem = str(exc)
    pytest.fail(f"cannot build the Go interop programs: {problem}", pytrace=False)


@pytest.fixture
def go(go_build: Path, tmp_path: Path) -> Iterator[GoClients]:
    """Go client programs; any still running are killed when the test ends."""
    clients = GoClients(go_build, tmp_path / "go")
    try:
        yield clients
    finally:
        clients.close()


@pytest.fixture(scope="session")
def java_build() -> JavaBuild:
    """The Java client programs and the Apache RocketMQ servers, built once per machine (cached)."""
    reason = java_tools_missing()
    if reason is not None:
        if java_required():
            pytest.fail(f"{reason}; $SLUICE_REQUIRE_JAVA is set, so the Java tests may not skip", pytrace=False)
        pytest.skip(reason)
    try:
        return ensure_java_build()
    except RuntimeError as exc:
        problem = str(exc)
    pytest.fail(f"cannot build the Java interop programs: {problem}", pytrace=False)


@pytest.fixture
def store_config(tmp_path: Path) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 100,
        max_hash_slot_num=64,
        max_index_num=400,
    )


@pytest.fixture
def store(store_config: MessageStoreConfig) -> Iterator[MessageStore]:
    s = MessageStore(store_config).start()
    try:
        yield s
    finally:
        s.shutdown()


T = TypeVar("T")


class ServerLoop:
    """An event loop in a daemon thread; ``run(coro)`` waits for the result from the test's thread."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-servers", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Cluster:
    """One name server and any number of brokers in this process."""

    def __init__(self, root: Path, loop: ServerLoop, namesrv_settings: dict[str, Any] | None = None) -> None:
        self.root = root
        self.loop = loop
        cfg = NamesrvConfig(port=0, kv_config_path=str(root / "namesrv" / "kvConfig.json"))
        for k, v in (namesrv_settings or {}).items():
            setattr(cfg, k, v)
        self.namesrv = loop.run(NamesrvController(cfg).start())
        self.brokers: list[BrokerController] = []
        # Signs what the fixture itself sends (create_topic), for brokers with authentication on.
        self.credentials: tuple[str, str] | None = None
        self.front: Any = None  # a gRPC front's MessagingService, when a fixture serves one

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address

    def broker_config(self, name: str = "broker-a", **settings: Any) -> BrokerConfig:
        store = MessageStoreConfig(store_path_root_dir=str(self.root / name), mapped_file_size_commit_log=8 << 20,
                                   mapped_file_size_consume_queue=20 * 20_000, max_hash_slot_num=20_000,
                                   max_index_num=80_000)
        # RocketMQ's 200 ms in the put queue is for a machine doing nothing else; on a CI machine running the suite
        # two-way a put can wait longer than that, and a test not about back-pressure must not see SYSTEM_BUSY.
        # Tests of back-pressure set ``store_wait_time_ms_in_send_queue`` themselves.
        store.wait_time_ms_in_send_queue = 5000
        cfg = BrokerConfig(broker_name=name, listen_port=0, namesrv_addr=self.namesrv_addr, store=store)
        for k, v in settings.items():
            if k.startswith("store_"):
                setattr(cfg.store, k[len("store_"):], v)
            else:
                setattr(cfg, k, v)
        return cfg

    def start_broker(self, name: str = "broker-a", **settings: Any) -> BrokerController:
        """Start a broker (store in tmp_path/<name>) and wait until the name server routes to it."""
        broker = self.loop.run(BrokerController(self.broker_config(name, **settings)).start())
        self.brokers.append(broker)
        self.wait_registered(broker)
        return broker

    def create_topic(self, topic: str, queues: int, order: bool = False, attributes: str | None = None) -> None:
        """UPDATE_AND_CREATE_TOPIC on every broker (``attributes`` as ``+key=value,-key``), then wait until the name
        server routes all its queues."""

        async def go() -> None:
            remoting = RemotingClient(request_hook=signing_hook(self.credentials))
            api = MQClientAPI(remoting, [self.namesrv_addr])
            try:
                for b in self.brokers:
                    await api.create_topic(b.broker_addr, topic, queues, queues, 6, order=order, attributes=attributes)
                while True:
                    route = await api.get_topic_route(topic)
                    if route is not None and sum(q.read_queue_nums for q in route.queue_datas) == \
                            queues * len(self.brokers):
                        return
                    await asyncio.sleep(0.02)
            finally:
                await remoting.close()

        self.loop.run(asyncio.wait_for(go(), 60), 90)

    def wait_registered(self, broker: BrokerController, timeout: float = 60) -> None:
        async def wait() -> None:
            while broker.broker_addr not in {a for b in self.namesrv.route_info.broker_addr_table.values()
                                             for a in b.broker_addrs.values()}:
                await asyncio.sleep(0.01)

        self.loop.run(asyncio.wait_for(wait(), timeout), timeout + 30)

    def stop_broker(self, broker: BrokerController) -> None:
        self.loop.run(broker.stop())
        if broker in self.brokers:
            self.brokers.remove(broker)

    def restart_broker(self, broker: BrokerController) -> BrokerController:
        """Stop ``broker`` gracefully and start a new one on the same store (it gets a new port)."""
        cfg = broker.config
        self.stop_broker(broker)
        again = self.loop.run(BrokerController(cfg).start())
        self.brokers.append(again)
        self.wait_registered(again)
        return again

    def close(self) -> None:
        for b in list(self.brokers):
            self.loop.run(b.stop())
        self.brokers.clear()
        self.loop.run(self.namesrv.stop())


@pytest.fixture
def server_loop() -> Iterator[ServerLoop]:
    loop = ServerLoop()
    try:
        yield loop
    finally:
        loop.close()


@pytest.fixture
def cluster(tmp_path: Path, server_loop: ServerLoop) -> Iterator[Cluster]:
    """A name server plus one broker ``broker-a`` (auto-create on); ``cluster.start_broker`` adds more."""
    c = Cluster(tmp_path, server_loop)
    try:
        c.start_broker()
        yield c
    finally:
        c.close()


@pytest.fixture
def empty_cluster(tmp_path: Path, server_loop: ServerLoop) -> Iterator[Cluster]:
    """A name server alone; start brokers with ``start_broker(name, **settings)``."""
    c = Cluster(tmp_path, server_loop)
    try:
        yield c
    finally:
        c.close()
