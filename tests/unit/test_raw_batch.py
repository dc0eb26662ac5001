"""A batch body is stored record by record without being decoded, and reads back exactly as if each of
its messages had been put one by one."""

from __future__ import annotations

import asyncio
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.common.batch_codec import BatchItem, encode_batch, scan_batch_columns
from sluice.common.hashing import tag_hash_code
from sluice.common.message import MessageExtBrokerInner
from sluice.common.message_codec import decode_records
from sluice.common.properties import decode_properties, property_value
from sluice.store import MessageStore, PutMessageStatus, RawBatch
from sluice.store.index_file import INDEX_ENTRY_DTYPE, INDEX_HEADER_SIZE

from .helpers import read_queue


def raw(topic: str, items: list[BatchItem], queue_id: int = 0, extra: dict[str, str] | None = None) -> RawBatch:
    data = encode_batch(items)
    return RawBatch(topic, queue_id, data, scan_batch_columns(data), 0, 1_700_000_000_000, "10.0.0.1:5000", None, 0,
                    extra or {})


def items(n: int, start: int = 0) -> list[BatchItem]:
    return [BatchItem(f"body-{i}".encode() * (i % 5 + 1),
                      {"TAGS": f"t{i % 3}", "KEYS": f"k{i} shared", "UNIQ_KEY": f"{i:032X}", "user": "v"}, i)
            for i in range(start, start + n)]


def test_raw_batch_reads_back_like_messages_put_one_by_one(store: MessageStore, tmp_path):
    batch = items(40)
    r = store.put(raw("Raw", batch, queue_id=2))
    assert r.ok and r.msg_num == 40 and r.queue_offset == 0 and len(r.phys_offsets) == 40
    with MessageStore(store_path_root_dir=str(tmp_path / "oracle")).start() as oracle:
        for it in batch:
            assert oracle.put_message(MessageExtBrokerInner("Raw", it.body, 2, it.flag, it.properties, 0,
                                                            1_700_000_000_000, "10.0.0.1:5000")).ok
        expected = read_queue(oracle, "Raw", 2)
    got = read_queue(store, "Raw", 2)
    assert len(got) == 40
    for g, e in zip(got, expected, strict=True):
        assert (g.body, g.properties, g.flag, g.queue_offset, g.born_host, g.born_timestamp, g.store_size) == (
            e.body, e.properties, e.flag, e.queue_offset, e.born_host, e.born_timestamp, e.store_size)
    assert [g.commit_log_offset for g in got] == r.phys_offsets


def test_raw_batch_feeds_the_consume_queue_tags_and_the_index(store: MessageStore):
    store.put(raw("Raw", items(10)))
    store.put(raw("Raw", items(10, start=10)))
    assert store.get_max_offset_in_queue("Raw", 0) == 20
    r = store.get_messages("g", "Raw", 0, 0, 32, tag_codes={tag_hash_code("t1")})
    assert r.message_count == len([i for i in range(20) if i % 3 == 1])
    assert len(store.query_message("Raw", f"{13:032X}").messages) == 1
    assert len(store.query_message("Raw", "k7").messages) == 1
    assert len(store.query_message("Raw", "shared").messages) == 20


def test_header_properties_are_added_only_where_a_message_lacks_them(store: MessageStore):
    batch = [BatchItem(b"a", {"WAIT": "false"}), BatchItem(b"b", {}), BatchItem(b"c", {"x": "1"})]
    assert store.put(raw("Raw", batch, extra={"WAIT": "true", "y": "2"})).ok
    got = read_queue(store, "Raw", 0)
    assert [m.properties for m in got] == [{"WAIT": "false", "y": "2"}, {"WAIT": "true", "y": "2"},
                                           {"x": "1", "WAIT": "true", "y": "2"}]


@pytest.mark.parametrize(("props", "problem"), [({"DELAY": "3"}, "delay level"), ({"a": "b\0c"}, "NUL")])
def test_a_bad_message_rejects_the_whole_batch_and_stores_nothing(store: MessageStore, props, problem):
    batch = [BatchItem(b"ok", {}), BatchItem(b"bad", props)]
    r = store.put(raw("Raw", batch))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and problem in r.remark
    assert store.get_max_offset_in_queue("Raw", 0) == 0 and store.get_max_phy_offset() == 0


