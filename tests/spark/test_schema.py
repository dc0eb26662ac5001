"""The source's Spark schema and the Arrow batches read() yields agree exactly (Spark checks every batch)."""

from __future__ import annotations

import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from sluice.spark.arrow_codec import arrow_schema
from sluice.spark.datasource import source_schema

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("include_properties", [False, True])
def test_source_schema_maps_to_the_arrow_schema_of_the_batches_read_yields(include_properties):
    spark_side = to_arrow_schema(source_schema(include_properties), timezone="UTC")
    assert spark_side.equals(arrow_schema(include_properties))
    assert all(f.nullable for f in spark_side)
