"""The dashboard of a cluster with ACL on: nothing is shown before a login the brokers accept; a super user acts,
a normal user only looks; logging out ends the session; a form with a stale CSRF token is refused."""

from __future__ import annotations

import asyncio
import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.client.admin import Admin
from sluice.client.auth_admin import policy_entry
from sluice.common.config import AuthUser
from tests.browser.conftest import DashboardSite, start_site, stop_site

ROOT = ("root", "root-secret")
ALICE = ("alice", "alice-secret")


@pytest.fixture(scope="module")
def acl_site(tmp_path_factory: pytest.TempPathFactory, chrome: Any) -> Iterator[DashboardSite]:
    loop, cluster, dashboard, shots = start_site(
        tmp_path_factory, chrome, authentication_enabled=True, authorization_enabled=True,
        init_authentication_user=AuthUser(username=ROOT[0], password=ROOT[1]))

    async def provision() -> None:
        async with Admin(cluster.namesrv_addr, credentials=ROOT) as admin:
            await admin.create_user(*ALICE)
            await admin.create_acl("User:alice", [policy_entry("Topic:*", "Pub,Sub,Get"),
                                                  policy_entry("Group:*", "Sub,Get")])
            await admin.create_topic("secured-orders", queues=2, wait=30)

    asyncio.run(provision())
    try:
        yield DashboardSite(cluster, dashboard, chrome, shots)
    finally:
        chrome.delete_all_cookies()
        stop_site(loop, cluster, dashboard)


def log_in(site: DashboardSite, user: tuple[str, str], path: str = "/") -> None:
    site.open(path)
    site.wait_for(lambda: site.driver.current_url.split("?")[0].endswith("/login"), "the login page")
    site.fill("#username", user[0])
    site.fill("#password", user[1])
    site.click("#login-submit")


def test_nothing_is_shown_before_a_login_the_brokers_accept(acl_site: DashboardSite) -> None:
    site = acl_site
    site.driver.delete_all_cookies()
    for path in ("/", "/topics", "/groups", "/api/overview"):
        site.open(path)
        assert site.driver.current_url.split("?")[0].endswith("/login"), path
        assert "secured-orders" not in site.driver.page_source
    site.shot("login")
    log_in(site, (ALICE[0], "not-her-secret"), "/topics")
    assert "Wrong user name or password" in site.text("#login-error")
    log_in(site, ("nobody", "x"), "/topics")
    assert "Wrong user name or password" in site.text("#login-error")


def test_a_normal_user_looks_and_a_super_user_acts(acl_site: DashboardSite) -> None:
    site = acl_site
    site.driver.delete_all_cookies()
    log_in(site, ALICE, "/topics")
    site.says(".flash.ok", "Logged in as alice (you may look).")
    assert "secured-orders" in site.texts("#topics tbody td:first-child")
    assert site.absent("#create-topic") and not site.absent("#topics")  # no action for her
    site.click("#logout")
    site.wait_for(lambda: site.driver.current_url.endswith("/login"), "the login page after logging out")
    site.open("/topics")
    assert site.driver.current_url.split("?")[0].endswith("/login")  # the session is over

    log_in(site, ROOT, "/topics")
    site.says(".flash.ok", "Logged in as root (super user).")
    site.fill("#new-topic", "made-by-root")
    site.click("#create-topic-submit")
    site.click("#confirm")
    site.says(".flash.ok", "Topic made-by-root is on broker-a.")
    site.shot("topics-as-super-user")
    site.click("#logout")


