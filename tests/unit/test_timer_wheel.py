"""The timer wheel: due times rounded up to the precision, the newest unit per due time, the next due time found
within a span only, across the wheel's wrap-around."""

from __future__ import annotations

import pytest

from sluice.store.timer_wheel import TimerWheel, WheelOverflowError


def test_a_due_time_is_the_first_multiple_of_the_precision_at_or_after_the_time():
    w = TimerWheel(1000, 60_000)
    assert [w.due_time(t) for t in (0, 1, 999, 1000, 1001)] == [0, 1000, 1000, 1000, 2000]


def test_units_due_together_chain_and_are_taken_at_once():
    w = TimerWheel(100, 10_000)
    assert w.newest(500) == -1
    w.add(500, 0)
    assert w.newest(500) == 0
    w.add(500, 40)
    assert w.pending == 2
    assert w.take(500) == (40, 2)
    assert w.take(500) == (-1, 0) and w.pending == 0


def test_next_due_finds_the_earliest_in_the_span_and_nothing_outside_it():
    w = TimerWheel(100, 1_000_000)
    for due in (700_000, 5_000, 123_400):
        w.add(due, due)
    assert w.next_due(0, 2_000_000) == 5_000
    assert w.next_due(5_100, 2_000_000) == 123_400
    assert w.next_due(5_100, 123_300) is None
    assert w.next_due(123_401, 699_900) is None
    assert w.next_due(123_401, 700_000) == 700_000


def test_next_due_sees_through_the_wrap_around_and_ignores_a_slot_of_another_turn():
    w = TimerWheel(1000, 10_000)  # 24 slots: 24 s a turn
    w.add(23_000, 1)
    w.add(49_000, 2)  # slot 1 of the third turn
    assert w.next_due(22_000, 60_000) == 23_000
    w.take(23_000)
    assert w.next_due(24_000, 48_000) is None  # slot 1 holds 49 s, not 25 s
    assert w.next_due(24_000, 50_000) == 49_000
    with pytest.raises(WheelOverflowError):
        w.newest(25_000)  # slot 1 still holds 49 s
