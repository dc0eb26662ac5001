"""POP consumption (RocketMQ 5's, NSQ's in-flight model): received messages are invisible until acknowledged,
given more time, or their invisible time passes — then they come back, one more reconsume each, and into the
group's DLQ past its retries. A checkpoint stays in memory with its acks merged until it has stayed
``pop_ck_stay_buffer_time``, then goes through the store with its acks (the group's offset moving past a pop only
then, or once it is settled), so a restarted broker still knows which messages are out."""

from __future__ import annotations

import asyncio
import time

import pytest

from sluice import BrokerResponseError, Message, Producer, SimpleConsumer
from sluice.broker.pop.pop_revive_service import ACK_TAG, BATCH_ACK_TAG, CK_TAG, CheckPoint, revive_topic
from sluice.common.extra_info import PROPERTY_POP_CK, Receipt
from sluice.common.message_codec import decode_records
from sluice.remoting import RemotingCommand, RequestCode, ResponseCode
from sluice.remoting.client import RemotingClient
from tests.integration.helpers import wait_until


def produce(namesrv: str, topic: str, n: int, prefix: str = "m") -> set[bytes]:
    bodies = {f"{prefix}-{i}".encode() for i in range(n)}
    with Producer("pop-pg", namesrv=namesrv) as p:
        for b in sorted(bodies):
            assert p.send(Message(topic, b, tags="t")).status.name == "SEND_OK"
    return bodies


