"""Queue allocation strategies (RocketMQ's ``AllocateMessageQueueStrategy``): every queue to exactly one consumer,
RocketMQ's split."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.client.rebalance import (
    STRATEGIES,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueConsistentHash,
    averagely_range,
    get_strategy,
    java_queue_key,
    md5_hash,
)
from sluice.common.structs import MessageQueue


def _queues(n: int, brokers: int = 1) -> list[MessageQueue]:
    return [MessageQueue("T", f"broker-{b}", i) for b in range(brokers) for i in range(n)]


def _cids(m: int) -> list[str]:
    return [f"10.0.0.{i}@{i}" for i in range(m)]


def _split(strategy, mqs, cids):
    return {cid: strategy.allocate("g", cid, mqs, cids) for cid in cids}


def test_averagely_gives_contiguous_ranges_with_the_remainder_to_the_first_consumers():
    mqs, cids = _queues(10), _cids(3)
    got = _split(AllocateMessageQueueAveragely(), mqs, cids)
    assert [[q.queue_id for q in got[c]] for c in cids] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_averagely_with_more_consumers_than_queues_leaves_the_last_consumers_idle():
    mqs, cids = _queues(3), _cids(5)
    got = _split(AllocateMessageQueueAveragely(), mqs, cids)
    assert [[q.queue_id for q in got[c]] for c in cids] == [[0], [1], [2], [], []]


def test_inputs_are_sorted_before_allocating():
    mqs, cids = _queues(4, brokers=2), _cids(2)
    a = _split(AllocateMessageQueueAveragely(), mqs, cids)
    shuffled_mqs, shuffled_cids = mqs[::-1], cids[::-1]
    b = _split(AllocateMessageQueueAveragely(), shuffled_mqs, shuffled_cids)
    assert a == b
    assert a[cids[0]] == sorted(mqs)[:4]


def test_queues_sort_by_topic_then_broker_then_id():
    mqs = [MessageQueue("T", "b", 10), MessageQueue("T", "a", 2), MessageQueue("S", "z", 0), MessageQueue("T", "b", 9)]
    got = AllocateMessageQueueAveragely().allocate("g", "c", mqs, ["c"])
    assert got == [MessageQueue("S", "z", 0), MessageQueue("T", "a", 2), MessageQueue("T", "b", 9),
                   MessageQueue("T", "b", 10)]


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_unknown_consumer_or_no_queues_gets_nothing(name):
    s = get_strategy(name)
    assert s.allocate("g", "stranger", _queues(4), _cids(2)) == []
    assert s.allocate("g", "c", [], ["c"]) == []
    assert s.allocate("g", "c", _queues(2), []) == []


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_empty_current_id_is_an_error(name):
    with pytest.raises(ValueError):
        get_strategy(name).allocate("g", "", _queues(2), ["c"])


def test_by_circle_deals_queues_round_robin():
    mqs, cids = _queues(7), _cids(3)
    got = _split(AllocateMessageQueueAveragelyByCircle(), mqs, cids)
    assert [[q.queue_id for q in got[c]] for c in cids] == [[0, 3, 6], [1, 4], [2, 5]]


@given(st.integers(0, 64), st.integers(1, 20))
def test_averagely_range_partitions_queues_contiguously(n, m):
    ranges = [averagely_range(n, m, i) for i in range(m)]
    assert [i for r in ranges for i in r] == list(range(n))
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


def _java_averagely(n: int, m: int, index: int) -> list[int]:
    """RocketMQ's AllocateMessageQueueAveragely arithmetic, transcribed literally as the oracle."""
    mod = n % m
    if n <= m:
        average = 1
    elif mod > 0 and index < mod:
        average = n // m + 1
    else:
        average = n // m
    start = index * average if (mod > 0 and index < mod) else index * average + mod
    return [start + i for i in range(min(average, n - start))]


@given(st.integers(1, 64), st.integers(1, 20))
def test_averagely_agrees_with_rocketmq_arithmetic(n, m):
    for i in range(m):
        assert list(averagely_range(n, m, i)) == _java_averagely(n, m, i)


@pytest.mark.parametrize("name", list(STRATEGIES))
@given(n=st.integers(1, 40), m=st.integers(1, 12), brokers=st.integers(1, 3), seed=st.integers(0, 2**32))
def test_every_queue_goes_to_exactly_one_consumer(name, n, m, brokers, seed):
    mqs, cids = _queues(n, brokers), _cids(m)
    rnd = random.Random(seed)
    rnd.shuffle(mqs)
    split = {cid: get_strategy(name).allocate("g", cid, rnd.sample(mqs, len(mqs)), rnd.sample(cids, len(cids)))
             for cid in cids}
    assigned = [q for qs in split.values() for q in qs]
    assert sorted(assigned) == sorted(mqs)


def test_md5_hash_is_first_four_digest_bytes_unsigned():
    digest = hashlib.md5(b"abc").digest()
    assert md5_hash("abc") == int.from_bytes(digest[:4], "big") == 0x90015098


def test_queue_key_is_javas_to_string():
    assert java_queue_key(MessageQueue("T", "b", 3)) == "MessageQueue [topic=T, brokerName=b, queueId=3]"


def test_consistent_hash_ring_has_virtual_nodes_per_consumer():
    hashes, owners = AllocateMessageQueueConsistentHash(virtual_nodes=4).ring(["a", "b"])
    assert hashes == sorted(hashes) and len(hashes) == 8
    assert sorted(owners) == ["a"] * 4 + ["b"] * 4
    assert md5_hash("a-0") in hashes and md5_hash("b-3") in hashes


def test_consistent_hash_routes_a_queue_to_the_next_point_clockwise():
    s = AllocateMessageQueueConsistentHash(virtual_nodes=3)
    cids = ["c1", "c2", "c3"]
    hashes, owners = s.ring(cids)
    for mq in _queues(20):
        h = md5_hash(java_queue_key(mq))
        following = [o for p, o in zip(hashes, owners, strict=True) if p >= h]
        owner = following[0] if following else owners[0]
        assert mq in s.allocate("g", owner, _queues(20), cids)


@given(st.integers(1, 40), st.integers(1, 8))
def test_consistent_hash_moves_only_queues_the_new_consumer_takes(n, m):
    s = AllocateMessageQueueConsistentHash()
    mqs, cids = _queues(n, 2), _cids(m)
    before = _split(s, mqs, cids)
    newcomer = "newcomer@1"
    after = _split(s, mqs, [*cids, newcomer])
    for cid in cids:
        assert set(after[cid]) <= set(before[cid])
        assert set(before[cid]) - set(after[cid]) <= set(after[newcomer])


def test_virtual_nodes_must_be_positive():
    with pytest.raises(ValueError):
        AllocateMessageQueueConsistentHash(virtual_nodes=0)


def test_strategy_registry_by_rocketmq_name():
    assert isinstance(get_strategy("AVG"), AllocateMessageQueueAveragely)
    assert isinstance(get_strategy("avg_by_circle"), AllocateMessageQueueAveragelyByCircle)
    assert isinstance(get_strategy("CONSISTENT_HASH"), AllocateMessageQueueConsistentHash)
    with pytest.raises(ValueError, match="AVG"):
        get_strategy("RANDOM")
