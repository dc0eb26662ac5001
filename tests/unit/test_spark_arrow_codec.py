"""Bulk record ↔ Arrow conversion of the Spark source and sink agrees with the per-message codecs."""

from __future__ import annotations

import itertools
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow", reason="needs the sluice-mq[spark] extra")
np = pytest.importorskip("numpy")

from sluice.client.message import RESERVED_PROPERTY_KEYS  # noqa: E402
from sluice.common.batch_codec import decode_batch  # noqa: E402
from sluice.common.errors import MessageFormatError  # noqa: E402
from sluice.common.message_codec import decode_records, encode_record  # noqa: E402
from sluice.common.properties import encode_properties  # noqa: E402
from sluice.common.sysflag import COMPRESSED_FLAG  # noqa: E402
from sluice.spark.arrow_codec import (  # noqa: E402
    WRITE_KEY_PROPERTY,
    RowError,
    arrow_schema,
    chunk_records,
    encode_rows,
    record_starts,
    records_to_batch,
    split_by_topic,
    write_keys,
)

prop_text = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), max_size=20)
user_props = st.dictionaries(prop_text.filter(lambda s: bool(s) and s not in RESERVED_PROPERTY_KEYS), prop_text,
                             max_size=4)
record = st.fixed_dictionaries({
    "body": st.binary(max_size=300),
    "props": user_props,
    "tags": st.none() | st.text("abcxyz", min_size=1, max_size=5),
    "keys": st.none() | st.text("k12 ", min_size=1, max_size=8),
    "uniq": st.none() | st.text("0123456789ABCDEF", min_size=32, max_size=32),
    "born": st.integers(0, 2**42), "stored": st.integers(0, 2**42), "phys": st.integers(0, 2**50),
})


def _encode(i: int, r: dict) -> bytes:
    props = {}
    if r["tags"]:
        props["TAGS"] = r["tags"]
    if r["keys"]:
        props["KEYS"] = r["keys"]
    props["WAIT"] = "true"
    if r["uniq"]:
        props["UNIQ_KEY"] = r["uniq"]
    props.update(r["props"])
    return encode_record(topic=b"orders", body=r["body"], properties=encode_properties(props), queue_id=2,
                         queue_offset=1000 + i, physical_offset=r["phys"], born_timestamp=r["born"],
                         store_timestamp=r["stored"], store_host="10.0.0.7:10911")


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=30))
def test_bulk_decode_gives_the_rows_the_per_message_decoder_gives(records):
    buf = b"".join(_encode(i, r) for i, r in enumerate(records))
    batch = records_to_batch(buf, "orders", "broker-a", 2, include_properties=True).batch
    rows = batch.to_pylist()
    ref = decode_records(buf)
    micros = {c: batch.column(c).cast(pa.int64()).to_pylist() for c in ("born_timestamp", "store_timestamp")}
    assert micros["born_timestamp"] == [m.born_timestamp * 1000 for m in ref]
    assert micros["store_timestamp"] == [m.store_timestamp * 1000 for m in ref]
    assert len(rows) == len(ref)
    for row, m in zip(rows, ref, strict=True):
        assert (row["topic"], row["broker"], row["queue_id"], row["queue_offset"]) == \
            ("orders", "broker-a", 2, m.queue_offset)
        assert row["value"] == m.body
        assert row["msg_id"] == m.msg_id
        assert row["tags"] == m.tags
        assert row["keys"] == m.properties.get("KEYS")
        assert dict(row["properties"]) == {k: v for k, v in m.properties.items() if k not in RESERVED_PROPERTY_KEYS}


def test_decoded_batches_have_the_exact_arrow_schema_spark_checks():
    buf = _encode(0, {"body": b"x", "props": {}, "tags": None, "keys": None, "uniq": None, "born": 1, "stored": 2,
                      "phys": 3})
    assert records_to_batch(buf, "orders", "b", 2, False).batch.schema == arrow_schema(False)
    assert records_to_batch(buf, "orders", "b", 2, True).batch.schema == arrow_schema(True)
    assert records_to_batch(b"", "orders", "b", 2, False).batch.num_rows == 0


def test_compressed_bodies_are_inflated():
    body = b"hello " * 1000
    buf = encode_record(topic=b"t", body=zlib.compress(body), properties=b"", sys_flag=COMPRESSED_FLAG)
    assert records_to_batch(buf, "t", "b", 0, False).batch.column("value").to_pylist() == [body]