def receive_all(c: SimpleConsumer, n: int, invisible: float = 30.0, timeout: float = 60.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += c.receive(32, invisible, wait=1.0)
    return got


def revive_log(broker) -> list[tuple[str, bytes]]:
    """(tag, body) of every record in ``broker``'s revive log."""
    topic, out = revive_topic(broker.config.broker_cluster_name), []
    for qid in range(broker.config.revive_queue_num):
        r = broker.store.get_messages("test-reader", topic, qid, 0, 1000)
        if r.status.name == "FOUND":
            out += [(m.tags, m.body) for m in decode_records(b"".join(r.buffers))]
            r.release()
    return out


def one_queue(cluster, topic: str, n: int, group: str, **settings):
    """A broker started with ``settings``, ``topic`` of one queue holding ``n`` messages, a consumer of
    ``group``: (broker, consumer)."""
    broker = cluster.start_broker(**settings)
    cluster.create_topic(topic, 1)
    produce(cluster.namesrv_addr, topic, n)
    return broker, consumer(cluster, group, topic)


def consumer(cluster, group: str, topic: str, **kw) -> SimpleConsumer:
    c = SimpleConsumer(group, namesrv=cluster.namesrv_addr, consume_from_first=True, **kw)
    c.subscribe(topic)
    return c.start()


def test_received_messages_are_invisible_until_acked_and_each_goes_to_one_consumer(cluster):
    cluster.create_topic("PopT", 4)
    sent = produce(cluster.namesrv_addr, "PopT", 100)
    a, b = consumer(cluster, "pop-g", "PopT"), consumer(cluster, "pop-g", "PopT")
    try:
        got_a = receive_all(a, 50, timeout=10)
        got_b = receive_all(b, 100 - len(got_a), timeout=30)
        bodies = [m.body for m in got_a + got_b]
        assert sorted(bodies) == sorted(sent)  # every message once: none handed to both
        for m in got_a:
            a.ack(m)
        for m in got_b:
            b.ack(m)
        assert a.receive(32, wait=0.3) == [] and b.receive(32, wait=0.3) == []
        assert cluster.brokers[0].pop_revive.checkpoints == {}
    finally:
        a.shutdown()
        b.shutdown()


def test_an_unacked_message_comes_back_after_its_invisible_time_with_one_more_reconsume(cluster):
    cluster.create_topic("PopBack", 2)
    produce(cluster.namesrv_addr, "PopBack", 3)
    c = consumer(cluster, "pop-back", "PopBack")
    try:
        first = receive_all(c, 3, invisible=1.0)
        assert len(first) == 3 and all(m.reconsume_times == 0 for m in first)
        c.ack(first[0])
        t0 = time.monotonic()
        again = receive_all(c, 2, invisible=30.0, timeout=30)
        assert time.monotonic() - t0 >= 0.5
        assert sorted(m.body for m in again) == sorted(m.body for m in first[1:])
        assert all(m.reconsume_times == 1 and m.topic == "PopBack" for m in again)
        assert {m.msg_id for m in again} == {m.msg_id for m in first[1:]}  # the same message ids
        for m in again:
            assert Receipt.parse(m.properties[PROPERTY_POP_CK]).retry == "1"
            c.ack(m)
        assert c.receive(32, wait=1.5) == []
    finally:
        c.shutdown()


def test_change_invisible_duration_keeps_a_message_out_and_nack_brings_it_back_after_the_delay(cluster):
    cluster.create_topic("PopTouch", 1)
    produce(cluster.namesrv_addr, "PopTouch", 2)
    c = consumer(cluster, "pop-touch", "PopTouch")
    try:
        touched, nacked = sorted(receive_all(c, 2, invisible=1.0), key=lambda m: m.body)
        old = touched.properties[PROPERTY_POP_CK]
        c.change_invisible_duration(touched, 30.0)  # TOUCH
        assert touched.properties[PROPERTY_POP_CK] != old
        c.nack(nacked, 0.5)  # REQ with a delay
        back = receive_all(c, 1, timeout=30)
        assert [m.body for m in back] == [nacked.body]
        assert c.receive(32, wait=1.5) == []  # the touched one stays out well past its first second
        c.ack(touched)  # with its renewed receipt
        with pytest.raises(BrokerResponseError) as err:  # the old receipt no longer acks anything
            touched.properties[PROPERTY_POP_CK] = old
            c.ack(touched)
        assert err.value.code == ResponseCode.NO_MESSAGE
        c.ack(back[0])
    finally:
        c.shutdown()


def test_past_its_retries_a_message_goes_to_the_dlq(cluster):
    cluster.create_topic("PopDlq", 1)
    produce(cluster.namesrv_addr, "PopDlq", 1)
    cluster.brokers[0].subscription_group_manager.find("pop-dlq").retry_max_times = 2
    c = consumer(cluster, "pop-dlq", "PopDlq")
    try:
        seen = []
        for _ in range(3):
            got = receive_all(c, 1, invisible=0.2, timeout=30)
            assert len(got) == 1
            seen.append(got[0].reconsume_times)
        assert seen == [0, 1, 2]
        assert c.receive(32, wait=2.0) == []
        wait_until(lambda: cluster.brokers[0].pop_revive.dead == 1, 30, "the message in the DLQ")
        assert cluster.brokers[0].store.get_max_offset_in_queue("%DLQ%pop-dlq", 0) == 1
    finally:
        c.shutdown()


def test_a_forged_or_foreign_receipt_is_refused_and_never_acks_another_message(cluster):
    cluster.create_topic("PopForge", 1)
    produce(cluster.namesrv_addr, "PopForge", 2)
    c = consumer(cluster, "pop-forge", "PopForge")
    try:
        m1, m2 = sorted(receive_all(c, 2), key=lambda m: m.queue_offset)
        r2 = Receipt.parse(m2.properties[PROPERTY_POP_CK])
        forged = [f"{r2.ck_offset + 1} {r2.pop_time} {r2.invisible_time} {r2.revive_qid} 0 broker-a 0 "
                  f"{m1.queue_offset}",
                  "not a receipt", f"{r2.ck_offset} {r2.pop_time + 1} 30000 0 0 broker-a 0 {m2.queue_offset}",
                  str(r2).replace("broker-a", "broker-z")]

        async def ack(extra: str, offset: int) -> RemotingCommand:
            rc = RemotingClient()
            try:
                return await rc.invoke(cluster.brokers[0].broker_addr, RemotingCommand.request(
                    RequestCode.ACK_MESSAGE, {"consumerGroup": "pop-forge", "topic": "PopForge", "queueId": "0",
                                              "extraInfo": extra, "offset": str(offset)}), 5000)
            finally:
                await rc.close()

        codes = []
        for extra in forged:
            offset = int(extra.split()[-1]) if extra[0].isdigit() else m2.queue_offset
            resp = cluster.loop.run(ack(extra, offset))
            assert resp.code != ResponseCode.SUCCESS and resp.remark
            codes.append(resp.code)
        # a checkpoint that does not exist, garbage, a pop time off by one, another broker's: all refused
        assert ResponseCode.INVALID_PARAMETER in codes and ResponseCode.NO_MESSAGE in codes
        ck = next(iter(cluster.brokers[0].pop_revive.checkpoints.values()))
        assert ck.acked == 0
        c.ack(m1)
        c.ack(m2)
    finally:
        c.shutdown()


def test_an_empty_receive_waits_for_a_message_to_arrive(cluster):
    cluster.create_topic("PopWait", 2)
    c = consumer(cluster, "pop-wait", "PopWait")
    try:
        assert c.receive(1, wait=0.0) == []

        async def later() -> None:  # once the receive below is held by the broker
            while cluster.brokers[0].pop_polling.waiting("PopWait", -1) == 0:
                await asyncio.sleep(0.01)
            await asyncio.get_running_loop().run_in_executor(None, produce, cluster.namesrv_addr, "PopWait", 1,
                                                             "late")

        fut = asyncio.run_coroutine_threadsafe(later(), cluster.loop.loop)
        t0 = time.monotonic()
        got = c.receive(32, wait=20.0)
        assert [m.body for m in got] == [b"late-0"] and time.monotonic() - t0 < 15
        fut.result(30)
        c.ack(got[0])
    finally:
        c.shutdown()


def test_unacked_messages_come_back_after_a_broker_restart(cluster):
    cluster.create_topic("PopRestart", 2)
    sent = produce(cluster.namesrv_addr, "PopRestart", 20)
    c = consumer(cluster, "pop-restart", "PopRestart")
    try:
        got = receive_all(c, 20, invisible=2.0)
        assert len(got) == 20
        for m in got[:5]:
            c.ack(m)
    finally:
        c.shutdown()
    broker = cluster.restart_broker(cluster.brokers[0])
    assert len(broker.pop_revive.checkpoints) >= 1
    c = consumer(cluster, "pop-restart", "PopRestart")
    try:
        back = receive_all(c, 15, timeout=60)
        assert sorted(m.body for m in back) == sorted(m.body for m in got[5:])
        assert {m.body for m in back} | {m.body for m in got[:5]} == sent
        for m in back:
            c.ack(m)
        assert c.receive(32, wait=3.0) == []
    finally:
        c.shutdown()


def test_listen_acks_what_the_listener_takes_and_retries_what_it_raises_on(cluster):
    cluster.create_topic("PopListen", 2)
    sent = produce(cluster.namesrv_addr, "PopListen", 30)
    c = consumer(cluster, "pop-listen", "PopListen", invisible_duration=30.0)
    seen: list[tuple[bytes, int]] = []
    failed_once: set[bytes] = set()

    def listener(m) -> None:
        seen.append((m.body, m.reconsume_times))
        if m.body.endswith(b"7") and m.body not in failed_once:
            failed_once.add(m.body)
            raise RuntimeError("try again")

    try:
        import sluice.client.aio.simple_consumer as sc

        sc.NACK_BACKOFF = (0.2,) + sc.NACK_BACKOFF[1:]  # type: ignore[misc]
        c.listen(listener, max_in_flight=8)
        wait_until(lambda: {b for b, _ in seen} == sent and len(seen) == 30 + len(failed_once), 60,
                   "every message taken, the failed ones twice")
        assert failed_once == {b for b in sent if b.endswith(b"7")}

        def requests(code: int) -> float:  # (each series: counts per latency bucket, then the sum of ms)
            return sum(sum(v[:-1]) for k, v in cluster.brokers[0].rpc_latency.series.items() if k[0] == code)

        # the acks of listener calls that end together leave as one batch ack
        wait_until(lambda: cluster.brokers[0].pop_revive.checkpoints == {}, 30, "every message acknowledged")
        # (an ack alone, with no other listener call under way, is a single one)
        assert requests(RequestCode.BATCH_ACK_MESSAGE) >= 1
        assert requests(RequestCode.ACK_MESSAGE) + requests(RequestCode.BATCH_ACK_MESSAGE) < 30
    finally:
        c.shutdown()
        sc.NACK_BACKOFF = (10,) + sc.NACK_BACKOFF[1:]  # type: ignore[misc]


def test_ack_many_settles_a_receive_in_one_batch_ack_and_skips_the_expired(cluster):
    cluster.create_topic("PopBatchAck", 2)
    produce(cluster.namesrv_addr, "PopBatchAck", 40)
    c = consumer(cluster, "pop-bat", "PopBatchAck")
    try:
        got = receive_all(c, 40)
        first, rest = got[:1], got[1:]
        c.ack(first[0])
        c.ack_many(rest)  # a retried message's receipt would name the retry topic: the broker finds it by r
        assert c.receive(32, wait=2.0) == []
        assert cluster.brokers[0].pop_revive.checkpoints == {}
        with pytest.raises(BrokerResponseError) as err:  # all already acknowledged: nothing open to ack
            c.ack_many(rest)
        assert err.value.code == ResponseCode.NO_MESSAGE
    finally:
        c.shutdown()


def produce_ordered(namesrv: str, topic: str, n: int) -> list[bytes]:
    bodies = [f"o-{i}".encode() for i in range(n)]
    with Producer("pop-pg", namesrv=namesrv) as p:
        for b in bodies:
            assert p.send(Message(topic, b), sharding_key="one-group").status.name == "SEND_OK"
    return bodies


def test_an_orderly_receive_blocks_the_queue_and_an_unacked_message_comes_back_before_the_rest(cluster):
    cluster.create_topic("PopFifo", 1)
    bodies = produce_ordered(cluster.namesrv_addr, "PopFifo", 8)
    c = consumer(cluster, "pop-fifo", "PopFifo", orderly=True)
    try:
        first = c.receive(4, invisible_duration=1.0, wait=5.0)
        assert [m.body for m in first] == bodies[:4]
        assert all(Receipt.parse(m.properties[PROPERTY_POP_CK]).orderly for m in first)
        assert c.receive(4, wait=0.3) == []  # blocked while they are in flight
        for m in (first[0], first[2], first[3]):
            c.ack(m)
        again = receive_all(c, 5, timeout=30)
        assert [m.body for m in again] == [bodies[1], *bodies[4:]]  # the unacked one first, the acked never again
        assert [m.reconsume_times for m in again] == [1, 0, 0, 0, 0]
        c.change_invisible_duration(again[0], 30.0)  # TOUCH keeps the queue blocked past the first second
        for m in again[1:]:
            c.ack(m)
        assert c.receive(4, wait=1.5) == []
        c.ack(again[0])
        assert c.receive(4, wait=0.5) == []
        assert cluster.brokers[0].store.consumer_offsets.query_offset("pop-fifo", "PopFifo", 0) == 8
    finally:
        c.shutdown()


def test_an_orderly_message_past_its_retries_goes_to_the_dlq_and_the_queue_moves_on(cluster):
    cluster.create_topic("PopFifoDlq", 1)
    bodies = produce_ordered(cluster.namesrv_addr, "PopFifoDlq", 2)
    cluster.brokers[0].subscription_group_manager.find("pop-fifo-dlq").retry_max_times = 1
    c = consumer(cluster, "pop-fifo-dlq", "PopFifoDlq", orderly=True)
    try:
        seen = []
        for _ in range(2):
            got: list = []
            wait_until(lambda: got.extend(c.receive(1, 0.2, wait=1.0)) or got, 30, "a message")  # noqa: B023
            seen.append((got[0].body, got[0].reconsume_times))
        nxt: list = []
        wait_until(lambda: nxt.extend(c.receive(1, 30.0, wait=1.0)) or nxt, 30, "the next message")
        assert seen == [(bodies[0], 0), (bodies[0], 1)] and [m.body for m in nxt] == [bodies[1]]
        assert cluster.brokers[0].store.get_max_offset_in_queue("%DLQ%pop-fifo-dlq", 0) == 1
        c.ack(nxt[0])
    finally:
        c.shutdown()


def test_a_receipt_renewed_many_times_in_a_row_still_settles_its_message(cluster):
    cluster.create_topic("PopRenew", 1)
    produce(cluster.namesrv_addr, "PopRenew", 3)
    c = consumer(cluster, "pop-renew", "PopRenew")
    try:
        got = receive_all(c, 3)
        for _ in range(20):  # faster than a millisecond each, at times: every checkpoint still its own
            c.change_invisible_duration(got[0], 30.0)
        for m in got:
            c.ack(m)
        assert cluster.brokers[0].pop_revive.checkpoints == {}
        revive = cluster.brokers[0].pop_revive
        assert len(revive._due) <= 2 * len(revive.checkpoints) + 1024
    finally:
        c.shutdown()


def test_ack_many_settles_messages_of_several_topics(cluster):
    cluster.create_topic("PopMany1", 1)
    cluster.create_topic("PopMany2", 1)
    produce(cluster.namesrv_addr, "PopMany1", 3)
    produce(cluster.namesrv_addr, "PopMany2", 3)
    c = consumer(cluster, "pop-many", "PopMany1")
    c.subscribe("PopMany2")
    try:
        got = receive_all(c, 6)
        assert {m.topic for m in got} == {"PopMany1", "PopMany2"}
        c.ack_many(got)
        assert cluster.brokers[0].pop_revive.checkpoints == {}
    finally:
        c.shutdown()


def test_bad_pop_and_batch_ack_requests_get_a_clear_answer_quickly(cluster):
    cluster.create_topic("PopBad", 1)
    produce(cluster.namesrv_addr, "PopBad", 1)
    addr = cluster.brokers[0].broker_addr

    async def call(code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        rc = RemotingClient()
        try:
            return await rc.invoke(addr, RemotingCommand.request(code, ext, body), 10_000)
        finally:
            await rc.close()

    long_group = "g" * 120  # its retry topic %RETRY%<group>_<topic> would not be a topic name
    resp = cluster.loop.run(call(RequestCode.POP_MESSAGE, {"consumerGroup": long_group, "topic": "PopBad",
                                                           "queueId": "-1", "maxMsgNums": "1",
                                                           "invisibleTime": "1000", "pollTime": "0"}))
    assert resp.code == ResponseCode.INVALID_PARAMETER and "longer than 127" in resp.remark
    for ext in ({"maxMsgNums": "33"}, {"invisibleTime": "-1"}, {"invisibleTime": str(13 * 3600 * 1000)}):
        resp = cluster.loop.run(call(RequestCode.POP_MESSAGE, {"consumerGroup": "pop-bad", "topic": "PopBad",
                                                               "queueId": "-1", "maxMsgNums": "1",
                                                               "invisibleTime": "1000", **ext}))
        assert resp.code != ResponseCode.SUCCESS and resp.remark
    huge = '{"acks":[{"c":"pop-bad","t":"PopBad","r":"0","so":0,"q":0,"rq":0,"pt":1,"it":1,"b":"' + \
        "/" * 1_000_000 + '"}]}'
    t0 = time.monotonic()
    for body in (huge.encode(), b'{"acks":["x"]}', b"[1,2]", b"not json"):
        resp = cluster.loop.run(call(RequestCode.BATCH_ACK_MESSAGE, {}, body))
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark
    assert time.monotonic() - t0 < 5


def test_peek_shows_what_a_pop_would_hand_out_and_notification_says_whether_there_is_any(cluster):
    cluster.create_topic("PopPeek", 2)
    addr = cluster.brokers[0].broker_addr

    async def call(code: int, ext: dict[str, str]) -> RemotingCommand:
        rc = RemotingClient()
        try:
            return await rc.invoke(addr, RemotingCommand.request(code, ext), 20_000)
        finally:
            await rc.close()

    group = {"consumerGroup": "pop-peek", "topic": "PopPeek", "queueId": "-1"}
    resp = cluster.loop.run(call(RequestCode.PEEK_MESSAGE, {**group, "maxMsgNums": "32"}))
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    resp = cluster.loop.run(call(RequestCode.NOTIFICATION, {**group, "pollTime": "200", "bornTime": "0"}))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["hasMsg"] == "false"

    async def notified_later() -> RemotingCommand:  # a notification held until a message arrives
        waiting = asyncio.ensure_future(call(RequestCode.NOTIFICATION, {**group, "pollTime": "15000",
                                                                        "bornTime": "0"}))
        while cluster.brokers[0].pop_polling.waiting("PopPeek", -1) == 0:
            await asyncio.sleep(0.01)
        polling = await call(RequestCode.POLLING_INFO, group)
        assert polling.code == ResponseCode.SUCCESS and polling.ext_fields["pollingNum"] == "1"
        await asyncio.get_running_loop().run_in_executor(None, produce, cluster.namesrv_addr, "PopPeek", 3)
        return await waiting

    resp = cluster.loop.run(notified_later())
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["hasMsg"] == "true"
    resp = cluster.loop.run(call(RequestCode.PEEK_MESSAGE, {**group, "maxMsgNums": "32"}))
    assert resp.code == ResponseCode.SUCCESS
    from sluice.common.message_codec import decode_records

    assert sorted(m.body for m in decode_records(resp.body)) == [b"m-0", b"m-1", b"m-2"]
    c = consumer(cluster, "pop-peek", "PopPeek")
    try:  # peeking handed nothing out
        got = receive_all(c, 3)
        assert sorted(m.body for m in got) == [b"m-0", b"m-1", b"m-2"]
        c.ack_many(got)
    finally:
        c.shutdown()


def test_no_client_may_write_the_brokers_own_topics_such_as_the_revive_log(cluster):
    from tests.integration.test_send_groups import exchange, send_v2

    addr = cluster.brokers[0].broker_addr
    forged = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_v2("rmq_sys_REVIVE_LOG_DefaultCluster", 0),
                                     b'{"t":"T","c":"victim","q":0,"so":0,"d":[0,9]}')
    resp = exchange(addr, [forged])[forged.opaque]
    assert resp.code == ResponseCode.NO_PERMISSION and "forbidden" in resp.remark
    assert cluster.brokers[0].store.get_max_offset_in_queue("rmq_sys_REVIVE_LOG_DefaultCluster", 0) == 0


def test_a_suspended_message_comes_back_without_a_delivery_counted(cluster):
    """``suspend`` (RocketMQ 5.5): the message comes back with the reconsume times it had, even past the group's
    retries (a suspension is not a failure); a plain nack counts one more."""
    cluster.create_topic("PopSuspend", 1)
    produce(cluster.namesrv_addr, "PopSuspend", 2)
    c = consumer(cluster, "pop-suspend", "PopSuspend")
    try:
        suspended, nacked = sorted(receive_all(c, 2), key=lambda m: m.body)
        c.change_invisible_duration(suspended, 0.3, suspend=True)
        c.nack(nacked, 0.3)
        back = {m.body: m.reconsume_times for m in receive_all(c, 2, timeout=30)}
        assert back == {suspended.body: 0, nacked.body: 1}
    finally:
        c.shutdown()


def test_a_pop_acknowledged_within_its_stay_writes_nothing_but_its_offset_to_the_revive_log(cluster):
    cluster.create_topic("PopMerge", 1)
    produce(cluster.namesrv_addr, "PopMerge", 10)
    broker = cluster.brokers[0]
    c = consumer(cluster, "pop-merge", "PopMerge")
    try:
        got = receive_all(c, 10)
        assert len(got) == 10 and broker.pop_buffer.size >= 1
        # handed out, not settled, only in memory: the group's offset stays before them
        assert broker.store.consumer_offsets.query_offset("pop-merge", "PopMerge", 0) == 0
        c.ack_many(got)
        assert broker.store.consumer_offsets.query_offset("pop-merge", "PopMerge", 0) == 10
        assert broker.pop_buffer.size == 0 and broker.pop_revive.checkpoints == {}
        assert c.receive(32, wait=0.3) == []
        assert not [tag for tag, _ in revive_log(broker) if tag in (CK_TAG, ACK_TAG, BATCH_ACK_TAG)]
    finally:
        c.shutdown()


def test_a_checkpoint_open_past_its_stay_is_written_with_its_acks_and_later_acks_follow_it(empty_cluster):
    broker, c = one_queue(empty_cluster, "PopStay", 4, "pop-stay", pop_ck_stay_buffer_time=300)
    try:
        got = sorted(receive_all(c, 4, invisible=8.0), key=lambda m: m.queue_offset)
        c.ack(got[0])
        wait_until(lambda: any(tag == CK_TAG for tag, _ in revive_log(broker)), 30, "the checkpoint written")
        (body,) = [b for tag, b in revive_log(broker) if tag == CK_TAG]
        ck = CheckPoint.from_json(body, 0, 0)
        assert (ck.start_offset, ck.diffs, ck.acked) == (0, [0, 1, 2, 3], 0b0001)
        assert not [tag for tag, _ in revive_log(broker) if tag in (ACK_TAG, BATCH_ACK_TAG)]  # (merged into it)
        # written: nothing of the pop can be lost any more, so the group's offset is past it
        wait_until(lambda: broker.store.consumer_offsets.query_offset("pop-stay", "PopStay", 0) == 4, 30,
                   "the offset past the written checkpoint")
        c.ack(got[1])
        assert [tag for tag, _ in revive_log(broker) if tag in (ACK_TAG, BATCH_ACK_TAG)] == [ACK_TAG]
    finally:
        c.shutdown()
    broker = empty_cluster.restart_broker(broker)
    c = consumer(empty_cluster, "pop-stay", "PopStay")
    try:  # the two not acknowledged come back once their time is up; the two acknowledged never
        back = receive_all(c, 2, timeout=60)
        assert sorted(m.body for m in back) == sorted(m.body for m in got[2:])
    finally:
        c.shutdown()


def test_without_the_buffer_every_pop_and_ack_is_written_at_once(empty_cluster):
    broker, c = one_queue(empty_cluster, "PopNoMerge", 3, "pop-nomerge", enable_pop_buffer_merge=False)
    try:
        got = receive_all(c, 3)
        assert [tag for tag, _ in revive_log(broker)] == [CK_TAG]
        assert broker.store.consumer_offsets.query_offset("pop-nomerge", "PopNoMerge", 0) == 3
        c.ack_many(got)
        assert [tag for tag, _ in revive_log(broker)] == [CK_TAG, BATCH_ACK_TAG]
        assert broker.pop_revive.checkpoints == {} and broker.pop_buffer.size == 0
    finally:
        c.shutdown()


def test_a_change_of_invisible_time_in_a_buffered_pop_writes_only_the_new_checkpoint(cluster):
    """The new checkpoint is written at once, marked as a change (a restart does not move the offset by it); the
    pop it came from stays in memory, and the group's offset moves past it once its other messages are settled."""
    cluster.create_topic("PopChange", 1)
    produce(cluster.namesrv_addr, "PopChange", 3)
    broker = cluster.brokers[0]
    c = consumer(cluster, "pop-change", "PopChange")
    try:
        got = sorted(receive_all(c, 3), key=lambda m: m.queue_offset)
        c.change_invisible_duration(got[1], 30.0)
        cks = [CheckPoint.from_json(b, 0, 0) for tag, b in revive_log(broker) if tag == CK_TAG]
        assert [(ck.start_offset, ck.diffs, ck.changed) for ck in cks] == [(1, [0], True)]
        assert not [tag for tag, _ in revive_log(broker) if tag in (ACK_TAG, BATCH_ACK_TAG)]
        assert broker.store.consumer_offsets.query_offset("pop-change", "PopChange", 0) == 0
        c.ack_many([got[0], got[2]])
        assert broker.store.consumer_offsets.query_offset("pop-change", "PopChange", 0) == 3
        assert c.receive(32, wait=0.3) == []  # the changed one is still out
        c.ack(got[1])  # (its renewed receipt)
        assert broker.pop_revive.checkpoints == {}
    finally:
        c.shutdown()


def test_an_admin_reset_of_a_popping_group_is_not_undone_by_the_acks_of_earlier_pops(cluster):
    from sluice.client import _loop
    from sluice.client.admin import Admin

    cluster.create_topic("PopReset", 1)
    sent = produce(cluster.namesrv_addr, "PopReset", 6)
    broker = cluster.brokers[0]
    c = consumer(cluster, "pop-reset", "PopReset")
    try:
        got = receive_all(c, 6)

        async def reset() -> None:
            async with Admin(cluster.namesrv_addr) as admin:
                await admin.reset_offset("pop-reset", "PopReset", 0)

        _loop.run(reset())
        c.ack_many(got)  # (settles the pop before the reset: the group's offset stays where the reset put it)
        assert broker.store.consumer_offsets.query_offset("pop-reset", "PopReset", 0) == 0
        again = receive_all(c, 6)
        assert sorted(m.body for m in again) == sorted(sent)
        c.ack_many(again)
        assert broker.store.consumer_offsets.query_offset("pop-reset", "PopReset", 0) == 6
    finally:
        c.shutdown()


def test_past_the_buffers_bound_the_oldest_checkpoints_are_written_early_and_pops_go_on(empty_cluster):
    broker, c = one_queue(empty_cluster, "PopBound", 4, "pop-bound", pop_ck_max_buffer_size=2)
    try:
        got = []
        for _ in range(4):  # one pop a message: four checkpoints of one queue, none acknowledged
            got += c.receive(1, 30.0, wait=5.0)
        assert len(got) == 4  # (never SYSTEM_BUSY: that is for twice the bound, with the store refusing writes)
        wait_until(lambda: len([t for t, _ in revive_log(broker) if t == CK_TAG]) >= 3, 30,
                   "the oldest checkpoints written before their stay time")
        cks = [CheckPoint.from_json(b, 0, 0).start_offset for t, b in revive_log(broker) if t == CK_TAG]
        assert cks == sorted(cks) and cks[0] == 0  # oldest first
        assert broker.pop_buffer.size < 2
        wait_until(lambda: broker.store.consumer_offsets.query_offset("pop-bound", "PopBound", 0) >= len(cks), 30,
                   "the offset past the written ones")
        c.ack_many(got)
    finally:
        c.shutdown()
