"""Retention deletes expired segments, and consume-queue / index min offsets follow; disk safety."""

from __future__ import annotations

import os
import time

from sluice.common.config import MessageStoreConfig
from sluice.store import GetMessageStatus, MessageStore, PutMessageStatus

from .helpers import msg, read_queue


def test_expired_segments_are_deleted_and_min_offsets_follow(store_config: MessageStoreConfig):
    cfg = store_config.replace(max_index_num=64)
    with MessageStore(cfg) as store:
        for i in range(900):
            store.put_message(msg(body=bytes(300) + str(i).encode(), queue_id=i % 2, keys=f"k{i}"))
        files = store.commit_log.queue.files
        assert len(files) >= 5
        old = time.time() - 73 * 3600
        for mf in files[:3]:
            os.utime(mf.path, (old, old))
        os.utime(files[-1].path, (old, old))  # the segment being written is never deleted
        boundary = files[3].file_from_offset
        index_files_before = len(store.index_service.files)

        not_the_delete_hour = time.time() + (3600 if time.localtime().tm_hour == 4 else 0)
        assert store.clean_expired_files(now=not_the_delete_hour, manual=False) == 0
        assert store.clean_expired_files() == 3
        assert store.get_min_phy_offset() == boundary
        assert not any(os.path.exists(mf.path) for mf in files[:3])
        assert len(store.index_service.files) < index_files_before
        for q in range(2):
            cq_min = store.get_min_offset_in_queue("T", q)
            assert cq_min > 0
            r = store.get_messages("g", "T", q, 0, 32)
            assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == cq_min
            remaining = read_queue(store, "T", q, cq_min)
            assert remaining[0].commit_log_offset >= boundary
            assert remaining[-1].body.endswith(str(898 + q).encode())
            assert store.get_earliest_message_time("T", q) == remaining[0].store_timestamp
        assert store.query_message("T", "k1").messages == []
        assert store.query_message("T", "k899").messages[0].body.endswith(b"899")
    with MessageStore(cfg) as store:  # the new minimums hold after a restart
        assert store.get_min_phy_offset() == boundary
        assert read_queue(store, "T", 0, store.get_min_offset_in_queue("T", 0))[0].commit_log_offset >= boundary


def test_full_disk_refuses_writes_with_a_clear_status(store_config: MessageStoreConfig):
    with MessageStore(store_config.replace(disk_space_warning_level_ratio=0.0,
                                           disk_space_clean_forcibly_ratio=0.0)) as store:
        r = store.put_message(msg())
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "disk is full" in r.remark
        assert store.get_max_phy_offset() == 0
        store.config.disk_space_warning_level_ratio = 1.0
        store.check_disk_space()
        assert store.put_message(msg()).ok


def test_deleting_unconsumed_messages_to_free_the_disk_is_a_warning_per_topic(store_config: MessageStoreConfig,
                                                                               caplog):
    cfg = store_config.replace(disk_space_clean_forcibly_ratio=0.0, delete_files_batch_max=3,
                               delete_commit_log_files_interval=1)
    with MessageStore(cfg) as store:
        for i in range(600):
            store.put_message(msg(topic="T" if i % 2 else "U", body=bytes(300) + str(i).encode(), queue_id=0))
        store.consumer_offsets.commit_offset("g-slow", "T", 0, 10)
        store.consumer_offsets.commit_offset("g-fast", "T", 0, 200)
        assert store.clean_expired_files() == 3  # nothing expired: the disk is "full" (above the forcibly ratio)
        t_min, u_min = store.get_min_offset_in_queue("T", 0), store.get_min_offset_in_queue("U", 0)
        assert t_min > 10 and u_min > 0
    warnings = {r.getMessage().split(" of topic ")[1].split(" ")[0]: r.getMessage() for r in caplog.records
                if r.levelname == "WARNING" and "before their retention time" in r.getMessage()}
    assert set(warnings) == {"T", "U"}
    assert f"deleted {t_min - 10} message(s) of topic T" in warnings["T"] and "g-fast, g-slow" in warnings["T"]
    assert f"deleted {u_min} message(s) of topic U" in warnings["U"] and "no consumer group" in warnings["U"]


def test_expired_segments_deleted_at_the_delete_hour_are_no_warning(store_config: MessageStoreConfig, caplog):
    with MessageStore(store_config) as store:
        for i in range(600):
            store.put_message(msg(body=bytes(300) + str(i).encode()))
        old = time.time() - 73 * 3600
        for mf in store.commit_log.queue.files[:2]:
            os.utime(mf.path, (old, old))
        assert store.clean_expired_files() == 2
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
