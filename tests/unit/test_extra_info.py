"""POP receipts and offset infos read back what they were made from, in RocketMQ's format, and refuse what
the broker could not have made."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.common.extra_info import OffsetInfo, Receipt, ReceiptError, pop_retry_topic, real_topic, retry_flag

longs = st.integers(0, 2**63 - 1)
ints = st.integers(0, 2**31 - 1)


def test_a_receipt_is_rocketmqs_eight_space_separated_fields():
    r = Receipt(100, 1_700_000_000_000, 60_000, 3, "0", "broker-a", 1, 102)
    assert str(r) == "100 1700000000000 60000 3 0 broker-a 1 102"
    assert Receipt.parse(str(r)) == r and r.revive_time == 1_700_000_060_000 and not r.orderly


@given(longs, longs, longs, ints, st.sampled_from("012"), st.text("abc-_1", min_size=1, max_size=20), ints, longs)
def test_a_receipt_reads_back_what_it_was_made_from(ck, pt, it, qid, retry, broker, queue_id, offset):
    r = Receipt(ck, pt, it, qid, retry, broker, queue_id, offset)
    assert Receipt.parse(str(r)) == r


@pytest.mark.parametrize("text", ["", "1 2 3", "1 2 3 4 0 b 0 5 6", "x 2 3 4 0 b 0 5", "1 2 3 4 9 b 0 5",
                                  "1 2 3 4 0  0 5", "1 2 3 -4 0 b 0 5", "1 2 3 4 0 b 0 99999999999999999999",
                                  "1 2 3 4 0 b 0 ５", "1 2 3 4 0 b 4294967296 5"])
def test_a_malformed_receipt_is_refused_with_a_reason(text):
    with pytest.raises(ReceiptError, match=r"\w"):
        Receipt.parse(text)


def test_retry_topics_and_their_flags_are_rocketmqs():
    assert pop_retry_topic("T", "g") == "%RETRY%g_T" and pop_retry_topic("T", "g", v2=True) == "%RETRY%g+T"
    assert [retry_flag(t) for t in ("T", "%RETRY%g_T", "%RETRY%g+T")] == ["0", "1", "2"]
    assert [real_topic(f, "T", "g") for f in "012"] == ["T", "%RETRY%g_T", "%RETRY%g+T"]


def test_offset_infos_are_what_the_java_client_parses():
    info = OffsetInfo()
    info.add("%RETRY%g_T", 0, 5, [5, 6])
    info.add("T", 1, 100, [100, 102])
    assert info.start_offset_info() == "1 0 5;0 1 100"
    assert info.msg_offset_info() == "1 0 5,6;0 1 100,102"
    back = OffsetInfo.parse(info.start_offset_info(), info.msg_offset_info())
    assert back.start == info.start and back.offsets == info.offsets
    with pytest.raises(ReceiptError):
        OffsetInfo.parse("0 1 5;0 1 6", "")


@pytest.mark.parametrize("second", ["1 2 3 4 0 b 0 -6", "1 2 3 4 0 b 0 ５", "1 2 3 4 0 b 0 x", "1 2 3 4 0 b 0 ",
                                    "1 2 3 4 0 b 0 99999999999999999999", "1 2 3 4 0 b 0 0"])
def test_ack_many_checks_every_receipt_not_only_the_first_of_its_pop(second):
    """The receipts of one pop share all but their offset, parsed once; each offset is still checked (and none may
    lie before its checkpoint's start)."""
    from sluice.client.aio.simple_consumer import SimpleConsumer
    from sluice.common.errors import ClientError
    from sluice.common.extra_info import PROPERTY_POP_CK
    from sluice.common.message import MessageExt

    def popped(receipt: str) -> MessageExt:
        return MessageExt("T", b"x", 0, 0, 0, 0, 0, 0, "127.0.0.1:1", 0, "127.0.0.1:2", 0, 0,
                          {PROPERTY_POP_CK: receipt}, 0, 0)

    c = SimpleConsumer("g", namesrv="127.0.0.1:1")
    with pytest.raises(ClientError, match="malformed|lies before"):
        asyncio.run(c.ack_many([popped("1 2 3 4 0 b 0 5"), popped(second)]))
