"""Trace records (sluice.client.trace): RocketMQ's text format both ways, older clients' shorter lines, anything else
skipped, and trace messages packed under the size limit."""

from __future__ import annotations

from sluice.client.trace import (
    TraceBean,
    TraceContext,
    TraceMessageType,
    TraceType,
    decode_trace_data,
    encode_context,
    pack,
    trace_keys,
)

S, F = "\x01", "\x02"


def test_each_record_type_reads_back_as_written() -> None:
    pub = TraceContext(TraceType.PUB, 1700000000000, "DefaultRegion", "pg", 3, True, beans=[TraceBean(
        "t", "ID1", "OFF1", None, "k1 k2", "127.0.0.1:10911", 12, msg_type=TraceMessageType.DELAY)])
    before = TraceContext(TraceType.SUB_BEFORE, 1700000000100, "DefaultRegion", "cg", request_id="R1",
                          beans=[TraceBean(msg_id="ID1", keys="k1 k2", retry_times=2)])
    after = TraceContext(TraceType.SUB_AFTER, 1700000000200, "", "cg", 7, False, "R1", 4,  # (no region in the line)
                         beans=[TraceBean(msg_id="ID1", keys="k1 k2")])
    end = TraceContext(TraceType.END_TRANSACTION, 1700000000300, "DefaultRegion", "pg", beans=[TraceBean(
        "t", "ID1", tags="tg", store_host="127.0.0.1:10911", msg_type=TraceMessageType.TRANS_COMMIT,
        transaction_id="TX", transaction_state="ROLLBACK_MESSAGE", from_transaction_check=True)])
    text = "".join(encode_context(c) for c in (pub, before, after, end))
    assert encode_context(pub) == S.join(["Pub", "1700000000000", "DefaultRegion", "pg", "t", "ID1", "null", "k1 k2",
                                          "127.0.0.1:10911", "12", "3", "3", "OFF1", "true"]) + F
    assert encode_context(after) == S.join(["SubAfter", "R1", "ID1", "7", "false", "k1 k2", "4", "1700000000200",
                                            "cg"]) + F
    back = decode_trace_data(text)
    assert [c.trace_type for c in back] == [TraceType.PUB, TraceType.SUB_BEFORE, TraceType.SUB_AFTER,
                                            TraceType.END_TRANSACTION]
    assert back[0] == pub and back[1] == before and back[2] == after and back[3] == end
    assert trace_keys(pub) == {"ID1", "k1", "k2"}


def test_older_clients_shorter_lines_read_and_broken_ones_are_skipped() -> None:
    old_pub = S.join(["Pub", "1", "R", "pg", "t", "ID", "tg", "null", "h:1", "5", "2", "0", "true"])  # no offset id
    old_after = S.join(["SubAfter", "R1", "ID", "3", "true", "null", "0"])  # no time, no group
    junk = ["", "Pub" + S + "x", "Nope" + S + "1", S.join(["SubBefore", "notanumber", "R", "g", "R1", "ID", "x", "k"])]
    got = decode_trace_data(F.join([old_pub, old_after, *junk]))
    assert [c.trace_type for c in got] == [TraceType.PUB, TraceType.SUB_AFTER, TraceType.SUB_BEFORE]
    assert got[0].success and got[0].beans[0].offset_msg_id == "" and got[0].beans[0].keys is None
    assert got[1].group == "" and got[1].cost_time == 3
    assert got[2].timestamp == 0 and got[2].beans[0].retry_times == 0  # numbers that are not read as 0


def test_trace_messages_stay_under_the_size_limit_and_carry_their_records_keys() -> None:
    contexts = [TraceContext(TraceType.PUB, 1000 + i, "R", "pg",
                             beans=[TraceBean("t", f"ID{i:03d}", keys=f"key{i:03d}")]) for i in range(50)]
    one = len(encode_context(contexts[0]))
    bodies = list(pack(contexts, max_size=one * 10))
    assert [len(decode_trace_data(b)) for b, _, _ in bodies] == [n for _, _, n in bodies] == [10] * 5
    assert all(len(b) <= one * 10 for b, _, _ in bodies)
    assert bodies[1][1] == {f"ID{i:03d}" for i in range(10, 20)} | {f"key{i:03d}" for i in range(10, 20)}


def test_a_trace_messages_keys_stay_within_what_a_stored_message_can_carry() -> None:
    long_keys = " ".join(f"k{i}-{'x' * 60}" for i in range(30))  # ~1.9 KB of keys a message
    contexts = [TraceContext(TraceType.PUB, 1000 + i, "R", "pg", beans=[TraceBean("t", f"ID{i:03d}", keys=long_keys
                                                                                  .replace("k", f"m{i}k"))])
                for i in range(20)]
    packed = list(pack(contexts, max_keys=8_000))
    assert sum(n for _, _, n in packed) == 20 and len(packed) > 1
    for body, keys, _ in packed:
        assert sum(len(k) + 1 for k in keys) <= 8_000
        assert {c.beans[0].msg_id for c in decode_trace_data(body)} <= keys  # every record found by its id
    alone = list(pack([TraceContext(TraceType.PUB, 1, "R", "pg", beans=[TraceBean("t", "ID", keys=long_keys)])],
                      max_keys=500))
    assert "ID" in alone[0][1] and sum(len(k) + 1 for k in alone[0][1]) <= 500
