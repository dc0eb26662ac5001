"""The dashboard's pages against what the cluster holds, its actions with their confirmations, and message content
that is HTML and script shown as text (ACL off; tests/browser/test_dashboard_acl.py logs in)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

from sluice.aio import Producer, PushConsumer
from sluice.client.admin import Admin
from sluice.client.message import ConsumeStatus, Message
from tests.browser.conftest import DashboardSite
from tests.integration.helpers import FAST, committed_to_end
from tests.integration.test_cli import ok
from tests.integration.test_dlq import dead_letters_in


def send(site: DashboardSite, topic: str, messages: list[Message]) -> None:
    async def go() -> None:
        async with Producer("dashboard-test-pg", site.namesrv) as producer:
            await asyncio.gather(*(producer.send(m) for m in messages))

    asyncio.run(go())


def test_each_page_shows_what_the_cluster_holds(site: DashboardSite, capsys: Any) -> None:
    ok(capsys, "topic", "create", "orders", "--queues", "4", "--namesrv", site.namesrv)
    send(site, "orders", [Message("orders", b"order-%d" % i, tags="new", keys=[f"k{i}"]) for i in range(12)])

    site.open("/")
    site.wait_for(lambda: "broker-a" in site.text("#brokers"), "the overview to list broker-a")
    site.wait_for(lambda: site.text("#stored") != "0 B", "the overview to count the stored bytes")
    site.wait_for(lambda: site.driver.execute_script(
        "const l = document.querySelector('#chart-stored polyline');"
        "return l ? l.getAttribute('points').split(' ').length : 0;") >= 3,
        "the stored-bytes chart to have three points")
    assert site.texts("#brokers tbody tr td:nth-child(5)") == ["ASYNC_MASTER"]
    site.shot("overview")

    site.open("/topics")
    assert "orders" in site.texts("#topics tbody td:first-child")
    site.shot("topics")
    site.open("/topics/orders")
    assert site.text("#topic-total") == "12"
    assert len(site.texts("#queues tbody tr")) == 4
    site.shot("topic")

    site.open("/cluster")
    assert "broker-a" in site.text("#cluster") and site.cluster.brokers[0].broker_addr in site.text("#cluster")
    epoch = site.cluster.brokers[0].epochs.entries[-1]  # its current term, and where it began
    assert site.texts("td.epochs summary") == [f"{epoch.epoch} from offset {epoch.start_offset:,}"]
    site.shot("cluster")
    site.open("/cluster/broker-a/0")
    assert "brokerVersionDesc" in site.text("#runtime")

    site.open("/messages?topic=orders&begin=0")
    assert len(site.texts("#found tbody tr")) == 12
    site.shot("messages")
    site.click("#found tbody tr a")
    assert site.text("#message-tags") == "new"
    site.shot("message")


def test_lag_after_500_unconsumed_messages_reads_500(site: DashboardSite) -> None:
    topic, group = "lagging", "billing"
    site.cluster.create_topic(topic, 2)
    send(site, topic, [Message(topic, b"early-%d" % i) for i in range(10)])

    async def consume_all() -> None:
        consumer = PushConsumer(group, site.namesrv, **FAST)
        consumer.subscribe(topic)
        consumer.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
        await consumer.start()
        try:
            async with asyncio.timeout(60):
                while not await asyncio.to_thread(committed_to_end, site.cluster, group, topic, 2):
                    await asyncio.sleep(0.05)
        finally:
            await consumer.shutdown()

    asyncio.run(consume_all())
    sent_at = time.time()
    send(site, topic, [Message(topic, b"late-%d" % i) for i in range(500)])
    sent = time.time()  # (each queue's oldest waiting message was stored between the two)

    site.open("/groups?sort=lag")
    site.wait_for(lambda: site.text(f'#groups tr[data-group="{group}"] td.lag') == "500",
                  "the groups table to read a lag of 500", reload=True)
    site.shot("groups")
    site.open(f"/groups/{group}")
    assert site.text("#group-lag") == "500" and site.text("#group-ready") == "500"
    assert site.text("#group-inflight") == "0"
    site.wait_for(lambda: site.driver.execute_script(
        "const l = document.querySelector('#chart-lag polyline');"
        "return l ? l.getAttribute('points').split(' ').length : 0;") >= 2, "the lag chart to have two points")
    assert site.text(".charts figure:first-child .max") == "max 500.0"
    assert site.text("#group-queueing") not in ("", "0 ms")
    with urllib.request.urlopen(f"{site.dashboard.address}/api/groups/{group}", timeout=30) as r:
        points = json.loads(r.read())["series"][group]
    assert points[-1][6] > 0, points  # (the queueing-latency chart's column, as the lag reads 500)
    site.shot("group")

    # Queueing latency: how long each queue's oldest message not yet pulled has waited, by the broker's clock.
    async def waits() -> list[int]:
        async with Admin(site.namesrv) as admin:
            return [q.queueing_latency_ms for q in (await admin.group_progress(group, topic)).queues]

    asked = time.time()
    waited = asyncio.run(waits())
    answered = time.time()
    assert len(waited) == 2 and all((asked - sent) * 1000 - 2 <= w <= (answered - sent_at) * 1000 + 2
                                    for w in waited), (waited, asked - sent, answered - sent_at)


def test_dead_letters_resent_at_50_a_second_reach_the_group_once_each(site: DashboardSite) -> None:
    topic, group, count = "dl-orders", "dl-billing", 100
    site.cluster.create_topic(topic, 2)
    dead_letters_in(site.cluster, topic, group, count)

    site.open(f"/dlq?group={group}")
    assert site.text("#dlq-total") == str(count)
    site.shot("dead-letters")
    export = site.driver.find_element("css selector", "#dlq-export").get_attribute("href")
    with urllib.request.urlopen(export, timeout=30) as r:
        lines = [json.loads(line) for line in r.read().splitlines()]
    assert sorted(line["body"] for line in lines) == [f"order-{i:04d}" for i in range(count)]
    assert {line["originalTopic"] for line in lines} == {topic}
    site.fill("#dlq-rate", "50")
    site.click("#resend-all")
    assert f"Re-send all dead letters of {group} at 50 a second?" in site.text("#question")
    started = time.monotonic()
    site.click("#confirm")
    site.says(".flash.ok", f"Re-sending all dead letters of {group} at 50 a second")
    site.wait_for(lambda: site.text("#resend-progress .running") == "finished", "the re-send to finish",
                  timeout=60)
    took = time.monotonic() - started
    assert site.text("#resend-progress .resent") == str(count)
    assert took >= (count - 1) / 50 * 0.95, f"{count} messages re-sent in {took:.2f} s: faster than 50 a second"
    site.shot("dead-letters-resent")

    got: list[bytes] = []
    stored_at: dict[bytes, set[int]] = {}

    def listener(msgs: list[Any]) -> ConsumeStatus:
        for m in msgs:
            got.append(bytes(m.body))
            stored_at.setdefault(bytes(m.body), set()).add(m.commit_log_offset)
        return ConsumeStatus.CONSUME_SUCCESS

    async def consume() -> None:
        consumer = PushConsumer(group, site.namesrv, max_reconsume_times=0, **FAST)
        consumer.subscribe(topic)
        consumer.register_listener(listener)
        await consumer.start()
        try:
            async with asyncio.timeout(90):
                while not (len(set(got)) >= count and await asyncio.to_thread(
                        committed_to_end, site.cluster, group, f"%RETRY%{group}", 1)):
                    await asyncio.sleep(0.05)
        finally:
            await consumer.shutdown()

    asyncio.run(consume())
    # Each re-sent once: one stored message per dead letter. (The consumer may be handed one again, as any
    # RocketMQ push consumer may when its queues move before a commit; that is delivery, not a second re-send.)
    assert set(got) == {b"order-%04d" % i for i in range(count)}
    assert all(len(offsets) == 1 for offsets in stored_at.values()), stored_at

    site.open(f"/dlq?group={group}")  # all of them again: none is sent twice
    site.click("#resend-all")
    site.click("#confirm")
    site.wait_for(lambda: site.text("#resend-progress .running") == "finished", "the second re-send to finish",
                  timeout=60)
    assert site.text("#resend-progress .resent") == "0"


def test_an_action_asks_first_then_says_what_it_did(site: DashboardSite) -> None:
    site.open("/topics")
    site.fill("#new-topic", "made-in-the-browser")
    site.click("#create-topic-submit")
    assert "Create or update topic made-in-the-browser with 8 queues" in site.text("#question")
    site.shot("confirm")
    site.click("#confirm")
    site.says(".flash.ok", "Topic made-in-the-browser is on broker-a.")
    assert site.text("#topic-name") == "made-in-the-browser"

    site.click("#delete-topic-submit")
    assert "Delete topic made-in-the-browser?" in site.text("#question")
    site.click("#cancel")  # nothing happens
    site.open("/topics/made-in-the-browser")
    assert site.text("#topic-name") == "made-in-the-browser"
    site.click("#delete-topic-submit")
    site.click("#confirm")
    site.says(".flash.ok", "Topic made-in-the-browser was deleted")
    site.open("/topics/made-in-the-browser")
    assert site.text("#error-title") == "Not found"


HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'


def test_html_and_script_in_a_message_are_shown_as_text_and_never_run(site: DashboardSite) -> None:
    topic = "hostile"
    site.cluster.create_topic(topic, 1)
    send(site, topic, [Message(topic, HOSTILE.encode(), tags="<b>t</b>", keys=["<i>k</i>"],
                               properties={"note": HOSTILE})])
    site.open(f"/messages?topic={topic}&begin=0")
    site.click("#found tbody tr a")
    assert site.text("#message-body") == HOSTILE
    assert HOSTILE in site.text("#message-properties")
    assert site.text("#message-tags") == "<b>t</b>"
    assert site.driver.title != "pwned" and "pwned" not in site.driver.title
    site.open(f"/messages?topic={topic}&key=<i>k</i>")
    assert len(site.texts("#found tbody tr")) == 1 and site.driver.title != "pwned"


def test_a_huge_body_is_cut_and_downloads_whole(site: DashboardSite) -> None:
    topic = "huge"
    site.cluster.create_topic(topic, 1)
    body = b"x" * 100_000 + b"END"
    send(site, topic, [Message(topic, body)])
    site.open(f"/messages?topic={topic}&begin=0")
    site.click("#found tbody tr a")
    assert len(site.text("#message-body")) < 20_000
    assert "cut" in site.text("#body-cut")
    href = site.driver.find_element("css selector", "#body-download").get_attribute("href")
    with urllib.request.urlopen(href, timeout=30) as r:
        assert r.read() == body


def test_pages_for_what_does_not_exist_say_so(site: DashboardSite) -> None:
    for path, says in [("/topics/no-such-topic", "There is no topic no-such-topic."),
                       ("/groups/no-such-group", "There is no consumer group no-such-group."),
                       ("/message?id=7F000001000000000000000000ABCDEF", "7F000001000000000000000000ABCDEF"),
                       ("/no/such/page", "There is no page at /no/such/page.")]:
        site.open(path)
        assert site.text("#error-title") == "Not found", path
        assert says in site.text("#error-message"), path
        assert "Traceback" not in site.driver.page_source


def test_a_confirmation_acts_on_the_name_it_asked_about_even_one_holding_a_percent_sign(site: DashboardSite) -> None:
    from tests.browser.test_dashboard_acl import Browser

    site.cluster.create_topic("ab-c", 1)
    site.cluster.create_topic("ab%2Dc", 1)
    visitor = Browser(site.dashboard.address)
    token = visitor.csrf("/topics")
    status, page = visitor.post("/topics/ab%252Dc/delete", {"csrf": token})
    assert status == 200 and "Delete topic ab%2Dc?" in page
    assert 'action="/topics/ab%252Dc/delete"' in page
    status, page = visitor.post("/topics/ab%252Dc/delete", {"csrf": token, "confirmed": "1"})
    assert status == 200 and "Topic ab%2Dc was deleted" in page
    assert visitor.get("/topics/ab-c")[0] == 200 and visitor.get("/topics/ab%252Dc")[0] == 404


def test_a_dead_letter_page_for_an_illegal_group_name_is_a_bad_request(site: DashboardSite) -> None:
    from tests.browser.test_dashboard_acl import Browser

    visitor = Browser(site.dashboard.address)
    for path in ("/dlq?group=%00", "/dlq?group=a%20b", "/dlq/%3Cscript%3E/export"):
        status, page = visitor.get(path)
        assert status == 400, (path, status)
        assert "Bad request" in page and "may only contain letters" in page and "<script>" not in page, path


def test_a_re_send_stopped_midway_goes_on_later_without_sending_any_twice(site: DashboardSite) -> None:
    topic, group, count = "dl-stop", "dl-stopper", 20
    site.cluster.create_topic(topic, 1)
    dead_letters_in(site.cluster, topic, group, count)
    site.open(f"/dlq?group={group}")
    site.fill("#dlq-rate", "2")
    site.click("#resend-all")
    site.click("#confirm")
    site.wait_for(lambda: int(site.text("#resend-progress .resent")) >= 1, "the first message re-sent")
    site.click("#resend-stop")
    site.says(".flash.ok", "stops after the message under way")
    site.wait_for(lambda: site.text("#resend-progress .running") == "finished", "the re-send to stop", reload=True)
    first = int(site.text("#resend-progress .resent"))
    assert 1 <= first < count
    site.fill("#dlq-rate", "100")
    site.click("#resend-all")
    site.click("#confirm")
    site.wait_for(lambda: site.text("#resend-progress .running") == "finished", "the second re-send to finish",
                  reload=True)
    assert first + int(site.text("#resend-progress .resent")) == count


def test_messages_pulled_and_not_yet_consumed_read_as_inflight(site: DashboardSite) -> None:
    import threading

    from sluice import PushConsumer as SyncPushConsumer

    topic, group = "slow-work", "slow-workers"
    site.cluster.create_topic(topic, 1)
    send(site, topic, [Message(topic, b"job-%d" % i) for i in range(40)])
    release = threading.Event()
    consumer = SyncPushConsumer(group, namesrv=site.namesrv, consume_thread_nums=1, **FAST)
    consumer.subscribe(topic)
    consumer.register_listener(lambda msgs: (release.wait(60), ConsumeStatus.CONSUME_SUCCESS)[1])
    consumer.start()
    try:
        site.open(f"/groups/{group}")
        site.wait_for(lambda: int(site.text("#group-inflight")) > 0, "pulled messages to read as inflight",
                      reload=True)
        assert int(site.text("#group-inflight")) + int(site.text("#group-ready")) == 40
        site.open("/groups?sort=inflight")
        site.wait_for(lambda: site.texts("#groups tbody tr td:first-child")[0] == group,
                      "the busiest group first in the table sorted by inflight", reload=True)
    finally:
        release.set()
        consumer.shutdown()


def test_a_broker_made_read_only_by_its_permission_is_an_alert(site: DashboardSite, capsys: Any) -> None:
    ns = site.namesrv
    site.open("/")
    ok(capsys, "cluster", "broker-config-set", "broker-a", "brokerPermission", "4", "--namesrv", ns)  # read only
    try:
        site.wait_for(lambda: "broker broker-a is read-only by its permission (brokerPermission 4)"
                      in site.text("#alerts"), "the read-only alert", reload=True)
    finally:
        ok(capsys, "cluster", "broker-config-set", "broker-a", "brokerPermission", "6", "--namesrv", ns)
    site.wait_for(lambda: "read-only" not in site.text("#alerts"), "the alert to go once writes are allowed",
                  reload=True)

    async def writable() -> bool:  # (the broker tells the name server in the background: later tests send)
        async with Admin(ns) as admin:
            return all(q.perm & 2 for q in (await admin.topic_route("TBW102")).queue_datas)

    site.wait_for(lambda: asyncio.run(writable()), "the name server to route writes to broker-a again")


def test_a_groups_settings_are_changed_from_its_page_after_a_confirmation(site: DashboardSite, capsys: Any) -> None:
    group = "settings-g"
    ok(capsys, "group", "create", group, "--namesrv", site.namesrv)

    async def config() -> dict[str, Any]:
        async with Admin(site.namesrv) as admin:
            found = await admin.group_config(group)
            assert found is not None
            return found

    assert asyncio.run(config())["retryMaxTimes"] == 16
    site.open(f"/groups/{group}")
    site.fill("#setting-retryMaxTimes", "3")
    site.click("#setting-consumeEnable")  # (checked: the group may consume) → unchecked
    site.click("#settings-submit")
    assert f"Change group {group}'s settings: retryMaxTimes 16 → 3, consumeEnable true → false?" \
        in site.text("#question")
    site.click("#confirm")
    site.says(".flash.ok", f"Group {group}: retryMaxTimes 16 → 3, consumeEnable true → false on broker-a.")
    changed = asyncio.run(config())
    assert (changed["retryMaxTimes"], changed["consumeEnable"], changed["retryQueueNums"]) == (3, False, 1)

    site.fill("#setting-retryMaxTimes", "lots")  # refused before anything is asked or changed
    site.click("#settings-submit")
    site.says(".flash.error", "retryMaxTimes must be a whole number from -1 to 1000, not 'lots'")
    site.fill("#setting-retryMaxTimes", "--5")
    site.click("#settings-submit")
    site.says(".flash.error", "retryMaxTimes must be a whole number from -1 to 1000, not '--5'")
    assert asyncio.run(config())["retryMaxTimes"] == 3


def test_a_brokers_setting_is_changed_from_its_page_and_one_it_cannot_change_is_refused(site: DashboardSite) -> None:
    async def reserved() -> str:
        async with Admin(site.namesrv) as admin:
            return (await admin.broker_config("broker-a"))["fileReservedTime"]

    before = asyncio.run(reserved())
    try:
        site.open("/cluster/broker-a/0")
        site.fill("#setting-key", "fileReservedTime")
        site.fill("#setting-value", "49")
        site.click("#setting-submit")
        assert "Set fileReservedTime = 49 on broker broker-a (id 0," in site.text("#question")
        site.click("#confirm")
        site.says(".flash.ok", "fileReservedTime = 49 on broker broker-a (id 0), kept for its next start.")
        assert asyncio.run(reserved()) == "49"
        assert site.driver.execute_script(
            "return [...document.querySelectorAll('#config tr')].find(r => r.cells[0].textContent === "
            "'fileReservedTime').cells[1].textContent;") == "49"

        site.fill("#setting-key", "a=b")  # refused before anything is asked
        site.click("#setting-submit")
        site.says(".flash.error", "Name the setting by RocketMQ's name")
        site.fill("#setting-key", "listenPort")
        site.fill("#setting-value", "1")
        site.click("#setting-submit")
        site.click("#confirm")
        refused = site.says(".flash.error", "listenPort was not changed on broker-a:")
        assert refused.startswith("listenPort was not changed on broker-a:") \
            and "listenPort cannot be changed while the broker runs" in refused, refused
    finally:
        async def restore() -> None:
            async with Admin(site.namesrv) as admin:
                await admin.update_broker_config("broker-a", "fileReservedTime", before)

        asyncio.run(restore())


def test_a_lite_parent_topics_page_shows_its_lite_topics_and_the_groups_behind(site: DashboardSite) -> None:
    import threading

    from sluice import LitePushConsumer, OffsetOption
    from sluice.common.lite import POLICY_MIN
    parent, group = "dash-chats", "dash-chat-readers"
    site.cluster.create_topic(parent, 2, attributes="+message.type=LITE,+lite.topic.expiration=1")

    async def setup() -> None:
        async with Admin(site.namesrv) as admin:
            await admin.update_group(group, attributes=f"+lite.bind.topic={parent}")
        async with Producer("dash-lite-pg", site.namesrv) as producer:
            for lite, n in (("frank", 7), ("gus", 3)):
                for i in range(n):
                    await producer.send(Message(parent, b"%s-%d" % (lite.encode(), i), lite_topic=lite))

    asyncio.run(setup())
    gate = threading.Event()  # the reader holds each lite topic's first message: nothing of them is consumed
    reader = LitePushConsumer(group, namesrv=site.namesrv, bind_topic=parent)
    reader.register_listener(lambda m: gate.wait(60) and None)
    reader.start()
    try:
        reader.subscribe_lite("frank", "gus", offset=OffsetOption("POLICY", POLICY_MIN))
        site.open(f"/topics/{parent}")
        assert site.texts("#lite-brokers tbody td:nth-child(2)") == ["2"]  # frank's and gus's light queues
        assert site.text("#lite-brokers tbody td:nth-child(3)") == "1 min"
        row = f'#lite-groups tr[data-group="{group}"]'
        site.wait_for(lambda: site.text(f"{row} td.lag") == "10", "the bound group's lag over its lite topics",
                      reload=True)
        assert site.text(f"{row} td.behind") == "frank (7), gus (3)"
        site.shot("lite-topic")
        site.click(f"{row} td.behind a")  # frank's own offsets and reader
        assert site.texts("#lite-one tbody td:nth-child(3)") == ["7"]
        assert reader.aio.client.client_id in site.text("#lite-one")
        assert site.driver.find_element("css selector", "#lite-name").get_attribute("value") == "frank"
        site.fill("#lite-name", "no spaces")
        site.click("#lite-submit")
        assert "Lite topic no spaces:" in site.text("#lite-error") and "alphanumeric" in site.text("#lite-error")
    finally:
        gate.set()
        reader.shutdown()
    site.cluster.create_topic("dash-plain", 1)
    site.open("/topics/dash-plain")  # a topic of another kind has no such section
    assert site.absent("#lite") and not site.absent("#queues")
