"""Fixtures of the Spark tests: one local[2] SparkSession and one Sluice cluster for the whole session.

Spark is slow to start (~10 s, and ~6 s more for the first streaming query), so the session is shared;
each test uses its own topics. The cluster (name server + broker ``broker-a``) runs in this process on a
background loop, like the integration tests' ``cluster`` fixture.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark", reason="the Spark tests need the sluice-mq[spark] extra")
if shutil.which("java") is None:  # pragma: no cover - `make setup` installs a JRE when java is missing
    pytest.skip("the Spark tests need java on PATH", allow_module_level=True)

import os  # noqa: E402

from pyspark.sql import SparkSession  # noqa: E402

from sluice.spark.session import local_spark  # noqa: E402
from tests.conftest import Cluster, ServerLoop  # noqa: E402

# The tests' Spark JVMs (this session's and the pipeline demo's, which inherits it) compile with C1 only and
# collect with one thread: a fifth less CPU for the Spark tests on two cores, whose small batches C2 never repays.
os.environ.setdefault("SLUICE_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """local[2], UI and progress bars off, 2 shuffle partitions, logs at ERROR, workers on this interpreter."""
    session = local_spark("sluice-tests", work_dir=tmp_path_factory.mktemp("spark"))
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A name server and broker ``broker-a`` shared by the Spark tests (each test makes its own topics)."""
    loop = ServerLoop()
    cluster = Cluster(tmp_path_factory.mktemp("sluice"), loop)
    try:
        cluster.start_broker()
        yield cluster
    finally:
        cluster.close()
        loop.close()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to the test."""
    base = "".join(c if c.isalnum() else "_" for c in request.node.name)[:60]
    return f"{base}_{int(time.time() * 1000) % 100000}"




@pytest.fixture
def small_segment_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster of its own whose broker rolls 64 KiB commit-log segments and 100-entry consume-queue files,
    so retention can expire old messages in a test."""
    loop = ServerLoop()
    cluster = Cluster(tmp_path_factory.mktemp("sluice-small"), loop)
    try:
        cluster.start_broker(store_mapped_file_size_commit_log=64 * 1024,
                             store_mapped_file_size_consume_queue=20 * 100)
        yield cluster
    finally:
        cluster.close()
        loop.close()
