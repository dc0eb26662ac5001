"""Fixtures of the Spark tests: one local[2] SparkSession and one Sluice cluster for the whole session.

Spark is slow to start (~10 s, and ~6 s more for the first streaming query), so the session is shared;
each test uses its own topics. The cluster (name server + broker ``broker-a``) runs in this process on a
background loop, like the integration tests' ``cluster`` fixture.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark", reason="the Spark tests need the sluice[spark] extra")
if shutil.which("java") is None:  # pragma: no cover - `make setup` installs a JRE when java is missing
    pytest.skip("the Spark tests need java on PATH", allow_module_level=True)

from pyspark.sql import SparkSession  # noqa: E402

from sluice.spark import register  # noqa: E402
from tests.integration.conftest import Cluster, ServerLoop  # noqa: E402

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """local[2], UI and progress bars off, 2 shuffle partitions, logs at ERROR, workers on this interpreter."""
    conf_dir = tmp_path_factory.mktemp("spark-conf")
    log4j = conf_dir / "log4j2.properties"
    log4j.write_text(LOG4J2)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = (SparkSession.builder.master("local[2]").appName("sluice-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
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
