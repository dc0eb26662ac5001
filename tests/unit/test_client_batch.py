"""Batch bodies (SEND_BATCH_MESSAGE's, as RocketMQ's ``MessageDecoder.encodeMessages`` writes them): the shared
codec and the client's batch rules."""

from __future__ import annotations

import itertools
import struct
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.client.batch import check_batch, encode_message_batch, split_batches
from sluice.client.message import Message
from sluice.common.batch_codec import BatchItem, decode_batch, encode_batch, encode_batch_record
from sluice.common.errors import MessageFormatError

_prop_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), min_size=1,
                     max_size=8)
_items = st.lists(st.builds(BatchItem, st.binary(max_size=64), st.dictionaries(_prop_text, _prop_text, max_size=4),
                            st.integers(-(2**31), 2**31 - 1)), max_size=10)


def _seq_ids():
    c = itertools.count()
    return lambda n: [f"{next(c):032X}" for _ in range(n)]


def test_record_matches_the_observed_cpp_layout():
    props = b"TAGS\x01TagA\x02UNIQ_KEY\x01" + b"0" * 32 + b"\x02WAIT\x01true\x02"
    rec = encode_batch_record(b"b1", props)
    assert rec[:22] == struct.pack(">iiiii", 0x56, 0, 0, 0, 2) + b"b1"
    assert rec[22:24] == b"\x00\x3e" and len(rec) == 0x56


@given(_items)
def test_batch_body_round_trips(items):
    assert decode_batch(encode_batch(items)) == items


@given(_items)
def test_decoder_accepts_memoryview_and_bytearray(items):
    body = encode_batch(items)
    assert decode_batch(memoryview(body)) == decode_batch(bytearray(body)) == items


def test_decoder_accepts_cpp_trailing_property_separator():
    rec = encode_batch_record(b"x", b"A\x011\x02B\x012\x02")
    assert decode_batch(rec)[0].properties == {"A": "1", "B": "2"}


@given(st.lists(st.builds(BatchItem, st.binary(min_size=1, max_size=16)), min_size=1, max_size=4),
       st.data())
def test_truncated_body_is_rejected(items, data):
    body = encode_batch(items)
    cut = data.draw(st.integers(1, len(body) - 1))
    # Cutting inside the last record always fails; cutting between records is a shorter valid body.
    boundaries = set(itertools.accumulate(len(encode_batch([it])) for it in items))
    if cut in boundaries:
        decode_batch(body[:cut])
    else:
        with pytest.raises(MessageFormatError, match="byte"):
            decode_batch(body[:cut])


@pytest.mark.parametrize("total_delta", [-1, 1, 1000])
def test_total_size_disagreeing_with_lengths_is_rejected(total_delta):
    rec = bytearray(encode_batch_record(b"abc", b"K\x01V"))
    struct.pack_into(">i", rec, 0, len(rec) + total_delta)
    with pytest.raises(MessageFormatError):
        decode_batch(bytes(rec) + b"\0" * 8)


def test_negative_lengths_are_rejected():
    rec = bytearray(encode_batch_record(b"abc", b""))
    struct.pack_into(">i", rec, 16, -1)
    with pytest.raises(MessageFormatError):
        decode_batch(bytes(rec))


def test_empty_body_decodes_to_no_messages():
    assert decode_batch(b"") == []


def test_each_message_gets_its_own_uniq_key_and_properties():
    msgs = [Message("t", b"b1", tags="TagA"), Message("t", b"b2", keys=["k"], properties={"p": "v"}, flag=7)]
    enc = encode_message_batch(msgs, new_ids=_seq_ids())
    assert enc.topic == "t" and enc.properties == {"WAIT": "true"} and enc.wait_store_msg_ok
    assert enc.msg_ids == [f"{0:032X}", f"{1:032X}"]
    items = decode_batch(enc.body)
    assert [it.body for it in items] == [b"b1", b"b2"]
    assert items[0].properties == {"TAGS": "TagA", "WAIT": "true", "UNIQ_KEY": enc.msg_ids[0]}
    assert items[1].properties == {"KEYS": "k", "WAIT": "true", "UNIQ_KEY": enc.msg_ids[1], "p": "v"}
    assert items[1].flag == 7


def test_default_ids_are_distinct():
    enc = encode_message_batch([Message("t", b"1"), Message("t", b"2")])
    assert len(set(enc.msg_ids)) == 2


def test_batch_of_mixed_topics_is_refused():
    with pytest.raises(MessageFormatError, match="one topic"):
        check_batch([Message("a", b"1"), Message("b", b"2")])


def test_batch_with_a_delay_level_is_refused():
    with pytest.raises(MessageFormatError, match="delay"):
        check_batch([Message("a", b"1"), Message("a", b"2", delay_level=2)])


@pytest.mark.parametrize("timer", [{"delay": timedelta(seconds=5)}, {"deliver_at": 1_900_000_000_000}])
def test_batch_with_a_timer_is_refused(timer):
    with pytest.raises(MessageFormatError, match="timer messages cannot be sent in a batch"):
        check_batch([Message("a", b"1"), Message("a", b"2", **timer)])


def test_batch_to_a_retry_topic_is_refused():
    with pytest.raises(MessageFormatError, match="retry"):
        check_batch([Message("%RETRY%g", b"1")])


def test_batch_with_mixed_wait_flags_is_refused():
    with pytest.raises(MessageFormatError, match="wait_store_msg_ok"):
        check_batch([Message("a", b"1"), Message("a", b"2", wait_store_msg_ok=False)])


def test_empty_batch_and_non_messages_are_refused():
    with pytest.raises(MessageFormatError, match="at least one"):
        check_batch([])
    with pytest.raises(MessageFormatError, match="not a Message"):
        check_batch([b"x"])  # type: ignore[list-item]


def test_encoded_batch_over_the_size_limit_is_refused():
    msgs = [Message("t", b"x" * 60) for _ in range(3)]
    with pytest.raises(MessageFormatError, match="split"):
        encode_message_batch(msgs, max_body_size=200)


def test_split_batches_yields_runs_that_each_encode_within_the_limit():
    msgs = [Message("t", bytes(n), tags="T") for n in (10, 50, 90, 5, 5, 5, 120, 1)]
    limit = 220
    runs = split_batches(msgs, limit)
    assert [m for run in runs for m in run] == msgs
    for run in runs:
        assert len(encode_message_batch(run, limit).body) <= limit
    # Greedy: no run could have taken the next run's first message.
    for a, b in itertools.pairwise(runs):
        assert len(encode_message_batch([*a, b[0]], 10**6).body) > limit
