"""Master / slave replication (docs/ha.md) with real brokers in this process: the slave's store becomes the
master's, byte for byte; a SYNC_MASTER answers only once a slave has the bytes; a slave serves reads, refuses
writes and copies its master's metadata; a slave whose log diverged is cut back to where the logs agree."""

from __future__ import annotations

import asyncio
import filecmp
import os
from pathlib import Path
from typing import Any

import pytest

from sluice import Message, MessageQueue, Producer, PullConsumer, SendStatus
from sluice.broker.broker_runner import BrokerRunner
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.config import BrokerConfig, BrokerRole
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.store.ha.ha_protocol import Handshake, encode_handshake
from tests.conftest import Cluster
from tests.integration.helpers import FAST, wait_until

SEGMENT = 1 << 20  # small segments: replication crosses many of them


def _config(cluster: Cluster, name: str, **settings: Any) -> BrokerConfig:
    cfg = cluster.broker_config(name, store_mapped_file_size_commit_log=SEGMENT, **settings)
    cfg.broker_name = "broker-ha"
    return cfg


def _start(cluster: Cluster, name: str, **settings: Any) -> BrokerRunner:
    runner = BrokerRunner(_config(cluster, name, **settings))
    cluster.loop.run(runner.start())
    return runner


def _stop(cluster: Cluster, *runners: BrokerRunner) -> None:
    for r in runners:
        cluster.loop.run(r.stop())


def _end(cluster: Cluster, runner: BrokerRunner) -> int:
    async def get() -> int:
        broker = runner.broker
        return -1 if broker is None else broker.store.commit_log.max_offset  # (None: restarting, its log cut)

    return cluster.loop.run(get())


def _caught_up(cluster: Cluster, master: BrokerRunner, slave: BrokerRunner) -> bool:
    return slave.broker is not None and _end(cluster, slave) == _end(cluster, master) > 0


def _same_files(a: Path, b: Path) -> list[str]:
    """Relative paths of the files that differ (or exist on one side only) under ``a`` and ``b``."""
    diffs: list[str] = []
    cmp = filecmp.dircmp(a, b)

    def walk(c: filecmp.dircmp, rel: str) -> None:
        diffs.extend(os.path.join(rel, n) for n in c.left_only + c.right_only)
        _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
        diffs.extend(os.path.join(rel, n) for n in mismatch + errors)
        for name, sub in c.subdirs.items():
            walk(sub, os.path.join(rel, name))

    walk(cmp, "")
    return diffs


@pytest.fixture
def ha(empty_cluster: Cluster) -> Cluster:
    return empty_cluster


def test_a_slave_holds_the_same_log_queues_and_index_as_its_master(ha: Cluster, tmp_path: Path) -> None:
    master = _start(ha, "m", broker_role=BrokerRole.ASYNC_MASTER)
    with Producer("ha-p", namesrv=ha.namesrv_addr) as producer:
        # Before the slave exists (it catches up in bulk), then while it copies (it follows).
        for i in range(1500):
            producer.send(Message("TopicHA", f"early-{i}".encode() * 120, keys=[f"k{i}"], tags="a" if i % 2 else "b"))
        slave = _start(ha, "s", broker_role=BrokerRole.SLAVE, broker_id=1)
        for i in range(1500):
            producer.send(Message("TopicHA", f"late-{i}".encode() * 120, keys=[f"k{1500 + i}"]))
        producer.send_batch([Message("TopicHA", f"batch-{i}".encode()) for i in range(100)])
    wait_until(lambda: _caught_up(ha, master, slave), 30, "the slave to hold the master's whole log")
    assert _end(ha, master) > 3 * SEGMENT

    async def by_key(runner: BrokerRunner) -> list[list[int]]:
        assert runner.broker is not None
        store = runner.broker.store
        return [sorted(m.commit_log_offset for m in store.query_message("TopicHA", f"k{i}").messages)
                for i in range(0, 3000, 37)]

    # The index files are named after the time each was made: what they answer must agree, not their names.
    on_master = ha.loop.run(by_key(master))
    assert all(len(found) == 1 for found in on_master)
    assert ha.loop.run(by_key(slave)) == on_master
    _stop(ha, slave, master)
    for part in ("commitlog", "consumequeue"):
        assert _same_files(tmp_path / "m" / part, tmp_path / "s" / part) == [], part


