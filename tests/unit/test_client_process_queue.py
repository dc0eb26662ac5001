"""ProcessQueue: the cache of pulled messages and the offset a consumer may commit."""

from __future__ import annotations

import random
import threading

from hypothesis import given
from hypothesis import strategies as st

from sluice.client.process_queue import ProcessQueue
from sluice.common.message import MessageExt


def _msg(offset: int, body: bytes = b"xx", props: dict[str, str] | None = None) -> MessageExt:
    return MessageExt(topic="T", body=body, queue_id=0, flag=0, queue_offset=offset, commit_log_offset=offset * 100,
                      sys_flag=0, born_timestamp=0, born_host="127.0.0.1:1", store_timestamp=0,
                      store_host="127.0.0.1:10911", reconsume_times=0, prepared_transaction_offset=0,
                      properties=props or {}, store_size=100, body_crc=0)


def _msgs(offsets) -> list[MessageExt]:
    return [_msg(o) for o in offsets]


def test_nothing_ever_put_commits_minus_one():
    pq = ProcessQueue()
    assert pq.remove_messages([_msg(3)]) == -1
    assert pq.commit_offset() == -1 and pq.msg_count == 0


def test_commit_offset_is_the_smallest_unfinished_message():
    pq = ProcessQueue()
    batch = _msgs(range(10, 15))
    pq.put_messages(batch)
    assert pq.remove_messages([batch[2], batch[4]]) == 10
    assert pq.remove_messages([batch[0]]) == 11
    assert pq.remove_messages([batch[1]]) == 13
    assert pq.remove_messages([batch[3]]) == 15
    assert pq.msg_count == 0 and pq.msg_size == 0


def test_empty_cache_commits_one_past_the_largest_offset_ever_put():
    pq = ProcessQueue()
    pq.put_messages(_msgs([5, 9, 7]))
    pq.remove_messages(_msgs([5, 7, 9]))
    assert pq.remove_messages([]) == 10


def test_counters_track_messages_and_body_bytes():
    pq = ProcessQueue()
    pq.put_messages([_msg(1, b"a"), _msg(2, b"bbb")])
    assert (pq.msg_count, pq.msg_size) == (2, 4)
    pq.put_messages([_msg(2, b"bbbbb")])  # pulled again: replaced, not counted twice
    assert (pq.msg_count, pq.msg_size) == (2, 6)
    pq.remove_messages([_msg(1)])
    assert (pq.msg_count, pq.msg_size) == (1, 5)
    pq.remove_messages([_msg(1)])  # twice is harmless
    assert (pq.msg_count, pq.msg_size) == (1, 5)


def test_max_span_is_largest_minus_smallest_cached_offset():
    pq = ProcessQueue()
    assert pq.max_span == 0
    pq.put_messages(_msgs([100, 101, 2100]))
    assert pq.max_span == 2000
    pq.remove_messages(_msgs([100]))
    assert pq.max_span == 1999


def test_out_of_order_puts_keep_offsets_sorted():
    pq = ProcessQueue()
    pq.put_messages(_msgs([5, 1, 3]))
    pq.put_messages(_msgs([2, 4]))
    assert [m.queue_offset for m in pq.take_messages(10)] == [1, 2, 3, 4, 5]


def test_put_asks_for_one_dispatch_until_the_queue_runs_dry():
    pq = ProcessQueue()
    assert pq.put_messages(_msgs([0])) is True
    assert pq.put_messages(_msgs([1])) is False
    assert len(pq.take_messages(5)) == 2
    assert pq.take_messages(5) == []  # idle now
    assert pq.put_messages(_msgs([2])) is True
    assert pq.put_messages([]) is False


def test_put_of_nothing_does_not_ask_for_dispatch():
    assert ProcessQueue().put_messages([]) is False


def test_max_offset_property_sets_messages_left_in_broker():
    pq = ProcessQueue()
    pq.put_messages([_msg(0), _msg(1, props={"MAX_OFFSET": "50"})])
    assert pq.msg_acc_cnt == 49


