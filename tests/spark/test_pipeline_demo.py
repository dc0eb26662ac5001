"""The example pipeline (examples/revenue_pipeline.py): revenue per region per minute to parquet and to a
topic, resumed from its checkpoints on the next run. A short form of ``sluice pipeline demo``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sluice import Producer
from sluice.cli.main import main as cli_main
from sluice.cli.pipeline import load_example
from tests.spark.helpers import read_all

pytestmark = pytest.mark.spark

MINUTE = 60_000


def revenue(orders: list[dict], watermark_ms: int) -> dict[tuple[int, str], tuple[float, int]]:
    """(minute start ms, region) → (revenue, orders) for the minutes that end at or before the watermark."""
    out: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for o in orders:
        minute = o["ts"] - o["ts"] % MINUTE
        if minute + MINUTE <= watermark_ms:
            out[(minute, o["region"])][0] += o["amount"]
            out[(minute, o["region"])][1] += 1
    return {k: (round(v[0], 2), int(v[1])) for k, v in out.items()}


@pytest.fixture
def utc(spark):
    """Session time zone UTC for the test (minutes read back from parquet are compared as UTC)."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield
    spark.conf.set("spark.sql.session.timeZone", zone)


def test_revenue_pipeline_writes_each_finished_minute_once_and_resumes_from_its_checkpoints(
        spark, spark_cluster, topic_name, tmp_path: Path, utc):
    demo = load_example("revenue_pipeline.py")
    ns = spark_cluster.namesrv_addr
    orders_topic, revenue_topic = f"{topic_name}_orders", f"{topic_name}_revenue"
    spark_cluster.create_topic(orders_topic, 4)
    spark_cluster.create_topic(revenue_topic, 2)
    start = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE
    sent: list[dict] = []

    def produce(count: int) -> None:
        first = sent[-1]["ts"] + 250 if sent else start
        orders = list(demo.order_events(count, first, 250, seed=len(sent)))  # 4 orders a second of event time
        with Producer("pipeline-test-pg", namesrv=ns) as producer:
            for i in range(0, count, 200):
                demo.send_orders(producer, orders_topic, orders[i:i + 200])
        sent.extend(orders)

    def run() -> dict[tuple[int, str], tuple[float, int]]:
        queries = demo.start_pipeline(spark, ns, tmp_path, orders_topic, revenue_topic, trigger={"availableNow": True})
        for q in queries:
            assert q.awaitTermination(180), "AvailableNow ends by itself"
            assert q.exception() is None
        rows = spark.read.parquet(str(tmp_path / "revenue")).collect()
        keys = [(int(r.minute.replace(tzinfo=UTC).timestamp() * 1000), r.region) for r in rows]
        assert len(keys) == len(set(keys)), "each minute and region is written once"
        return {(int(r.minute.replace(tzinfo=UTC).timestamp() * 1000), r.region): (r.revenue, r.orders)
                for r in rows}

    produce(1_200)  # five minutes of orders
    watermark = sent[-1]["ts"] - 10_000
    first = run()
    expected = revenue(sent, watermark)
    assert len(expected) == 4 * 4  # minutes 0-3 are finished; minute 4 waits for the watermark
    assert first.keys() == expected.keys()
    for key, (amount, count) in expected.items():
        assert first[key][0] == pytest.approx(amount, abs=0.011) and first[key][1] == count

    produce(720)  # three more minutes: minute 4 finishes, and minutes 5-6
    second = run()
    expected = revenue(sent, sent[-1]["ts"] - 10_000)
    assert len(expected) == 7 * 4
    assert second.keys() == expected.keys()
    assert all(second[k] == v for k, v in first.items()), "minutes written by the first run are unchanged"

    messages = read_all(ns, revenue_topic, len(expected))
    published = {}
    for m in messages:
        doc = json.loads(m.body)
        minute = int(datetime.fromisoformat(doc["minute"]).timestamp() * 1000)
        assert m.tags == doc["region"]
        published[(minute, doc["region"])] = (doc["revenue"], doc["orders"])
    assert len(messages) == len(expected)
    assert published == second


def test_pipeline_demo_command_shows_the_demos_options(capsys):
    with pytest.raises(SystemExit) as done:
        cli_main(["pipeline", "demo", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--namesrv" in out and "--duration" in out and "revenue per region per minute" in out


# A JVM of its own (the command's), not the shared session: under pytest-xdist it runs beside the Spark group.
@pytest.mark.xdist_group("spark-demo")
def test_the_demo_stopped_after_its_duration_finishes_its_batch_and_prints_no_error(spark_cluster, tmp_path: Path):
    """A normal stop: the generator stops, the micro-batch in flight finishes, then the queries and the session
    stop; no ERROR line and no stack trace (a stop in the middle of a batch aborts its write, which Spark logs
    with both). Triggers every second at 200 orders a second keep a batch in flight most of the time."""
    demo = subprocess.run([sys.executable, "-m", "sluice.cli.main", "pipeline", "demo",
                           "--namesrv", spark_cluster.namesrv_addr, "--dir", str(tmp_path / "demo"),
                           "--duration", "8", "--trigger", "1", "--rate", "200"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    out = demo.stdout + demo.stderr
    assert demo.returncode == 0, out[-5000:]
    assert "stopped; " in demo.stdout, out[-5000:]
    ours = _without_spark_runner_exit(out)
    for word in ("ERROR", "Exception", "Traceback"):
        assert word not in ours, out[-5000:]


# What pyspark's streaming-source runner (a process of Spark's, writing to the stderr it inherited) prints when the
# JVM closes its socket at the query's stop before it has killed it: its loop ends only on that EOF, and its error
# report then meets the closed socket. Spark's own shutdown race, seen on a busy machine; nothing of the demo's.
_RUNNER_EXIT = re.compile(
    r"Traceback \(most recent call last\):\n(?:  .*\n)*?.*python_streaming_source_runner\.py.*\n(?:(?:  .*|)\n)*?"
    r"(?:EOFError|BrokenPipeError: \[Errno 32\] Broken pipe)\n(?:\nDuring handling of the above exception, another "
    r"exception occurred:\n\n)?")


def _without_spark_runner_exit(out: str) -> str:
    return _RUNNER_EXIT.sub("", out)
