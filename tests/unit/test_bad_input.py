"""Bad input gets a clear status and writes nothing."""

from __future__ import annotations

import struct

import pytest

from sluice.common.config import MessageStoreConfig
from sluice.common.errors import MessageFormatError, StoreLockedError
from sluice.common.message_codec import decode_records, encode_record
from sluice.remoting.codec import decode_frame, encode_command_bytes
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import BadRequestError
from sluice.remoting.headers import SendMessageRequestHeader
from sluice.store import MessageStore, PutMessageStatus

from .helpers import msg


def test_oversized_message_is_illegal_and_not_written(store_config: MessageStoreConfig):
    with MessageStore(store_config.replace(max_message_size=1024)) as store:
        r = store.put_message(msg(body=b"x" * 1025))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "max_message_size" in r.remark
        assert store.get_max_phy_offset() == 0 and store.consume_queues == {}
        assert store.put_message(msg(body=b"x" * 1024)).ok


@pytest.mark.parametrize("topic", ["bad topic", "a/b", "", "x" * 128, "ü"])
def test_invalid_topic_is_illegal(store: MessageStore, topic: str):
    r = store.put_message(msg(topic=topic))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "topic" in r.remark
    assert store.get_max_phy_offset() == 0


def test_oversized_properties_are_refused(store: MessageStore):
    m = msg()
    m.properties["big"] = "v" * 40_000
    r = store.put_message(m)
    assert r.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED and "32767" in r.remark
    assert store.get_max_phy_offset() == 0


def test_one_bad_message_fails_the_whole_batch(store: MessageStore):
    r = store.put([msg(), msg(topic="bad topic")])
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.get_max_phy_offset() == 0


def test_put_after_shutdown_is_refused(store_config: MessageStoreConfig):
    store = MessageStore(store_config).start()
    store.shutdown()
    assert store.put_message(msg()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_store_directory_is_locked_against_a_second_open(store: MessageStore, store_config: MessageStoreConfig):
    with pytest.raises(StoreLockedError, match="in use"):
        MessageStore(store_config).start()


def test_nul_in_properties_is_illegal(store: MessageStore):
    m = msg()
    m.properties["k"] = "a\0b"
    r = store.put_message(m)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "NUL" in r.remark
    assert store.get_max_phy_offset() == 0


def test_an_index_geometry_that_holds_no_key_is_refused_at_configuration(tmp_path):
    with pytest.raises(ValueError, match="max_index_num: an integer of at least 2 is allowed, got 1"):
        MessageStore(MessageStoreConfig(store_path_root_dir=str(tmp_path), max_index_num=1))


def test_a_pull_body_with_a_zero_record_size_is_refused_not_looped_on():
    record = bytearray(encode_record(topic=b"T", body=b"x", properties=b""))
    record[0:4] = (0).to_bytes(4, "big")
    record[84:88] = (-91).to_bytes(4, "big", signed=True)
    with pytest.raises(MessageFormatError):
        decode_records(bytes(record))


def test_a_v2_send_header_mixing_long_names_in_reads_them():
    h = SendMessageRequestHeader.decode_v2({"a": "g", "b": "T", "e": "1", "defaultTopicQueueNums": "16"})
    assert (h.topic, h.queue_id, h.default_topic_queue_nums, h.producer_group) == ("T", 1, 16, "g")
    with pytest.raises(BadRequestError, match="'e' \\(queueId\\)"):
        SendMessageRequestHeader.decode_v2({"b": "T", "e": "x"})


def test_headers_json_reads_but_orjson_does_not_still_decode():
    for header in (b'\xef\xbb\xbf{"code":10,"opaque":1}', b'{"code":10,"remark":"\\ud800","opaque":2}'):
        frame = struct.pack(">I", len(header)) + header
        assert decode_frame(frame).code == 10
    odd = RemotingCommand(10, {}, remark="\ud800 lone")
    assert decode_frame(encode_command_bytes(odd)[4:]).remark == "\ud800 lone"
