"""ACL 2.0 from the Java remoting client's side (RocketMQ 5.5's ``AclClientRPCHook``): its signature is the one
Sluice checks; a user with the right rules sends and consumes; wrong credentials and missing rules are refused with
RocketMQ's code and remark, and nothing is stored."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.client.admin import Admin
from sluice.client.auth_admin import policy_entry
from sluice.common.config import AuthUser
from tests.conftest import Cluster
from tests.integration.helpers import wait_until
from tests.interop.conftest import stored_messages
from tests.interop.java_clients import JavaBuild, JavaClients

ROOT = ("root", "root-secret")
ALICE = {"access_key": "alice", "secret_key": "alice-secret"}


@pytest.fixture
def acl_sluice(empty_cluster: Cluster) -> Iterator[Cluster]:
    empty_cluster.credentials = ROOT
    empty_cluster.start_broker(authentication_enabled=True, authorization_enabled=True,
                               init_authentication_user=AuthUser(username=ROOT[0], password=ROOT[1]))
    empty_cluster.create_topic("java-acl", 2)
    empty_cluster.create_topic("java-acl-other", 2)

    async def setup() -> None:
        async with Admin(empty_cluster.namesrv_addr, credentials=ROOT) as admin:
            await admin.create_user("alice", "alice-secret")
            await admin.create_acl("User:alice", [policy_entry("Topic:java-acl", "Pub,Sub"),
                                                  policy_entry("Group:java-acl-*", "Sub")])
    asyncio.run(setup())
    yield empty_cluster


def test_the_java_client_with_aclclientrpchook_is_allowed_and_refused_as_its_rules_say(
        acl_sluice: Cluster, java_clients: JavaClients, tmp_path: Path) -> None:
    ns = acl_sluice.namesrv_addr
    sent = java_clients.run("produce", namesrv=ns, topic="java-acl", group="java-acl-pg", mode="sync", count=10,
                            **ALICE)
    assert [r["status"] for r in sent if r["event"] == "sent"] == ["SEND_OK"] * 10

    for topic, creds, remark in [
        ("java-acl-other", ALICE,
         "User:alice has no permission to access Topic:java-acl-other from 127.0.0.1, no matched policies."),
        ("java-acl", {"access_key": "alice", "secret_key": "wrong"}, "check signature failed."),
        ("java-acl", {"access_key": "nobody", "secret_key": "x"}, "User:nobody is not found."),
    ]:
        records = java_clients.run("produce", namesrv=ns, topic=topic, group="java-acl-pg", mode="sync", count=1,
                                   **creds)
        [failed] = [r for r in records if r["event"] == "send-failed"]
        assert failed["code"] == 16 and remark in failed["error"] + failed.get("cause", ""), failed
    assert asyncio.run(stored_messages(ns, "java-acl", ROOT)) == 10
    assert asyncio.run(stored_messages(ns, "java-acl-other", ROOT)) == 0

    stop = tmp_path / "stop"
    consumer = java_clients.start("push-consume", namesrv=ns, topic="java-acl", group="java-acl-readers",
                                  consume_from="CONSUME_FROM_FIRST_OFFSET", stop_file=stop, timeout=90, **ALICE)
    wait_until(lambda: len(consumer.received()) >= 10, 45, "the Java consumer reading the ten messages")
    stop.touch()
    consumer.wait(30)
    assert sorted(r["body"] for r in consumer.received()) == sorted(r["body"] for r in sent if r["event"] == "sent")


def test_the_java_admins_acl_calls_round_trip_as_mqadmin_makes_them(acl_sluice: Cluster, java_build: JavaBuild,
                                                                      tmp_path: Path) -> None:
    """``mqadmin createUser`` … ``listAcl`` are these ``DefaultMQAdminExt`` calls."""
    from tests.interop.java_clients import JavaAdmin
    ns = acl_sluice.namesrv_addr
    addr = acl_sluice.brokers[0].broker_addr
    admin = JavaAdmin(java_build, ns, tmp_path / "admin", credentials=ROOT)
    try:
        admin.call("createUser", addr=addr, username="bob", password="bob-secret", userType="Normal")
        assert admin.call("getUser", addr=addr, username="bob") == {
            "password": "bob-secret", "userStatus": "enable", "userType": "Normal", "username": "bob"}
        admin.call("updateUser", addr=addr, username="bob", password=None, userType=None, userStatus="disable")
        assert admin.call("getUser", addr=addr, username="bob")["userStatus"] == "disable"
        assert sorted(u["username"] for u in admin.call("listUser", addr=addr, filter="")) == ["alice", "bob",
                                                                                                "root"]
        admin.call("createAcl", addr=addr, subject="User:bob", resources=["Topic:t1", "Group:g*"],
                   actions=["Pub", "Sub"], sourceIps=["10.0.0.0/8"], decision="Allow")
        acl = admin.call("getAcl", addr=addr, subject="User:bob")
        assert acl["subject"] == "User:bob"
        [policy] = acl["policies"]
        assert policy["policyType"] == "Custom"
        assert [(e["resource"], e["actions"], e["sourceIps"], e["decision"]) for e in policy["entries"]] == [
            ("Topic:t1", ["Pub", "Sub"], ["10.0.0.0/8"], "Allow"),
            ("Group:g*", ["Pub", "Sub"], ["10.0.0.0/8"], "Allow")]
        admin.call("updateAcl", addr=addr, subject="User:bob", resources=["Topic:t1"], actions=["Sub"],
                   sourceIps=None, decision="Deny")
        admin.call("deleteAcl", addr=addr, subject="User:bob", resource="Group:g*")
        [acl] = admin.call("listAcl", addr=addr, subjectFilter="bob", resourceFilter=None)
        assert [(e["resource"], e["actions"], e["decision"]) for e in acl["policies"][0]["entries"]] == [
            ("Topic:t1", ["Sub"], "Deny")]
        admin.call("deleteUser", addr=addr, username="bob")
        assert admin.call("getUser", addr=addr, username="bob") is None
        with pytest.raises(Exception, match="The user is existed"):
            admin.call("createUser", addr=addr, username="alice", password="x", userType="Normal")
    finally:
        admin.close()
