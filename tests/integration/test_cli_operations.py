"""The operator's verbs named after mqadmin's, against a real broker: status, settings, replication, connections,
group deletion."""

from __future__ import annotations

import json

import sluice
from sluice import ConsumeStatus
from tests.conftest import Cluster
from tests.integration.test_cli import fails, ok


def test_a_brokers_status_and_settings_are_read_and_a_runtime_setting_changed(cluster: Cluster, capsys):
    ns = cluster.namesrv_addr
    status = json.loads(ok(capsys, "cluster", "broker-status", "broker-a", "--namesrv", ns, "--json"))
    assert status["brokerActive"] == "true" and "putTps" in status
    config = json.loads(ok(capsys, "cluster", "broker-config", "broker-a", "--namesrv", ns, "--json"))
    assert config["brokerName"] == "broker-a"
    assert "fileReservedTime = 48 on broker-a" in ok(capsys, "cluster", "broker-config-set", "broker-a",
                                                      "fileReservedTime", "48", "--namesrv", ns)
    assert json.loads(ok(capsys, "cluster", "broker-config", "broker-a", "--namesrv", ns, "--json"))[
        "fileReservedTime"] == "48"
    ok(capsys, "cluster", "broker-config-set", "broker-a", "fileReservedTime", "72", "--namesrv", ns)  # (shared)
    err = fails(capsys, "cluster", "broker-config-set", "broker-a", "listenPort", "1", "--namesrv", ns)
    assert "listenPort cannot be changed while the broker runs" in err
    assert "no broker named 'broker-z'" in fails(capsys, "cluster", "broker-status", "broker-z", "--namesrv", ns)
    ha = json.loads(ok(capsys, "cluster", "ha-status", "--namesrv", ns, "--json"))
    assert ha["broker-a"]["master"] is True and ha["broker-a"]["haConnectionInfo"] == []


def test_a_groups_connections_are_listed_and_the_group_deleted(cluster: Cluster, capsys):
    ns = cluster.namesrv_addr
    cluster.create_topic("ops-cli-t", 2)
    with sluice.Producer("ops-cli-pg", namesrv=ns) as producer:
        producer.send(sluice.Message("ops-cli-t", b"x"))
        consumer = sluice.PushConsumer("ops-cli-g", namesrv=ns, consume_from="first")
        consumer.subscribe("ops-cli-t")
        consumer.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
        consumer.start()
        try:
            conns = json.loads(ok(capsys, "group", "connections", "ops-cli-g", "--namesrv", ns, "--json"))
            assert [c["clientId"] for c in conns["connections"]] == [consumer.aio.client.client_id]
            assert "ops-cli-t" in conns["subscriptions"] and conns["messageModel"] == "CLUSTERING"
            producers = json.loads(ok(capsys, "producer", "connections", "ops-cli-pg", "--namesrv", ns, "--json"))
            assert len(producers) == 1 and producers[0]["broker"] == "broker-a"
            assert producers[0]["language"] == "PYTHON"
        finally:
            consumer.shutdown()
    assert "deleted group ops-cli-g on broker-a" in ok(capsys, "group", "delete", "ops-cli-g", "--namesrv", ns)
    groups = json.loads(ok(capsys, "group", "list", "--namesrv", ns, "--json"))
    assert "ops-cli-g" not in {g["name"] for g in groups}


def test_a_groups_offsets_are_reset_to_the_earliest_and_the_latest(cluster: Cluster, capsys):
    ns = cluster.namesrv_addr
    cluster.create_topic("ops-reset-t", 2)
    with sluice.Producer("ops-reset-pg", namesrv=ns) as producer:
        for i in range(6):
            producer.send(sluice.Message("ops-reset-t", b"m%d" % i))
    ok(capsys, "group", "delete", "ops-reset-g", "--namesrv", ns)  # (no such group yet: nothing to delete)
    consumer = sluice.PushConsumer("ops-reset-g", namesrv=ns, consume_from="first")  # (creates the group)
    consumer.subscribe("ops-reset-t")
    consumer.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    consumer.start()
    consumer.shutdown()
    latest = json.loads(ok(capsys, "group", "reset-offset", "ops-reset-g", "ops-reset-t", "--to", "latest",
                           "--namesrv", ns, "--json"))
    assert sum(latest.values()) == 6 and len(latest) == 2
    assert json.loads(ok(capsys, "group", "progress", "ops-reset-g", "--topic", "ops-reset-t", "--namesrv", ns,
                         "--json"))["totalLag"] == 0
    earliest = json.loads(ok(capsys, "group", "reset-offset", "ops-reset-g", "ops-reset-t", "--to", "earliest",
                             "--namesrv", ns, "--json"))
    assert set(earliest.values()) == {0}
    assert json.loads(ok(capsys, "group", "progress", "ops-reset-g", "--topic", "ops-reset-t", "--namesrv", ns,
                         "--json"))["totalLag"] == 6
    assert "time 'yesterday'" in fails(capsys, "group", "reset-offset", "ops-reset-g", "ops-reset-t", "--to",
                                       "yesterday", "--namesrv", ns)
