"""Clients following a broker group through a failover: sends go to the master only and resume on a promoted
slave within seconds (not at the 30 s route poll); a pull consumer whose master is gone reads from the slave.

A group here is one brokerName with a master (id 0) and a slave (id 1). Where brokers replicate (a broker
role in the config), the slave is a real SLAVE copying the master; otherwise it is an ordinary broker
registered as id 1, and the test writes to it what replication would have copied.
"""

from __future__ import annotations

import time
from typing import Any

from sluice import Message, MessageQueue, Producer
from sluice.broker.broker_controller import BrokerController
from sluice.client.pull_consumer import PullConsumer
from sluice.common import config as config_module
from sluice.common.config import BrokerConfig
from sluice.common.errors import ClientError
from sluice.common.message import MessageExt
from sluice.common.naming import AUTO_CREATE_TOPIC_KEY_TOPIC
from sluice.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from tests.broker_process import free_port
from tests.conftest import Cluster
from tests.integration.helpers import FAST, wait_until

TOPIC = "FailoverT"
QUEUES = 4
REPLICATING = "broker_role" in BrokerConfig.__struct_fields__
# Recovery bound: a failed send asks for the route again at most once a second.
RESUME_WITHIN = 10.0


def _role_settings(master: bool) -> dict[str, Any]:
    if not REPLICATING:
        return {}
    role = config_module.BrokerRole  # type: ignore[attr-defined]
    # ha_listen_port 0: two brokers in one process must not both take the default HA port.
    return {"broker_role": role.ASYNC_MASTER if master else role.SLAVE, "ha_listen_port": 0}


def _invoke(cluster: Cluster, addr: str, cmd: RemotingCommand) -> RemotingCommand:
    async def one() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(addr, cmd, 5000)
        finally:
            await client.close()

    return cluster.loop.run(one())


def _create_topic(cluster: Cluster, broker: BrokerController) -> None:
    resp = _invoke(cluster, broker.broker_addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": TOPIC, "defaultTopic": AUTO_CREATE_TOPIC_KEY_TOPIC, "readQueueNums": str(QUEUES),
        "writeQueueNums": str(QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0",
        "order": "false"}))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def _group_addrs(cluster: Cluster) -> dict[int, str]:
    async def get() -> dict[int, str]:
        route = cluster.namesrv.route_info.pick_topic_route_data(TOPIC)
        return dict(route.broker_datas[0].broker_addrs) if route is not None else {}

    return cluster.loop.run(get())


def _stored(cluster: Cluster, broker: BrokerController) -> int:
    async def count() -> int:
        return sum(broker.store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES))

    return cluster.loop.run(count())


def _start_group(cluster: Cluster, slave_port: int = 0) -> tuple[BrokerController, BrokerController]:
    """broker-a's master (id 0) with the topic, and its slave (id 1), both in the name server's route."""
    master = cluster.start_broker("broker-a", **_role_settings(master=True))
    _create_topic(cluster, master)
    slave = cluster.start_broker("broker-a", broker_id=1, listen_port=slave_port,
                                 store_store_path_root_dir=str(cluster.root / "broker-a-slave"),
                                 **_role_settings(master=False))
    if not REPLICATING:
        _create_topic(cluster, slave)
    wait_until(lambda: _group_addrs(cluster) == {0: master.broker_addr, 1: slave.broker_addr}, 30,
               "the group's master and slave in the route")
    return master, slave


def _promote(cluster: Cluster, slave: BrokerController) -> BrokerController:
    """The slave back as the group's master at its own address (what a failover does to it)."""
    cfg = slave.config.replace(broker_id=0, **_role_settings(master=True))
    cluster.stop_broker(slave)
    promoted = cluster.loop.run(BrokerController(cfg).start())
    cluster.brokers.append(promoted)
    if REPLICATING:
        _create_topic(cluster, promoted)  # (whether the slave had copied the topic yet or not)
    return promoted


