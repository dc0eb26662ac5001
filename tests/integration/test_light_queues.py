"""Light message queues (RocketMQ's LMQ: ``enableLmq`` / ``enableMultiDispatch``): a message whose
INNER_MULTI_DISPATCH names ``%LMQ%a,%LMQ%b`` is stored once and entered in each of those queues as well, with offsets
of their own written into it (INNER_MULTI_QUEUE_OFFSET); each light queue is read, long-polled and committed as a
queue of its own; what it holds survives a restart; a dispatch list the broker cannot serve is refused with
RocketMQ's codes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from sluice import Message, Producer, PullConsumer
from sluice.broker.broker_controller import BrokerController
from sluice.client.message import PullStatus
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.errors import ClientError
from sluice.common.message_codec import decode_records
from sluice.common.structs import MessageQueue
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.headers import PullMessageRequestHeader
from tests.conftest import Cluster
from tests.integration.helpers import wait_until

DISPATCH = "INNER_MULTI_DISPATCH"
OFFSETS = "INNER_MULTI_QUEUE_OFFSET"
SUSPEND, SUBSCRIPTION = 2, 4  # PULL_MESSAGE's sysFlag bits


@pytest.fixture
def lmq_broker(empty_cluster: Cluster) -> BrokerController:
    broker = empty_cluster.start_broker("broker-a", store_enable_lmq=True, store_enable_multi_dispatch=True)
    empty_cluster.create_topic("lmq-parent", 2)
    return broker


@pytest.fixture
def api(empty_cluster: Cluster) -> Iterator[MQClientAPI]:
    remoting = RemotingClient()
    try:
        yield MQClientAPI(remoting, [empty_cluster.namesrv_addr])
    finally:
        empty_cluster.loop.run(remoting.close())


def _send(cluster: Cluster, body: bytes, queues: str) -> None:
    with Producer("lmq-pg", namesrv=cluster.namesrv_addr) as p:
        p.send(Message("lmq-parent", body, properties={DISPATCH: queues}))


def _read(cluster: Cluster, api: MQClientAPI, broker: BrokerController, lmq: str, offset: int = 0) -> list[tuple]:
    async def pull() -> list[tuple]:
        r = await api.pull_message(broker.broker_addr, "lmq-g", MessageQueue(lmq, "broker-a", 0), offset, 32)
        if r.status is not PullStatus.FOUND:
            return []
        return [(m.body, m.topic, m.queue_offset, m.properties.get(OFFSETS), m.properties.get("WAIT"))
                for m in decode_records(r.body)]
    return cluster.loop.run(pull())


def test_a_message_is_read_from_each_light_queue_it_names_at_offsets_of_their_own(
        empty_cluster: Cluster, lmq_broker: BrokerController, api: MQClientAPI) -> None:
    _send(empty_cluster, b"to a and b", "%LMQ%a,%LMQ%b")
    _send(empty_cluster, b"to b only", "%LMQ%b")
    _send(empty_cluster, b"to a and c", "%LMQ%c,%LMQ%a")
    a = _read(empty_cluster, api, lmq_broker, "%LMQ%a")
    b = _read(empty_cluster, api, lmq_broker, "%LMQ%b")
    c = _read(empty_cluster, api, lmq_broker, "%LMQ%c")
    # the stored message (its own topic and queue offset), its offsets in its light queues in the order named
    assert [(body, off) for body, _, _, off, _ in a] == [(b"to a and b", "0,0"), (b"to a and c", "0,1")]
    assert [(body, off) for body, _, _, off, _ in b] == [(b"to a and b", "0,0"), (b"to b only", "1")]
    assert [body for body, *_ in c] == [b"to a and c"]
    assert {t for _, t, *_ in a + b + c} == {"lmq-parent"} and all(w == "true" for *_, w in a + b + c)
    assert _read(empty_cluster, api, lmq_broker, "%LMQ%a", offset=1)[0][0] == b"to a and c"
    store = lmq_broker.store
    assert [store.get_max_offset_in_queue(q, 0) for q in ("%LMQ%a", "%LMQ%b", "%LMQ%c")] == [2, 2, 1]
    assert store.lmq_queue_count() == 3
    assert "%LMQ%a" not in lmq_broker.topic_config_manager.table  # (never kept nor registered)


def test_a_long_polling_pull_of_a_light_queue_is_answered_when_a_message_names_it(
        empty_cluster: Cluster, lmq_broker: BrokerController, api: MQClientAPI) -> None:
    async def held_pull() -> list[bytes]:
        ext = PullMessageRequestHeader("lmq-poll-g", "%LMQ%poll", 0, 0, 32, SUSPEND | SUBSCRIPTION, -1, 15_000, "*",
                                       0, "TAG").encode()
        resp = await api.invoke(lmq_broker.broker_addr, RequestCode.PULL_MESSAGE, ext, timeout_ms=30_000)
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        return [m.body for m in decode_records(resp.body)]

    async def go() -> list[bytes]:
        task = asyncio.ensure_future(held_pull())
        async with asyncio.timeout(30):  # (until the broker holds it: the message then wakes it)
            while not lmq_broker.hold_service.held_queues("%LMQ%poll"):
                await asyncio.sleep(0.01)
        await asyncio.to_thread(_send, empty_cluster, b"wake up", "%LMQ%poll")
        return await asyncio.wait_for(task, 30)

    assert empty_cluster.loop.run(go()) == [b"wake up"]


def test_light_queues_and_their_offsets_survive_a_restart(empty_cluster: Cluster, lmq_broker: BrokerController,
                                                          api: MQClientAPI) -> None:
    _send(empty_cluster, b"before", "%LMQ%keep,%LMQ%other")
    broker = empty_cluster.restart_broker(lmq_broker)
    _send(empty_cluster, b"after", "%LMQ%keep")
    got = _read(empty_cluster, api, broker, "%LMQ%keep")
    assert [(body, off) for body, _, _, off, _ in got] == [(b"before", "0,0"), (b"after", "1")]
    assert broker.store.lmq_queue_count() == 2


@pytest.mark.parametrize(("queues", "words"), [
    ("%LMQ%a,orders", "'orders' is not a light queue"),
    ("%LMQ%a,%LMQ%a", "names a light queue twice"),
    (",".join(f"%LMQ%q{i}" for i in range(257)), "names 257 light queues, more than max_lmq_dispatch (256)"),
    ("%LMQ%bad name", "may only contain letters"),
])
def test_a_dispatch_list_the_broker_cannot_serve_is_refused_and_nothing_is_stored(
        empty_cluster: Cluster, lmq_broker: BrokerController, queues: str, words: str) -> None:
    with pytest.raises(ClientError) as err:
        _send(empty_cluster, b"refused", queues)
    assert words in str(err.value)
    assert sum(lmq_broker.store.get_max_offset_in_queue("lmq-parent", q) for q in range(2)) == 0
    assert lmq_broker.store.lmq_queue_count() == 0


def test_new_light_queues_past_the_quota_are_refused_existing_ones_are_served(
        empty_cluster: Cluster, lmq_broker: BrokerController, api: MQClientAPI) -> None:
    lmq_broker.store.config.max_lmq_consume_queue_num = 2  # (the store's copy of its settings)
    _send(empty_cluster, b"first two", "%LMQ%q1,%LMQ%q2")
    with pytest.raises(ClientError) as err:
        _send(empty_cluster, b"a third", "%LMQ%q1,%LMQ%q3")
    assert "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]lmq consume queue num exceeded." in str(err.value)
    _send(empty_cluster, b"to one it has", "%LMQ%q2")
    assert [body for body, *_ in _read(empty_cluster, api, lmq_broker, "%LMQ%q2")] == [b"first two", b"to one it has"]
    assert lmq_broker.store.lmq_queue_count() == 2


def test_without_light_queues_on_the_property_is_only_a_property(empty_cluster: Cluster, api: MQClientAPI) -> None:
    broker = empty_cluster.start_broker("broker-a")
    empty_cluster.create_topic("lmq-parent", 2)
    _send(empty_cluster, b"plain", "%LMQ%a")
    assert broker.store.lmq_queue_count() == 0
    with pytest.raises(ClientError):  # (no such topic: light queues are off)
        _read(empty_cluster, api, broker, "%LMQ%a")


def test_sluices_pull_consumer_reads_a_light_queue_assigned_to_it(empty_cluster: Cluster,
                                                                   lmq_broker: BrokerController) -> None:
    """A light queue has no route: the consumer finds its broker in the name server's list of brokers."""
    _send(empty_cluster, b"one", "%LMQ%session-1")
    _send(empty_cluster, b"two", "%LMQ%session-1,%LMQ%session-2")
    got: list[bytes] = []
    with PullConsumer("lmq-reader", namesrv=empty_cluster.namesrv_addr, consume_from="first") as c:
        c.assign([MessageQueue("%LMQ%session-1", "broker-a", 0)])
        wait_until(lambda: got.extend(m.body for m in c.poll(0.2)) or len(got) >= 2, 30, "both messages")
        c.commit()
    assert got == [b"one", b"two"]
    wait_until(lambda: lmq_broker.store.consumer_offsets.query_offset("lmq-reader", "%LMQ%session-1", 0) == 2, 30,
               "the committed offset")


