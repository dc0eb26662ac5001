"""Exponential backoff with full jitter."""

from __future__ import annotations

import pytest

from sluice.common.backoff import Backoff


def test_the_ceiling_doubles_per_failure_up_to_the_cap_and_a_success_starts_over():
    b = Backoff(0.1, 1.0, rng=lambda: 1.0)
    assert [round(b.fail(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.succeed()
    assert b.fail() == pytest.approx(0.1)


def test_each_wait_is_drawn_from_zero_to_the_ceiling():
    draws = iter([0.0, 0.5, 0.25])
    b = Backoff(0.2, 10.0, rng=lambda: next(draws))
    assert [b.fail(), b.fail(), b.fail()] == [0.0, pytest.approx(0.2), pytest.approx(0.2)]


def test_real_draws_stay_within_the_ceiling():
    b = Backoff(0.05, 1.0)
    for n in range(1, 200):
        wait = b.fail()
        assert 0 <= wait <= min(1.0, 0.05 * 2 ** (n - 1))


def test_a_long_outage_does_not_overflow():
    b = Backoff(0.05, 3.0, rng=lambda: 1.0)
    for _ in range(5000):
        wait = b.fail()
    assert wait == 3.0


def test_a_zero_cap_never_waits_and_negative_bounds_are_refused():
    assert Backoff(0.1, 0.0).fail() == 0.0
    with pytest.raises(ValueError, match="at least 0"):
        Backoff(-1, 1)
