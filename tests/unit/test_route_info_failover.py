"""RouteInfoManager through a master/slave failover (RocketMQ RouteInfoManager.registerBroker: one address holds
one id in its group; the newest registration of an id wins; a dead master leaves the route at once)."""

from __future__ import annotations

from sluice.common.structs import DataVersion, TopicConfig
from sluice.namesrv.register_broker_body import TopicConfigSerializeWrapper
from sluice.namesrv.route_info_manager import RouteInfoManager

OLD_MASTER, SLAVE = "10.0.0.1:10911", "10.0.0.2:10911"


def wrapper(counter: int = 1, epoch: int = 0, perm: int = 6) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(DataVersion(1000, counter, epoch), {"T": TopicConfig("T", 4, 4, perm)})


def register(rim: RouteInfoManager, addr: str, broker_id: int, conn: str, now: int = 0, counter: int = 1,
             epoch: int = 0, perm: int = 6):
    return rim.register_broker("DefaultCluster", addr, "broker-a", broker_id, addr.replace("10911", "10912"),
                               wrapper(counter, epoch, perm), now, conn)


def group(rim: RouteInfoManager) -> dict[int, str]:
    route = rim.pick_topic_route_data("T")
    assert route is not None
    return route.broker_datas[0].broker_addrs


def test_master_connection_closing_leaves_a_route_without_master_and_with_its_slave():
    rim = RouteInfoManager()
    register(rim, OLD_MASTER, 0, "m")
    register(rim, SLAVE, 1, "s")
    rim.on_connection_closed("m")
    assert group(rim) == {1: SLAVE}
    assert rim.pick_topic_route_data("T").publish_queues("T") == []


def test_silent_master_expires_and_leaves_its_slave():
    rim = RouteInfoManager(broker_channel_expired_time=1000)
    register(rim, OLD_MASTER, 0, "m", now=0)
    register(rim, SLAVE, 1, "s", now=900)
    assert [d.broker_addr for d in rim.scan_not_active_broker(1500)] == [OLD_MASTER]
    assert group(rim) == {1: SLAVE}


def test_promoted_slave_takes_id_0_and_gives_up_id_1():
    rim = RouteInfoManager()
    register(rim, OLD_MASTER, 0, "m")
    register(rim, SLAVE, 1, "s")
    rim.on_connection_closed("m")
    result = register(rim, SLAVE, 0, "s", counter=2)
    assert result.master_addr is None
    assert group(rim) == {0: SLAVE}
    assert rim.broker_live_table[SLAVE].broker_id == 0
    assert [q.queue_id for q in rim.pick_topic_route_data("T").publish_queues("T")] == [0, 1, 2, 3]


def test_new_master_address_replaces_a_master_still_registered():
    rim = RouteInfoManager()
    register(rim, OLD_MASTER, 0, "m")
    register(rim, SLAVE, 1, "s")
    register(rim, SLAVE, 0, "s", counter=2)
    assert group(rim) == {0: SLAVE}
    # The old master's going later does not take the new master with it.
    rim.on_connection_closed("m")
    assert group(rim) == {0: SLAVE}
    assert SLAVE in rim.broker_live_table and OLD_MASTER not in rim.broker_live_table


def test_old_master_back_as_a_slave_gets_the_new_master():
    rim = RouteInfoManager()
    register(rim, OLD_MASTER, 0, "m")
    register(rim, SLAVE, 1, "s")
    rim.on_connection_closed("m")
    register(rim, SLAVE, 0, "s", counter=2)
    result = register(rim, OLD_MASTER, 1, "m2")
    assert group(rim) == {0: SLAVE, 1: OLD_MASTER}
    assert (result.master_addr, result.ha_server_addr) == (SLAVE, "10.0.0.2:10912")


def test_demoted_master_registering_as_slave_gives_up_id_0_in_place():
    rim = RouteInfoManager()
    register(rim, OLD_MASTER, 0, "m")
    register(rim, OLD_MASTER, 1, "m")
    assert group(rim) == {1: OLD_MASTER}
    assert rim.pick_topic_route_data("T").publish_queues("T") == []


def test_replaced_master_still_registering_under_an_older_epoch_is_ignored_and_leaves_the_route():
    rim = RouteInfoManager()
    register(rim, OLD_MASTER, 0, "m", epoch=1)
    register(rim, SLAVE, 1, "s", epoch=1)
    # The slave is elected (epoch 2) while the old master, cut off from its group, still reaches the name server.
    register(rim, SLAVE, 0, "s", counter=2, epoch=2)
    assert group(rim) == {0: SLAVE}
    result = register(rim, OLD_MASTER, 0, "m", counter=5, epoch=1)
    assert result.rejected and result.master_addr is None
    assert group(rim) == {0: SLAVE}
    assert OLD_MASTER not in rim.broker_live_table
    assert [q.queue_id for q in rim.pick_topic_route_data("T").publish_queues("T")] == [0, 1, 2, 3]


def test_newer_epoch_replaces_an_older_master_of_the_id():
    rim = RouteInfoManager()
    register(rim, OLD_MASTER, 0, "m", epoch=1)
    result = register(rim, SLAVE, 0, "s", counter=2, epoch=2)
    assert not result.rejected
    assert group(rim) == {0: SLAVE}


def test_fenced_master_registering_read_only_leaves_no_writable_queue():
    rim = RouteInfoManager()
    register(rim, OLD_MASTER, 0, "m", epoch=1)
    register(rim, OLD_MASTER, 0, "m", counter=2, epoch=1, perm=4)
    assert rim.pick_topic_route_data("T").publish_queues("T") == []


def test_a_slave_id_taken_by_another_address_is_not_refused_for_its_state_version():
    """The state version tells masters apart; a slave moved to another address (an empty store, version 0)
    replaces the old one of its id at once, as before."""
    rim = RouteInfoManager()
    register(rim, OLD_MASTER, 0, "m", epoch=5)
    register(rim, SLAVE, 1, "s", epoch=5)
    moved = "10.0.0.9:10911"
    result = register(rim, moved, 1, "s2", epoch=0)
    assert not result.rejected and group(rim)[1] == moved
