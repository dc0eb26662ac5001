"""Sluice's own lite push consumer (RocketMQ 5.5's LitePushConsumer over the remoting codes), and the lite admin
requests (GET_BROKER_LITE_INFO ... TRIGGER_LITE_DISPATCH) through ``Admin``, against a real broker: what the
consumer reads, in order, what comes back after a failure, an exclusive group's take-over, and what the admin
answers say about each."""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from sluice import BrokerResponseError, ClientError, LitePushConsumer, Message, OffsetOption, Producer
from sluice.client.admin import Admin
from sluice.common.lite import POLICY_MIN, to_lmq_name
from sluice.common.message import MessageExt
from sluice.remoting.codes import ResponseCode
from tests.conftest import Cluster
from tests.integration.helpers import wait_until
from tests.integration.test_cli import ok
from tests.integration.test_cli import sluice as sluice_cli
from tests.integration.test_lite_topics import GROUP, PARENT, lite_cluster


class Seen:
    """What a listener was handed, by lite topic, in order."""

    def __init__(self, fail_first: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.by_lite: dict[str, list[bytes]] = defaultdict(list)
        self.retried: list[tuple[bytes, int]] = []
        self.fail_first = set(fail_first)
        self.lock = threading.Lock()
        self.active: dict[str, int] = defaultdict(int)
        self.most_at_once = 0  # the most messages of one lite topic with the listener at once

    def __call__(self, m: MessageExt) -> None:
        lite = m.lite_topic or "?"
        with self.lock:
            self.active[lite] += 1
            self.most_at_once = max(self.most_at_once, self.active[lite])
        try:
            time.sleep(0.002)  # (long enough for a second message of the lite topic to overlap, were it run)
            with self.lock:
                if lite in self.fail_first:
                    self.fail_first.discard(lite)
                    raise RuntimeError("fails once")
                if m.reconsume_times:
                    self.retried.append((m.body, m.reconsume_times))
                self.by_lite[lite].append(m.body)
        finally:
            with self.lock:
                self.active[lite] -= 1

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.by_lite.values())


def send(namesrv: str, lite: str, n: int, prefix: str | None = None) -> None:
    with Producer("lite-pg", namesrv=namesrv) as p:
        for i in range(n):
            p.send(Message(PARENT, f"{prefix or lite}-{i}".encode(), lite_topic=lite))


def consumer(cluster: Cluster, listener: Any, **kwargs: Any) -> LitePushConsumer:
    c = LitePushConsumer(GROUP, namesrv=cluster.namesrv_addr, bind_topic=PARENT, **kwargs)
    c.register_listener(listener)
    return c.start()


def test_a_lite_consumer_reads_its_lite_topics_in_order_and_only_theirs(empty_cluster: Cluster) -> None:
    lite_cluster(empty_cluster)
    ns = empty_cluster.namesrv_addr
    seen = Seen()
    c = consumer(empty_cluster, seen)
    try:
        send(ns, "alice", 5)
        c.subscribe_lite("alice", "bob", offset=OffsetOption("POLICY", POLICY_MIN))  # (alice's 5 sent before)
        assert c.lite_topics == {"alice", "bob"}
        send(ns, "bob", 20)
        send(ns, "carol", 3)  # (nobody reads carol)
        wait_until(lambda: seen.count() == 25, 30, "alice's and bob's messages")
        assert seen.by_lite["alice"] == [f"alice-{i}".encode() for i in range(5)]
        assert seen.by_lite["bob"] == [f"bob-{i}".encode() for i in range(20)]
        assert "carol" not in seen.by_lite
        assert seen.most_at_once == 1  # (one message of a lite topic at a time, though 20 threads could run)
        c.unsubscribe_lite("bob")
        assert c.lite_topics == {"alice"}
        send(ns, "bob", 2, prefix="late-bob")
        send(ns, "alice", 1, prefix="late-alice")
        wait_until(lambda: len(seen.by_lite["alice"]) == 6, 30, "alice's late message")
        assert len(seen.by_lite["bob"]) == 20  # (bob's late ones are no longer this consumer's)
    finally:
        c.shutdown()


def test_a_failed_message_comes_back_before_the_rest_of_its_lite_topic(empty_cluster: Cluster) -> None:
    lite_cluster(empty_cluster)
    seen = Seen(fail_first={"dora"})
    send(empty_cluster.namesrv_addr, "dora", 3)  # (handed out together: what follows the failure waits for it)
    c = consumer(empty_cluster, seen, retry_delays=(0.5,))
    try:
        c.subscribe_lite("dora", offset=OffsetOption("POLICY", POLICY_MIN))
        wait_until(lambda: len(seen.by_lite["dora"]) == 3, 30, "dora's messages, the first retried")
        assert seen.by_lite["dora"] == [b"dora-0", b"dora-1", b"dora-2"]  # (in order: nothing passed the retry)
        assert seen.retried[0] == (b"dora-0", 1)
    finally:
        c.shutdown()