def test_batches_roll_over_segments_without_splitting_a_record(store: MessageStore):
    size = store.config.mapped_file_size_commit_log
    n = 0
    while store.get_max_phy_offset() < 2 * size:
        assert store.put(raw("Raw", items(50, start=n))).ok
        n += 50
    got = read_queue(store, "Raw", 0)
    assert [m.queue_offset for m in got] == list(range(n))
    assert len(store.commit_log.queue.files) >= 3


@pytest.mark.parametrize("data", [b"", b"A\x01x", b"TAGS\x01a\x02B\x01TAGS\x01no", b"x\x01TAGS\x01y\x02TAGS\x01z",
                                  b"TAGS\x01first\x02TAGS\x01last", b"KTAGS\x01no\x02", b"TAGS\x01"])
def test_property_value_agrees_with_decoding_everything(data):
    assert property_value(data, "TAGS") == decode_properties(data).get("TAGS")


_NAMES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAYX", "XTAGS", "user", "a"])
_TEXT = st.lists(st.sampled_from(["a", "b", " ", "é", "\x01", "TAGS", "KEYS\x01", "UNIQ_KEY", "0F"]),
                 max_size=6).map("".join)
_HEX32 = st.integers(0, 2**128 - 1).map(lambda i: f"{i:032X}")
_BODY = st.lists(st.sampled_from([b"x", b"\x02", b"\x00", b"TAGS\x01t", b"\x02UNIQ_KEY\x01", b"KEYS\x01k"]),
                 max_size=8).map(b"".join)


@st.composite
def _batch_items(draw: st.DrawFn) -> list[BatchItem]:
    out = []
    for _ in range(draw(st.integers(1, 30))):
        props = draw(st.dictionaries(_NAMES, _TEXT, max_size=4))
        if draw(st.booleans()):
            props["UNIQ_KEY"] = draw(_HEX32)
        out.append(BatchItem(draw(_BODY), props, draw(st.integers(0, 7))))
    return out


def _index_tables(store: MessageStore) -> list[tuple[bytes, bytes]]:
    """Each index file's slots and (hash, offset, previous entry) columns: all but the stored times."""
    out = []
    for f in store.index_service.files:
        slots = bytes(f.mf.buf[INDEX_HEADER_SIZE:f._entries_base])
        entries = np.frombuffer(f.mf.buf, INDEX_ENTRY_DTYPE, count=f.index_count, offset=f._entries_base)
        out.append((slots, entries[["hash", "phy", "prev"]].tobytes()))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(_batch_items(), min_size=1, max_size=3))
def test_a_raw_batch_stores_the_same_records_cq_entries_and_index_as_putting_its_messages(batches):
    geometry = {"max_hash_slot_num": 8, "max_index_num": 24}
    with (tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b,
          MessageStore(store_path_root_dir=a, **geometry).start() as raw_store,
          MessageStore(store_path_root_dir=b, **geometry).start() as oracle):
        for n, batch in enumerate(batches):
            raw_batch = RawBatch("Raw", 1, encode_batch(batch), scan_batch_columns(encode_batch(batch)), 0,
                                 1_700_000_000_000 + n, "10.0.0.1:5000", "10.0.0.2:10911", 0, {})
            assert raw_store.put(raw_batch).ok
            assert oracle.put([
                MessageExtBrokerInner("Raw", it.body, 1, it.flag, it.properties, 0, 1_700_000_000_000 + n,
                                      "10.0.0.1:5000", "10.0.0.2:10911") for it in batch]).ok
        for s in (raw_store, oracle):
            s.commit_log.queue.flush()
        got, expected = (decode_records(_log_bytes(s)) for s in (raw_store, oracle))
        assert [m.replace(store_timestamp=0) for m in got] == [m.replace(store_timestamp=0) for m in expected]
        n = sum(map(len, batches))
        assert (raw_store.find_consume_queue("Raw", 1).get_entries(0, n).tobytes()
                == oracle.find_consume_queue("Raw", 1).get_entries(0, n).tobytes())
        assert _index_tables(raw_store) == _index_tables(oracle)


def _log_bytes(store: MessageStore) -> bytes:
    return bytes(store.commit_log.get_data(0, store.get_max_phy_offset()))