class Browser:
    """A second client with cookies of its own: forms posted as a script would, to try what the pages do not offer."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.base + path, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, str]:
        data = urllib.parse.urlencode(fields).encode()
        try:
            with self.opener.open(self.base + path, data=data, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def csrf(self, path: str) -> str:
        _, page = self.get(path)
        m = re.search(r'name="csrf" value="([^"]+)"', page)
        assert m, page[:2000]
        return m.group(1)

    def log_in(self, user: tuple[str, str]) -> tuple[int, str]:
        return self.post("/login", {"csrf": self.csrf("/login"), "username": user[0], "password": user[1],
                                    "next": "/topics"})


def test_a_user_the_brokers_do_not_let_read_the_cluster_sees_nothing_the_dashboard_gathered(
        acl_site: DashboardSite) -> None:
    site = acl_site
    root = Browser(site.dashboard.address)
    root.log_in(ROOT)
    status, page = root.get("/groups?system=1")  # the dashboard's table now holds what root could see
    assert status == 200
    alice = Browser(site.dashboard.address)  # her rules name topics and groups, not the cluster
    alice.log_in(ALICE)
    for path in ("/", "/cluster", "/groups", "/api/overview", "/api/groups/any"):
        status, page = alice.get(path)
        assert status == 403 and "has no permission to access Cluster" in page, (path, status, page[-500:])
    status, page = alice.get("/topics")  # what her rules let her read
    assert status == 200 and "secured-orders" in page
    status, page = root.get("/acl")  # users and rules, never a password
    assert status == 200 and "Topic:*" in page and "User:alice" in page and ALICE[1] not in page


def test_an_unreadable_form_or_token_is_refused_not_a_server_error(acl_site: DashboardSite) -> None:
    root = Browser(acl_site.dashboard.address)
    root.log_in(ROOT)
    request = urllib.request.Request(acl_site.dashboard.address + "/topics", data=b"csrf=%FF%FE&topic=\xff",
                                     headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
    try:
        root.opener.open(request, timeout=30)
        raise AssertionError("an unreadable form was served")
    except urllib.error.HTTPError as exc:
        assert exc.code in (400, 403), exc.code
    status, page = root.post("/topics", {"csrf": "\u2603" * 20, "topic": "x", "confirmed": "1"})
    assert status == 403 and "security token is stale" in page


def test_with_no_broker_answering_an_anonymous_visitor_is_shown_nothing(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    from sluice.dashboard import Dashboard, DashboardConfig
    from tests.conftest import Cluster, ServerLoop

    loop = ServerLoop()
    cluster = Cluster(tmp_path_factory.mktemp("no-broker"), loop)  # a name server alone
    dashboard = loop.run(Dashboard(DashboardConfig(cluster.namesrv_addr, port=0)).start())
    try:
        visitor = Browser(dashboard.address)
        for path in ("/", "/topics", "/api/overview"):
            status, page = visitor.get(path)
            assert status == 502 and "No broker answered" in page, (path, status)
        assert visitor.get("/login")[0] == 200
    finally:
        stop_site(loop, cluster, dashboard)


def test_an_action_by_a_user_without_the_right_or_with_a_stale_token_is_refused(
        acl_site: DashboardSite, caplog: pytest.LogCaptureFixture) -> None:
    site = acl_site
    alice = Browser(site.dashboard.address)
    status, page = alice.log_in(ALICE)
    assert status == 200 and "Logged in as alice" in page
    token = alice.csrf("/topics")
    status, page = alice.post("/topics", {"csrf": token, "topic": "alice-made", "confirmed": "1"})
    assert status == 403 and "not a super user" in page
    assert "refused create topics to alice" in caplog.text
    for path, fields, what in (("/groups/any-g/settings", {"retryMaxTimes": "0", "retryQueueNums": "1"},
                                "change group settings"),
                               ("/cluster/broker-a/0/settings", {"key": "fileReservedTime", "value": "1"},
                                "change broker settings")):
        status, page = alice.post(path, {"csrf": token, "confirmed": "1", **fields})
        assert status == 403 and "not a super user" in page, (path, status)
        assert f"refused {what} to alice" in caplog.text

    root = Browser(site.dashboard.address)
    root.log_in(ROOT)
    stale = root.csrf("/topics")
    root.post("/logout", {"csrf": stale})
    root.log_in(ROOT)  # a new session: the old token is stale
    status, page = root.post("/topics", {"csrf": stale, "topic": "made-with-a-stale-token", "confirmed": "1"})
    assert status == 403 and "security token is stale" in page
    assert "stale or missing CSRF token" in caplog.text
    status, page = root.get("/topics/made-with-a-stale-token")
    assert status == 404
    status, page = root.post("/topics", {"csrf": root.csrf("/topics"), "topic": "made-with-a-fresh-token",
                                         "confirmed": "1"})
    assert status == 200 and "Topic made-with-a-fresh-token is on broker-a." in page


def test_a_message_lookup_the_brokers_refuse_is_a_refusal_not_a_missing_message(acl_site: DashboardSite) -> None:
    from sluice.aio import Producer
    from sluice.client.message import Message
    site = acl_site

    async def send() -> str:
        async with Producer("acl-lookup-pg", site.namesrv, credentials=ROOT) as producer:
            return (await producer.send(Message("secured-orders", b"payroll-2026"))).offset_msg_id

    offset_id = asyncio.run(send())
    root = Browser(site.dashboard.address)
    root.log_in(ROOT)
    status, page = root.get(f"/message?id={offset_id}")
    assert status == 200 and "payroll-2026" in page
    alice = Browser(site.dashboard.address)  # an offset id names no topic: the brokers check the cluster
    alice.log_in(ALICE)
    status, page = alice.get(f"/message?id={offset_id}")
    assert status == 403 and "has no permission to access Cluster" in page and "payroll" not in page, (status,
                                                                                                         page[-800:])
