"""The producer's accumulator (RocketMQ 5's ProduceAccumulator, Kafka's RecordAccumulator): async single sends
made in one turn of the event loop for the same place are held here, each already encoded as a batch record, and
leave together as one SEND_BATCH_MESSAGE when the turn ends or the batch is full. Sans-IO: the producer decides
when to drain and sends what it gets.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import NamedTuple

from sluice.client.message import Message, SendResult
from sluice.client.request_reply import ReplyMessage
from sluice.common.naming import RETRY_GROUP_TOPIC_PREFIX
from sluice.common.structs import MessageQueue


class BatchKey(NamedTuple):
    """Where a batch goes: its topic, and its sharding key or pinned queue (each keeps a batch of its own, so that
    the order of its sends holds)."""

    topic: str
    sharding_key: str | None
    queue: MessageQueue | None


@dataclass(slots=True)
class PendingSend:
    """One caller's message, encoded as a batch record with its ``UNIQ_KEY``, and the future it waits on."""

    msg: Message
    uniq: str
    record: bytes
    out: asyncio.Future[SendResult]


@dataclass(slots=True)
class ProducerBatch:
    key: BatchKey
    wait_store_msg_ok: bool  # one for all (RocketMQ's batch rule: the request's WAIT)
    sends: list[PendingSend] = field(default_factory=list)
    size: int = 0
    timeout: float | None = None  # the shortest any member asked for (None: the producer's)

    def add(self, send: PendingSend, timeout: float | None) -> None:
        self.sends.append(send)
        self.size += len(send.record)
        if timeout is not None:
            self.timeout = timeout if self.timeout is None else min(self.timeout, timeout)


def batchable(msg: Message, compress_over: int) -> bool:
    """Whether a message may share a batch: not delayed (levels or timers), not for a retry topic, and small
    enough to go uncompressed (a batch record has no compressed flag of its own); not a reply (a request of its own);
    without a priority (the broker routes only a single send by it), a lite topic or light queues (it dispatches
    only a single send to them).
    """
    return (not isinstance(msg, ReplyMessage) and msg.delay_level == 0 and msg.deliver_at is None and msg.delay is None
            and msg.priority is None and msg.lite_topic is None and "INNER_MULTI_DISPATCH" not in msg.properties
            and len(msg.body) <= compress_over and not msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX))


class RecordAccumulator:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.batches: dict[BatchKey, ProducerBatch] = {}
        self.pending = 0  # sends held

    def append(self, key: BatchKey, send: PendingSend, timeout: float | None) -> ProducerBatch | None:
        """Hold ``send``. A batch of its place taken out to be sent now, before or with it, when one is full, or
        the one held cannot take it (another ``wait_store_msg_ok``, or no room left under ``max_bytes``)."""
        full: ProducerBatch | None = None
        batch = self.batches.get(key)
        if batch is not None and (batch.wait_store_msg_ok != send.msg.wait_store_msg_ok
                                  or batch.size + len(send.record) > self.max_bytes):
            full = self._take(key)  # leaves first: the new send starts the next batch of its place
            batch = None
        if batch is None:
            batch = self.batches[key] = ProducerBatch(key, send.msg.wait_store_msg_ok)
        batch.add(send, timeout)
        self.pending += 1
        if full is None and batch.size >= self.max_bytes:
            full = self._take(key)
        return full

    def _take(self, key: BatchKey) -> ProducerBatch:
        batch = self.batches.pop(key)
        self.pending -= len(batch.sends)
        return batch

    def holds(self, topic: str) -> bool:
        return any(k.topic == topic for k in self.batches)

    def drain(self, topic: str | None = None) -> list[ProducerBatch]:
        """Every batch held (or ``topic``'s), oldest first, taken out."""
        if topic is None:
            out = list(self.batches.values())
            self.batches.clear()
        else:
            out = [b for k, b in self.batches.items() if k.topic == topic]
            for b in out:
                del self.batches[b.key]
        self.pending -= sum(len(b.sends) for b in out)
        return out


__all__ = ["BatchKey", "PendingSend", "ProducerBatch", "RecordAccumulator", "batchable"]
