"""Per-topic and per-group counters (RocketMQ's StatsItem): each window's sum, rate and mean, bounded in number."""

from __future__ import annotations

from sluice.broker.stats_item import TOPIC_PUT_NUMS, StatsTable


def test_a_window_sums_what_it_saw_and_rates_it_over_its_span() -> None:
    t = StatsTable()
    t0 = 1_000_000
    t.add(TOPIC_PUT_NUMS, "orders", 10, now_ms=t0)
    t.add(TOPIC_PUT_NUMS, "orders", 30, now_ms=t0 + 5_000)
    view = t.view(TOPIC_PUT_NUMS, "orders", now_ms=t0 + 10_000)
    assert view is not None
    assert view["statsMinute"] == {"sum": 40, "tps": 4.0, "avgpt": 20.0}
    assert view["statsDay"]["sum"] == 40
    assert t.view(TOPIC_PUT_NUMS, "payments") is None


def test_the_minute_window_forgets_what_is_older_than_its_snapshots() -> None:
    t = StatsTable()
    t0 = 1_000_000
    t.add(TOPIC_PUT_NUMS, "orders", 100, now_ms=t0)
    for i in range(1, 9):  # snapshots every 10 s; the minute keeps 7
        t.sample(now_ms=t0 + i * 10_000 + 10_000_000)
    t.add(TOPIC_PUT_NUMS, "orders", 5, now_ms=t0 + 95_000 + 10_000_000)
    view = t.view(TOPIC_PUT_NUMS, "orders", now_ms=t0 + 100_000 + 10_000_000)
    assert view is not None and view["statsMinute"]["sum"] == 5 and view["statsDay"]["sum"] == 105


def test_names_from_clients_cannot_grow_the_table_past_its_bound() -> None:
    t = StatsTable(max_items=100)
    for i in range(1_000):
        t.add(TOPIC_PUT_NUMS, f"t{i}", 1, now_ms=i)
    assert len(t.items) == 100
    assert t.view(TOPIC_PUT_NUMS, "t999") is not None and t.view(TOPIC_PUT_NUMS, "t0") is None
