"""The ``sluice`` PySpark data source: ``from sluice.spark import SluiceDataSource, register``.

Install with ``pip install 'sluice-mq[spark]'`` (pyspark 4.3, Java 17+). Only ``sluice.spark.datasource``
imports pyspark, and only when ``SluiceDataSource`` / ``register`` are first used; ``offsets``, ``options``,
``arrow_codec``, ``source`` and ``sink`` are plain Python.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SluiceDataSource", "register"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from sluice.spark import datasource

        return getattr(datasource, name)
    raise AttributeError(f"module 'sluice.spark' has no attribute {name!r}")