def test_a_sync_master_answers_slave_not_available_without_a_slave_and_ok_once_one_has_the_bytes(
        ha: Cluster) -> None:
    master = _start(ha, "m", broker_role=BrokerRole.SYNC_MASTER)
    with Producer("ha-p", namesrv=ha.namesrv_addr, retry_times_when_send_failed=0) as producer:
        alone = producer.send(Message("TopicSync", b"alone"))
        assert alone.status is SendStatus.SLAVE_NOT_AVAILABLE
        slave = _start(ha, "s", broker_role=BrokerRole.SLAVE, broker_id=1)

        def replicated_send_ok() -> bool:
            return producer.send(Message("TopicSync", b"probe")).status is SendStatus.SEND_OK

        wait_until(replicated_send_ok, 30, "the slave to join")
        for i in range(50):
            r = producer.send(Message("TopicSync", f"m{i}".encode()))
            assert r.status is SendStatus.SEND_OK
            # SEND_OK means the slave has it already: its log reaches past this message.
            assert _end(ha, slave) > int(r.offset_msg_id[-16:], 16)
    _stop(ha, slave, master)


def test_a_sync_master_whose_slave_never_confirms_answers_flush_slave_timeout(ha: Cluster) -> None:
    master = _start(ha, "m", broker_role=BrokerRole.SYNC_MASTER, store_sync_flush_timeout=500)
    assert master.broker is not None and master.broker.ha_service is not None
    host, port = master.broker.ha_address.split(":")

    async def silent_slave() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(encode_handshake(Handshake(7, 0, [])))  # joins, takes the bytes, never reports them
        await writer.drain()
        return reader, writer

    _, writer = ha.loop.run(silent_slave())
    try:
        wait_until(lambda: 7 in master.broker.ha_service.slaves, 10, "the silent slave to join")  # type: ignore
        with Producer("ha-p", namesrv=ha.namesrv_addr, retry_times_when_send_failed=0) as producer:
            r = producer.send(Message("TopicSync", b"nobody confirms"))
        assert r.status is SendStatus.FLUSH_SLAVE_TIMEOUT
    finally:
        async def close() -> None:
            writer.close()

        ha.loop.run(close())
        _stop(ha, master)


def test_a_slave_refuses_writes_and_serves_reads(ha: Cluster) -> None:
    master = _start(ha, "m")
    slave = _start(ha, "s", broker_role=BrokerRole.SLAVE, broker_id=1)
    with Producer("ha-p", namesrv=ha.namesrv_addr) as producer:
        sent = [producer.send(Message("TopicR", f"r{i}".encode()), queue=MessageQueue("TopicR", "broker-ha", 0))
                for i in range(20)]
    wait_until(lambda: _caught_up(ha, master, slave), 30, "the slave to catch up")
    assert slave.broker is not None
    wait_until(lambda: slave.broker.topic_config_manager.get("TopicR") is not None, 20,  # type: ignore[union-attr]
               "the slave to copy the topic's config")

    async def on_slave() -> tuple[int, str, list[bytes]]:
        remoting = RemotingClient()
        api = MQClientAPI(remoting, [ha.namesrv_addr])
        try:
            resp = await api.invoke(slave.broker.broker_addr, RequestCode.SEND_MESSAGE_V2,  # type: ignore[union-attr]
                                    {"a": "g", "b": "TopicR", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                                     "g": "0", "h": "0", "i": "", "j": "0", "k": "false"}, body=b"x")
            from sluice.common.message_codec import decode_records
            bodies: list[bytes] = []
            async with asyncio.timeout(30):  # (the slave serves what it has dispatched into its queues)
                while len(bodies) < 20:
                    pulled = await api.pull_message(slave.broker.broker_addr, "g-r",  # type: ignore[union-attr]
                                                    MessageQueue("TopicR", "broker-ha", 0), 0, 32)
                    bodies = [m.body for m in decode_records(pulled.body)] if pulled.body else []
                    if len(bodies) < 20:
                        await asyncio.sleep(0.05)
            return resp.code, resp.remark or "", bodies
        finally:
            await remoting.close()

    code, remark, bodies = ha.loop.run(on_slave())
    assert code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in remark
    assert bodies == [f"r{i}".encode() for i in range(20)]
    assert len(sent) == 20
    _stop(ha, slave, master)


