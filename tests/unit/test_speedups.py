"""The compiled codecs (``sluice._speedups``) give exactly what their pure-Python twins give: the same
results, and a ``MessageFormatError`` for the same inputs."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.common import batch_codec, message_codec
from sluice.common.batch_codec import BatchItem, encode_batch
from sluice.common.errors import MessageFormatError
from sluice.common.message_codec import encode_record
from sluice.common.speedups import NO_EXTENSIONS_ENV, speedups

needs_c = pytest.mark.skipif(speedups is None, reason="sluice._speedups is not built here (no C compiler)")
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
hosts = st.builds(lambda a, b, c, d, port: f"{a}.{b}.{c}.{d}:{port}", *[st.integers(0, 255)] * 4,
                  st.integers(0, 65535))
topics = st.text("abcXYZ019_-%|", min_size=1, max_size=20).map(str.encode) | st.binary(max_size=8)
props = st.binary(max_size=60) | st.dictionaries(st.text("abcKEYSTAG", min_size=1, max_size=6),
                                                 st.text(max_size=8).filter(lambda v: "\x01" not in v and "\x02"
                                                                            not in v and "\0" not in v),
                                                 max_size=4).map(
    lambda d: "\x02".join(f"{k}\x01{v}" for k, v in d.items()).encode())


@st.composite
def records(draw: st.DrawFn) -> bytes:
    return encode_record(topic=draw(topics), body=draw(st.binary(max_size=80)), properties=draw(props),
                         queue_id=draw(int32), flag=draw(int32), queue_offset=draw(int64),
                         physical_offset=draw(int64), sys_flag=draw(int32), born_timestamp=draw(int64),
                         born_host=draw(hosts), store_timestamp=draw(int64), store_host=draw(hosts),
                         reconsume_times=draw(int32), prepared_transaction_offset=draw(int64))


@st.composite
def damaged(draw: st.DrawFn, whole: st.SearchStrategy[bytes]) -> bytes:
    """Whole inputs, or the same with bytes overwritten, cut or appended."""
    data = bytearray(draw(whole))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["set", "cut", "append"]))
        if kind == "set" and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[draw(st.integers(0, len(data))):]
        else:
            data += draw(st.binary(max_size=12))
    return bytes(data)


pull_bodies = damaged(st.lists(records(), max_size=4).map(b"".join))


def outcome(fn, *args):  # noqa: ANN001, ANN201
    try:
        return "ok", fn(*args)
    except MessageFormatError:
        return "refused", None


@needs_c
@SETTINGS
@given(pull_bodies)
def test_c_decode_records_equals_python(data: bytes) -> None:
    c, py = outcome(message_codec.c_decode_records, data, message_codec._HOSTS), \
        outcome(message_codec.py_decode_records, data)
    assert c == py
    if c[0] == "ok":
        for a, b in zip(c[1], py[1], strict=True):
            assert (a.topic, a.born_host, a.store_host, a._raw_properties, a.tags) == \
                   (b.topic, b.born_host, b.store_host, b._raw_properties, b.tags)


@needs_c
@SETTINGS
@given(damaged(records() | st.builds(lambda n: (n + 8).to_bytes(4, "big", signed=True) + b"\xcb\xd41\x94" +
                                      bytes(n), st.integers(0, 20))), st.integers(0, 200), st.integers(0, 200),
       st.booleans())
def test_c_check_record_equals_python(data: bytes, pos: int, cut: int, check_crc: bool) -> None:
    pos = min(pos, len(data))
    limit = max(pos, len(data) - cut)
    assert outcome(speedups.check_record, data, pos, limit, check_crc) == \
        outcome(message_codec.py_check_record, data, pos, limit, check_crc)


batch_bodies = damaged(st.lists(st.builds(BatchItem, st.binary(max_size=40),
                                          st.dictionaries(st.text("abcKEYS", min_size=1, max_size=5),
                                                          st.text("xyz01 ", max_size=6), max_size=3),
                                          int32), max_size=5).map(encode_batch))


@needs_c
@SETTINGS
@given(batch_bodies)
def test_c_scan_batch_equals_python(data: bytes) -> None:
    c, py = outcome(batch_codec.c_scan_batch_columns, data), outcome(batch_codec.py_scan_batch_columns, data)
    assert c[0] == py[0]
    if c[0] == "ok":
        for a, b in zip(c[1], py[1], strict=True):
            assert a.dtype == b.dtype == np.int64 and a.tolist() == b.tolist()


# Properties made to trip a property search: markers inside values, repeated names, a name that ends another's.
tricky_props = st.lists(st.sampled_from([b"TAGS\x01a", b"KEYS\x01k1 k2", b"xTAGS\x01no", b"UNIQ_KEY\x01u",
                                         b"TAGS\x01", b"a\x01TAGS\x01in-value", b"TAGS\x01TAGS\x01b", b"\x02",
                                         b"", b"TAG", b"S\x01", b"DELAY\x013"]), max_size=6).map(b"\x02".join)


@needs_c
@SETTINGS
@given(st.lists(st.tuples(st.binary(max_size=12), tricky_props | props), min_size=1, max_size=6),
       st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "S"]))
def test_c_property_spans_equal_the_pure_python_searches(records: list[tuple[bytes, bytes]], name: str) -> None:
    from sluice.common.properties import property_value
    from sluice.store.batch_encoder import BatchBody
    data = b"".join(batch_codec.encode_batch_record(b, p) for b, p in records)
    body = BatchBody(data, batch_codec.scan_batch_columns(data))
    compiled, bulk = body.property_spans(name), body.bulk_property_spans(name)
    by_record = body._spans_record_by_record(f"{name}\x01".encode())
    for spans in (bulk, by_record):
        assert [a.tolist() for a in compiled] == [a.tolist() for a in spans]
    want = {i: v for i, (_, p) in enumerate(records) if (v := property_value(p, name)) is not None}
    assert dict(zip(compiled.record.tolist(), body.values(compiled), strict=True)) == want


@needs_c
@SETTINGS
@given(st.lists(st.tuples(st.binary(max_size=40), tricky_props | props, int32), min_size=1, max_size=6),
       st.text(min_size=1, max_size=12), st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**62))
def test_c_encode_records_equal_the_numpy_encoder_and_decode_to_the_batch(
        records: list[tuple[bytes, bytes, int]], topic: str, first_phys: int, first_qoff: int, store_ts: int) -> None:
    from sluice.common.message import host_to_bytes
    from sluice.common.message_codec import RECORD_HEADER, decode_records
    from sluice.common.sysflag import MESSAGE_MAGIC_CODE_V1
    from sluice.store.batch_encoder import BatchBody, bulk_stored_records, record_sizes, stored_records
    data = b"".join(batch_codec.encode_batch_record(b, p, f) for b, p, f in records)
    body = BatchBody(data, batch_codec.scan_batch_columns(data))
    addr, port = host_to_bytes("10.0.0.7:4321")
    header = RECORD_HEADER.pack(0, MESSAGE_MAGIC_CODE_V1, 0, 3, 0, 0, 0, 0, 1234, addr, port, 0, addr, port, 2, 0, 0)
    topic_b = topic.encode()[:255]
    tail = bytes([len(topic_b)]) + topic_b
    compiled = stored_records(body, header, tail, first_phys, first_qoff, store_ts)
    assert compiled == bulk_stored_records(body, header, tail, first_phys, first_qoff, store_ts)
    assert len(compiled) == int(record_sizes(body.cols, len(tail)).sum())
    stored = decode_records(compiled)
    assert [(m.body, m.flag, m.queue_offset, m.store_timestamp) for m in stored] == \
        [(b, f, first_qoff + i, store_ts) for i, (b, _, f) in enumerate(records)]
    assert [m.commit_log_offset for m in stored][0] == first_phys


@needs_c
def test_c_encode_records_refuse_columns_that_do_not_fit_the_body() -> None:
    one = np.array([0], dtype=np.int64)
    with pytest.raises(ValueError, match="outside"):
        speedups.encode_records(b"abc", one, one, np.array([4], dtype=np.int64), one, bytes(88), b"\x01t", 0, 0, 0)
    with pytest.raises(ValueError, match="properties at 2 lie outside"):
        speedups.encode_records(b"abc", one, np.array([2], dtype=np.int64), np.array([1], dtype=np.int64), one,
                                bytes(88), b"", 0, 0, 0)
    with pytest.raises(ValueError, match="one length"):
        speedups.encode_records(b"abc", one, one, one, np.array([], dtype=np.int64), bytes(88), b"", 0, 0, 0)
    with pytest.raises(ValueError, match="88"):
        speedups.encode_records(b"abc", one, one, one, one, bytes(87), b"", 0, 0, 0)


@needs_c
def test_c_encode_records_take_columns_of_any_alignment() -> None:
    data = batch_codec.encode_batch_record(b"abc", b"K\x01v", 7)
    cols = batch_codec.scan_batch_columns(data)
    raw = bytearray(1 + 8 * 4)
    for i, col in enumerate(cols):
        raw[1 + 8 * i:9 + 8 * i] = col.tobytes()
    view = memoryview(raw)
    unaligned = [view[1 + 8 * i:9 + 8 * i] for i in range(4)]
    assert speedups.encode_records(data, *unaligned, bytes(88), b"\x01t", 5, 6, 7) == \
        speedups.encode_records(data, *cols, bytes(88), b"\x01t", 5, 6, 7)


@needs_c
@SETTINGS
@given(st.lists(st.tuples(st.binary(max_size=12), st.binary(max_size=30) | tricky_props), min_size=1, max_size=6))
def test_c_nul_check_of_the_properties_equals_numpys(records: list[tuple[bytes, bytes]]) -> None:
    from sluice.store.batch_encoder import BatchBody
    data = b"".join(batch_codec.encode_batch_record(b, p) for b, p in records)
    body = BatchBody(data, batch_codec.scan_batch_columns(data))
    assert body.props_have_nul() == body.bulk_props_have_nul() == any(0 in p for _, p in records)


@needs_c
def test_c_nul_check_refuses_spans_outside_the_data() -> None:
    with pytest.raises(ValueError, match="outside"):
        speedups.spans_hold_nul(b"abc", np.array([1], dtype=np.int64), np.array([4], dtype=np.int64))
    with pytest.raises(ValueError, match="one length"):
        speedups.spans_hold_nul(b"abc", np.array([1], dtype=np.int64), np.array([], dtype=np.int64))
    assert speedups.spans_hold_nul(b"a\0c", np.array([0, 2], dtype=np.int64), np.array([1, 3], dtype=np.int64)) \
        is False


@needs_c
def test_c_index_put_refuses_entries_or_slots_outside_the_file_and_writes_nothing() -> None:
    from sluice.store.index_file import index_file_size
    buf = bytearray(index_file_size(4, 8))  # entries 0 .. 7 after 4 slots
    one = np.array([5], dtype=np.int64)
    base = 40 + 4 * 4
    with pytest.raises(ValueError, match="do not fit"):
        speedups.index_put_many(buf, 4, base, 8, one, one, 0)  # entry 8 of 8
    with pytest.raises(ValueError, match="do not fit"):
        speedups.index_put_many(buf, 5, base, 1, one, one, 0)  # a fifth slot over the entries
    with pytest.raises(ValueError, match="do not fit"):
        speedups.index_put_many(buf, 2**62, base, 1, one, one, 0)  # slots past any buffer (no overflow)
    with pytest.raises(ValueError, match="one length"):
        speedups.index_put_many(buf, 4, base, 1, one, np.array([], dtype=np.int64), 0)
    assert buf == bytearray(len(buf))
    assert speedups.index_put_many(buf, 4, base, 7, one, one, 0) == 1  # the last entry fits


@needs_c
@SETTINGS
@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x00\x01\x02"), max_size=40) |
                st.text("0123456789ABCDEF", min_size=32, max_size=32), min_size=1, max_size=8),
       st.text(min_size=1, max_size=20))
def test_c_index_hashes_of_property_values_equal_java_string_hashes(values: list[str], topic: str) -> None:
    from sluice.common.hashing import index_key_hash, java_string_hash
    from sluice.store.batch_encoder import BatchBody, _prefixed_hashes, bulk_prefixed_hashes
    data = b"".join(batch_codec.encode_batch_record(b"x", f"UNIQ_KEY\x01{v}".encode()) for v in values)
    body = BatchBody(data, batch_codec.scan_batch_columns(data))
    spans = body.property_spans("UNIQ_KEY")
    prefix = topic + "#"
    want = [index_key_hash(prefix + v) for v in values]
    assert _prefixed_hashes(body, prefix, spans).tolist() == bulk_prefixed_hashes(body, prefix, spans).tolist() == want
    compiled = speedups.prefixed_index_hashes(data, spans.start, spans.end, java_string_hash(prefix) & 0xFFFFFFFF)
    if all(v.isascii() for v in values):  # (the compiled hash answers, not the Python one behind it)
        assert compiled is not None and np.frombuffer(compiled, dtype=np.int64).tolist() == want
    else:
        assert compiled is None


@needs_c
def test_c_index_hashes_leave_values_beyond_ascii_to_python_and_refuse_spans_outside_the_data() -> None:
    one, two = np.array([0], dtype=np.int64), np.array([2], dtype=np.int64)
    assert speedups.prefixed_index_hashes("é".encode(), one, two, 0) is None
    assert np.frombuffer(speedups.prefixed_index_hashes(b"ab", one, two, 0), dtype=np.int64).tolist() == [3105]
    # (its String.hashCode is Integer.MIN_VALUE, whose absolute value RocketMQ's IndexFile takes as 0)
    assert np.frombuffer(speedups.prefixed_index_hashes(b"polygenelubricants", one, np.array([18], dtype=np.int64),
                                                        0), dtype=np.int64).tolist() == [0]
    from sluice.common.hashing import index_key_hash, java_string_hash
    seed = java_string_hash("polygene") & 0xFFFFFFFF  # the same key as a prefix and a value
    assert np.frombuffer(speedups.prefixed_index_hashes(b"lubricants", one, np.array([10], dtype=np.int64), seed),
                         dtype=np.int64).tolist() == [0] == [index_key_hash("polygenelubricants")]
    with pytest.raises(ValueError, match="outside"):
        speedups.prefixed_index_hashes(b"a", one, two, 0)


@needs_c
def test_c_property_spans_refuse_spans_outside_the_data_and_an_empty_marker() -> None:
    with pytest.raises(ValueError, match="outside"):
        speedups.property_spans(b"abc", np.array([1], dtype=np.int64), np.array([4], dtype=np.int64), b"T\x01")
    with pytest.raises(ValueError, match="one length"):
        speedups.property_spans(b"abc", np.array([1], dtype=np.int64), np.array([], dtype=np.int64), b"T\x01")
    with pytest.raises(ValueError, match="marker is empty"):
        speedups.property_spans(b"abc", np.array([0], dtype=np.int64), np.array([3], dtype=np.int64), b"")


@needs_c
@SETTINGS
@given(st.binary(max_size=100), st.binary(max_size=100) | st.just(b"p" * 32768),
       int32 | st.integers(-(2**40), 2**40), st.booleans())
def test_c_encode_batch_record_equals_python(body: bytes, properties: bytes, flag: int, as_bytearray: bool) -> None:
    if as_bytearray:
        body = bytearray(body)  # type: ignore[assignment]
    assert outcome(speedups.encode_batch_record, body, properties, flag) == \
        outcome(batch_codec.py_encode_batch_record, body, properties, flag)
    assert outcome(lambda: speedups.encode_batch_record(body, properties, flag=flag)) == \
        outcome(batch_codec.py_encode_batch_record, body, properties, flag)


@needs_c
def test_c_codecs_are_the_ones_in_use() -> None:
    assert message_codec.decode_records is message_codec._c_decode_records
    assert message_codec.check_record is speedups.check_record
    assert batch_codec.scan_batch_columns is batch_codec.c_scan_batch_columns
    assert batch_codec.encode_batch_record is speedups.encode_batch_record


def test_speedups_are_built_where_required() -> None:
    # CI sets SLUICE_REQUIRE_EXTENSIONS=1: a broken build must not pass as the pure-Python fallback.
    if os.environ.get("SLUICE_REQUIRE_EXTENSIONS") == "1" and not os.environ.get(NO_EXTENSIONS_ENV):
        assert speedups is not None


@pytest.mark.parametrize("value", ["1", "true", "Yes"])
def test_no_extensions_environment_selects_the_python_codecs(value: str) -> None:
    code = ("from sluice.common import message_codec as m, batch_codec as b; from sluice.common.speedups import "
            "speedups; print(speedups is None, m.decode_records is m.py_decode_records, "
            "b.scan_batch_columns is b.py_scan_batch_columns)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, NO_EXTENSIONS_ENV: value},
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split() == ["True", "True", "True"]


@needs_c
@SETTINGS
@given(st.lists(st.integers(0, 2**42), min_size=1, max_size=6), st.integers(0, 0xFFFF), st.integers(0, 70_000))
def test_c_uniq_id_clock_equals_python(times: list[int], counter: int, many: int) -> None:
    from sluice.client.message_id import MessageIdGenerator

    c = MessageIdGenerator(ip="10.0.0.7", pid=4321, salt=99)
    py = MessageIdGenerator(ip="10.0.0.7", pid=4321, salt=99)
    py._clock = None
    c._clock.counter = py._counter = counter
    assert [c.create(t) for t in times] == [py.create(t) for t in times]
    a, b = c.create_many(many % 300), py.create_many(many % 300)
    assert len(a) == len(b) and [i[-4:] for i in a] == [i[-4:] for i in b] and {i[:20] for i in a + b} <= {c.prefix}
    assert c.create(times[0])[-4:] == py.create(times[0])[-4:]


@st.composite
def span_writes(draw: st.DrawFn) -> tuple[int, list[tuple[int, bytes]], bytes, bytes, int]:
    """A buffer size, spans, positions and values: mostly within the buffer, sometimes past it or negative."""
    size = draw(st.integers(0, 64))
    width = draw(st.integers(1, 8))
    spans = draw(st.lists(st.tuples(st.integers(-2, size + 2), st.binary(max_size=16)), max_size=4))
    count = draw(st.integers(0, 4))
    positions = draw(st.lists(st.integers(-2, max(size - width, 0) + 2), min_size=count, max_size=count))
    values = draw(st.binary(min_size=count * width, max_size=count * width))
    return size, spans, np.array(positions, dtype=np.int64).tobytes(), values, width


@needs_c
@SETTINGS
@given(span_writes())
def test_store_spans_writes_and_refuses_what_its_twin_does(case: tuple[int, list[tuple[int, bytes]], bytes, bytes,
                                                                         int]) -> None:
    from sluice.store.mapped_file import py_store_spans

    size, spans, positions, values, width = case
    outcomes = []
    for fn in (speedups.store_spans, py_store_spans):  # type: ignore[union-attr]
        buf = bytearray(size)
        try:
            fn(memoryview(buf), spans, positions, values, width)
            outcomes.append(("ok", bytes(buf)))
        except ValueError:
            outcomes.append(("refused", bytes(buf)))  # (nothing written when a span does not fit)
    assert outcomes[0] == outcomes[1]
    if outcomes[0][0] == "ok" and not positions and len({o for o, _ in spans}) == len(spans) == 1:
        (off, data), = spans
        assert outcomes[0][1][off:off + len(data)] == data
