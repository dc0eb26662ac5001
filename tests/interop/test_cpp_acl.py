"""ACL 2.0 from the C++ client's side (``rocketmq==0.4.4``, ``set_session_credentials``: RocketMQ's
``AccessKey`` / ``Signature`` fields): its sends allowed with the right user and rule, refused with NO_PERMISSION and
RocketMQ's remark otherwise, nothing stored."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.client.admin import Admin
from sluice.client.auth_admin import policy_entry
from sluice.common.config import AuthUser
from tests.conftest import Cluster, ServerLoop
from tests.interop.conftest import CppClients, stored_messages

ROOT = ("root", "root-secret")


@pytest.fixture
def acl_sluice(tmp_path: Path, server_loop: ServerLoop) -> Iterator[Cluster]:
    c = Cluster(tmp_path, server_loop)
    c.credentials = ROOT
    try:
        c.start_broker(authentication_enabled=True, authorization_enabled=True,
                       init_authentication_user=AuthUser(username=ROOT[0], password=ROOT[1]))
        c.create_topic("cpp-acl", 4)
        c.create_topic("cpp-acl-other", 4)

        async def setup() -> None:
            async with Admin(c.namesrv_addr, credentials=ROOT) as admin:
                await admin.create_user("carol", "carol-secret")
                await admin.create_acl("User:carol", [policy_entry("Topic:cpp-acl", "Pub")])
        asyncio.run(setup())
        yield c
    finally:
        c.close()


def test_the_cpp_producer_with_session_credentials_is_allowed_and_refused_as_its_rules_say(
        acl_sluice: Cluster, rocketmq_python: Path, tmp_path: Path) -> None:
    cpp = CppClients(rocketmq_python, tmp_path / "cpp")
    ns = acl_sluice.namesrv_addr
    try:
        sent = cpp.run("producer", namesrv=ns, topic="cpp-acl", group="cpp-acl-pg", mode="sync", count=5,
                       access_key="carol", secret_key="carol-secret")
        assert [r["status"] for r in sent if r["event"] == "sent"] == ["OK"] * 5, sent[-3:]  # (the C++ SendStatus)
        for topic, ak, sk, remark in [
            ("cpp-acl-other", "carol", "carol-secret",
             "User:carol has no permission to access Topic:cpp-acl-other from 127.0.0.1, no matched policies."),
            ("cpp-acl", "carol", "wrong", "check signature failed."),
            ("cpp-acl", "nobody", "x", "User:nobody is not found."),
        ]:
            client = cpp.start("producer", namesrv=ns, topic=topic, group="cpp-acl-pg", mode="sync", count=1,
                               access_key=ak, secret_key=sk)
            records = client.wait(60)
            assert not [r for r in records if r["event"] == "sent"], records
            assert [r["event"] for r in records] == ["send-failed", "end"], records
            # The client's exception says only that every attempt failed; its log has the broker's answer.
            logged = "".join(f.read_text(errors="replace") for f in client.home.glob("logs/rocketmq-cpp/*"))
            assert f"remark:{remark}" in logged and "error code:16" in logged, logged[-2000:]
    finally:
        cpp.close()
    assert asyncio.run(stored_messages(ns, "cpp-acl", ROOT)) == 5
    assert asyncio.run(stored_messages(ns, "cpp-acl-other", ROOT)) == 0
