"""Sends at a fixed rate, evenly, for ``sluice bench e2e``.

The event loop's own timers tick by the millisecond, so pacing with ``asyncio.sleep`` sends bursts (five at
once every millisecond at 5,000/s) that queue behind each other and measure the burst, not the system. A
kernel interval timer (a Linux timerfd the loop watches) wakes the loop once per send, as a network event
would. Where there is no timerfd (not Linux), the loop's own timers pace, in bursts.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import time
from collections.abc import Callable

_CLOCK_MONOTONIC = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def interval_timer_fd(interval: float) -> int:
    """A non-blocking timerfd that fires every ``interval`` seconds; reading it gives the expirations since the
    last read. Through libc with ctypes: ``os.timerfd_create`` arrives in Python 3.13."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd: int = libc.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "timerfd_create failed")
    ns = max(1, round(interval * 1e9))
    ts = _Timespec(ns // 1_000_000_000, ns % 1_000_000_000)
    if libc.timerfd_settime(fd, 0, ctypes.byref(_Itimerspec(ts, ts)), None) != 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise OSError(err, "timerfd_settime failed")
    return fd


async def pace(send: Callable[[], None], rate: float, duration: float) -> int:
    """Call ``send`` ``rate`` times a second, evenly, for ``duration`` seconds (at least once); returns how
    many times. A tick that finds the loop busy makes every send that is due, so the rate holds; an exception
    from ``send`` ends the pacing and is raised here."""
    loop = asyncio.get_running_loop()
    total = max(1, round(rate * duration))
    try:
        fd = interval_timer_fd(1.0 / rate)
    except (AttributeError, OSError):  # no timerfd (not Linux): the loop's own, millisecond timers
        return await _pace_with_sleep(send, rate, total)
    done: asyncio.Future[None] = loop.create_future()
    sent = 0

    def tick() -> None:
        nonlocal sent
        try:
            expirations = int.from_bytes(os.read(fd, 8), sys.byteorder)
        except BlockingIOError:
            return
        try:
            for _ in range(min(expirations, total - sent)):
                send()
                sent += 1
        except Exception as exc:
            if not done.done():
                done.set_exception(exc)
            return
        if sent >= total and not done.done():
            done.set_result(None)

    try:
        loop.add_reader(fd, tick)
        try:
            await done
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)
    return sent


async def _pace_with_sleep(send: Callable[[], None], rate: float, total: int) -> int:
    """``pace`` with ``asyncio.sleep``: sends that fall due between two millisecond ticks go together."""
    t0 = time.perf_counter()
    for sent in range(total):
        delay = t0 + sent / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        send()
    return total


__all__ = ["interval_timer_fd", "pace"]