def test_truncated_or_corrupt_records_are_refused():
    buf = _encode(0, {"body": b"x" * 10, "props": {}, "tags": None, "keys": None, "uniq": None, "born": 1,
                      "stored": 2, "phys": 3})
    with pytest.raises(MessageFormatError):
        records_to_batch(buf[:-3], "orders", "b", 2, False)
    with pytest.raises(MessageFormatError):
        records_to_batch(buf[:4] + b"\0\0\0\0" + buf[8:], "orders", "b", 2, False)


def test_encoded_rows_decode_to_the_messages_the_sink_means():
    batch = pa.RecordBatch.from_pydict({
        "value": ["v0", "v1", "v2"],
        "keys": ["k1 k2", None, ""],
        "tags": ["paid", None, "x"],
        "properties": pa.array([[("region", "eu")], None, []], pa.map_(pa.string(), pa.string())),
    })
    records = encode_rows(batch, write_keys("q-1:7:3", np.arange(3) + 10))
    chunks = list(chunk_records(records, "orders", max_rows=1000, max_bytes=1 << 20))
    assert len(chunks) == 1 and chunks[0].count == 3
    items = decode_batch(chunks[0].body)
    assert [i.body for i in items] == [b"v0", b"v1", b"v2"]
    assert items[0].properties == {"KEYS": "k1 k2", "TAGS": "paid", "region": "eu", WRITE_KEY_PROPERTY: "q-1:7:3:10"}
    assert items[1].properties == {WRITE_KEY_PROPERTY: "q-1:7:3:11"}
    assert items[2].properties == {"TAGS": "x", WRITE_KEY_PROPERTY: "q-1:7:3:12"}


def test_chunks_respect_row_and_byte_limits_and_keep_every_row_once():
    n = 2500
    batch = pa.RecordBatch.from_pydict({"value": [b"x" * (i % 50 + 1) for i in range(n)]})
    records = encode_rows(batch, write_keys("s:0:0", np.arange(n)))
    chunks = list(chunk_records(records, "t", max_rows=1000, max_bytes=20_000))
    assert all(c.count <= 1000 and len(c.body) <= 20_000 for c in chunks)
    bodies = [i.body for c in chunks for i in decode_batch(c.body)]
    assert bodies == batch.column("value").to_pylist()


@pytest.mark.parametrize("columns,problem", [
    ({"value": [b""]}, "'value'"),
    ({"value": [None]}, "'value'"),
    ({"value": [b"x"], "tags": ["a|b"]}, "'tags'"),
    ({"value": [b"x"], "keys": ["a\x01b"]}, "'keys'"),
    ({"value": [b"x"], "properties": pa.array([[("TAGS", "x")]], pa.map_(pa.string(), pa.string()))},
     "reserved property name 'TAGS'"),
])
def test_rows_that_cannot_be_messages_are_refused_naming_the_column(columns, problem):
    with pytest.raises(RowError, match=problem):
        encode_rows(pa.RecordBatch.from_pydict(columns), write_keys("s:0:0", np.arange(1)))


def test_rows_are_split_by_their_topic_column_unless_the_option_names_one():
    batch = pa.RecordBatch.from_pydict({"value": [b"a", b"b", b"c"], "topic": ["t2", "t1", "t2"]})
    parts = split_by_topic(batch, None)
    assert [(t, rows.column("value").to_pylist(), pos.tolist()) for t, rows, pos in parts] == \
        [("t1", [b"b"], [1]), ("t2", [b"a", b"c"], [0, 2])]
    assert [t for t, _, _ in split_by_topic(batch, "fixed")] == ["fixed"]


@pytest.mark.parametrize("bodies", [[b"x" * 10] * 5, [b"x" * 10, b"y" * 112, b"z" * 10], [b"a"],
                                    [b"x" * 10, b"y" * 10, b"z" * 11]])
def test_record_starts_follow_each_record_size_whether_or_not_the_records_are_of_one_size(bodies):
    records = [encode_record(topic=b"T", body=b, properties=b"") for b in bodies]
    expected = list(itertools.accumulate((len(r) for r in records[:-1]), initial=0))
    assert record_starts(b"".join(records)).tolist() == expected
    with pytest.raises(MessageFormatError):
        record_starts(b"".join(records) + records[0][:50])


def test_a_negative_properties_length_is_a_format_error():
    record = bytearray(encode_record(topic=b"T", body=b"body", properties=b"a\x01b"))
    props_len_at = len(record) - 3 - 2
    record[props_len_at:props_len_at + 2] = (-1).to_bytes(2, "big", signed=True)
    with pytest.raises(MessageFormatError):
        records_to_batch(bytes(record), "T", "b", 0, include_properties=False)