def test_an_exclusive_groups_new_consumer_takes_a_lite_topic_over(empty_cluster: Cluster) -> None:
    lite_cluster(empty_cluster)

    async def exclusive() -> None:
        async with Admin(empty_cluster.namesrv_addr) as admin:
            await admin.update_group(GROUP, attributes="+lite.sub.model=Exclusive")

    empty_cluster.loop.run(exclusive())
    first_seen, second_seen = Seen(), Seen()
    first = consumer(empty_cluster, first_seen)
    second = consumer(empty_cluster, second_seen)
    try:
        first.subscribe_lite("erin")
        second.subscribe_lite("erin")
        wait_until(lambda: "erin" not in first.lite_topics, 10, "the first consumer told to let erin go")
        send(empty_cluster.namesrv_addr, "erin", 3)
        wait_until(lambda: len(second_seen.by_lite["erin"]) == 3, 30, "erin's messages at the new reader")
        assert first_seen.count() == 0
    finally:
        first.shutdown()
        second.shutdown()


def test_bad_lite_consumer_arguments_are_refused_saying_why(empty_cluster: Cluster) -> None:
    lite_cluster(empty_cluster)
    with pytest.raises(ClientError, match="register_listener"):
        LitePushConsumer(GROUP, namesrv=empty_cluster.namesrv_addr, bind_topic=PARENT).start()
    with pytest.raises(ClientError, match="retry_delays"):
        LitePushConsumer(GROUP, bind_topic=PARENT, retry_delays=())
    c = consumer(empty_cluster, Seen())
    try:
        with pytest.raises(ClientError, match="alphanumeric"):
            c.subscribe_lite("no spaces")
        with pytest.raises(ClientError, match="1 .. 10000"):
            c.subscribe_lite()
    finally:
        c.shutdown()
    stranger = LitePushConsumer("not-bound", namesrv=empty_cluster.namesrv_addr, bind_topic=PARENT)
    stranger.register_listener(Seen())
    with pytest.raises(BrokerResponseError) as refused:  # (a group bound to no parent may not read lite topics)
        stranger.start()
    assert refused.value.code == ResponseCode.ILLEGAL_OPERATION


