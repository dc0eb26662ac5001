"""Brokers going away: offsets survive a restart, dead brokers leave the routes, producers send around them."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from pathlib import Path

from sluice import ConsumeStatus, Message, Producer, PushConsumer
from sluice.common.structs import TopicRouteData
from sluice.namesrv.default_request_processor import monotonic_ms
from sluice.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from tests.conftest import Cluster
from tests.integration.helpers import committed_to_end, wait_until

# == helpers ==========================================================================================


def small_store_config(tmp_path: Path, **broker: int) -> str:
    """A TOML file for spawned brokers: small store files, and the given [broker] settings."""
    path = tmp_path / f"broker-{len(list(tmp_path.glob('broker-*.toml')))}.toml"
    lines = ["[broker]"] + [f"{k} = {v}" for k, v in broker.items()]
    lines += ["[store]", "mapped_file_size_commit_log = 8388608", "mapped_file_size_consume_queue = 400000",
              "max_hash_slot_num = 20000", "max_index_num = 80000"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def invoke(cluster: Cluster, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
    """One raw request from the servers' loop (a fresh connection each time)."""

    async def one() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(addr, cmd, timeout_ms)
        finally:
            await client.close()

    return cluster.loop.run(one())


def route(cluster: Cluster, topic: str) -> TopicRouteData | None:
    resp = invoke(cluster, cluster.namesrv_addr,
                  RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return TopicRouteData.from_json(json.loads(resp.body))


def brokers_of(cluster: Cluster, topic: str) -> set[str]:
    r = route(cluster, topic)
    return {q.broker_name for q in r.queue_datas} if r else set()


def create_topic(cluster: Cluster, addr: str, topic: str, queues: int) -> None:
    resp = invoke(cluster, addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def max_offsets(cluster: Cluster, addr: str, topic: str, queues: int) -> list[int]:
    out = []
    for q in range(queues):
        resp = invoke(cluster, addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                                             {"topic": topic, "queueId": str(q)}))
        out.append(int(resp.ext_fields["offset"]))
    return out


class Collector:
    """A push consumer listener that records bodies and can wait for a count."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.cond = threading.Condition()

    def __call__(self, msgs) -> ConsumeStatus:
        with self.cond:
            self.bodies.extend(m.body for m in msgs)
            self.cond.notify_all()
        return ConsumeStatus.CONSUME_SUCCESS

    def wait_for(self, n: int, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: len(self.bodies) >= n, timeout)


def consume(cluster: Cluster, group: str, topic: str, n: int, timeout: float = 60) -> list[bytes]:
    """Start a consumer of ``group``, wait for ``n`` messages and until it committed every queue of ``topic`` to
    its end (all it pulled is consumed: a message it was to get again would have come by then), shut it down."""
    got = Collector()
    consumer = PushConsumer(group, namesrv=cluster.namesrv_addr, consume_from="first",
                            persist_consumer_offset_interval=200)
    consumer.subscribe(topic, "*")
    consumer.listener(got)
    consumer.start()
    try:
        assert got.wait_for(n, timeout), f"{group} got {len(got.bodies)} of {n} messages"
        wait_until(lambda: committed_to_end(cluster, group, topic, 4), timeout, f"{group} to commit {topic}")
    finally:
        consumer.shutdown()  # commits the offsets
    return got.bodies


# == offsets across a restart =========================================================================
def test_committed_offsets_survive_a_graceful_broker_restart(cluster):
    broker = cluster.brokers[0]
    topic, group = "fo-offsets", "fo-offsets-group"
    with Producer("fo-producers", namesrv=cluster.namesrv_addr) as producer:
        first = [b"before-%d" % i for i in range(20)]
        for body in first:
            producer.send(Message(topic, body))
    assert sorted(consume(cluster, group, topic, 20)) == sorted(first)

    committed = {q: broker.store.consumer_offsets.query_offset(group, topic, q) for q in range(4)}
    assert sum(committed.values()) == 20, committed
    store_dir = Path(broker.config.store.store_path_root_dir)

    broker = cluster.restart_broker(broker)

    # What the stopped broker wrote: RocketMQ's consumerOffset.json, "<topic>@<group>" → queue id → offset.
    on_disk = json.loads((store_dir / "config" / "consumerOffset.json").read_text())
    assert {int(q): o for q, o in on_disk["offsetTable"][f"{topic}@{group}"].items()} == committed
    assert {q: broker.store.consumer_offsets.query_offset(group, topic, q) for q in range(4)} == committed

    # The restarted broker has a new address: a new producer and consumer learn it from the name server.
    with Producer("fo-producers", namesrv=cluster.namesrv_addr) as producer:
        second = [b"after-%d" % i for i in range(10)]
        for body in second:
            producer.send(Message(topic, body))
    # consume_from="first" only applies to queues with no committed offset: the group continues where it left off.
    got = consume(cluster, group, topic, 10)
    assert sorted(got) == sorted(second), "the group re-consumed messages it had committed before the restart"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_consumer_running_through_a_broker_restart_neither_loses_nor_repeats(empty_cluster):
    # A fixed port: the restarted broker is where clients already know it is (as in production).
    broker = empty_cluster.start_broker("broker-a", listen_port=_free_port())
    topic, group = "fo-live", "fo-live-group"
    got = Collector()
    with Producer("fo-producers", namesrv=empty_cluster.namesrv_addr) as producer:
        first = [b"before-%d" % i for i in range(20)]
        for body in first:
            producer.send(Message(topic, body))
        consumer = PushConsumer(group, namesrv=empty_cluster.namesrv_addr, consume_from="first",
                                pull_time_delay_millis_when_exception=200, persist_consumer_offset_interval=200)
        consumer.subscribe(topic, "*")
        consumer.listener(got)
        consumer.start()
        try:
            assert got.wait_for(20, 60)
            broker = empty_cluster.restart_broker(broker)
            second = [b"after-%d" % i for i in range(10)]
            for body in second:
                producer.send(Message(topic, body))
            assert got.wait_for(30, 60), f"got {len(got.bodies)} of 30"
            # Anything re-delivered would come before the commits reach the ends of the queues.
            wait_until(lambda: committed_to_end(empty_cluster, group, topic, 4), 60, "every queue committed")
        finally:
            consumer.shutdown()
    assert sorted(got.bodies) == sorted(first + second)
    assert sum(broker.store.consumer_offsets.query_offset(group, topic, q) for q in range(4)) == 30


def test_consumer_offsets_reach_consumer_offset_json_while_the_broker_runs(empty_cluster):
    broker = empty_cluster.start_broker("broker-a", store_flush_consumer_offset_interval=100,
                                        store_flush_interval_consume_queue=50)
    topic, group = "fo-persist", "fo-persist-group"
    with Producer("fo-producers", namesrv=empty_cluster.namesrv_addr) as producer:
        for i in range(8):
            producer.send(Message(topic, b"m-%d" % i))
    consume(empty_cluster, group, topic, 8)
    path = Path(broker.config.store.store_path_root_dir) / "config" / "consumerOffset.json"

    def persisted() -> dict[int, int]:
        try:
            table = json.loads(path.read_text())["offsetTable"]
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return {int(q): o for q, o in table.get(f"{topic}@{group}", {}).items()}

    wait_until(lambda: sum(persisted().values()) == 8, 60, "the committed offsets to be written to disk")
    assert broker.running  # written by the periodic flush, not by a shutdown


def test_offsets_written_to_consumer_offset_json_survive_a_kill(empty_cluster, spawn_broker, tmp_path):
    config = small_store_config(tmp_path)
    with open(config, "a") as f:
        f.write("flush_consumer_offset_interval = 100\nflush_interval_consume_queue = 50\n")
    proc = spawn_broker(empty_cluster.namesrv_addr, "broker-k", "--config", config)
    topic, group = "fo-kill-offsets", "fo-kill-group"
    create_topic(empty_cluster, proc.addr, topic, 2)
    for q, offset in ((0, 7), (1, 3)):
        resp = invoke(empty_cluster, proc.addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": str(q), "commitOffset": str(offset)}))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    path = tmp_path / "broker-k" / "config" / "consumerOffset.json"
    wait_until(lambda: path.exists() and f"{topic}@{group}" in path.read_text(), 60, "consumerOffset.json")
    proc.kill()  # no shutdown: only what the file holds can survive

    again = spawn_broker(empty_cluster.namesrv_addr, "broker-k", "--config", config)

    def committed(q: int) -> str:
        resp = invoke(empty_cluster, again.addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": str(q)}))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return resp.ext_fields["offset"]

    assert [committed(0), committed(1)] == ["7", "3"]


# == dead brokers and the name server =================================================================
def _live(cluster: Cluster, addr: str) -> tuple[int | None, int]:
    """(last registration time of ``addr`` on the name server or None, the name server's clock), in ms."""

    async def read() -> tuple[int | None, int]:
        live = cluster.namesrv.route_info.broker_live_table.get(addr)
        return (live.last_update_ms if live else None), monotonic_ms()

    return cluster.loop.run(read())


def test_stopped_broker_leaves_the_route_after_the_expiry_not_before(tmp_path, server_loop, spawn_broker):
    expiry, scan = 2000, 50
    cluster = Cluster(tmp_path, server_loop, namesrv_settings={"broker_channel_expired_time": expiry,
                                                               "scan_not_active_broker_interval": scan})
    try:
        proc = spawn_broker(cluster.namesrv_addr, "broker-p",
                            "--config", small_store_config(tmp_path, register_name_server_period=300))
        create_topic(cluster, proc.addr, "fo-expiry", 2)
        wait_until(lambda: brokers_of(cluster, "fo-expiry") == {"broker-p"}, 60, "the topic's route")
        # Registering every 300 ms keeps a live broker in the routes: it stays there, looked at all along, for
        # longer than the expiry (this wait is the duration under test, not a synchronisation).
        stay_until = time.monotonic() + expiry / 1000 + 0.3
        while time.monotonic() < stay_until:
            assert brokers_of(cluster, "fo-expiry") == {"broker-p"}, "a live broker left the routes"
            time.sleep(0.05)

        proc.stop()  # SIGSTOP: silent, but its TCP connections stay open
        last_seen = None
        while True:
            seen, now = _live(cluster, proc.addr)
            if seen is None:
                break
            # The scan comes every 50 ms; a busy machine may delay it, never by seconds.
            assert now - seen <= expiry + scan + 3000, "the silent broker outlived its expiry"
            last_seen = seen
            time.sleep(0.01)
        dropped_after = now - last_seen
        assert dropped_after >= expiry - 20, f"dropped {dropped_after} ms after its last registration"
        assert brokers_of(cluster, "fo-expiry") == set()

        proc.cont()  # it registers again and the route comes back
        wait_until(lambda: brokers_of(cluster, "fo-expiry") == {"broker-p"}, 60, "the resumed broker's route")
    finally:
        cluster.close()


def test_killed_broker_is_dropped_when_its_connection_closes(empty_cluster, spawn_broker, tmp_path):
    # The name server's expiry is the default 120 s: only the closed connection can explain a drop well before.
    proc = spawn_broker(empty_cluster.namesrv_addr, "broker-p", "--config", small_store_config(tmp_path))
    create_topic(empty_cluster, proc.addr, "fo-killed", 2)
    wait_until(lambda: brokers_of(empty_cluster, "fo-killed") == {"broker-p"}, 60, "the topic's route")
    t0 = time.monotonic()
    proc.kill()
    wait_until(lambda: brokers_of(empty_cluster, "fo-killed") == set(), 60, "the killed broker to be dropped")
    assert time.monotonic() - t0 < 60
    assert _live(empty_cluster, proc.addr)[0] is None


# == producers and two brokers ========================================================================
def test_producer_spreads_sends_over_two_brokers_and_keeps_sending_when_one_is_killed(cluster, spawn_broker,
                                                                                     tmp_path):
    broker_a = cluster.brokers[0]
    proc = spawn_broker(cluster.namesrv_addr, "broker-p", "--config", small_store_config(tmp_path))
    topic = "fo-spread"
    for addr in (broker_a.broker_addr, proc.addr):
        create_topic(cluster, addr, topic, 4)
    wait_until(lambda: brokers_of(cluster, topic) == {"broker-a", "broker-p"}, 60, "both brokers in the route")

    with Producer("fo-spread-producers", namesrv=cluster.namesrv_addr) as producer:
        spread = Counter(producer.send(Message(topic, b"spread-%d" % i)).queue.broker_name for i in range(40))
        assert spread["broker-a"] >= 10 and spread["broker-p"] >= 10, spread

        # Kill broker-p from another thread while sends keep flowing (some are in flight when it dies).
        sent: list[str] = []
        failures: list[Exception] = []
        killed = threading.Event()
        dead_from: list[int] = []

        def killer() -> None:
            while len(sent) < 50:
                time.sleep(0.001)
            proc.kill()  # SIGKILL, and reaped: nothing it answers can come after this
            dead_from.append(len(sent) + 1)  # + the one send that may have been in flight
            killed.set()

        t = threading.Thread(target=killer)
        t.start()
        try:
            deadline = time.monotonic() + 60
            i = 0
            while (not killed.is_set() or len(sent) < dead_from[0] + 100) and time.monotonic() < deadline:
                try:
                    sent.append(producer.send(Message(topic, b"stream-%d" % i)).queue.broker_name)
                except Exception as exc:  # counted, not raised: the assertion below reports them
                    failures.append(exc)
                i += 1
        finally:
            t.join(10)
        # Sends did go to the dead broker and were retried elsewhere: it is now avoided.
        assert not producer.aio.faults.is_available("broker-p")
    assert killed.is_set()
    assert not failures, f"{len(failures)} sends failed after the kill: {failures[:3]}"
    after_kill = sent[dead_from[0]:]
    assert len(after_kill) >= 99 and set(after_kill) == {"broker-a"}, Counter(after_kill)
    # Every send broker-a acknowledged is in its store.
    acked_a = spread["broker-a"] + sent.count("broker-a")
    assert sum(max_offsets(cluster, broker_a.broker_addr, topic, 4)) == acked_a


def test_async_sends_in_flight_when_a_broker_is_killed_are_retried_on_the_other(cluster, spawn_broker, tmp_path):
    broker_a = cluster.brokers[0]
    proc = spawn_broker(cluster.namesrv_addr, "broker-p", "--config", small_store_config(tmp_path))
    topic = "fo-async"
    for addr in (broker_a.broker_addr, proc.addr):
        create_topic(cluster, addr, topic, 4)
    wait_until(lambda: brokers_of(cluster, topic) == {"broker-a", "broker-p"}, 60, "both brokers in the route")

    with Producer("fo-async-producers", namesrv=cluster.namesrv_addr) as producer:
        futures = []
        for i in range(2000):
            futures.append(producer.send_async(Message(topic, b"async-%d" % i)))
            if i == 1000:
                futures[900].result(10)  # broker-p has been taking its share...
                proc.kill()  # ... and dies with up to a hundred sends in flight
        brokers, failures = [], []
        for f in futures:
            try:
                brokers.append(f.result(10).queue.broker_name)
            except Exception as exc:
                failures.append(exc)
    assert not failures, f"{len(failures)} of 2000 async sends failed: {failures[:3]}"
    spread = Counter(brokers)
    assert spread["broker-p"] > 0 and spread["broker-a"] > 1000, spread
    assert sum(max_offsets(cluster, broker_a.broker_addr, topic, 4)) == spread["broker-a"]