def test_async_sends_reach_their_light_queues_and_a_batch_naming_them_is_refused(
        empty_cluster: Cluster, lmq_broker: BrokerController, api: MQClientAPI) -> None:
    """send_async batches what it can: never a message naming light queues, which only a single send reaches."""
    with Producer("lmq-async-pg", namesrv=empty_cluster.namesrv_addr) as p:
        p.send(Message("lmq-parent", b"warm-up"))  # (the route known: later async sends could batch)
        futures = [p.send_async(Message("lmq-parent", f"a{i}".encode(), properties={DISPATCH: "%LMQ%async"}))
                   for i in range(20)]
        for f in futures:
            f.result(30)
        with pytest.raises(ClientError, match="a batch cannot carry INNER_MULTI_DISPATCH"):
            p.send_batch([Message("lmq-parent", b"b", properties={DISPATCH: "%LMQ%async"})])
    assert sorted(body for body, *_ in _read(empty_cluster, api, lmq_broker, "%LMQ%async")) == sorted(
        f"a{i}".encode() for i in range(20))


def test_a_reply_naming_a_light_queue_outside_the_store_is_refused(empty_cluster: Cluster,
                                                                  lmq_broker: BrokerController) -> None:
    """Every put is checked in the store, not only a send: a reply's dispatch list too."""
    header = {"a": "pg", "b": f"{lmq_broker.config.broker_cluster_name}_REPLY_TOPIC", "c": "TBW102", "d": "1",
              "e": "0", "f": "0", "g": "0", "h": "0", "i": f"{DISPATCH}\x01%LMQ%/../../../escaped", "j": "0",
              "k": "false", "m": "false", "n": "broker-a"}

    async def reply() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(lmq_broker.broker_addr, RemotingCommand.request(
                RequestCode.SEND_REPLY_MESSAGE_V2, header, b"reply"), 5000)
        finally:
            await client.close()

    r = empty_cluster.loop.run(reply())
    assert r.code != ResponseCode.SUCCESS  # (its requester is unknown too: the answer says that first)
    reply_topic = f"{lmq_broker.config.broker_cluster_name}_REPLY_TOPIC"
    assert sum(lmq_broker.store.get_max_offset_in_queue(reply_topic, q) for q in range(16)) == 0  # not stored
    assert not (empty_cluster.root / "escaped").exists() and lmq_broker.store.lmq_queue_count() == 0


def test_a_half_message_is_not_in_a_light_queue_until_committed(empty_cluster: Cluster,
                                                                 lmq_broker: BrokerController,
                                                                 api: MQClientAPI) -> None:
    from sluice import LocalTransactionState, TransactionListener, TransactionProducer

    class Decide(TransactionListener):
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT if msg.body == b"commit" else LocalTransactionState.ROLLBACK

        def check_local_transaction(self, msg: object) -> LocalTransactionState:
            return LocalTransactionState.ROLLBACK

    with TransactionProducer("lmq-tx-pg", Decide(), namesrv=empty_cluster.namesrv_addr) as p:
        for body in (b"rollback", b"commit"):
            p.send_message_in_transaction(Message("lmq-parent", body, properties={DISPATCH: "%LMQ%tx"}))
    wait_until(lambda: lmq_broker.store.get_max_offset_in_queue("%LMQ%tx", 0) >= 1, 30, "the committed message")
    got = _read(empty_cluster, api, lmq_broker, "%LMQ%tx")
    assert [(body, topic) for body, topic, *_ in got] == [(b"commit", "lmq-parent")]