def test_a_slave_copies_topics_offsets_delay_offsets_and_groups_from_its_master(ha: Cluster) -> None:
    master = _start(ha, "m")
    slave = _start(ha, "s", broker_role=BrokerRole.SLAVE, broker_id=1)
    assert master.broker is not None

    async def on_master() -> None:
        remoting = RemotingClient()
        api = MQClientAPI(remoting, [ha.namesrv_addr])
        try:
            addr = master.broker.broker_addr  # type: ignore[union-attr]
            await api.create_topic(addr, "TopicMeta", 3, 3, 6)
            await api.update_consumer_offset(addr, "g-meta", MessageQueue("TopicMeta", "broker-ha", 1), 42)
            await api.invoke_ok(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                body=b'{"groupName":"g-meta","retryMaxTimes":5}')
        finally:
            await remoting.close()
        master.broker.schedule_service.offsets[3] = 17  # type: ignore[union-attr]

    ha.loop.run(on_master())

    def copied() -> bool:
        b = slave.broker
        if b is None:
            return False
        g = b.subscription_group_manager.table.get("g-meta")
        delay = Path(b.config.store.store_path_config) / "delayOffset.json"
        return (b.topic_config_manager.get("TopicMeta") is not None
                and b.store.consumer_offsets.query_offset("g-meta", "TopicMeta", 1) == 42
                and g is not None and g.retry_max_times == 5
                and delay.exists() and '"3": 17' in delay.read_text())

    wait_until(copied, 20, "the slave to copy its master's metadata")
    _stop(ha, slave, master)


def test_a_slave_whose_log_diverged_is_cut_back_to_where_it_agrees_with_the_new_master(
        ha: Cluster, tmp_path: Path) -> None:
    a = _start(ha, "a")
    b = _start(ha, "b", broker_role=BrokerRole.SLAVE, broker_id=1)
    with Producer("ha-p", namesrv=ha.namesrv_addr) as producer:
        for i in range(300):
            producer.send(Message("TopicD", f"both-{i}".encode() * 30))
        wait_until(lambda: _caught_up(ha, a, b), 30, "b to copy a")
        _stop(ha, b)
        for i in range(300):  # only a has these: it goes on alone
            producer.send(Message("TopicD", f"a-only-{i}".encode() * 30))
    a_end = _end(ha, a)
    _stop(ha, a)
    # b is made master by hand; it writes its own; a comes back as b's slave.
    b = _start(ha, "b")
    with Producer("ha-p2", namesrv=ha.namesrv_addr) as producer:
        for i in range(200):
            producer.send(Message("TopicD", f"b-only-{i}".encode() * 10))
    a = _start(ha, "a", broker_role=BrokerRole.SLAVE, broker_id=1)
    wait_until(lambda: _caught_up(ha, b, a), 30, "a to take b's log after cutting its own")
    assert _end(ha, a) != a_end
    _stop(ha, a, b)
    assert _same_files(tmp_path / "b" / "commitlog", tmp_path / "a" / "commitlog") == []
    assert _same_files(tmp_path / "b" / "consumequeue", tmp_path / "a" / "consumequeue") == []


def test_a_master_points_pulls_of_messages_out_of_memory_at_its_slave(ha: Cluster) -> None:
    master = _start(ha, "m", slave_read_enable=True)
    slave = _start(ha, "s", broker_role=BrokerRole.SLAVE, broker_id=1)
    with Producer("ha-p", namesrv=ha.namesrv_addr) as producer:
        for i in range(10):
            producer.send(Message("TopicSlow", f"s{i}".encode()), queue=MessageQueue("TopicSlow", "broker-ha", 0))
    wait_until(lambda: _caught_up(ha, master, slave), 30, "the slave to catch up")
    assert master.broker is not None

    async def suggested(memory: int) -> str:
        master.broker._memory = memory  # type: ignore[union-attr]  # (what the broker takes for its RAM)
        remoting = RemotingClient()
        try:
            resp = await MQClientAPI(remoting, []).invoke(
                master.broker.broker_addr, RequestCode.PULL_MESSAGE,  # type: ignore[union-attr]
                {"consumerGroup": "g-slow", "topic": "TopicSlow", "queueId": "0", "queueOffset": "0",
                 "maxMsgNums": "4", "sysFlag": "4", "commitOffset": "-1", "suspendTimeoutMillis": "0",
                 "subscription": "*", "subVersion": "0", "expressionType": "TAG"})
            assert resp.code == ResponseCode.SUCCESS
            return resp.ext_fields["suggestWhichBrokerId"]
        finally:
            await remoting.close()

    assert ha.loop.run(suggested(1 << 40)) == "0"  # in memory: the master serves it
    assert ha.loop.run(suggested(100)) == "1"  # far behind the log's end for this RAM: slave 1
    _stop(ha, slave, master)


