"""Fixtures of the differential tests: one scenario, run against Sluice and against Apache RocketMQ.

``rocketmq`` is one Apache RocketMQ name server and broker (``rocketmq_node.py``) for the whole session; each test
uses topics and groups of its own on it. ``systems`` gives a test both sides as ``System`` objects with the same
face: a name server, a broker address, Java client programs and the Java admin, and Sluice's own client, so that
one scenario function runs unchanged against either and returns what a client observed. The test compares the two
observations; a difference is a Sluice bug unless docs/interop.md explains it.

Both brokers are set up alike: cluster ``DefaultCluster``, broker ``broker-a``, topics and groups created on
demand, every retry delay level 1 s (RocketMQ's delay levels have a one-second resolution), undecided transactions
checked back after a second, SQL92 property filters on (``enablePropertyFilter``, off by default in both).
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sluice.client.admin import Admin
from tests.conftest import Cluster
from tests.interop.java_clients import JavaAdmin, JavaBuild, JavaClients
from tests.reference.rocketmq_node import RocketMQNode, free_port

DELAY_LEVELS = " ".join(["1s"] * 18)
# Undecided transactions are checked back after a second, every second (RocketMQ: 6 s, then every 30 s).
TRANSACTION_CHECKS = {"transactionTimeOut": "1000", "transactionCheckInterval": "1000"}
UNKNOWN_CODES = frozenset({9999})  # request codes no broker serves, sent on purpose by the bad-request tests
T = TypeVar("T")


@pytest.fixture(scope="session")
def rocketmq(java_build: JavaBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RocketMQNode]:
    node = RocketMQNode(java_build, tmp_path_factory.mktemp("rocketmq"), broker_settings={
        "messageDelayLevel": DELAY_LEVELS, "mappedFileSizeCommitLog": str(128 << 20), **TRANSACTION_CHECKS,
        "enablePropertyFilter": "true", "recallMessageEnable": "true", "enableLmq": "true",
        "enableMultiDispatch": "true", **metrics_settings()})
    try:
        node.start()
    except RuntimeError as exc:
        pytest.fail(f"cannot start the Apache RocketMQ reference node: {exc}", pytrace=False)
    _SESSION_NODES.append(node)
    try:
        yield node
    finally:
        _SESSION_NODES.remove(node)
        node.stop()


# The session's node, stopped with the last reference test of this worker (pytest-xdist's loadgroup runs them one
# after another) rather than with the worker: idle, its two JVMs still take a good part of a core, which the tests
# that follow on two cores need. A reference test after that (another ordering) starts it again.
_SESSION_NODES: list[RocketMQNode] = []


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is not None and Path(str(nextitem.fspath)).resolve().parent == Path(__file__).resolve().parent:
        return
    for node in _SESSION_NODES:
        node.stop()


def running(node: RocketMQNode) -> RocketMQNode:
    """The session's node, started again if the reference tests before stopped it."""
    if not node.running:
        node.start()
    return node


def metrics_settings() -> dict[str, str]:
    """RocketMQ's Prometheus exporter on a free loopback port (``metrics_url`` reads it back)."""
    return {"metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1",
            "metricsPromExporterPort": str(free_port())}


def metrics_url(node: RocketMQNode) -> str:
    return f"http://127.0.0.1:{node.broker_settings['metricsPromExporterPort']}/metrics"


def run(coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    """Run a coroutine of Sluice's asyncio client from a test (its own short-lived loop)."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


class System:
    """One side of a differential test: where its servers are, and clients to reach them."""

    def __init__(self, name: str, namesrv: str, broker_addr: str, java: JavaClients, admin_home: Path,
                 build: JavaBuild, prefix: str, metrics_url: str = "") -> None:
        self.name = name
        self.metrics_url = metrics_url  # its broker's Prometheus endpoint
        self.namesrv = namesrv
        self.broker_addr = broker_addr
        self.java = java
        self.prefix = prefix
        self._admin_home = admin_home
        self._build = build
        self._admin: JavaAdmin | None = None

    def __repr__(self) -> str:
        return f"<{self.name} {self.namesrv}>"

    def topic(self, name: str) -> str:
        """A name of this test's own (the RocketMQ node serves the whole session)."""
        return f"{self.prefix}-{name}"

    @property
    def java_admin(self) -> JavaAdmin:
        if self._admin is None:
            self._admin = JavaAdmin(self._build, self.namesrv, self._admin_home)
        return self._admin

    def create_topic(self, topic: str, queues: int = 4, perm: int = 6, order: bool = False,
                     message_type: str | None = None) -> None:
        """Created with Sluice's admin client (so that works against both too), then routed."""

        async def go() -> None:
            async with Admin(self.namesrv) as admin:
                await admin.create_topic(topic, queues=queues, perm=perm, order=order, wait=30,
                                         message_type=message_type)

        run(go())

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
        self.java.close()


def _prefix(request: pytest.FixtureRequest) -> str:
    """``d-<the test's name, cut>-<a hash of its id>``: the same on both systems, unique per test."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.originalname.removeprefix("test_"))[:40].strip("-")
    return f"d-{name}-{zlib.crc32(request.node.nodeid.encode()):08x}"


@pytest.fixture
def systems(request: pytest.FixtureRequest, rocketmq: RocketMQNode, empty_cluster: Cluster, java_build: JavaBuild,
            tmp_path: Path) -> Iterator[dict[str, System]]:
    """``{"sluice": System, "rocketmq": System}``; Sluice's side must not see a request it does not serve."""
    broker = empty_cluster.start_broker("broker-a", message_delay_level=DELAY_LEVELS, transaction_timeout=1000,
                                        transaction_check_interval=1000, enable_property_filter=True,
                                        recall_message_enable=True, store_enable_lmq=True,
                                        store_enable_multi_dispatch=True,
                                        metrics_exporter_type="PROM", metrics_prom_exporter_port=0)
    assert broker.metrics_exporter is not None
    prefix = _prefix(request)
    both = {
        "sluice": System("sluice", empty_cluster.namesrv_addr, broker.broker_addr,
                         JavaClients(java_build, tmp_path / "sluice" / "java"), tmp_path / "sluice" / "admin",
                         java_build, prefix, broker.metrics_exporter.address),
        "rocketmq": System("rocketmq", running(rocketmq).namesrv, rocketmq.broker_addr,
                           JavaClients(java_build, tmp_path / "rocketmq" / "java"), tmp_path / "rocketmq" / "admin",
                           java_build, prefix, metrics_url(rocketmq)),
    }
    try:
        yield both
    finally:
        with ThreadPoolExecutor(2) as pool:  # a Java client takes seconds to shut down: both at once
            list(pool.map(System.close, both.values()))
    for s in both.values():
        for c in s.java.started:
            c.check_exit()
    unsupported = {c: n for c, n in broker.dispatcher.unsupported_seen.items() if c not in UNKNOWN_CODES}
    unsupported |= {c: n for c, n in empty_cluster.namesrv.dispatcher.unsupported_seen.items()
                    if c not in UNKNOWN_CODES}
    assert not unsupported, f"Sluice answered REQUEST_CODE_NOT_SUPPORTED to request codes {unsupported}"
