"""The Spark layer's plain modules run without pyspark, and nothing below the layer imports it."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "sluice"


def test_offset_option_codec_source_and_sink_modules_do_not_import_pyspark():
    pytest.importorskip("pyarrow", reason="needs the sluice-mq[spark] extra")
    code = ("import sys, sluice, sluice.spark, sluice.spark.offsets, sluice.spark.options, "
            "sluice.spark.arrow_codec, sluice.spark.source, sluice.spark.sink, sluice.spark.queue_client\n"
            "assert not [m for m in sys.modules if m.startswith('pyspark')], 'pyspark was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


BELOW_SPARK = ("common", "remoting", "store", "namesrv", "broker", "client")
IMPORT = re.compile(r"^\s*(from|import)\s+(sluice\.spark|pyspark)\b", re.MULTILINE)


def test_no_layer_below_spark_imports_it_or_pyspark():
    offenders = [str(p.relative_to(SRC)) for layer in BELOW_SPARK for p in (SRC / layer).rglob("*.py")
                 if IMPORT.search(p.read_text())]
    assert offenders == []


def test_loop_thread_timeout_says_what_did_not_finish():
    import asyncio

    from sluice.spark.queue_client import LoopThread

    async def own_timeout() -> None:
        raise TimeoutError("the coroutine's own")

    thread = LoopThread("test-loop-thread")
    try:
        with pytest.raises(TimeoutError, match=r"^sleep did not finish within 0.05 s$"):
            thread.run(asyncio.sleep(5), timeout=0.05)
        with pytest.raises(TimeoutError, match=r"^the coroutine's own$"):
            thread.run(own_timeout(), timeout=5)
    finally:
        thread.close()
