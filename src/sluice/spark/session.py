"""A quiet local SparkSession for demos, benchmarks and tests. Imports pyspark.

Workers run this interpreter (``PYSPARK_PYTHON``), logs are at ERROR through a log4j2 file, the UI and
progress bars are off, and ``format("sluice")`` is registered.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from sluice.spark.datasource import register

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


def local_spark(app_name: str = "sluice", cores: int = 2, driver_memory: str = "1g",
                work_dir: str | os.PathLike[str] | None = None) -> SparkSession:
    """``local[cores]`` with 2 shuffle partitions and ``sluice`` registered (the JVM starts in ~6-10 s).

    ``$SLUICE_SPARK_JAVA_OPTIONS`` adds options to the driver JVM's command line (e.g. its JIT or collector)."""
    base = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="sluice-spark-"))
    base.mkdir(parents=True, exist_ok=True)
    log4j = base / "log4j2.properties"
    log4j.write_text(LOG4J2)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    extra = os.environ.get("SLUICE_SPARK_JAVA_OPTIONS", "")
    spark = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", driver_memory)
             .config("spark.sql.warehouse.dir", str(base / "warehouse"))
             .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j} {extra}".strip())
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