def test_orderly_take_commit_returns_one_past_the_last_taken():
    pq = ProcessQueue()
    pq.put_messages(_msgs(range(10)))
    taken = pq.take_messages(3)
    assert [m.queue_offset for m in taken] == [0, 1, 2]
    assert pq.msg_count == 10  # taken messages still count until committed
    assert not pq.contains_message(taken[0])
    assert pq.commit() == 3
    assert pq.msg_count == 7 and pq.msg_size == 14
    assert pq.commit() == -1


def test_orderly_consume_again_puts_taken_messages_back_in_order():
    pq = ProcessQueue()
    pq.put_messages(_msgs(range(5)))
    taken = pq.take_messages(2)
    pq.make_message_to_consume_again(taken)
    assert pq.msg_count == 5
    assert [m.queue_offset for m in pq.take_messages(3)] == [0, 1, 2]
    pq.make_message_to_consume_again([_msg(4)])  # never taken: ignored
    assert pq.commit() == 3
    assert [m.queue_offset for m in pq.take_messages(10)] == [3, 4]


def test_repulled_message_being_consumed_is_not_cached_twice():
    pq = ProcessQueue()
    pq.put_messages(_msgs([0, 1]))
    pq.take_messages(1)
    pq.put_messages(_msgs([0]))
    assert pq.msg_count == 2
    assert pq.commit() == 1


def test_rollback_returns_every_taken_message():
    pq = ProcessQueue()
    pq.put_messages(_msgs(range(4)))
    pq.take_messages(3)
    pq.rollback()
    assert pq.commit() == -1
    assert [m.queue_offset for m in pq.take_messages(10)] == [0, 1, 2, 3]


def test_lock_expires_30_seconds_after_the_last_lock():
    pq = ProcessQueue(now=100.0)
    assert not pq.is_lock_expired(now=130.0)
    assert pq.is_lock_expired(now=130.5)
    pq.last_lock_timestamp = 125.0
    assert not pq.is_lock_expired(now=130.5)


def test_pull_expires_after_120_seconds():
    pq = ProcessQueue(now=0.0)
    assert not pq.is_pull_expired(now=120.0) and pq.is_pull_expired(now=121.0)


def test_remove_and_take_update_last_consume_timestamp():
    pq = ProcessQueue(now=0.0)
    pq.remove_messages([], now=5.0)
    assert pq.last_consume_timestamp == 5.0
    pq.take_messages(1, now=7.0)
    assert pq.last_consume_timestamp == 7.0


def test_clear_forgets_everything():
    pq = ProcessQueue()
    pq.put_messages(_msgs([1, 2]))
    pq.take_messages(1)
    pq.clear()
    assert (pq.msg_count, pq.msg_size, pq.max_span) == (0, 0, 0)
    assert pq.remove_messages([]) == -1


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=200, unique=True), st.randoms(use_true_random=False),
       st.integers(1, 32))
def test_commit_offset_is_smallest_unfinished_under_any_remove_order(offsets, rnd, chunk):
    offsets.sort()
    pq = ProcessQueue()
    for i in range(0, len(offsets), 32):  # pulled in batches of up to 32
        pq.put_messages(_msgs(offsets[i:i + 32]))
    pending = set(offsets)
    order = offsets[:]
    rnd.shuffle(order)
    for i in range(0, len(order), chunk):
        done = order[i:i + chunk]
        pending -= set(done)
        expected = min(pending) if pending else max(offsets) + 1
        assert pq.remove_messages(_msgs(done)) == expected
        assert pq.msg_count == len(pending)
        assert pq.msg_size == 2 * len(pending)


def test_concurrent_removals_from_many_threads_leave_a_consistent_cache():
    pq = ProcessQueue()
    offsets = list(range(4000))
    for i in range(0, len(offsets), 32):
        pq.put_messages(_msgs(offsets[i:i + 32]))
    shuffled = offsets[:]
    random.Random(1).shuffle(shuffled)
    chunks = [shuffled[i::8] for i in range(8)]
    results: list[int] = []

    def work(part: list[int]) -> None:
        for j in range(0, len(part), 16):
            results.append(pq.remove_messages(_msgs(part[j:j + 16])))

    threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pq.msg_count == 0 and pq.msg_size == 0
    assert pq.commit_offset() == 4000 and max(results) == 4000

