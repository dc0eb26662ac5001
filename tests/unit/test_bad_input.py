"""Bad input gets a clear status and writes nothing."""

from __future__ import annotations

import pytest

from sluice.common.config import MessageStoreConfig
from sluice.common.errors import StoreLockedError
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
    r = store.put_messages([msg(), msg(topic="bad topic")])
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
