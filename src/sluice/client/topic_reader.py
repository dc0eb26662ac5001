"""Reading a topic's messages as an operator does (mqadmin queryMsgByOffset, consumeMessage / printMsg): one message
at a queue offset, or every message from a starting point on, optionally following new ones — without a consumer
group's offsets: nothing is committed, no consumer of the topic is disturbed.

Pulls go as ``TOOLS_CONSUMER`` (RocketMQ's group for its tools), never held by the broker; messages the producer
compressed come back inflated.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sluice.client.admin import Admin, AdminError, uncompressed
from sluice.common.message import MessageExt
from sluice.common.message_codec import decode_records
from sluice.common.structs import MessageQueue

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
PULL_BATCH = 32
FOLLOW_INTERVAL = 0.2  # s between rounds when following and nothing new came


@dataclass(slots=True)
class _Cursor:
    addr: str
    mq: MessageQueue
    offset: int
    end: int  # where reading stops when not following (the queue's end when it began)


async def _queues(admin: Admin, topic: str, broker: str | None, queue: int | None) -> list[tuple[str, MessageQueue]]:
    route = await admin.api.get_topic_route(topic)
    if route is None:
        raise AdminError(f"no route for topic {topic!r}")
    out: list[tuple[str, MessageQueue]] = []
    for qd in route.queue_datas:
        if broker is not None and qd.broker_name != broker:
            continue
        addr = next((b.select_addr() for b in route.broker_datas if b.broker_name == qd.broker_name), None)
        if not addr:
            continue
        out.extend((addr, MessageQueue(topic, qd.broker_name, q)) for q in range(qd.read_queue_nums)
                   if queue is None or q == queue)
    if not out:
        where = " and ".join(p for p in (f"broker {broker}" if broker is not None else "",
                                         f"queue {queue}" if queue is not None else "") if p)
        raise AdminError(f"topic {topic!r} has no {where or 'readable queue'}")
    return sorted(out, key=lambda t: (t[1].broker_name, t[1].queue_id))


async def message_at(admin: Admin, topic: str, broker: str, queue: int, offset: int) -> MessageExt:
    """The message at ``offset`` of queue ``queue`` of ``topic`` on ``broker``; an error says where the queue's
    messages are when there is none there."""
    [(addr, mq)] = await _queues(admin, topic, broker, queue)
    pulled = await admin.api.pull_message(addr, TOOLS_CONSUMER_GROUP, mq, offset, 1)
    for m in decode_records(pulled.body) if pulled.body else []:
        if m.queue_offset == offset:
            return uncompressed(m)
    raise AdminError(f"no message at offset {offset} of {topic} queue {queue} on {broker}: it holds offsets "
                     f"{pulled.min_offset} to {pulled.max_offset - 1}" if pulled.max_offset > pulled.min_offset
                     else f"no message at offset {offset} of {topic} queue {queue} on {broker}: the queue is empty")


async def read_messages(admin: Admin, topic: str, *, start: str | int = "earliest", offset: int | None = None,
                        broker: str | None = None, queue: int | None = None, count: int | None = None,
                        follow: bool = False) -> AsyncIterator[MessageExt]:
    """The topic's messages from ``start`` (``earliest``, ``latest``, or a store time in ms) or from queue
    ``offset`` (of each queue chosen by ``broker`` / ``queue``), round by round over the queues, each round's in
    store-time order; at most ``count``. Without ``follow`` it ends at the queues' ends as they were when it began;
    with it, it waits for new messages until cancelled."""
    cursors: list[_Cursor] = []
    for addr, mq in await _queues(admin, topic, broker, queue):
        low = await admin.api.get_min_offset(addr, mq)
        high = await admin.api.get_max_offset(addr, mq)
        if offset is not None:
            at = min(max(offset, low), high)
        elif start == "earliest":
            at = low
        elif start == "latest":
            at = high
        else:
            at = min(max(await admin.api.search_offset(addr, mq, int(start)), low), high)
        cursors.append(_Cursor(addr, mq, at, high))
    left = count
    while cursors and (left is None or left > 0):
        found: list[MessageExt] = []
        for c in cursors:
            if not follow and c.offset >= c.end:
                continue
            want = PULL_BATCH if follow else min(PULL_BATCH, c.end - c.offset)
            pulled = await admin.api.pull_message(c.addr, TOOLS_CONSUMER_GROUP, c.mq, c.offset, want)
            msgs = [m for m in (decode_records(pulled.body) if pulled.body else []) if m.queue_offset >= c.offset]
            if not follow:
                msgs = [m for m in msgs if m.queue_offset < c.end]
            if msgs:
                c.offset = msgs[-1].queue_offset + 1
                found.extend(msgs)
            elif pulled.next_begin_offset > c.offset:
                c.offset = pulled.next_begin_offset  # (removed by retention meanwhile: skip ahead)
            elif not follow:
                c.offset = c.end  # (nothing more to read there)
        found.sort(key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
        for m in found:
            yield uncompressed(m)
            if left is not None:
                left -= 1
                if left <= 0:
                    return
        if not follow and all(c.offset >= c.end for c in cursors):
            return
        if follow and not found:
            await asyncio.sleep(FOLLOW_INTERVAL)


__all__ = ["TOOLS_CONSUMER_GROUP", "message_at", "read_messages"]