def test_bodies_full_of_property_markers_are_not_mistaken_for_properties(store: MessageStore):
    noisy = b"\x02TAGS\x01fake\x02UNIQ_KEY\x01" + b"\x02KEYS\x01k" * 200  # more markers than the bulk search takes
    batch = [BatchItem(noisy, {"TAGS": "real", "UNIQ_KEY": f"{i:032X}"}) for i in range(3)] + [BatchItem(noisy, {})]
    assert store.put(raw("Raw", batch)).ok
    assert store.get_messages("g", "Raw", 0, 0, 32, tag_codes={tag_hash_code("real")}).message_count == 3
    assert store.get_messages("g", "Raw", 0, 0, 32, tag_codes={tag_hash_code("fake")}).message_count == 0
    assert len(store.query_message("Raw", f"{2:032X}").messages) == 1
    assert store.query_message("Raw", "k").messages == []


def _walked_starts(data: bytes) -> list[int]:
    """Record starts found by following each TOTALSIZE (the reference for the uniform-size shortcut)."""
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += int.from_bytes(data[pos:pos + 4], "big", signed=True)
    return starts


@given(sizes=st.lists(st.sampled_from([0, 1, 7, 40]), min_size=1, max_size=12), uniform=st.booleans())
def test_batch_layout_is_the_same_whether_records_share_one_size_or_not(sizes, uniform):
    if uniform:
        sizes = [sizes[0]] * len(sizes)
    data = encode_batch([BatchItem(b"b" * s, {"UNIQ_KEY": f"{i:032X}"}) for i, s in enumerate(sizes)])
    cols = scan_batch_columns(data)
    assert (cols.body_start - 20).tolist() == _walked_starts(data)
    assert (cols.props_len_pos - cols.body_start).tolist() == sizes


def test_records_of_one_size_keep_their_own_layouts_and_mixed_sizes_are_walked():
    # One TOTALSIZE, different layouts inside (40 body bytes and no properties, or the reverse): each
    # record's own lengths are read.
    a = encode_batch([BatchItem(b"x" * 40, {})])
    b = encode_batch([BatchItem(b"", {"k": "v" * 38})])  # same TOTALSIZE as ``a``, other layout inside
    assert len(a) == len(b)
    data = a + b + a
    cols = scan_batch_columns(data)
    assert (cols.props_len_pos - cols.body_start).tolist() == [40, 0, 40]
    odd = encode_batch([BatchItem(b"x" * 40, {}), BatchItem(b"y" * 17, {}), BatchItem(b"z" * 23, {})])
    assert (scan_batch_columns(odd).props_len_pos - scan_batch_columns(odd).body_start).tolist() == [40, 17, 23]


def test_messages_and_raw_batches_in_one_put_are_stored_in_the_order_given_each_with_its_answer(store: MessageStore):
    puts: list = [[MessageExtBrokerInner("Mixed", b"a", 1)], raw("Mixed", items(3), queue_id=1),
                  [MessageExtBrokerInner("bad topic!", b"x", 1)],
                  [MessageExtBrokerInner("Mixed", b"b", 1), MessageExtBrokerInner("Mixed", b"c", 1)],
                  [MessageExtBrokerInner("Mixed", b"d", 1)], raw("Mixed", items(2, start=3), queue_id=1)]
    answers: dict[int, object] = {}

    async def main() -> None:
        all_answered = asyncio.get_running_loop().create_future()

        def done(i: int, r: object) -> None:
            answers[i] = r
            if len(answers) == len(puts):
                all_answered.set_result(None)

        store.put_then(puts, done)
        await asyncio.wait_for(all_answered, 30)

    asyncio.run(main())
    assert sorted(answers) == list(range(6))
    assert answers[2].status is PutMessageStatus.MESSAGE_ILLEGAL  # type: ignore[attr-defined]
    offsets = [answers[i].queue_offset for i in (0, 1, 3, 4, 5)]  # type: ignore[attr-defined]
    assert offsets == [0, 1, 4, 6, 7]
    assert [answers[i].msg_num for i in (0, 1, 3, 4, 5)] == [1, 3, 2, 1, 2]  # type: ignore[attr-defined]
    got = read_queue(store, "Mixed", 1)
    assert [m.body for m in got] == [b"a", *(it.body for it in items(3)), b"b", b"c", b"d",
                                     *(it.body for it in items(2, start=3))]
    assert [m.commit_log_offset for m in got] == sorted(m.commit_log_offset for m in got)