def test_with_the_master_gone_a_consumer_reads_from_the_slave_and_its_offsets_reach_the_master_again(
        ha: Cluster) -> None:
    master = _start(ha, "m")
    slave = _start(ha, "s", broker_role=BrokerRole.SLAVE, broker_id=1)
    mq = MessageQueue("TopicBack", "broker-ha", 0)
    with Producer("ha-p", namesrv=ha.namesrv_addr) as producer:
        for i in range(40):
            producer.send(Message("TopicBack", f"b{i}".encode()), queue=mq)
    wait_until(lambda: _caught_up(ha, master, slave), 30, "the slave to catch up")
    wait_until(lambda: slave.broker.topic_config_manager.get("TopicBack") is not None, 20,  # type: ignore
               "the slave to copy the topic")
    _stop(ha, master)
    consumer = PullConsumer("g-back", namesrv=ha.namesrv_addr, **FAST)
    consumer.start()
    consumer.assign([mq])
    consumer.seek(mq, 0)
    got: list[bytes] = []
    try:
        wait_until(lambda: len(got.extend(m.body for m in consumer.poll(0.2)) or got) >= 40, 30,
                   "the messages, read from the slave")
        consumer.commit()

        def offset_on(runner: BrokerRunner) -> int:
            async def q() -> int:
                assert runner.broker is not None
                return runner.broker.store.consumer_offsets.query_offset("g-back", "TopicBack", 0)

            return ha.loop.run(q())

        wait_until(lambda: offset_on(slave) == 40, 20, "the commit on the slave")
        master = _start(ha, "m")
        wait_until(lambda: offset_on(master) == 40, 30, "the consumer's offset on the master once it is back")
    finally:
        consumer.shutdown()
    assert sorted(got) == sorted(f"b{i}".encode() for i in range(40))
    _stop(ha, slave, master)


def test_a_master_whose_default_ha_port_is_taken_listens_on_another_and_its_slave_finds_it(ha: Cluster) -> None:
    import socket

    from tests.broker_process import free_port

    while True:  # a fixed port whose neighbour (the default HA port) something else holds
        port = free_port()
        blocker = socket.socket()
        try:
            blocker.bind(("127.0.0.1", port + 1))
            blocker.listen()
            break
        except OSError:
            blocker.close()
    try:
        master = _start(ha, "m", listen_port=port)
        assert master.broker is not None and master.broker.ha_address != f"127.0.0.1:{port + 1}"
        slave = _start(ha, "s", broker_role=BrokerRole.SLAVE, broker_id=1)
        with Producer("ha-p", namesrv=ha.namesrv_addr) as producer:
            producer.send(Message("TopicPort", b"x"))
        wait_until(lambda: _caught_up(ha, master, slave), 30, "the slave to find the master's HA port")
        _stop(ha, slave, master)
    finally:
        blocker.close()


def test_with_acl_on_a_slave_copies_only_with_the_inner_credentials_and_takes_the_users_and_rules_along(
        ha: Cluster) -> None:
    from sluice.client.admin import Admin
    from sluice.client.auth_admin import policy_entry
    from sluice.common.config import AuthCredentials, AuthUser

    inner = AuthCredentials(access_key="sluice-inner", secret_key="inner-secret")
    root = AuthUser(username="root", password="root-secret")
    secured = {"authentication_enabled": True, "authorization_enabled": True, "init_authentication_user": root,
               "inner_client_authentication_credentials": inner}
    master = _start(ha, "m", **secured)
    impostor = _start(ha, "x", broker_role=BrokerRole.SLAVE, broker_id=2,
                      **{**secured, "inner_client_authentication_credentials": AuthCredentials(
                          access_key="sluice-inner", secret_key="guessed")})
    slave = _start(ha, "s", broker_role=BrokerRole.SLAVE, broker_id=1, **secured)
    assert master.broker is not None

    async def write() -> None:
        async with Admin(ha.namesrv_addr, credentials=("root", "root-secret")) as admin:
            await admin.create_user("alice", "alice-secret")
            await admin.create_acl("User:alice", [policy_entry("Topic:TopicAcl", "Pub")])
    ha.loop.run(write())
    with Producer("ha-acl-p", namesrv=ha.namesrv_addr, credentials=("root", "root-secret")) as producer:
        for i in range(20):
            producer.send(Message("TopicAcl", f"m-{i}".encode()))

    def copied() -> bool:
        b = slave.broker
        return (b is not None and _caught_up(ha, master, slave) and b.auth_metadata.get_user("alice") is not None
                and b.auth_metadata.get_acl("User:alice") is not None)

    wait_until(copied, 30, "the slave to copy the log, the users and the rules")

    def refused() -> bool:
        client = impostor.broker.ha_client if impostor.broker is not None else None
        return client is not None and "check signature failed." in (client.last_error or "")

    wait_until(refused, 30, "the master to refuse the slave with the wrong inner secret")
    assert impostor.broker is not None and impostor.broker.store.commit_log.max_offset == 0
    _stop(ha, impostor, slave, master)
