"""UNIQ_KEY generation: layout, uniqueness, and reading the time back out."""

from __future__ import annotations

import datetime as dt
import os
import threading

import pytest

from sluice.client.message_id import (
    MessageIdGenerator,
    create_uniq_id,
    default_generator,
    uniq_id_ip,
    uniq_id_pid,
    uniq_id_timestamp,
)
from sluice.common.speedups import speedups


@pytest.fixture(params=["compiled", "python"])
def make_gen(request):
    """MessageIdGenerator with its compiled clock, and with the pure-Python one: the same ids."""
    if request.param == "compiled" and speedups is None:
        pytest.skip("sluice._speedups is not built here")

    def make(**kw) -> MessageIdGenerator:
        gen = MessageIdGenerator(**kw)
        if request.param == "python":
            gen._clock = None
        else:
            assert gen._clock is not None
        return gen

    return make


def _set_counter(gen: MessageIdGenerator, value: int) -> None:
    if gen._clock is not None:
        gen._clock.counter = value
    else:
        gen._counter = value


def _ms(*args: int) -> int:
    return round(dt.datetime(*args).timestamp() * 1000)  # local time, as the generator uses


def test_id_is_32_upper_hex_with_fixed_prefix(make_gen):
    gen = make_gen(ip="10.1.2.3", pid=0x12345, salt=0xDEADBEEF)
    uid = gen.create()
    assert len(uid) == 32 and uid == uid.upper()
    assert uid.startswith("0A010203" + "2345" + "DEADBEEF")
    assert uniq_id_ip(uid) == "10.1.2.3"
    assert uniq_id_pid(uid) == 0x2345


def test_time_field_is_ms_since_start_of_local_month_and_counter_increments(make_gen):
    gen = make_gen(ip=b"\x7f\0\0\1", pid=1, salt=0)
    now = _ms(2024, 3, 15, 12, 0, 0)
    a, b = gen.create(now), gen.create(now)
    span = now - _ms(2024, 3, 1)
    assert a[20:28] == f"{span:08X}"
    assert (a[28:], b[28:]) == ("0000", "0001")


def test_counter_wraps_at_16_bits(make_gen):
    gen = make_gen(ip="1.2.3.4", pid=1, salt=0)
    _set_counter(gen, 0xFFFF)
    now = _ms(2024, 3, 15)
    assert gen.create(now)[28:] == "FFFF"
    assert gen.create(now)[28:] == "0000"


def test_late_in_a_31_day_month_the_span_uses_all_32_bits(make_gen):
    gen = make_gen(ip="1.2.3.4", pid=1, salt=0)
    now = _ms(2024, 1, 31, 23, 59, 59)
    uid = gen.create(now)
    assert int(uid[20:28], 16) == now - _ms(2024, 1, 1) > 2**31
    assert uniq_id_timestamp(uid, now_ms=now + 5) == now


def test_month_rollover_restarts_the_span(make_gen):
    gen = make_gen(ip="1.2.3.4", pid=1, salt=0)
    gen.create(_ms(2024, 12, 31, 23))
    uid = gen.create(_ms(2025, 1, 1, 0, 0, 1))
    assert int(uid[20:28], 16) == 1000


def test_timestamp_read_back_from_this_month_and_from_last_month(make_gen):
    gen = make_gen(ip="1.2.3.4", pid=1, salt=0)
    made = _ms(2024, 5, 10, 8, 30)
    uid = gen.create(made)
    assert uniq_id_timestamp(uid, now_ms=made + 60_000) == made
    # Read in June: the span would point to 10 June, in the future, so May is assumed.
    assert uniq_id_timestamp(uid, now_ms=_ms(2024, 6, 2)) == made


def test_timestamp_of_an_id_made_now_is_now():
    uid = create_uniq_id()
    t = uniq_id_timestamp(uid)
    assert abs(t - dt.datetime.now().timestamp() * 1000) < 5_000


def test_ids_are_unique_across_threads(make_gen):
    gen = make_gen(ip="1.2.3.4", pid=1, salt=0)
    out: list[list[str]] = [[] for _ in range(8)]

    def work(i: int) -> None:
        out[i].extend(gen.create() for _ in range(5000))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [u for chunk in out for u in chunk]
    assert len(set(ids)) == len(ids) == 40_000


def test_default_generator_is_shared():
    assert default_generator() is default_generator()
    assert create_uniq_id()[:20] == default_generator().prefix


@pytest.mark.parametrize("bad", ["", "XYZ", "G" * 32, "0" * 31])
def test_malformed_ids_are_refused(bad):
    with pytest.raises(ValueError):
        uniq_id_timestamp(bad)


def test_ip_must_be_ipv4(make_gen):
    with pytest.raises(ValueError):
        make_gen(ip=b"\0" * 16)


def test_ids_made_many_at_once_are_distinct_and_read_back_the_same_time(make_gen):
    gen = make_gen(ip="10.1.2.3", pid=7, salt=1)
    ids = gen.create_many(70_000)  # wraps the 16-bit counter
    assert len(ids) == 70_000 and all(len(i) == 32 and i[:20] == ids[0][:20] for i in ids)
    assert len(set(ids[:65_536])) == 65_536
    assert [int(i[-4:], 16) for i in ids[:3]] == [0, 1, 2] and gen.create()[-4:] == f"{70_000 & 0xFFFF:04X}"


def test_a_forked_child_makes_ids_of_its_own():
    parent = create_uniq_id()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, then out
        try:
            os.write(write_end, create_uniq_id().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    child = os.read(read_end, 64).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    assert uniq_id_pid(child) == pid & 0xFFFF != uniq_id_pid(parent)
    assert child[:20] != parent[:20] and create_uniq_id()[:20] == parent[:20]


def test_a_negative_count_of_ids_is_refused(make_gen):
    with pytest.raises(ValueError, match="n >= 0"):
        make_gen(ip="1.2.3.4", pid=1, salt=0).create_many(-1)
