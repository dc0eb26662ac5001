"""The broker's transaction check rounds, driven directly on a real broker: a decision is never taken twice
while a round walks the half queue, producer-set properties cannot stall the rounds or the broker's start, and a
half message its producer made immune for a while holds up nobody sent after it."""

from __future__ import annotations

import asyncio
import time

import pytest

from sluice.broker.broker_controller import BrokerController
from sluice.common.message import MessageExtBrokerInner
from sluice.common.naming import TRANS_HALF_TOPIC
from tests.conftest import Cluster


def half(broker: BrokerController, body: bytes, **props: str) -> MessageExtBrokerInner:
    """A half message of group ``g`` for topic ``T``, as the send path prepares it."""
    msg = MessageExtBrokerInner("T", body, 0, 0, {"TRAN_MSG": "true", "PGROUP": "g", "UNIQ_KEY": body.hex(), **props},
                                0, int(time.time() * 1000), "127.0.0.1:1234", broker.broker_addr, 0)
    return broker.transaction_service.prepare(msg)


async def clock_past(stored_ms: int) -> None:
    """Until the wall clock has left millisecond ``stored_ms``: a round started later sees what was stored then as
    older than itself (it leaves anything stored in its own millisecond to the next round)."""
    while int(time.time() * 1000) <= stored_ms:
        await asyncio.sleep(0.001)


def test_a_late_end_transaction_during_a_check_round_is_refused(empty_cluster: Cluster):
    broker = empty_cluster.start_broker("broker-a", transaction_timeout=0, transaction_check_interval=86_400_000)
    broker.ensure_system_topic("T", 1)
    ts = broker.transaction_service

    async def go() -> list[int]:
        r = broker.store.put([half(broker, b"first")])
        first, decision = ts.check_end("g", r.queue_offset, r.wrote_offset)
        assert first is not None and (await ts.end(first, True)).ok
        for i in range(3000):  # a round long enough to pause (it yields every few ms)
            last = broker.store.put([half(broker, b"h%d" % i)])
        await clock_past(last.store_timestamp)
        round_ = asyncio.get_running_loop().create_task(ts.check_round())
        accepted = []
        while not round_.done():
            again, _ = ts.check_end("g", r.queue_offset, r.wrote_offset)
            if again is not None:
                accepted.append(ts.half_walked)
                await ts.end(again, True)
            # (a millisecond between looks, not a busy loop: the store thread needs the GIL for the round's writes)
            await asyncio.sleep(0.001)
        await round_
        return accepted

    assert empty_cluster.loop.run(go(), 120) == []  # (3,000 puts and a round over them: slow on a busy machine)
    assert broker.store.get_max_offset_in_queue("T", 0) == 1


@pytest.mark.parametrize("prop, value", [("TRAN_PREPARED_QUEUE_OFFSET", "²"), ("TRANSACTION_CHECK_TIMES", "abc"),
                                         ("TRANSACTION_CHECK_TIMES", "-99999999"),
                                         ("CHECK_IMMUNITY_TIME_IN_SECONDS", "²")])
def test_producer_set_properties_neither_stall_the_checks_nor_the_brokers_start(empty_cluster: Cluster, prop: str,
                                                                                 value: str):
    broker = empty_cluster.start_broker("broker-a", transaction_timeout=0, transaction_check_interval=86_400_000)
    broker.ensure_system_topic("T", 1)
    ts = broker.transaction_service

    async def go() -> int:
        broker.store.put([half(broker, b"odd", **{prop: value})])
        await clock_past(broker.store.put([half(broker, b"plain")]).store_timestamp)
        return await ts.check_round()

    assert empty_cluster.loop.run(go()) == 2  # both checked back (nobody online to ask: still counted)
    assert ts.half_walked == 2
    again = empty_cluster.restart_broker(broker)  # (which checks both again at once: timeout 0)
    assert again.transaction_service.half_walked >= 2
    assert len(again.transaction_service.live) == 2


def test_an_immune_half_message_is_put_back_and_holds_up_nobody(empty_cluster: Cluster):
    broker = empty_cluster.start_broker("broker-a", transaction_timeout=0, transaction_check_interval=86_400_000)
    broker.ensure_system_topic("T", 1)
    ts = broker.transaction_service

    async def go() -> int:
        broker.store.put([half(broker, b"immune", CHECK_IMMUNITY_TIME_IN_SECONDS="3600")])
        for i in range(5):
            last = broker.store.put([half(broker, b"h%d" % i)])
        await clock_past(last.store_timestamp)
        return await ts.check_round()

    assert empty_cluster.loop.run(go()) == 5
    assert ts.half_walked == 6  # walked past the immune one: it waits further down the queue
    assert broker.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) == 12  # 5 checked copies and the put-back one