def test_the_lite_admin_requests_say_what_the_broker_holds(empty_cluster: Cluster,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    broker = lite_cluster(empty_cluster)
    ns = empty_cluster.namesrv_addr
    empty_cluster.create_topic("plain", 1)
    gate = threading.Event()
    done: list[bytes] = []

    def slow(m: MessageExt) -> None:  # (holds frank's first message until told: frank lags meanwhile)
        if m.body == b"frank-0":
            gate.wait(30)
        done.append(m.body)

    send(ns, "frank", 30)
    c = consumer(empty_cluster, slow)
    try:
        c.subscribe_lite("frank", "gus", offset=OffsetOption("POLICY", POLICY_MIN))
        send(ns, "gus", 2)
        wait_until(lambda: done.count(b"gus-1") == 1, 30, "gus's messages")
        client_id = c.aio.client.client_id

        async def ask() -> dict[str, Any]:
            async with Admin(ns) as admin:
                return {"broker": await admin.broker_lite_info("broker-a"),
                        "parent": await admin.parent_topic_info(PARENT),
                        "topic": await admin.lite_topic_info(PARENT, "frank"),
                        "client": await admin.lite_client_info(PARENT, GROUP, client_id),
                        "group": await admin.lite_group_info(PARENT, GROUP, top_k=5),
                        "one": await admin.lite_group_info(PARENT, GROUP, "frank"),
                        "dispatched": await admin.trigger_lite_dispatch(PARENT, GROUP)}

        got = empty_cluster.loop.run(ask(), 30)
        b = got["broker"]
        assert b["currentLmqNum"] == 2 and b["maxLmqNum"] == broker.config.store.max_lmq_consume_queue_num
        assert b["liteSubscriptionCount"] == 2 and b["topicMeta"] == {PARENT: 1} and b["groupMeta"] == \
            {PARENT: [GROUP]}
        assert got["parent"]["broker-a"]["liteTopicCount"] == 2
        assert got["parent"]["broker-a"]["groups"] == [GROUP]
        t = got["topic"]["broker-a"]
        assert t["topicOffset"]["minOffset"] == 0 and t["topicOffset"]["maxOffset"] == 30
        assert t["topicOffset"]["lastUpdateTimestamp"] > 0 and t["shardingToBroker"] is True
        assert t["subscriber"] == [{"clientId": client_id, "group": GROUP}]
        cl = got["client"]["broker-a"]
        assert cl["liteTopicCount"] == 2 and sorted(cl["liteTopicSet"]) == \
            [to_lmq_name(PARENT, "frank"), to_lmq_name(PARENT, "gus")]
        assert cl["lastAccessTime"] > 0
        g = got["group"]["broker-a"]
        assert g["totalLagCount"] == 30 and [e["liteTopic"] for e in g["lagCountTopK"]] == ["frank"]
        assert g["lagCountTopK"][0]["lagCount"] == 30 and g["earliestUnconsumedTimestamp"] > 0
        assert [e["liteTopic"] for e in g["lagTimestampTopK"]] == ["frank"]
        one = got["one"]["broker-a"]
        assert one["totalLagCount"] == 30 and one["liteTopicOffsetWrapper"]["brokerOffset"] == 30
        assert got["dispatched"] == ["broker-a"]
        # The same through the CLI, as an operator reads it.
        cli = {verb: ok(capsys, "lite", *args, "--namesrv", ns) for verb, args in (
            ("broker", ("broker", "broker-a")), ("topic", ("topic", PARENT, "frank")),
            ("group", ("group", PARENT, GROUP)), ("client", ("client", PARENT, GROUP, client_id)),
            ("dispatch", ("dispatch", PARENT, GROUP)))}
        assert re.search(r"^\s*2\s+\d+\s+2\s", cli["broker"], re.M) and re.search(rf"^{PARENT}\s+1\s+{GROUP}",
                                                                               cli["broker"], re.M)
        assert re.search(rf"^broker-a\s+0\s+30\s+\S.*yes\s+{re.escape(client_id)} \({GROUP}\)", cli["topic"], re.M)
        assert re.search(r"^broker-a\s+30\s", cli["group"], re.M) and re.search(r"^frank\s+broker-a\s+30\s",
                                                                                 cli["group"], re.M)
        assert re.search(r"^broker-a\s+2\s", cli["client"], re.M) and to_lmq_name(PARENT, "gus") in cli["client"]
        assert "offered again to its readers on broker-a" in cli["dispatch"]
        rc, _, err = sluice_cli(capsys, "lite", "group", PARENT, "no-such-group", "--namesrv", ns)
        assert rc != 0 and "Group [no-such-group] not exist." in err
    finally:
        gate.set()
        c.shutdown()

    async def refused() -> list[tuple[int, str]]:
        out = []
        async with Admin(ns) as admin:
            for call in (admin.parent_topic_info("plain"), admin.lite_topic_info(PARENT, "no spaces"),
                         admin.lite_group_info(PARENT, "no-such-group"),
                         admin.lite_client_info(PARENT, "no-such-group", "x"),
                         admin.trigger_lite_dispatch(PARENT, "no-such-group")):
                try:
                    await call
                except BrokerResponseError as exc:
                    out.append((exc.code, exc.remark or ""))
        return out

    answers = empty_cluster.loop.run(refused(), 30)
    assert answers[0] == (ResponseCode.INVALID_PARAMETER, "Topic [plain] type not match.")
    assert answers[1][0] == ResponseCode.INVALID_PARAMETER and "alphanumeric" in answers[1][1]
    assert answers[2:] == [(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "Group [no-such-group] not exist.")] * 3


def test_a_wildcard_groups_consumer_reads_every_lite_topic_naming_none(empty_cluster: Cluster) -> None:
    """``lite.sub.wildcard`` (RocketMQ 5.5): the group's consumers read every lite topic of the parent, those that
    held messages before they came and those made after; naming one is refused."""
    broker = lite_cluster(empty_cluster)
    ns = empty_cluster.namesrv_addr

    async def wildcard_group() -> None:
        async with Admin(ns) as admin:
            await admin.update_group("everything", attributes=f"+lite.bind.topic={PARENT},+lite.sub.wildcard=true")

    empty_cluster.loop.run(wildcard_group())
    send(ns, "old-1", 3)
    seen = Seen()
    c = LitePushConsumer("everything", namesrv=ns, bind_topic=PARENT)
    c.register_listener(seen)
    c.start()
    try:
        with pytest.raises(BrokerResponseError) as refused:
            c.subscribe_lite("old-1")
        assert refused.value.code == ResponseCode.ILLEGAL_OPERATION and "not supported" in (refused.value.remark or "")
        wait_until(lambda: seen.count() == 3, 30, "the messages sent before the consumer came")
        send(ns, "new-1", 2)
        send(ns, "new-2", 2)
        wait_until(lambda: seen.count() == 7, 30, "the messages of lite topics made since")
        assert seen.by_lite == {"old-1": [b"old-1-0", b"old-1-1", b"old-1-2"], "new-1": [b"new-1-0", b"new-1-1"],
                                "new-2": [b"new-2-0", b"new-2-1"]}
        client_id = c.aio.client.client_id
        readers = broker.lite.registry.subscribers(to_lmq_name(PARENT, "new-2"))  # type: ignore[union-attr]
        assert readers == {"everything": [client_id]}
    finally:
        c.shutdown()
    assert broker.lite.registry.wildcard == {}  # type: ignore[union-attr]  (its last reader gone)
