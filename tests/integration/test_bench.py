"""The client benchmarks run end to end on small counts (so they cannot rot)."""

import json
import logging

from sluice import Message, Producer
from sluice.cli.main import main
from tests.integration.helpers import wait_until


def test_bench_produce_reports_tps_and_send_latency(cluster, capsys):
    assert main(["bench", "produce", "--namesrv", cluster.namesrv_addr, "--count", "500", "--concurrency", "8",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["bench"] == "produce" and r["messages"] >= 500 and r["failures"] == 0
    assert r["tps"] > 0 and 0 < r["send_rt"]["p50_ms"] <= r["send_rt"]["p99_ms"] <= r["send_rt"]["max_ms"]


def test_bench_produce_async_mode_keeps_a_window_of_sends_in_flight(cluster, capsys):
    assert main(["bench", "produce", "--namesrv", cluster.namesrv_addr, "--topic", "AsyncBench", "--count", "400",
                 "--concurrency", "16", "--mode", "async", "--json"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["mode"] == "async" and r["messages"] == 400 and r["failures"] == 0
    assert 0 < r["send_rt"]["p50_ms"] <= r["send_rt"]["max_ms"]


def test_bench_pop_receives_and_acks_every_message_by_receive_and_by_listen(cluster, capsys):
    assert main(["bench", "produce", "--namesrv", cluster.namesrv_addr, "--topic", "PopBench", "--count", "300",
                 "--concurrency", "2", "--batch", "50", "--json"]) == 0
    capsys.readouterr()
    for group, extra in (("pop-by-receive", ["--concurrency", "2", "--batch", "32"]),
                         ("pop-by-listen", ["--concurrency", "16", "--listen"])):
        assert main(["bench", "pop", "--namesrv", cluster.namesrv_addr, "--topic", "PopBench", "--group", group,
                     "--count", "300", "--json", *extra]) == 0
        run = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert run["bench"] == "pop" and run["messages"] >= 300 and run["tps"] > 0
        assert run["listen"] == ("--listen" in extra)
    assert cluster.brokers[0].pop_revive.checkpoints == {}  # every message popped was acknowledged


def test_bench_produce_batches_then_consume_reads_them_back(cluster, capsys):
    assert main(["bench", "produce", "--namesrv", cluster.namesrv_addr, "--topic", "BatchBench", "--count", "640",
                 "--concurrency", "2", "--batch", "64", "--json"]) == 0
    produced = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert produced["messages"] == 640 and produced["batch"] == 64
    assert main(["bench", "consume", "--namesrv", cluster.namesrv_addr, "--topic", "BatchBench", "--count", "641",
                 "--json"]) == 0
    consumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    lat = consumed["delivery_latency"]
    assert consumed["messages"] >= 641 and 0 < lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"] < 60_000


def test_bench_e2e_measures_latency_at_a_fixed_rate(cluster, capsys):
    assert main(["bench", "e2e", "--namesrv", cluster.namesrv_addr, "--topic", "E2E", "--rate", "200",
                 "--duration", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["sent"] >= 150 and r["received"] == r["sent"]
    assert 0 < r["latency"]["p50_ms"] < 1000


def test_bench_rejects_count_with_duration(capsys):
    try:
        main(["bench", "produce", "--count", "1", "--duration", "1"])
    except SystemExit as exc:
        assert "not both" in str(exc)
    else:
        raise AssertionError("expected an error")


def test_broker_logs_a_stats_line_with_puts_gets_and_latencies(empty_cluster, caplog):
    caplog.set_level(logging.INFO, logger="sluice.broker.stats")
    empty_cluster.start_broker(stats_log_interval=300)
    with Producer("stats_producer", namesrv=empty_cluster.namesrv_addr) as producer:
        for i in range(20):
            producer.send(Message("StatsTopic", b"m%d" % i))
    wait_until(lambda: any("puts" in r.getMessage() and "puts 0.0/s" not in r.getMessage()
                           for r in caplog.records if r.name == "sluice.broker.stats"), 10, "a stats line with puts")
    line = next(r.getMessage() for r in caplog.records
                if r.name == "sluice.broker.stats" and "puts 0.0/s" not in r.getMessage())
    for part in ("gets", "put latency p50", "p99", "flushes", "behind flush", "behind dispatch"):
        assert part in line, (part, line)


def test_bench_targets_runs_a_case_on_an_embedded_broker_and_reports_the_median(capsys):
    assert main(["bench", "targets", "--runs", "1", "--scale", "0.001", "--case", "4"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    run = json.loads(out[0])
    assert run["bench"] == "consume" and run["case"] == 4 and run["messages"] >= 1_000
    row = out[-1]
    assert row.startswith("| consume a 1,000-message 128 B backlog |") and "≥ 300,000 msgs/s" in row
