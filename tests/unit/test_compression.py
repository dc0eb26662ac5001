"""Bounded inflation: a compressed body never grows past its reader's limit, whoever sent it."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.common.compression import inflate
from sluice.common.errors import MessageFormatError
from sluice.namesrv.register_broker_body import MAX_INFLATED_REGISTER_BODY, BodyFormatError, decode_register_broker_body

BOMB = zlib.compress(b"\0" * (200 << 20), 9)  # 200 MiB of zeros in about 200 KB


def test_a_zip_bomb_stops_at_the_limit():
    assert len(BOMB) < 300_000
    with pytest.raises(MessageFormatError, match="inflates to more than 1048576 bytes"):
        inflate(BOMB, 1 << 20, "the body")


@given(st.binary(max_size=5000), st.integers(0, 6000))
def test_what_fits_inflates_exactly_and_what_does_not_is_refused(data, limit):
    packed = zlib.compress(data)
    if len(data) <= limit:
        assert inflate(packed, limit) == data
    else:
        with pytest.raises(MessageFormatError):
            inflate(packed, limit)


@pytest.mark.parametrize(("data", "problem"), [(b"not zlib", "does not inflate"),
                                               (zlib.compress(b"x" * 1000)[:-6], "truncated")])
def test_garbage_and_truncated_streams_are_refused(data, problem):
    with pytest.raises(MessageFormatError, match=problem):
        inflate(data, 1 << 20)


def test_a_name_server_refuses_a_register_body_that_inflates_past_its_limit():
    bomb = zlib.compress(b"\0" * (MAX_INFLATED_REGISTER_BODY + 1), 9)
    with pytest.raises(BodyFormatError, match="inflates to more than"):
        decode_register_broker_body(bomb, compressed=True)
