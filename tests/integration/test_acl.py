"""ACL 2.0 from Sluice's own clients' side: a broker with authentication and authorization on, users and rules made
over the admin requests, sends and consumption allowed and refused with RocketMQ's answers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.aio import Producer, PullConsumer
from sluice.client.admin import Admin
from sluice.client.auth_admin import policy_entry
from sluice.client.message import Message
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.remoting.codes import ResponseCode
from tests.conftest import Cluster, ServerLoop
from tests.integration.helpers import wait_until

ROOT = ("root", "root-secret")


@pytest.fixture
def acl_cluster(tmp_path: Path, server_loop: ServerLoop) -> Iterator[Cluster]:
    """A name server and broker-a with authentication and authorization on, and the super user root."""
    c = Cluster(tmp_path, server_loop)
    c.credentials = ROOT
    try:
        c.start_broker(authentication_enabled=True, authorization_enabled=True,
                       init_authentication_user=_auth_user(*ROOT))
        yield c
    finally:
        c.close()


def _auth_user(username: str, password: str) -> object:
    from sluice.common.config import AuthUser
    return AuthUser(username=username, password=password)


def run(cluster: Cluster, coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def send_one(ns: str, topic: str, credentials: object, body: bytes = b"x") -> object:
    async with Producer("acl-pg", ns, credentials=credentials, retry_times_when_send_failed=0) as p:
        return await p.send(Message(topic, body), timeout=5)


def refusal(ns: str, topic: str, credentials: object) -> BrokerResponseError:
    with pytest.raises(ClientError) as err:
        asyncio.run(send_one(ns, topic, credentials))
    exc = err.value
    while not isinstance(exc, BrokerResponseError) and exc.__cause__ is not None:
        exc = exc.__cause__  # type: ignore[assignment]
    assert isinstance(exc, BrokerResponseError), repr(err.value)
    assert exc.code == ResponseCode.NO_PERMISSION
    return exc


async def max_offset(ns: str, topic: str) -> int:
    async with Admin(ns, credentials=ROOT) as admin:
        return sum(q.max_offset for q in await admin.topic_status(topic))


def test_sends_are_refused_with_rocketmqs_remarks_unless_signed_by_an_enabled_user_with_a_rule(
        acl_cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    ns = acl_cluster.namesrv_addr
    acl_cluster.create_topic("orders", 2)
    acl_cluster.create_topic("payments", 2)

    async def setup() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            await admin.create_user("alice", "alice-secret")
            await admin.create_user("carol", "carol-secret")
            await admin.create_acl("User:alice", [policy_entry("Topic:orders", "Pub")])
            await admin.update_user("carol", user_status="disable")
    asyncio.run(setup())

    caplog.set_level(logging.INFO, logger="sluice.auth.audit")
    assert refusal(ns, "orders", None).remark == "username cannot be null."
    assert refusal(ns, "orders", ("alice", "wrong")).remark == "check signature failed."
    assert refusal(ns, "orders", ("bob", "whatever")).remark == "User:bob is not found."
    assert refusal(ns, "orders", ("carol", "carol-secret")).remark == "User:carol is disabled."
    assert refusal(ns, "payments", ("alice", "alice-secret")).remark == \
        "User:alice has no permission to access Topic:payments from 127.0.0.1, no matched policies."
    assert asyncio.run(max_offset(ns, "orders")) == 0 and asyncio.run(max_offset(ns, "payments")) == 0

    result = asyncio.run(send_one(ns, "orders", ("alice", "alice-secret")))
    assert result.status.name == "SEND_OK"  # type: ignore[attr-defined]
    assert asyncio.run(max_offset(ns, "orders")) == 1

    audit = [r.getMessage() for r in caplog.records if r.name == "sluice.auth.audit"]
    assert "[AUTHENTICATION] User:alice is authenticated failed with Signature = " in "\n".join(audit)
    assert ("[AUTHORIZATION] Subject = User:alice is Deny Action = Pub from sourceIp = 127.0.0.1 on resource = "
            "Topic:payments for request = 310.") in audit
    assert not any("alice-secret" in line or "root-secret" in line for line in audit)


def test_a_consumer_needs_sub_on_its_topic_and_its_group(acl_cluster: Cluster,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    ns = acl_cluster.namesrv_addr
    acl_cluster.create_topic("events", 1)
    asyncio.run(send_one(ns, "events", ROOT, b"hello"))
    dave = ("dave", "dave-secret")
    caplog.set_level(logging.INFO, logger="sluice.auth.audit")

    async def consume(until: object) -> list[bytes]:
        consumer = PullConsumer("readers", ns, credentials=dave, consume_from="CONSUME_FROM_FIRST_OFFSET")
        consumer.subscribe("events")
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                while not until(got):  # type: ignore[operator]
                    got += [m.body for m in await consumer.poll(timeout=0.2)]
        finally:
            await consumer.shutdown()
        return got

    async def grant(entries: list[dict[str, object]]) -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            if await admin.get_user("dave") is None:
                await admin.create_user("dave", "dave-secret")
            await admin.update_acl("User:dave", entries)

    def refused_group(_: list[bytes]) -> bool:
        return any("Subject = User:dave is Deny Action = Sub from sourceIp = 127.0.0.1 on resource = Group:readers"
                   in r.getMessage() for r in caplog.records)

    asyncio.run(grant([policy_entry("Topic:events", "Sub")]))
    assert asyncio.run(consume(refused_group)) == []
    asyncio.run(grant([policy_entry("Group:read*", "Sub")]))
    assert asyncio.run(consume(lambda got: got)) == [b"hello"]


def test_the_most_specific_rule_decides_and_deny_wins_between_equals(acl_cluster: Cluster) -> None:
    ns = acl_cluster.namesrv_addr
    for t in ("audit_a", "audit_b", "other"):
        acl_cluster.create_topic(t, 1)
    erin = ("erin", "erin-secret")

    async def setup() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            await admin.create_user("erin", "erin-secret")
            await admin.create_acl("User:erin", [policy_entry("*", "All"),
                                                 policy_entry("Topic:*", "Pub", "Deny"),
                                                 policy_entry("Topic:audit*", "Pub"),
                                                 policy_entry("Topic:audit_b", "Pub", "Deny")])
    asyncio.run(setup())
    asyncio.run(send_one(ns, "audit_a", erin))
    assert refusal(ns, "audit_b", erin).remark.endswith("the decision is deny.")
    assert refusal(ns, "other", erin).remark.endswith("the decision is deny.")


def test_users_and_rules_round_trip_survive_a_restart_and_sit_in_an_owner_only_file(acl_cluster: Cluster) -> None:
    ns = acl_cluster.namesrv_addr
    rule = policy_entry("Topic:orders*", ["Pub", "Sub"], source_ips=["10.0.0.0/8", "127.0.0.1"])
    manage_users = policy_entry("Cluster:DefaultCluster", "Update")

    async def write() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            await admin.create_user("frank", "frank-secret")
            await admin.create_acl("User:frank", [rule, manage_users])
            with pytest.raises(BrokerResponseError) as err:
                await admin.create_user("frank", "again")
            assert (err.value.code, err.value.remark) == (ResponseCode.NO_PERMISSION, "The user is existed")
        async with Admin(ns, credentials=("frank", "frank-secret")) as admin:
            with pytest.raises(BrokerResponseError) as err:
                await admin.create_user("mallory", "m", user_type="Super")
            assert (err.value.code, err.value.remark) == (ResponseCode.SYSTEM_ERROR,
                                                          "The super user can only be create by super user")
            with pytest.raises(BrokerResponseError, match="no permission to access Cluster:DefaultCluster"):
                await admin.list_users()
    asyncio.run(write())

    broker = acl_cluster.restart_broker(acl_cluster.brokers[0])
    path = Path(broker.config.store.store_path_config) / "auth.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert b"frank-secret" in path.read_bytes()

    async def read() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            assert await admin.get_user("frank") == {"password": "frank-secret", "userStatus": "enable",
                                                     "userType": "Normal", "username": "frank"}
            assert await admin.get_acl("User:frank") == {
                "policies": [{"entries": [{"actions": ["Pub", "Sub"], "decision": "Allow",
                                           "resource": "Topic:orders*", "sourceIps": ["10.0.0.0/8", "127.0.0.1"]},
                                          {"actions": ["Update"], "decision": "Allow",
                                           "resource": "Cluster:DefaultCluster"}],
                              "policyType": "Custom"}],
                "subject": "User:frank"}
            assert [u["username"] for u in await admin.list_users()] == ["frank", "root"]
            await admin.delete_user("frank")
            assert await admin.get_user("frank") is None
            assert await admin.list_acls() == []
    asyncio.run(read())


@pytest.mark.parametrize("body,remark", [
    ({"subject": "User:gina", "policies": [{"entries": [{"resource": "Topic:t", "actions": ["Fly"],
                                                         "decision": "Allow"}]}]}, "The actions is empty."),
    ({"subject": "User:gina", "policies": [{"entries": [{"resource": "Queue:t", "actions": ["Pub"],
                                                         "decision": "Allow"}]}]}, "The resource is null."),
    ({"subject": "User:gina", "policies": [{"entries": [{"resource": "Topic:t", "actions": ["Pub"],
                                                         "decision": "Maybe"}]}]},
     "The decision is null or illegal."),
    ({"subject": "User:gina", "policies": [{"entries": [{"resource": "Topic:t", "actions": ["Pub"],
                                                         "sourceIps": ["300.1.1.1"], "decision": "Allow"}]}]},
     "The source ip is invalid."),
    ({"subject": "User:nobody", "policies": [{"entries": [{"resource": "Topic:t", "actions": ["Pub"],
                                                           "decision": "Allow"}]}]},
     "The subject of User:nobody is not exist."),
    ({"subject": "User:gina", "policies": [{"entries": [{"resource": "Namespace:a%b", "actions": ["Pub"],
                                                         "decision": "Allow"}]}]},
     "The resource Namespace:a%b names no namespace: namespace 'a%b' may only contain letters, digits, '_' and '-'"),
])
def test_a_bad_rule_is_refused_naming_the_problem_and_changes_nothing(acl_cluster: Cluster, body: dict[str, object],
                                                                      remark: str) -> None:
    ns = acl_cluster.namesrv_addr

    async def go() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            if await admin.get_user("gina") is None:
                await admin.create_user("gina", "gina-secret")
                await admin.create_acl("User:gina", [policy_entry("Topic:kept", "Sub")])
            addr = next(iter((await admin.brokers()).values()))
            with pytest.raises(BrokerResponseError) as err:
                await admin.auth.update_acl(addr, body)
            assert (err.value.code, err.value.remark) == (ResponseCode.NO_PERMISSION, remark)
            acl = await admin.get_acl("User:gina")
            assert acl is not None and [e["resource"] for e in acl["policies"][0]["entries"]] == ["Topic:kept"]
    asyncio.run(go())


def test_the_name_server_takes_writes_only_with_the_inner_credentials_and_routes_for_anyone(
        tmp_path: Path, server_loop: ServerLoop) -> None:
    from sluice.common.config import AuthCredentials
    inner = AuthCredentials(access_key="sluice-inner", secret_key="inner-secret")
    c = Cluster(tmp_path, server_loop, {"authentication_enabled": True,
                                        "inner_client_authentication_credentials": inner})
    c.credentials = ROOT
    try:
        c.start_broker(authentication_enabled=True, init_authentication_user=_auth_user(*ROOT),
                       inner_client_authentication_credentials=inner)  # registers: signed with the inner ones
        c.create_topic("routed", 2)
        ns = c.namesrv_addr

        async def go() -> None:
            async with Admin(ns) as anyone:
                route = await anyone.topic_route("routed")
                assert {q.broker_name for q in route.queue_datas} == {"broker-a"}
                with pytest.raises(BrokerResponseError) as err:
                    await anyone.api.put_kv_config("ORDER_TOPIC_CONFIG", "routed", "broker-a:2")
                assert (err.value.code, err.value.remark) == (ResponseCode.NO_PERMISSION, "username cannot be null.")
            async with Admin(ns, credentials=ROOT) as root:
                with pytest.raises(BrokerResponseError, match="User:root is not found."):
                    await root.api.put_kv_config("ORDER_TOPIC_CONFIG", "routed", "broker-a:2")
            async with Admin(ns, credentials=("sluice-inner", "wrong")) as forged:
                with pytest.raises(BrokerResponseError, match="check signature failed."):
                    await forged.api.put_kv_config("ORDER_TOPIC_CONFIG", "routed", "broker-a:2")
            async with Admin(ns, credentials=("sluice-inner", "inner-secret")) as operator:
                await operator.api.put_kv_config("ORDER_TOPIC_CONFIG", "routed", "broker-a:2")
        asyncio.run(go())
        assert c.namesrv.kv_config.get("ORDER_TOPIC_CONFIG", "routed") == "broker-a:2"
    finally:
        c.close()


def test_the_cli_manages_users_and_rules_signing_with_the_environments_credentials(
        acl_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io
    import json

    from sluice.cli.main import main as cli_main
    ns = acl_cluster.namesrv_addr
    monkeypatch.setenv("SLUICE_CREDENTIALS_FILE", str(Path(acl_cluster.root) / "no-such-file"))
    assert cli_main(["user", "list", "--namesrv", ns]) == 1
    assert "username cannot be null." in capsys.readouterr().err
    monkeypatch.setenv("SLUICE_ACCESS_KEY", ROOT[0])
    monkeypatch.setenv("SLUICE_SECRET_KEY", ROOT[1])
    monkeypatch.setattr("sys.stdin", io.StringIO("hank-secret\n"))
    assert cli_main(["user", "create", "hank", "--password-stdin", "--namesrv", ns]) == 0
    assert cli_main(["acl", "create", "User:hank", "--resource", "Topic:logs*", "--resource", "Group:g",
                     "--actions", "Pub,Sub", "--source-ip", "127.0.0.1", "--namesrv", ns]) == 0
    capsys.readouterr()
    assert cli_main(["user", "list", "--json", "--namesrv", ns]) == 0
    users = json.loads(capsys.readouterr().out)
    assert {u["username"]: u["password"] for u in users} == {"hank": "***", "root": "***"}
    assert cli_main(["acl", "get", "User:hank", "--json", "--namesrv", ns]) == 0
    acl = json.loads(capsys.readouterr().out)
    assert [(e["resource"], e["actions"], e["sourceIps"]) for e in acl["policies"][0]["entries"]] == [
        ("Topic:logs*", ["Pub", "Sub"], ["127.0.0.1"]), ("Group:g", ["Pub", "Sub"], ["127.0.0.1"])]
    assert cli_main(["acl", "delete", "User:hank", "--resource", "Group:g", "--namesrv", ns]) == 0
    capsys.readouterr()
    assert cli_main(["acl", "list", "--namesrv", ns]) == 0
    listing = capsys.readouterr().out
    assert "Topic:logs*" in listing and "Group:g " not in listing
    assert cli_main(["user", "get", "nobody", "--namesrv", ns]) == 1
    assert "no user 'nobody'" in capsys.readouterr().err


def test_a_topic_a_user_may_read_does_not_open_another_topics_messages_by_offset(acl_cluster: Cluster) -> None:
    from sluice.common.message import decode_message_id
    from sluice.remoting.codes import RequestCode
    ns = acl_cluster.namesrv_addr
    acl_cluster.create_topic("mine", 1)
    acl_cluster.create_topic("secret", 1)
    mine = asyncio.run(send_one(ns, "mine", ROOT, b"mine"))
    secret = asyncio.run(send_one(ns, "secret", ROOT, b"secret"))

    async def go() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            await admin.create_user("ivan", "ivan-secret")
            await admin.create_acl("User:ivan", [policy_entry("Topic:mine", "Get,Sub"),
                                                 policy_entry("Group:ivan-g", "Sub")])
            addr = next(iter((await admin.brokers()).values()))
        async with Admin(ns, credentials=("ivan", "ivan-secret")) as ivan:
            for result, code in ((mine, ResponseCode.SUCCESS), (secret, ResponseCode.SYSTEM_ERROR)):
                offset = decode_message_id(result.offset_msg_id)[1]  # type: ignore[attr-defined]
                resp = await ivan.api.invoke(addr, RequestCode.VIEW_MESSAGE_BY_ID,
                                             {"topic": "mine", "offset": str(offset)})
                assert resp.code == code, resp.remark
                resp = await ivan.api.invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK,
                                             {"group": "ivan-g", "offset": str(offset), "delayLevel": "1",
                                              "originTopic": "mine", "originMsgId": result.msg_id})  # type: ignore[attr-defined]
                assert (resp.code == ResponseCode.SUCCESS) == (code == ResponseCode.SUCCESS), resp.remark
            resp = await ivan.api.invoke(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "0"})
            assert resp.code == ResponseCode.NO_PERMISSION and "Cluster:DefaultCluster" in (resp.remark or "")
    asyncio.run(go())


def test_a_standalone_proxy_checks_every_rpc_against_the_users_and_rules_it_copies_from_the_brokers(
        tmp_path: Path, server_loop: ServerLoop) -> None:
    import re
    import subprocess
    import sys

    import grpc

    from sluice.auth.signature import grpc_authorization, grpc_date_time
    from sluice.common.config import AuthCredentials
    from sluice.proxy.protocol import SERVICE, pb

    inner = AuthCredentials(access_key="sluice-inner", secret_key="inner-secret")
    c = Cluster(tmp_path, server_loop)
    c.credentials = ROOT
    try:
        c.start_broker(authentication_enabled=True, authorization_enabled=True,
                       init_authentication_user=_auth_user(*ROOT), inner_client_authentication_credentials=inner)
        c.create_topic("px-acl", 2)

        async def add(user: str) -> None:
            async with Admin(c.namesrv_addr, credentials=ROOT) as admin:
                await admin.create_user(user, f"{user}-secret")
                await admin.create_acl(f"User:{user}", [policy_entry("Topic:px-acl", "Pub")])
        asyncio.run(add("alice"))
        config = tmp_path / "proxy.toml"
        config.write_text(f'[proxy]\nauthentication_enabled = true\nauthorization_enabled = true\n'
                          f'auth_cache_refresh_seconds = 0.5\ntls_server_mode = "disabled"\n'
                          f'inner_client_authentication_credentials = {{ access_key = "{inner.access_key}", '
                          f'secret_key = "{inner.secret_key}" }}\n')
        proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", "proxy", "--namesrv", c.namesrv_addr,
                                 "--port", "0", "--config", str(config)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            banner = proc.stdout.readline()
            found = re.search(r"ACL on\) ready on 127\.0\.0\.1:(\d+)", banner)
            assert found, banner + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
            endpoint = f"127.0.0.1:{found.group(1)}"

            async def route(user: str, secret: str) -> Any:
                date = grpc_date_time()
                async with grpc.aio.insecure_channel(endpoint) as channel:
                    call = channel.unary_unary(f"/{SERVICE}/QueryRoute",
                                               request_serializer=pb.QueryRouteRequest.SerializeToString,
                                               response_deserializer=pb.QueryRouteResponse.FromString)
                    return await call(pb.QueryRouteRequest(topic=pb.Resource(name="px-acl")), timeout=10, metadata=(
                        ("authorization", grpc_authorization(user, secret, date)), ("x-mq-date-time", date)))

            assert asyncio.run(route("alice", "alice-secret")).status.code == 20000
            refused = asyncio.run(route("alice", "wrong"))
            assert (refused.status.code, refused.status.message) == (40100, "check signature failed.")
            assert asyncio.run(route("bob", "bob-secret")).status.message == "User:bob is not found."
            asyncio.run(add("bob"))  # made on the broker: the proxy knows it at its next copy
            wait_until(lambda: asyncio.run(route("bob", "bob-secret")).status.code == 20000, 30,
                       "the proxy to copy the new user")
        finally:
            proc.terminate()
            proc.wait(30)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
    finally:
        c.close()


def test_the_proxys_copy_of_users_and_rules_expires_when_the_brokers_cannot_be_reached(
        acl_cluster: Cluster) -> None:
    from sluice.auth.credentials import signing_hook
    from sluice.client.mq_client_api import MQClientAPI
    from sluice.proxy.auth_metadata_cache import EXPIRY_INTERVALS, BrokerAuthMetadata
    from sluice.remoting.client import RemotingClient

    refresh = 0.2
    remoting = RemotingClient(request_hook=signing_hook(ROOT))
    metadata = BrokerAuthMetadata(MQClientAPI(remoting, [acl_cluster.namesrv_addr]), refresh)
    try:
        acl_cluster.loop.run(metadata.start())
        assert metadata.get_user("root") is not None and metadata.copies >= 1
        acl_cluster.stop_broker(acl_cluster.brokers[0])
        wait_until(lambda: metadata.get_user("root") is None, 10 + EXPIRY_INTERVALS * refresh,
                   "the copy to expire once no broker answers")
        assert metadata.last_error
    finally:
        acl_cluster.loop.run(metadata.stop())
        acl_cluster.loop.run(remoting.close())


def test_fields_a_handler_reads_cannot_be_used_around_the_check(acl_cluster: Cluster, caplog: pytest.LogCaptureFixture
                                                                  ) -> None:
    """A V2 send whose long-named ``topic`` field overrides ``b``; a send-back without ``originTopic`` of another
    topic's message; an END_TRANSACTION without a topic, or naming another: each refused, nothing stored or
    decided; a user name with a line break cannot write a line of its own into the audit log."""
    from sluice.common.message import decode_message_id
    from sluice.remoting.codes import RequestCode
    from sluice.remoting.headers import SendMessageRequestHeader
    ns = acl_cluster.namesrv_addr
    for topic in ("mine", "secret"):
        acl_cluster.create_topic(topic, 1)
    secret = asyncio.run(send_one(ns, "secret", ROOT, b"secret"))
    before = asyncio.run(max_offset(ns, "secret"))

    async def go() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            await admin.create_user("ivan", "ivan-secret")
            await admin.create_acl("User:ivan", [policy_entry("Topic:mine", "Pub,Sub"),
                                                 policy_entry("Group:ivan-g", "Sub")])
            addr = next(iter((await admin.brokers()).values()))
        async with Admin(ns, credentials=("ivan", "ivan-secret")) as ivan:
            v2 = SendMessageRequestHeader("ivan-pg", "mine", "TBW102", 4, 0, 0, 0, 0, "").encode_v2()
            for ext in ({**v2, "topic": "secret"}, {k: v for k, v in v2.items() if k != "b"} | {"topic": "secret"}):
                for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
                    resp = await ivan.api.invoke(addr, code, ext, body=b"forged")
                    assert resp.code == ResponseCode.NO_PERMISSION and "Topic:secret" in (resp.remark or ""), resp
            offset = decode_message_id(secret.offset_msg_id)[1]  # type: ignore[attr-defined]
            resp = await ivan.api.invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK,
                                         {"group": "ivan-g", "offset": str(offset), "delayLevel": "1"})
            assert resp.code == ResponseCode.NO_PERMISSION and "originTopic" in (resp.remark or ""), resp
            for ext in ({}, {"topic": "mine"}):
                resp = await ivan.api.invoke(addr, RequestCode.END_TRANSACTION, {
                    "producerGroup": "acl-pg", "tranStateTableOffset": "0", "commitLogOffset": str(offset),
                    "commitOrRollback": "8", "fromTransactionCheck": "false", "msgId": "", **ext})
                assert resp.code in (ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_ERROR), resp
        async with Admin(ns, credentials=("ivan\n2026 INFO forged line", "x")) as forger:
            with contextlib.suppress(Exception):
                await forger.topic_status("mine")
    with caplog.at_level(logging.INFO, logger="sluice.auth.audit"):
        asyncio.run(go())
    assert asyncio.run(max_offset(ns, "secret")) == before
    audit = [r.getMessage() for r in caplog.records if r.name == "sluice.auth.audit"]
    assert any("ivan\\x0a2026 INFO forged line" in line for line in audit), audit
    assert not any("\n" in line for line in audit)


def test_another_users_producer_of_the_group_is_not_asked_about_its_transactions(tmp_path: Path,
                                                                                  server_loop: ServerLoop) -> None:
    """A transaction check carries the half message: it goes only to a producer whose user may publish to the
    message's topic, and one client cannot unregister another's registration."""
    from sluice import LocalTransactionState, TransactionProducer
    from sluice.remoting.codes import RequestCode
    c = Cluster(tmp_path, server_loop)
    c.credentials = ROOT
    try:
        c.start_broker(authentication_enabled=True, authorization_enabled=True,
                       init_authentication_user=_auth_user(*ROOT), transaction_timeout=1000,
                       transaction_check_interval=1000)
        c.create_topic("secret", 1)
        c.create_topic("mine", 1)
        ns = c.namesrv_addr

        async def users() -> None:
            async with Admin(ns, credentials=ROOT) as admin:
                for name in ("alice", "ivan"):
                    await admin.create_user(name, f"{name}-secret")
                await admin.create_acl("User:alice", [policy_entry("Topic:secret", "Pub")])
                await admin.create_acl("User:ivan", [policy_entry("Topic:mine", "Pub")])
        asyncio.run(users())

        class Listener:
            def __init__(self) -> None:
                self.checked: list[bytes] = []

            def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
                return LocalTransactionState.UNKNOWN if msg.body == b"payroll" else LocalTransactionState.COMMIT

            def check_local_transaction(self, msg: Any) -> LocalTransactionState:
                self.checked.append(msg.body)
                return LocalTransactionState.COMMIT

        alice, ivan = Listener(), Listener()
        broker = c.brokers[0]
        with TransactionProducer("alice-pg", ivan, namesrv=ns, credentials=("ivan", "ivan-secret"),
                                 heartbeat_broker_interval=500) as thief:
            thief.send_message_in_transaction(Message("mine", b"ivan's"))  # (a route: its heartbeats reach the broker)
            with TransactionProducer("alice-pg", alice, namesrv=ns, credentials=("alice", "alice-secret"),
                                     heartbeat_broker_interval=500) as owner:
                owner_id = owner.aio.client.client_id

                async def unregister_owner() -> int:
                    async with Admin(ns, credentials=("ivan", "ivan-secret")) as admin:
                        addr = next(iter((await admin.brokers()).values()))
                        resp = await admin.api.invoke(addr, RequestCode.UNREGISTER_CLIENT, {
                            "clientID": owner_id, "producerGroup": "alice-pg"})
                        return resp.code
                owner.send_message_in_transaction(Message("secret", b"payroll"))
                wait_until(lambda: owner_id in broker.producer_manager.groups.get("alice-pg", {}), 30,
                           "the owner's heartbeat")
                assert asyncio.run(unregister_owner()) == ResponseCode.SUCCESS
                assert owner_id in broker.producer_manager.groups.get("alice-pg", {}), "another client unregistered it"
            # The owner is gone; only the other user's producer of the group is online: it is never asked.
            unasked = broker.transaction_service.checks_unasked
            wait_until(lambda: broker.transaction_service.checks_unasked >= unasked + 3, 30,
                       "three checks to find no producer allowed to be asked")
            assert ivan.checked == []
            with TransactionProducer("alice-pg", alice, namesrv=ns, credentials=("alice", "alice-secret"),
                                     heartbeat_broker_interval=500) as back:
                back.send_message_in_transaction(Message("secret", b"hello"))
                wait_until(lambda: b"payroll" in alice.checked, 30, "the owner to be asked once it is back")
                wait_until(lambda: asyncio.run(max_offset(ns, "secret")) == 2, 30, "the owner's answer to commit it")
            assert ivan.checked == []
    finally:
        c.close()


def test_the_admin_status_and_relay_requests_need_their_rights(acl_cluster: Cluster) -> None:
    """The operator requests (broker config and stats, HA status, connections, group deletion, relays to a client)
    are refused to a user without the right, with RocketMQ's code, and served to the super user."""
    from sluice.remoting.codes import RequestCode
    ns = acl_cluster.namesrv_addr
    requests: list[tuple[int, dict[str, str], bytes]] = [
        (RequestCode.UPDATE_BROKER_CONFIG, {}, b"fileReservedTime=48\n"),
        (RequestCode.GET_BROKER_CONFIG, {}, b""),
        (RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "mine"}, b""),
        (RequestCode.GET_BROKER_HA_STATUS, {}, b""),
        (RequestCode.GET_BROKER_EPOCH_CACHE, {}, b""),
        (RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "false"}, b""),
        (RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "someone-pg"}, b""),
        (RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "someone-g", "cleanOffset": "true"}, b""),
        (RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "someone-g", "clientId": "c@1"}, b""),
        (RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "someone-g", "clientId": "c@1",
                                                "msgId": "0" * 32, "topic": "mine"}, b""),
    ]

    async def go() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            await admin.create_user("ivan", "ivan-secret")
            await admin.create_acl("User:ivan", [policy_entry("Topic:mine", "Pub,Sub,Get")])
            addr = next(iter((await admin.brokers()).values()))
            for code, ext, body in requests:
                resp = await admin.api.invoke(addr, code, dict(ext), body=body)
                assert resp.code != ResponseCode.NO_PERMISSION, (code, resp.remark)
        async with Admin(ns, credentials=("ivan", "ivan-secret")) as ivan:
            for code, ext, body in requests:
                resp = await ivan.api.invoke(addr, code, dict(ext), body=body)
                assert resp.code == ResponseCode.NO_PERMISSION and "User:ivan has no permission" in (
                    resp.remark or ""), (code, resp.remark)
    asyncio.run(go())


