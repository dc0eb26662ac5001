"""RouteInfoManager: registration, routes, expiry, connection loss, unregistration, cluster info, admin ops."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sluice.common.structs import DataVersion, TopicConfig
from sluice.common.sysflag import PERM_READ, PERM_WRITE
from sluice.namesrv.register_broker_body import TopicConfigSerializeWrapper
from sluice.namesrv.route_info_manager import RouteInfoManager

A_ADDR, A_SLAVE, B_ADDR = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


def wrapper(*topics: str | TopicConfig, counter: int = 1) -> TopicConfigSerializeWrapper:
    tcs = [t if isinstance(t, TopicConfig) else TopicConfig(t, 4, 4) for t in topics]
    return TopicConfigSerializeWrapper(DataVersion(1000, counter), {tc.topic_name: tc for tc in tcs})


def register(rim: RouteInfoManager, name: str = "broker-a", addr: str = A_ADDR, broker_id: int = 0,
             topics: TopicConfigSerializeWrapper | None = None, now: int = 0, conn: object = "conn-a",
             cluster: str = "DefaultCluster", ha: str = ""):
    return rim.register_broker(cluster, addr, name, broker_id, ha, topics if topics is not None else wrapper("T"),
                               now, conn)


def test_registered_master_serves_its_topics():
    rim = RouteInfoManager()
    result = register(rim, topics=wrapper("T", TopicConfig("U", 2, 3, PERM_READ)))
    assert result.master_addr is None and result.first_registration
    route = rim.pick_topic_route_data("U")
    assert route is not None
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 2, 3, PERM_READ)]
    assert [(b.cluster, b.broker_name, b.broker_addrs) for b in route.broker_datas] == [
        ("DefaultCluster", "broker-a", {0: A_ADDR})]
    assert rim.pick_topic_route_data("nope") is None
    assert rim.all_topics() == ["T", "U"]


def test_route_json_has_rocketmq_field_names():
    rim = RouteInfoManager()
    register(rim)
    d = rim.pick_topic_route_data("T").to_json()
    assert d == {"brokerDatas": [{"brokerAddrs": {"0": A_ADDR}, "brokerName": "broker-a", "cluster": "DefaultCluster"}],
                 "filterServerTable": {},
                 "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                                 "writeQueueNums": 4}]}


def test_two_brokers_serving_one_topic_both_appear_only_brokers_serving_it():
    rim = RouteInfoManager()
    register(rim, "broker-b", B_ADDR, topics=wrapper("T", "OnlyB"), conn="conn-b")
    register(rim, "broker-a", A_ADDR, topics=wrapper("T", "OnlyA"))
    route = rim.pick_topic_route_data("T")
    assert [q.broker_name for q in route.queue_datas] == ["broker-a", "broker-b"]
    assert [b.broker_name for b in route.broker_datas] == ["broker-a", "broker-b"]
    only_a = rim.pick_topic_route_data("OnlyA")
    assert [b.broker_name for b in only_a.broker_datas] == ["broker-a"]


def test_slave_registration_adds_its_address_under_id_1_and_learns_the_master():
    rim = RouteInfoManager()
    register(rim, ha="10.0.0.1:10912")
    result = register(rim, addr=A_SLAVE, broker_id=1, topics=wrapper("SlaveOnly"), conn="conn-s")
    assert (result.master_addr, result.ha_server_addr) == (A_ADDR, "10.0.0.1:10912")
    assert rim.pick_topic_route_data("T").broker_datas[0].broker_addrs == {0: A_ADDR, 1: A_SLAVE}
    # A slave's topic table does not create routes.
    assert rim.pick_topic_route_data("SlaveOnly") is None


def test_slave_without_live_master_gets_no_master_addr():
    rim = RouteInfoManager()
    result = register(rim, addr=A_SLAVE, broker_id=1)
    assert result.master_addr is None and result.ha_server_addr is None


def test_slave_promoted_to_master_gives_up_its_old_id():
    rim = RouteInfoManager()
    register(rim, addr=A_SLAVE, broker_id=1)
    register(rim, addr=A_SLAVE, broker_id=0, topics=wrapper("T", counter=2))
    assert rim.pick_topic_route_data("T").broker_datas[0].broker_addrs == {0: A_SLAVE}


def test_master_topic_table_replaces_its_queue_data():
    rim = RouteInfoManager()
    register(rim, "broker-b", B_ADDR, topics=wrapper("Shared"), conn="conn-b")
    register(rim, topics=wrapper("Shared", "Gone", counter=1))
    register(rim, topics=wrapper("Shared", TopicConfig("New", 8, 8), counter=2))
    assert rim.pick_topic_route_data("Gone") is None
    assert rim.pick_topic_route_data("New").queue_datas[0].write_queue_nums == 8
    assert [q.broker_name for q in rim.pick_topic_route_data("Shared").queue_datas] == ["broker-a", "broker-b"]


def test_changed_queue_counts_replace_the_old_ones():
    rim = RouteInfoManager()
    register(rim, topics=wrapper(TopicConfig("T", 4, 4), counter=1))
    register(rim, topics=wrapper(TopicConfig("T", 16, 8), counter=2))
    q = rim.pick_topic_route_data("T").queue_datas[0]
    assert (q.read_queue_nums, q.write_queue_nums) == (16, 8)


def test_unchanged_data_version_keeps_admin_changes_but_restores_deleted_topics():
    rim = RouteInfoManager()
    register(rim, topics=wrapper("T", "U", counter=5))
    assert rim.wipe_write_perm_of_broker("broker-a") == 2
    rim.delete_topic("U")
    register(rim, topics=wrapper("T", "U", counter=5), now=1)
    assert rim.pick_topic_route_data("T").queue_datas[0].perm == PERM_READ
    assert rim.pick_topic_route_data("U") is not None
    assert rim.add_write_perm_of_broker("broker-a") == 2
    assert rim.pick_topic_route_data("T").queue_datas[0].perm == PERM_READ | PERM_WRITE


def test_registration_without_topic_table_keeps_queue_data():
    rim = RouteInfoManager()
    register(rim, topics=wrapper("T"))
    rim.register_broker("DefaultCluster", A_ADDR, "broker-a", 0, "", None, 5, "conn-a")
    assert rim.pick_topic_route_data("T") is not None


def test_silent_broker_expires_and_its_topics_go():
    rim = RouteInfoManager(broker_channel_expired_time=100)
    register(rim, topics=wrapper("T", "OnlyA"), now=0)
    register(rim, "broker-b", B_ADDR, topics=wrapper("T"), now=50, conn="conn-b")
    assert rim.scan_not_active_broker(100) == []
    dropped = rim.scan_not_active_broker(101)
    assert [d.broker_addr for d in dropped] == [A_ADDR]
    assert rim.pick_topic_route_data("OnlyA") is None
    assert [b.broker_name for b in rim.pick_topic_route_data("T").broker_datas] == ["broker-b"]
    assert rim.cluster_info().cluster_addr_table == {"DefaultCluster": {"broker-b"}}


def test_re_registration_keeps_a_broker_alive():
    rim = RouteInfoManager(broker_channel_expired_time=100)
    register(rim, now=0)
    register(rim, now=90)
    assert rim.scan_not_active_broker(150) == []
    rim.update_broker_info_update_timestamp(A_ADDR, 180)
    assert rim.scan_not_active_broker(250) == []
    assert len(rim.scan_not_active_broker(281)) == 1


def test_per_broker_timeout_overrides_the_default():
    rim = RouteInfoManager(broker_channel_expired_time=100)
    rim.register_broker("C", A_ADDR, "broker-a", 0, "", wrapper("T"), 0, "conn", timeout_ms=1000)
    assert rim.scan_not_active_broker(500) == []
    assert len(rim.scan_not_active_broker(1001)) == 1


def test_closed_connection_drops_only_its_brokers():
    rim = RouteInfoManager()
    register(rim, conn="conn-a")
    register(rim, addr=A_SLAVE, broker_id=1, conn="conn-a")
    register(rim, "broker-b", B_ADDR, conn="conn-b")
    dropped = rim.on_connection_closed("conn-a")
    assert sorted(d.broker_addr for d in dropped) == [A_ADDR, A_SLAVE]
    assert sorted(rim.cluster_info().broker_addr_table) == ["broker-b"]
    assert rim.on_connection_closed("conn-a") == []


def test_reconnected_broker_survives_its_old_connection_closing():
    rim = RouteInfoManager()
    register(rim, conn="old")
    register(rim, conn="new")
    assert rim.on_connection_closed("old") == []
    assert rim.pick_topic_route_data("T") is not None


def test_master_dropped_slave_remains_keeps_the_route_for_reading():
    rim = RouteInfoManager()
    register(rim, conn="m")
    register(rim, addr=A_SLAVE, broker_id=1, conn="s")
    rim.on_connection_closed("m")
    route = rim.pick_topic_route_data("T")
    assert route.broker_datas[0].broker_addrs == {1: A_SLAVE}
    assert route.publish_queues("T") == []
    assert len(route.subscribe_queues("T")) == 4


def test_unregister_removes_the_broker_and_its_topics():
    rim = RouteInfoManager()
    register(rim, topics=wrapper("T", "OnlyA"))
    register(rim, "broker-b", B_ADDR, topics=wrapper("T"), conn="b")
    assert rim.unregister_broker("DefaultCluster", A_ADDR, "broker-a", 0)
    assert rim.pick_topic_route_data("OnlyA") is None
    assert [q.broker_name for q in rim.pick_topic_route_data("T").queue_datas] == ["broker-b"]
    assert A_ADDR not in rim.broker_live_table
    assert not rim.unregister_broker("DefaultCluster", A_ADDR, "broker-a", 0)
    assert rim.unregister_broker("DefaultCluster", B_ADDR, "broker-b", 0)
    assert rim.all_topics() == [] and rim.cluster_info().to_json() == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_unregister_with_a_stale_address_leaves_the_new_one():
    rim = RouteInfoManager()
    register(rim, addr="10.0.0.9:1", conn="old")
    register(rim, addr=A_ADDR, conn="new")
    rim.unregister_broker("DefaultCluster", "10.0.0.9:1", "broker-a", 0)
    assert rim.pick_topic_route_data("T").broker_datas[0].broker_addrs == {0: A_ADDR}


def test_cluster_info_and_topics_by_cluster():
    rim = RouteInfoManager()
    register(rim, topics=wrapper("T", "A1"))
    register(rim, addr=A_SLAVE, broker_id=1, conn="s")
    register(rim, "broker-b", B_ADDR, topics=wrapper("T", "B1"), cluster="Other", conn="b")
    info = rim.cluster_info().to_json()
    assert info == {
        "brokerAddrTable": {
            "broker-a": {"brokerAddrs": {"0": A_ADDR, "1": A_SLAVE}, "brokerName": "broker-a",
                         "cluster": "DefaultCluster"},
            "broker-b": {"brokerAddrs": {"0": B_ADDR}, "brokerName": "broker-b", "cluster": "Other"}},
        "clusterAddrTable": {"DefaultCluster": ["broker-a"], "Other": ["broker-b"]}}
    assert rim.topics_by_cluster("DefaultCluster") == ["A1", "T"]
    assert rim.topics_by_cluster("Other") == ["B1", "T"]
    assert rim.topics_by_cluster("Nope") == []
    topics, addr = rim.system_topics()
    assert topics == ["DefaultCluster", "Other", "broker-a", "broker-b"] and addr in (A_ADDR, B_ADDR)


def test_delete_topic_everywhere_or_in_one_cluster():
    rim = RouteInfoManager()
    register(rim, topics=wrapper("T"))
    register(rim, "broker-b", B_ADDR, topics=wrapper("T"), cluster="Other", conn="b")
    rim.delete_topic("T", "Other")
    assert [q.broker_name for q in rim.pick_topic_route_data("T").queue_datas] == ["broker-a"]
    rim.delete_topic("T")
    assert rim.pick_topic_route_data("T") is None


def test_data_version_tracking():
    rim = RouteInfoManager()
    assert rim.is_broker_topic_config_changed(A_ADDR, DataVersion(1000, 1))
    assert rim.query_broker_data_version(A_ADDR) is None
    register(rim, topics=wrapper("T", counter=3))
    assert not rim.is_broker_topic_config_changed(A_ADDR, DataVersion(1000, 3))
    assert rim.is_broker_topic_config_changed(A_ADDR, DataVersion(1000, 4))
    assert rim.query_broker_data_version(A_ADDR) == DataVersion(1000, 3)


def test_returned_routes_are_copies():
    rim = RouteInfoManager()
    register(rim)
    route = rim.pick_topic_route_data("T")
    route.queue_datas[0].perm = 0
    route.broker_datas[0].broker_addrs[5] = "x"
    again = rim.pick_topic_route_data("T")
    assert again.queue_datas[0].perm == PERM_READ | PERM_WRITE and 5 not in again.broker_datas[0].broker_addrs


# == invariants under any sequence of operations ===================================================
NAMES = st.sampled_from(["broker-a", "broker-b"])
ADDRS = st.sampled_from(["h1:1", "h2:1", "h3:1"])
TOPIC_SETS = st.sets(st.sampled_from(["T1", "T2", "T3"]), max_size=3)


class RouteTables(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rim = RouteInfoManager(broker_channel_expired_time=10)
        self.now = 0

    @rule(name=NAMES, addr=ADDRS, broker_id=st.integers(0, 2), topics=TOPIC_SETS, counter=st.integers(0, 2),
          cluster=st.sampled_from(["C1", "C2"]), conn=st.integers(0, 2))
    def register(self, name: str, addr: str, broker_id: int, topics: set[str], counter: int, cluster: str,
                 conn: int) -> None:
        self.rim.register_broker(cluster, addr, name, broker_id, "", wrapper(*sorted(topics), counter=counter),
                                 self.now, conn)

    @rule(name=NAMES, addr=ADDRS, broker_id=st.integers(0, 2))
    def unregister(self, name: str, addr: str, broker_id: int) -> None:
        self.rim.unregister_broker("C1", addr, name, broker_id)

    @rule(ms=st.integers(0, 15))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        self.rim.scan_not_active_broker(self.now)

    @rule(conn=st.integers(0, 2))
    def connection_closes(self, conn: int) -> None:
        self.rim.on_connection_closed(conn)

    @rule(topic=st.sampled_from(["T1", "T2", "T3"]), cluster=st.sampled_from([None, "C1", "C2"]))
    def delete_topic(self, topic: str, cluster: str | None) -> None:
        self.rim.delete_topic(topic, cluster)

    @invariant()
    def tables_agree(self) -> None:
        rim = self.rim
        for topic, qds in rim.topic_queue_table.items():
            assert qds, topic
            assert set(qds) <= set(rim.broker_addr_table), topic
            route = rim.pick_topic_route_data(topic)
            assert route is not None and route.broker_datas
        for name, bd in rim.broker_addr_table.items():
            assert bd.broker_addrs, name
            assert set(bd.broker_addrs.values()) <= set(rim.broker_live_table), name
            assert any(name in names for names in rim.cluster_addr_table.values()), name
        for names in rim.cluster_addr_table.values():
            assert names and names <= set(rim.broker_addr_table)


TestRouteTables = RouteTables.TestCase
TestRouteTables.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
