"""A batch body is stored record by record without being decoded, and reads back exactly as if each of
its messages had been put one by one."""

from __future__ import annotations

import pytest

from sluice.common.batch_codec import BatchItem, encode_batch, scan_batch
from sluice.common.hashing import tag_hash_code
from sluice.common.message import MessageExtBrokerInner
from sluice.common.properties import decode_properties, property_value
from sluice.store import MessageStore, PutMessageStatus, RawBatch

from .helpers import read_queue


def raw(topic: str, items: list[BatchItem], queue_id: int = 0, extra: dict[str, str] | None = None) -> RawBatch:
    data = encode_batch(items)
    return RawBatch(topic, queue_id, data, scan_batch(data), 0, 1_700_000_000_000, "10.0.0.1:5000", None, 0,
                    extra or {})


def items(n: int, start: int = 0) -> list[BatchItem]:
    return [BatchItem(f"body-{i}".encode() * (i % 5 + 1),
                      {"TAGS": f"t{i % 3}", "KEYS": f"k{i} shared", "UNIQ_KEY": f"{i:032X}", "user": "v"}, i)
            for i in range(start, start + n)]


def test_raw_batch_reads_back_like_messages_put_one_by_one(store: MessageStore, tmp_path):
    batch = items(40)
    r = store.put_raw_batch(raw("Raw", batch, queue_id=2))
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
    store.put_raw_batch(raw("Raw", items(10)))
    store.put_raw_batch(raw("Raw", items(10, start=10)))
    assert store.get_max_offset_in_queue("Raw", 0) == 20
    r = store.get_messages("g", "Raw", 0, 0, 32, tag_codes={tag_hash_code("t1")})
    assert r.message_count == len([i for i in range(20) if i % 3 == 1])
    assert len(store.query_message("Raw", f"{13:032X}").messages) == 1
    assert len(store.query_message("Raw", "k7").messages) == 1
    assert len(store.query_message("Raw", "shared").messages) == 20


def test_header_properties_are_added_only_where_a_message_lacks_them(store: MessageStore):
    batch = [BatchItem(b"a", {"WAIT": "false"}), BatchItem(b"b", {}), BatchItem(b"c", {"x": "1"})]
    assert store.put_raw_batch(raw("Raw", batch, extra={"WAIT": "true", "y": "2"})).ok
    got = read_queue(store, "Raw", 0)
    assert [m.properties for m in got] == [{"WAIT": "false", "y": "2"}, {"WAIT": "true", "y": "2"},
                                           {"x": "1", "WAIT": "true", "y": "2"}]


@pytest.mark.parametrize(("props", "problem"), [({"DELAY": "3"}, "delay level"), ({"a": "b\0c"}, "NUL")])
def test_a_bad_message_rejects_the_whole_batch_and_stores_nothing(store: MessageStore, props, problem):
    batch = [BatchItem(b"ok", {}), BatchItem(b"bad", props)]
    r = store.put_raw_batch(raw("Raw", batch))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and problem in r.remark
    assert store.get_max_offset_in_queue("Raw", 0) == 0 and store.get_max_phy_offset() == 0


def test_batches_roll_over_segments_without_splitting_a_record(store: MessageStore):
    size = store.config.mapped_file_size_commit_log
    n = 0
    while store.get_max_phy_offset() < 2 * size:
        assert store.put_raw_batch(raw("Raw", items(50, start=n))).ok
        n += 50
    got = read_queue(store, "Raw", 0)
    assert [m.queue_offset for m in got] == list(range(n))
    assert len(store.commit_log.queue.files) >= 3


@pytest.mark.parametrize("data", [b"", b"A\x01x", b"TAGS\x01a\x02B\x01TAGS\x01no", b"x\x01TAGS\x01y\x02TAGS\x01z",
                                  b"TAGS\x01first\x02TAGS\x01last", b"KTAGS\x01no\x02", b"TAGS\x01"])
def test_property_value_agrees_with_decoding_everything(data):
    assert property_value(data, "TAGS") == decode_properties(data).get("TAGS")