def _replicate_by_hand(cluster: Cluster, slave: BrokerController, body: bytes, queue_id: int) -> None:
    """Without replication: the message written to the slave's queue as its master's copy would be."""
    header = {"a": "failover-copier", "b": TOPIC, "c": AUTO_CREATE_TOPIC_KEY_TOPIC, "d": str(QUEUES),
              "e": str(queue_id), "f": "0", "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0",
              "k": "false", "m": "false", "n": "broker-a"}
    resp = _invoke(cluster, slave.broker_addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def _send_to_group(cluster: Cluster, producer: Producer, slave: BrokerController, bodies: list[bytes]) -> None:
    for i, body in enumerate(bodies):
        producer.send(Message(TOPIC, body), queue=MessageQueue(TOPIC, "broker-a", i % QUEUES))
        if not REPLICATING:
            _replicate_by_hand(cluster, slave, body, i % QUEUES)


# == tests ============================================================================================
def test_producer_sends_only_to_the_master_of_a_group_with_a_slave(empty_cluster):
    master, slave = _start_group(empty_cluster)
    stored_on_slave = _stored(empty_cluster, slave)
    with Producer("fo-producer", namesrv=empty_cluster.namesrv_addr) as producer:
        results = [producer.send(Message(TOPIC, b"m%d" % i)) for i in range(20)]
    assert {r.queue.broker_name for r in results} == {"broker-a"}
    assert _stored(empty_cluster, master) == 20
    if not REPLICATING:  # (a replicating slave holds copies; an ordinary one got nothing by the producer)
        assert _stored(empty_cluster, slave) == stored_on_slave == 0


def test_sending_loop_resumes_on_a_promoted_slave_without_restarting_the_producer(empty_cluster):
    master, slave = _start_group(empty_cluster, slave_port=free_port())
    slave_addr = slave.broker_addr
    # A 30 s route poll: only the refresh after a failed send can find the new master in time.
    with Producer("fo-producer", namesrv=empty_cluster.namesrv_addr, poll_name_server_interval=30_000,
                  send_msg_timeout=2000) as producer:
        assert producer.send(Message(TOPIC, b"before")).queue.broker_name == "broker-a"
        empty_cluster.stop_broker(master)
        wait_until(lambda: 0 not in _group_addrs(empty_cluster), 30, "the master gone from the route")
        try:  # the producer learns the group has no master (and keeps that route)
            producer.send(Message(TOPIC, b"no master"))
        except ClientError:
            pass

        promoted = _promote(empty_cluster, slave)
        assert promoted.broker_addr == slave_addr
        wait_until(lambda: _group_addrs(empty_cluster) == {0: slave_addr}, 30, "the slave registered as master")
        on_promoted = _stored(empty_cluster, promoted)
        t0 = time.monotonic()
        sent: list[Any] = []

        def send_once() -> bool:
            try:
                sent.append(producer.send(Message(TOPIC, b"after")))
                return True
            except ClientError:
                return False

        wait_until(send_once, RESUME_WITHIN, "a send to the promoted master", interval=0.05)
        assert time.monotonic() - t0 < RESUME_WITHIN
        assert sent[0].queue.broker_name == "broker-a"
        assert _stored(empty_cluster, promoted) == on_promoted + 1


def test_pull_consumer_whose_master_is_gone_pulls_from_the_slave(empty_cluster):
    master, slave = _start_group(empty_cluster)
    before = [b"before-%d" % i for i in range(8)]
    got: set[bytes] = set()
    consumer = PullConsumer("fo-pullers", namesrv=empty_cluster.namesrv_addr, **FAST)
    consumer.subscribe(TOPIC)
    consumer.start()
    try:
        with Producer("fo-producer", namesrv=empty_cluster.namesrv_addr) as producer:
            _send_to_group(empty_cluster, producer, slave, before)

        def poll_until(want: set[bytes]) -> bool:
            msgs: list[MessageExt] = consumer.poll(0.2)
            got.update(m.body for m in msgs)
            return want <= got

        wait_until(lambda: poll_until(set(before)), 30, "the first messages, from the master")
        if REPLICATING:
            wait_until(lambda: _stored(empty_cluster, slave) == len(before), 30, "the slave caught up")
        empty_cluster.stop_broker(master)
        wait_until(lambda: _group_addrs(empty_cluster) == {1: slave.broker_addr}, 30, "the master gone")

        # What only the slave has now: found only by pulling from it.
        if REPLICATING:
            after = []  # a slave takes no writes: what it already copied must keep flowing from it
            consumer.seek(MessageQueue(TOPIC, "broker-a", 0), 0)
            got.clear()
            wait_until(lambda: poll_until({b for i, b in enumerate(before) if i % QUEUES == 0}), 30,
                       "queue 0 read again, from the slave")
        else:
            after = [b"after-%d" % i for i in range(8)]
            for i, body in enumerate(after):
                _replicate_by_hand(empty_cluster, slave, body, i % QUEUES)
            wait_until(lambda: poll_until(set(after)), 30, "the slave's messages")
        assert not (set(after) - got)
    finally:
        consumer.shutdown()


def test_no_master_refuses_sends_quickly_and_asks_the_name_server_at_most_once_a_second(empty_cluster):
    master, _ = _start_group(empty_cluster)
    with Producer("fo-producer", namesrv=empty_cluster.namesrv_addr, poll_name_server_interval=30_000) as producer:
        producer.send(Message(TOPIC, b"x"))
        empty_cluster.stop_broker(master)
        wait_until(lambda: 0 not in _group_addrs(empty_cluster), 30, "the master gone from the route")
        client = producer.aio.client
        fetches = 0
        real = client.api.get_topic_route

        async def counting(topic: str, timeout_ms: int = 3000) -> Any:
            nonlocal fetches
            fetches += topic == TOPIC
            return await real(topic, timeout_ms)

        client.api.get_topic_route = counting  # type: ignore[method-assign]
        t0 = time.monotonic()
        failures = 0
        while time.monotonic() - t0 < 1.5:
            try:
                producer.send(Message(TOPIC, b"y"))
            except ClientError:
                failures += 1
        assert failures >= 10  # each refused at once, not after a send timeout
        assert 1 <= fetches <= 2  # a 1.5 s window holds one or two of the once-a-second refreshes
