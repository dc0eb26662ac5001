"""Offsets of the Spark source: canonical JSON, starting / ending specs, the per-trigger budget, partitions."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.spark.offsets import (
    OffsetError,
    OffsetRange,
    QueueRef,
    below_min,
    from_json_dict,
    parse_offset_spec,
    plan_ranges,
    rate_limit,
    resolve_spec,
    to_json,
    to_json_dict,
    with_new_queues,
)

A0, A1, A10, A2 = (QueueRef("orders", "broker-a", q) for q in (0, 1, 10, 2))
B0 = QueueRef("orders", "broker-b", 0)
P0 = QueueRef("payments", "broker-a", 0)


def test_offsets_serialize_in_one_canonical_order_whatever_the_insertion_order():
    a = {P0: 5, A10: 3, A2: 7, B0: 1, A0: 9}
    b = dict(reversed(list(a.items())))
    assert to_json(a) == to_json(b)
    assert json.dumps(to_json_dict(a)) == json.dumps(to_json_dict(b))
    assert list(to_json_dict(a)) == ["orders", "payments"]
    assert list(to_json_dict(a)["orders"]) == ["broker-a:0", "broker-a:2", "broker-a:10", "broker-b:0"]


def test_offsets_round_trip_through_the_json_spark_keeps():
    offsets = {A0: 0, A1: 2**62, B0: 17, P0: 3}
    assert from_json_dict(json.loads(to_json(offsets))) == offsets
    assert from_json_dict(to_json(offsets)) == offsets


@pytest.mark.parametrize("bad", ['{"orders": 3}', '{"orders": {"broker-a:x": 1}}', '{"orders": {"0": 1}}',
                                 '{"orders": {"broker-a:0": -5}}', '{"orders": {"broker-a:0": "7"}}', "[1]", "{"])
def test_malformed_offsets_are_refused_with_where_they_came_from(bad):
    with pytest.raises(OffsetError, match="checkpoint"):
        from_json_dict(bad, "checkpoint")


BOUNDS = {A0: (10, 100), A1: (0, 50), B0: (5, 5)}


def test_earliest_and_latest_resolve_to_each_queues_min_and_max():
    assert resolve_spec(parse_offset_spec("startingOffsets", "earliest"), BOUNDS, "earliest", "x") == \
        {A0: 10, A1: 0, B0: 5}
    assert resolve_spec(parse_offset_spec("startingOffsets", " LATEST "), BOUNDS, "earliest", "x") == \
        {A0: 100, A1: 50, B0: 5}


def test_json_spec_takes_named_queues_sentinels_and_bare_queue_ids_and_defaults_the_rest():
    spec = parse_offset_spec("startingOffsets", '{"orders": {"broker-a:0": 42, "1": -1, "broker-b:0": -2}}')
    assert resolve_spec(spec, BOUNDS, "earliest", "startingOffsets") == {A0: 42, A1: 50, B0: 5}
    spec = parse_offset_spec("startingOffsets", '{"orders": {"broker-a:1": 7}}')
    assert resolve_spec(spec, BOUNDS, "earliest", "startingOffsets") == {A0: 10, A1: 7, B0: 5}
    assert resolve_spec(spec, BOUNDS, "latest", "endingOffsets") == {A0: 100, A1: 7, B0: 5}


def test_json_spec_beyond_the_max_offset_or_naming_a_missing_queue_is_refused():
    with pytest.raises(OffsetError, match="endingOffsets.*beyond the queue's max offset 50"):
        resolve_spec(parse_offset_spec("endingOffsets", '{"orders": {"broker-a:1": 51}}'), BOUNDS, "latest",
                     "endingOffsets")
    with pytest.raises(OffsetError, match="startingOffsets.*queue broker-a:9"):
        resolve_spec(parse_offset_spec("startingOffsets", '{"orders": {"broker-a:9": 1}}'), BOUNDS, "earliest",
                     "startingOffsets")


@pytest.mark.parametrize("text,problem", [("{not json", "not valid JSON"), ("[]", "non-empty object"),
                                          ('{"orders": [1]}', "must map to an object"),
                                          ('{"orders": {"broker-a:0": -3}}', "-2 \\(earliest\\)"),
                                          ('{"orders": {"a:b:c": 1}}', "queue key")])
def test_malformed_offset_specs_name_the_option(text, problem):
    with pytest.raises(OffsetError, match=f"option 'startingOffsets'.*{problem}"):
        parse_offset_spec("startingOffsets", text)


def test_queues_new_since_the_start_begin_at_their_min_offset():
    assert with_new_queues({A0: 20}, BOUNDS) == {A0: 20, A1: 0, B0: 5}


def test_budget_is_split_in_proportion_to_lag_and_covers_exactly_max_rows():
    start = {A0: 0, A1: 0, B0: 0}
    end = {A0: 300, A1: 100, B0: 0}
    capped = rate_limit(start, end, 100)
    assert capped == {A0: 75, A1: 25, B0: 0}
    assert rate_limit(start, end, 1000) == end


@given(lags=st.lists(st.integers(0, 10_000), min_size=1, max_size=12), max_rows=st.integers(1, 20_000))
def test_budget_never_overshoots_a_queue_and_is_exact_when_lag_exceeds_it(lags, max_rows):
    refs = [QueueRef("t", "b", i) for i in range(len(lags))]
    start = {r: 1000 * i for i, r in enumerate(refs)}
    end = {r: start[r] + lag for r, lag in zip(refs, lags, strict=True)}
    capped = rate_limit(start, end, max_rows)
    assert all(start[r] <= capped[r] <= end[r] for r in refs)
    covered = sum(capped[r] - start[r] for r in refs)
    assert covered == min(max_rows, sum(lags))
    assert rate_limit(start, end, max_rows) == capped  # deterministic


def test_one_range_per_queue_with_data_in_canonical_order():
    ranges = plan_ranges({A1: 5, A0: 0, B0: 9}, {A0: 10, A1: 5, B0: 12})
    assert ranges == [OffsetRange("orders", "broker-a", 0, 0, 10), OffsetRange("orders", "broker-b", 0, 9, 12)]


def test_min_partitions_cuts_ranges_in_proportion_to_their_size_without_gaps():
    ranges = plan_ranges({A0: 0, A1: 0}, {A0: 900, A1: 100}, min_partitions=10)
    assert len(ranges) == 10
    by_queue = {q: [r for r in ranges if r.queue_id == q] for q in (0, 1)}
    assert len(by_queue[0]) == 9 and len(by_queue[1]) == 1
    for rs in by_queue.values():
        assert all(a.end == b.start for a, b in zip(rs, rs[1:], strict=False))
    assert by_queue[0][0].start == 0 and by_queue[0][-1].end == 900


def test_expired_starts_are_reported_with_the_queues_min_offset():
    assert below_min({A0: 3, A1: 0}, BOUNDS) == [(A0, 3, 10)]
