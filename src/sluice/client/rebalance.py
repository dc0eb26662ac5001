"""Queue allocation strategies: which of a topic's queues one consumer of a group takes.

Every member of a group runs the same strategy over the same sorted inputs and so agrees on the split
without talking to the others. The algorithms are RocketMQ's, so Sluice consumers can share a group with
Java consumers using the strategy of the same name. Pure functions, no I/O.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from typing import ClassVar, Protocol

from sluice.common.structs import MessageQueue


class AllocateStrategy(Protocol):
    """A queue allocation strategy."""

    @property
    def name(self) -> str: ...

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        """The queues of ``mq_all`` that consumer ``current_cid`` of ``cid_all`` should consume."""
        ...


def _prepare(current_cid: str, mq_all: Sequence[MessageQueue],
             cid_all: Sequence[str]) -> tuple[list[MessageQueue], list[str], int] | None:
    """Sorted, de-duplicated inputs and the current consumer's index; None when it gets nothing."""
    if not current_cid:
        raise ValueError("current consumer id is empty")
    mqs = sorted(set(mq_all))
    cids = sorted(set(cid_all))
    if not mqs or current_cid not in cids:
        return None
    return mqs, cids, cids.index(current_cid)


def averagely_range(n_queues: int, n_consumers: int, index: int) -> range:
    """Indices (into the sorted queues) consumer ``index`` gets under AVG: ⌊n/m⌋ each, one more for the first
    ``n mod m`` consumers, contiguous, in order; consumers past the last queue get none."""
    mod = n_queues % n_consumers
    if n_queues <= n_consumers:
        size = 1
    else:
        size = n_queues // n_consumers + (1 if index < mod else 0)
    start = index * size if index < mod else index * size + mod
    return range(start, min(start + size, n_queues)) if start < n_queues else range(0)


class AllocateMessageQueueAveragely:
    """``AVG``: contiguous ranges of the sorted queues, sizes differing by at most one (RocketMQ's default)."""

    name: ClassVar[str] = "AVG"

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        """See the class docstring; [] when ``current_cid`` is not in ``cid_all``."""
        prepared = _prepare(current_cid, mq_all, cid_all)
        if prepared is None:
            return []
        mqs, cids, index = prepared
        r = averagely_range(len(mqs), len(cids), index)
        return mqs[r.start:r.stop]


class AllocateMessageQueueAveragelyByCircle:
    """``AVG_BY_CIRCLE``: deal the sorted queues round-robin, consumer i gets queues i, i+m, i+2m, ..."""

    name: ClassVar[str] = "AVG_BY_CIRCLE"

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        """See the class docstring; [] when ``current_cid`` is not in ``cid_all``."""
        prepared = _prepare(current_cid, mq_all, cid_all)
        if prepared is None:
            return []
        mqs, cids, index = prepared
        return mqs[index::len(cids)]


def md5_hash(key: str) -> int:
    """RocketMQ's ring hash: the first 4 bytes of MD5(UTF-8 key) as an unsigned big-endian integer."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest()[:4], "big")


def java_queue_key(mq: MessageQueue) -> str:
    """Java's ``MessageQueue.toString()``, the key RocketMQ hashes a queue by."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


class AllocateMessageQueueConsistentHash:
    """``CONSISTENT_HASH``: consumers own points on a hash ring (``virtual_nodes`` each, keys ``"<cid>-<i>"``);
    a queue goes to the owner of the first point at or after its hash, wrapping around.

    Adding or removing a consumer moves only the queues next to its points. Same ring and keys as
    RocketMQ's ``ConsistentHashRouter`` with its MD5 hash.
    """

    name: ClassVar[str] = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = 10) -> None:
        if virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be at least 1, not {virtual_nodes}")
        self.virtual_nodes = virtual_nodes

    def ring(self, cid_all: Sequence[str]) -> tuple[list[int], list[str]]:
        """The ring as (sorted point hashes, owner of each point). On a hash collision the consumer later in
        sorted order keeps the point, as a Java TreeMap filled in that order would."""
        points: dict[int, str] = {}
        for cid in sorted(set(cid_all)):
            for i in range(self.virtual_nodes):
                points[md5_hash(f"{cid}-{i}")] = cid
        hashes = sorted(points)
        return hashes, [points[h] for h in hashes]

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        """See the class docstring; [] when ``current_cid`` is not in ``cid_all``."""
        prepared = _prepare(current_cid, mq_all, cid_all)
        if prepared is None:
            return []
        mqs, cids, _ = prepared
        hashes, owners = self.ring(cids)
        out: list[MessageQueue] = []
        for mq in mqs:
            i = bisect.bisect_left(hashes, md5_hash(java_queue_key(mq)))
            if owners[i if i < len(hashes) else 0] == current_cid:
                out.append(mq)
        return out


STRATEGIES: dict[str, type[AllocateMessageQueueAveragely | AllocateMessageQueueAveragelyByCircle |
                             AllocateMessageQueueConsistentHash]] = {
    AllocateMessageQueueAveragely.name: AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle.name: AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueConsistentHash.name: AllocateMessageQueueConsistentHash,
}
"""Strategy classes by RocketMQ name."""


def get_strategy(name: str) -> AllocateStrategy:
    """A new strategy by RocketMQ name (``"AVG"``, ``"AVG_BY_CIRCLE"``, ``"CONSISTENT_HASH"``; any case)."""
    cls = STRATEGIES.get(name.upper())
    if cls is None:
        raise ValueError(f"unknown allocation strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    return cls()


__all__ = [
    "STRATEGIES",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueConsistentHash",
    "AllocateStrategy",
    "averagely_range",
    "get_strategy",
    "java_queue_key",
    "md5_hash",
]
