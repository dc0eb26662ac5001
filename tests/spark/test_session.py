"""``local_spark``: the driver JVM's command line."""

from __future__ import annotations

import os
import shlex

import pytest
from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def test_the_driver_jvm_runs_with_the_options_of_sluice_spark_java_options(spark: SparkSession) -> None:
    wanted = shlex.split(os.environ["SLUICE_SPARK_JAVA_OPTIONS"])
    if not wanted:
        pytest.skip("$SLUICE_SPARK_JAVA_OPTIONS is set empty here")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert all(option in arguments for option in wanted), arguments
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in arguments), arguments