def test_replies_and_recalls_need_pub_on_their_topic(acl_cluster: Cluster) -> None:
    """A reply needs Pub on the reply topic, a recall Pub on the message's topic: refused from a real producer
    without it, allowed with it."""
    from datetime import timedelta

    from sluice.client.request_reply import ReplyMessage
    ns = acl_cluster.namesrv_addr
    acl_cluster.brokers[0].config.recall_message_enable = True
    acl_cluster.create_topic("timers", 1)

    async def go() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            await admin.create_user("rita", "rita-secret")
            await admin.create_acl("User:rita", [policy_entry("Topic:timers", "Pub")])
        async with Producer("rr-pg", ns, credentials=ROOT) as root:
            sent = await root.send(Message("timers", b"later", delay=timedelta(seconds=30)))
        assert sent.recall_handle is not None
        reply = ReplyMessage("DefaultCluster_REPLY_TOPIC", b"r", correlation_id="c", reply_to_client="x@1", ttl="1")
        async with Producer("rr-pg", ns, credentials=("rita", "rita-secret"),
                            retry_times_when_send_failed=0) as rita:
            with pytest.raises(ClientError) as err:
                await rita.send(reply)
            assert "User:rita has no permission to access Topic:DefaultCluster_REPLY_TOPIC" in str(err.value)
            assert await rita.recall_message("timers", sent.recall_handle) == sent.msg_id  # (Pub on timers)
        async with Admin(ns, credentials=ROOT) as admin:
            await admin.create_user("otto", "otto-secret")
            await admin.create_acl("User:otto", [policy_entry("Topic:other", "Pub")])
        async with Producer("rr-pg", ns, credentials=("otto", "otto-secret")) as otto:
            with pytest.raises(BrokerResponseError) as refused:
                await otto.recall_message("timers", sent.recall_handle)
            assert refused.value.code == ResponseCode.NO_PERMISSION
            assert "User:otto has no permission to access Topic:timers" in refused.value.remark

    asyncio.run(go())


def test_a_namespace_rule_covers_that_namespaces_topics_and_a_topics_own_rule_comes_first(
        acl_cluster: Cluster) -> None:
    ns = acl_cluster.namesrv_addr
    for topic in ("ns1%orders", "ns1%audit", "ns2%orders", "orders"):
        acl_cluster.create_topic(topic, 1)

    async def setup() -> None:
        async with Admin(ns, credentials=ROOT) as admin:
            await admin.create_user("nora", "nora-secret")
            await admin.create_acl("User:nora", [policy_entry("Namespace:ns1", "Pub"),
                                                 policy_entry("Topic:ns1%audit", "Pub", "Deny")])
    asyncio.run(setup())
    nora = ("nora", "nora-secret")
    assert asyncio.run(send_one(ns, "ns1%orders", nora)).status.name == "SEND_OK"  # type: ignore[attr-defined]
    assert refusal(ns, "ns1%audit", nora).remark.endswith("the decision is deny.")  # its own rule decides
    for other in ("ns2%orders", "orders"):  # another namespace's, and one in none
        assert refusal(ns, other, nora).remark == \
            f"User:nora has no permission to access Topic:{other} from 127.0.0.1, no matched policies."
