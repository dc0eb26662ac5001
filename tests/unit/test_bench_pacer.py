"""``sluice bench e2e``'s pacer: the asked number of sends, spread over the duration, not in bursts."""

from __future__ import annotations

import asyncio
import time

import pytest

from sluice.bench.pacer import pace


def _pace_times(rate: float, duration: float) -> tuple[int, list[float]]:
    times: list[float] = []

    async def main() -> int:
        return await pace(lambda: times.append(time.perf_counter()), rate, duration)

    return asyncio.run(main()), times


def test_pacer_sends_rate_times_duration_each_at_a_tick_of_a_timer_at_the_send_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.bench import pacer

    intervals: list[float] = []
    timer_fd = pacer.interval_timer_fd

    def recorded(interval: float) -> int:
        fd = timer_fd(interval)
        intervals.append(interval)
        return fd

    async def no_loop_timers(*args: object) -> int:
        raise AssertionError("the pacer fell back to the loop's timers")

    monkeypatch.setattr(pacer, "interval_timer_fd", recorded)
    monkeypatch.setattr(pacer, "_pace_with_sleep", no_loop_timers)
    t0 = time.perf_counter()
    n, times = _pace_times(2000, 0.5)
    assert n == len(times) == 1000
    # A kernel timer at the send interval (the loop's own timers tick by the millisecond: two sends at once at
    # 2,000 a second), and no send before its tick: sends come together only after a loop (or a machine) was busy,
    # which a timing assertion here would measure instead of the pacer.
    assert intervals == [1 / 2000]
    assert all(t - t0 >= (k + 1) / 2000 for k, t in enumerate(times))


def test_a_tick_that_finds_several_expirations_makes_as_many_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import sys

    from sluice.bench import pacer

    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.write(write_end, (3).to_bytes(8, sys.byteorder))  # three intervals passed while the loop was busy
    monkeypatch.setattr(pacer, "interval_timer_fd", lambda interval: read_end)
    try:
        n, times = _pace_times(3, 1.0)
    finally:
        os.close(write_end)
    assert n == len(times) == 3


def test_pacer_sends_at_least_once():
    n, times = _pace_times(10, 0.01)
    assert n == len(times) == 1


def test_pacer_stops_and_raises_when_a_send_fails():
    calls = 0

    def send() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("no route")

    async def main() -> int:
        return await pace(send, 1000, 60.0)

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="no route"):
        asyncio.run(main())
    assert calls == 3 and time.monotonic() - t0 < 30  # at the failing send, not at the end of the 60 s


def test_pacer_falls_back_to_loop_timers_without_a_timerfd(monkeypatch: pytest.MonkeyPatch):
    from sluice.bench import pacer

    def no_timerfd(interval: float) -> int:
        raise AttributeError("timerfd_create")

    monkeypatch.setattr(pacer, "interval_timer_fd", no_timerfd)
    n, times = _pace_times(1000, 0.1)
    assert n == len(times) == 100
    assert times[-1] - times[0] >= 0.08
