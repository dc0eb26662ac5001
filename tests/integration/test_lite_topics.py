"""Lite topics on the broker (RocketMQ 5.5), over the remoting protocol a gRPC front speaks to it: a message sent
with a lite topic lands in that lite topic's light queue, created by it; a client subscribed to some lite topics
pops only theirs, each in order (nothing more of one until what it got is acknowledged or comes back), and is
woken by a message arriving; an idle lite topic expires and its reader is told to unsubscribe."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from sluice import Message, Producer
from sluice.auth.credentials import signing_hook
from sluice.client.admin import Admin
from sluice.client.auth_admin import policy_entry
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.errors import BrokerResponseError, MessageFormatError
from sluice.common.lite import to_lmq_name
from sluice.common.message import MessageExt
from sluice.common.message_codec import decode_records
from sluice.common.properties import PROPERTY_INNER_MULTI_QUEUE_OFFSET, PROPERTY_LITE_TOPIC, encode_properties
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopLiteMessageRequestHeader,
    SendMessageRequestHeader,
)
from tests.conftest import Cluster
from tests.integration.helpers import wait_until

PARENT = "chats"
GROUP = "chat-readers"
LITE = dict(store_enable_lmq=True, store_enable_multi_dispatch=True)


def lite_cluster(cluster: Cluster, **settings: Any) -> Any:
    broker = cluster.start_broker("broker-a", **LITE, **settings)
    cluster.create_topic(PARENT, 2, attributes="+message.type=LITE,+lite.topic.expiration=1")

    async def group() -> None:
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.update_group(GROUP, attributes=f"+lite.bind.topic={PARENT}")

    cluster.loop.run(group())
    return broker


class Client:
    """A gRPC front's side of the broker: raw remoting requests, as RocketMQ's proxy sends them."""

    def __init__(self, addr: str, credentials: tuple[str, str] | None = None) -> None:
        self.addr = addr
        self.notices: list[dict[str, str]] = []
        self.remoting = RemotingClient(handler=self._on_request, request_hook=signing_hook(credentials))
        self.api = MQClientAPI(self.remoting, [])

    def _on_request(self, conn: Any, req: RemotingCommand) -> None:
        if req.code == RequestCode.NOTIFY_UNSUBSCRIBE_LITE:
            self.notices.append(dict(req.ext_fields))

    async def send(self, lite: str, body: bytes) -> RemotingCommand:
        props = encode_properties({PROPERTY_LITE_TOPIC: lite, "UNIQ_KEY": body.hex().upper()}).decode()
        ext = SendMessageRequestHeader("pg", PARENT, "TBW102", 4, 0, 0, 0, 0, props).encode_v2()
        return await self.api.invoke(self.addr, RequestCode.SEND_MESSAGE_V2, ext, body)

    async def ctl(self, action: str, client_id: str, lites: list[str], **extra: Any) -> RemotingCommand:
        entry = {"action": action, "clientId": client_id, "group": GROUP, "topic": PARENT, "liteTopicSet": lites,
                 "version": 0}
        entry.update(extra)
        body = json.dumps({"subscriptionSet": [entry]}).encode()
        return await self.api.invoke(self.addr, RequestCode.LITE_SUBSCRIPTION_CTL, {}, body)

    async def pop(self, client_id: str, poll_ms: int = 0, n: int = 32,
                  invisible_ms: int = 60_000) -> tuple[RemotingCommand, list[MessageExt]]:
        ext = PopLiteMessageRequestHeader(client_id, GROUP, PARENT, n, invisible_ms, poll_ms).encode()
        resp = await self.api.invoke(self.addr, RequestCode.POP_LITE_MESSAGE, ext, b"",
                                          timeout_ms=poll_ms + 10_000)
        return resp, decode_records(resp.body) if resp.code == ResponseCode.SUCCESS else []

    async def ack(self, resp: RemotingCommand, m: MessageExt) -> RemotingCommand:
        ext = AckMessageRequestHeader(GROUP, PARENT, 0, _lmq_offset(m), _receipt(resp, m),
                                      lite_topic=m.properties[PROPERTY_LITE_TOPIC]).encode()
        return await self.api.invoke(self.addr, RequestCode.ACK_MESSAGE, ext, b"")

    async def nack(self, resp: RemotingCommand, m: MessageExt, suspend: bool = False) -> RemotingCommand:
        ext = ChangeInvisibleTimeRequestHeader(GROUP, PARENT, 0, _lmq_offset(m), _receipt(resp, m), 0,
                                               lite_topic=m.properties[PROPERTY_LITE_TOPIC],
                                               suspend=suspend).encode()
        return await self.api.invoke(self.addr, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext, b"")

    async def close(self) -> None:
        await self.remoting.close()


def _lmq_offset(m: MessageExt) -> int:
    return int(m.properties[PROPERTY_INNER_MULTI_QUEUE_OFFSET])


def _receipt(resp: RemotingCommand, m: MessageExt) -> str:
    """The receipt a client builds for a lite message (RocketMQ's processPopLiteResponse)."""
    e = resp.ext_fields
    return f"0 {e['popTime']} {e['invisibleTime']} {e['reviveQid']} 0 broker-a 0 {_lmq_offset(m)}"


def test_a_subscriber_pops_its_lite_topics_in_order_and_only_theirs(empty_cluster: Cluster) -> None:
    broker = lite_cluster(empty_cluster)

    async def go() -> None:
        c = Client(broker.broker_addr)
        try:
            for i in range(3):
                for lite in ("alice", "bob", "carol"):
                    r = await c.send(lite, f"{lite}-{i}".encode())
                    assert r.code == ResponseCode.SUCCESS, r.remark
            assert broker.store.get_max_offset_in_queue(to_lmq_name(PARENT, "alice"), 0) == 3
            assert (await c.ctl("PARTIAL_ADD", "c1", ["alice", "bob"])).code == ResponseCode.SUCCESS
            resp, msgs = await c.pop("c1")
            bodies = sorted(m.body.decode() for m in msgs)
            assert bodies == ["alice-0", "alice-1", "alice-2", "bob-0", "bob-1", "bob-2"]
            assert resp.ext_fields["orderCountInfo"] == ";".join(["0"] * 6)
            # Nothing more of a lite topic in flight: a new message of alice waits for the acknowledgements.
            await c.send("alice", b"alice-3")
            resp2, more = await c.pop("c1")
            assert more == []
            for m in msgs:
                assert (await c.ack(resp, m)).code == ResponseCode.SUCCESS
            _, more = await c.pop("c1", poll_ms=5_000)
            assert [m.body for m in more] == [b"alice-3"]
        finally:
            await c.close()

    empty_cluster.loop.run(go(), 60)


def test_a_waiting_pop_is_woken_by_a_message_and_one_put_back_comes_again(empty_cluster: Cluster) -> None:
    broker = lite_cluster(empty_cluster)

    async def go() -> None:
        c = Client(broker.broker_addr)
        try:
            assert (await c.ctl("PARTIAL_ADD", "c1", ["dave"])).code == ResponseCode.SUCCESS
            waiting = asyncio.ensure_future(c.pop("c1", poll_ms=20_000))
            polling = broker.lite.polling  # type: ignore[union-attr]
            while not polling.held.get("c1"):  # (held on the broker: nothing to hand out yet)
                await asyncio.sleep(0.01)
            assert not waiting.done()
            await c.send("dave", b"hello")
            resp, msgs = await asyncio.wait_for(waiting, 10)
            assert [m.body for m in msgs] == [b"hello"]
            assert (await c.nack(resp, msgs[0])).code == ResponseCode.SUCCESS
            resp, again = await c.pop("c1", poll_ms=10_000)
            assert [m.body for m in again] == [b"hello"]
            assert resp.ext_fields["orderCountInfo"] == "1"  # handed out once before
        finally:
            await c.close()

    empty_cluster.loop.run(go(), 60)


def test_bad_lite_requests_are_refused_saying_why(empty_cluster: Cluster) -> None:
    broker = lite_cluster(empty_cluster)
    empty_cluster.create_topic("plain", 1)

    async def go() -> None:
        c = Client(broker.broker_addr)
        try:
            r = await c.send("has space", b"x")
            assert r.code == ResponseCode.MESSAGE_ILLEGAL and "alphanumeric" in r.remark
            r = await c.ctl("PARTIAL_ADD", "c1", ["a$b"])
            assert r.code == ResponseCode.ILLEGAL_OPERATION
            r = await c.api.invoke(broker.broker_addr, RequestCode.LITE_SUBSCRIPTION_CTL, {}, b"{}")
            assert r.code == ResponseCode.ILLEGAL_OPERATION
            ext = PopLiteMessageRequestHeader("c1", GROUP, "plain", 8, 60_000, 0).encode()
            r = await c.api.invoke(broker.broker_addr, RequestCode.POP_LITE_MESSAGE, ext, b"")
            assert r.code == ResponseCode.INVALID_PARAMETER and "message type not match" in r.remark
            ext = PopLiteMessageRequestHeader("c1", GROUP, PARENT, 33, 60_000, 0).encode()
            r = await c.api.invoke(broker.broker_addr, RequestCode.POP_LITE_MESSAGE, ext, b"")
            assert r.code == ResponseCode.INVALID_PARAMETER
            ext = AckMessageRequestHeader(GROUP, PARENT, 0, 5, "0 1 2 999 0 broker-a 0 5", lite_topic="zed").encode()
            r = await c.api.invoke(broker.broker_addr, RequestCode.ACK_MESSAGE, ext, b"")
            assert r.code == ResponseCode.NO_MESSAGE
        finally:
            await c.close()

    empty_cluster.loop.run(go(), 60)


def test_an_idle_lite_topic_expires_and_so_does_one_of_a_deleted_parent(empty_cluster: Cluster) -> None:
    # Expiration 1 minute (the attribute's unit), no floor: whether it is idle long enough is asked of a clock a
    # minute on, not waited for; the deletion is the one the periodic check makes. As in RocketMQ, its reader is
    # not told (its next full sync subscribes again).
    broker = lite_cluster(empty_cluster, min_lite_ttl=0)
    lmq = to_lmq_name(PARENT, "erin")
    lifecycle = broker.lite.lifecycle  # type: ignore[union-attr]

    async def go() -> Client:
        c = Client(broker.broker_addr)
        await c.send("erin", b"old news")
        assert (await c.ctl("PARTIAL_ADD", "c1", ["erin"])).code == ResponseCode.SUCCESS
        assert not lifecycle.is_expired(lmq, lifecycle_now())
        assert lifecycle.is_expired(lmq, lifecycle_now() + 61_000)
        await lifecycle.delete([lmq])
        return c

    c = empty_cluster.loop.run(go(), 60)
    try:
        assert broker.store.find_consume_queue(lmq, 0, create=False) is None
        assert lmq not in broker.lite.registry.by_lmq  # type: ignore[union-attr]
        assert c.notices == []
        empty_cluster.loop.run(c.send("frank", b"x"))
        assert not lifecycle.is_expired(to_lmq_name(PARENT, "frank"), lifecycle_now())
        broker.topic_config_manager.delete(PARENT)
        assert lifecycle.is_expired(to_lmq_name(PARENT, "frank"), lifecycle_now())
    finally:
        empty_cluster.loop.run(c.close())


def test_an_exclusive_groups_new_reader_takes_a_lite_topic_over_and_the_old_one_is_told(
        empty_cluster: Cluster) -> None:
    broker = lite_cluster(empty_cluster)

    async def go() -> tuple[Client, Client]:
        async with Admin(empty_cluster.namesrv_addr) as admin:
            await admin.update_group(GROUP,
                                     attributes="+lite.sub.model=Exclusive,+lite.sub.reset.offset.exclusive=true")
        a, b = Client(broker.broker_addr), Client(broker.broker_addr)
        for i in range(3):
            await a.send("gina", f"g-{i}".encode())
        assert (await a.ctl("PARTIAL_ADD", "a", ["gina"])).code == ResponseCode.SUCCESS
        resp, msgs = await a.pop("a")
        for m in msgs:
            assert (await a.ack(resp, m)).code == ResponseCode.SUCCESS
        assert (await b.ctl("PARTIAL_ADD", "b", ["hank"])).code == ResponseCode.SUCCESS  # (no one to take over)
        assert broker.store.consumer_offsets.query_offset(GROUP, to_lmq_name(PARENT, "gina"), 0) == 3
        assert (await b.ctl("PARTIAL_ADD", "b", ["gina"])).code == ResponseCode.SUCCESS
        return a, b

    a, b = empty_cluster.loop.run(go(), 60)
    try:
        wait_until(lambda: a.notices, 10, "the unsubscribe notice")
        assert a.notices[0]["liteTopic"] == "gina" and a.notices[0]["clientId"] == "a"
        # (taken over with lite.sub.reset.offset.exclusive: the new reader starts from the beginning)
        _, again = empty_cluster.loop.run(b.pop("b", poll_ms=5_000))
        assert [m.body for m in again] == [b"g-0", b"g-1", b"g-2"]
    finally:
        empty_cluster.loop.run(a.close())
        empty_cluster.loop.run(b.close())


def test_what_is_never_acknowledged_comes_back_after_its_invisible_time(empty_cluster: Cluster) -> None:
    broker = lite_cluster(empty_cluster)

    async def go() -> None:
        c = Client(broker.broker_addr)
        try:
            await c.send("ivan", b"first")
            assert (await c.ctl("PARTIAL_ADD", "c1", ["ivan"])).code == ResponseCode.SUCCESS
            _, msgs = await c.pop("c1", invisible_ms=1_000)
            assert [m.body for m in msgs] == [b"first"]
            resp, again = await c.pop("c1", poll_ms=10_000)  # (no new message: woken by its coming back)
            assert [m.body for m in again] == [b"first"] and resp.ext_fields["orderCountInfo"] == "1"
        finally:
            await c.close()

    empty_cluster.loop.run(go(), 60)


def test_a_client_reads_and_drops_only_its_own_groups_lite_topics(empty_cluster: Cluster) -> None:
    broker = lite_cluster(empty_cluster)

    async def go() -> None:
        async with Admin(empty_cluster.namesrv_addr) as admin:
            await admin.update_group("other", attributes=f"+lite.bind.topic={PARENT}")
        c = Client(broker.broker_addr)
        try:
            await c.send("judy", b"mine")
            assert (await c.ctl("PARTIAL_ADD", "victim", ["judy"])).code == ResponseCode.SUCCESS
            ext = PopLiteMessageRequestHeader("victim", "other", PARENT, 8, 60_000, 0).encode()
            r = await c.api.invoke(broker.broker_addr, RequestCode.POP_LITE_MESSAGE, ext, b"")
            assert r.code == ResponseCode.POLLING_TIMEOUT  # (another group's pop takes nothing of its events)
            body = json.dumps({"subscriptionSet": [{"action": "COMPLETE_REMOVE", "clientId": "victim",
                                                    "group": "other", "topic": PARENT}]}).encode()
            assert (await c.api.invoke(broker.broker_addr, RequestCode.LITE_SUBSCRIPTION_CTL, {}, body)).code == \
                ResponseCode.SUCCESS
            r = await c.ctl("PARTIAL_ADD", "victim", ["judy"], group="other")
            assert r.code == ResponseCode.ILLEGAL_OPERATION and "reads lite topics in group" in r.remark
            _, msgs = await c.pop("victim")
            assert [m.body for m in msgs] == [b"mine"]
            r = await c.ctl("PARTIAL_ADD", "stranger", ["judy"], group="no-such-group")
            assert r.code == ResponseCode.ILLEGAL_OPERATION
            # Another topic's lite topic cannot be named by hand.
            props = encode_properties({"INNER_MULTI_DISPATCH": to_lmq_name(PARENT, "judy"), "UNIQ_KEY": "AB"})
            ext = SendMessageRequestHeader("pg", "plain", "TBW102", 4, 0, 0, 0, 0, props.decode()).encode_v2()
            r = await c.api.invoke(broker.broker_addr, RequestCode.SEND_MESSAGE_V2, ext, b"x")
            assert r.code == ResponseCode.MESSAGE_ILLEGAL
        finally:
            await c.close()

    empty_cluster.create_topic("plain", 1)
    empty_cluster.loop.run(go(), 60)


def lifecycle_now() -> int:
    return int(time.time() * 1000)


def test_sluices_producer_sends_to_lite_topics_and_refuses_bad_names(empty_cluster: Cluster) -> None:
    broker = lite_cluster(empty_cluster)
    with Producer("lite-pg", namesrv=empty_cluster.namesrv_addr) as p:
        results = [p.send(Message(PARENT, f"k-{i}".encode(), lite_topic="kim")) for i in range(3)]
        assert len({r.queue.queue_id for r in results}) == 1  # (a lite topic's messages go to one queue)
        with pytest.raises(MessageFormatError, match="alphanumeric"):
            Message(PARENT, b"x", lite_topic="no spaces")
        with pytest.raises(MessageFormatError, match="reserved|not allowed|may not"):
            Message(PARENT, b"x", properties={"__LITE_TOPIC": "kim"})

    async def go() -> None:
        c = Client(broker.broker_addr)
        try:
            assert (await c.ctl("PARTIAL_ADD", "c1", ["kim"])).code == ResponseCode.SUCCESS
            _, msgs = await c.pop("c1", poll_ms=5_000)
            assert [m.body for m in msgs] == [b"k-0", b"k-1", b"k-2"]
            assert {m.properties[PROPERTY_LITE_TOPIC] for m in msgs} == {"kim"}
        finally:
            await c.close()

    empty_cluster.loop.run(go(), 60)


def test_with_acl_on_lite_subscriptions_and_pops_need_sub_on_the_parent_and_the_group(empty_cluster: Cluster) -> None:
    from sluice.common.config import AuthUser

    root = ("root", "root-secret")
    empty_cluster.credentials = root
    broker = empty_cluster.start_broker("broker-a", **LITE, authentication_enabled=True, authorization_enabled=True,
                                        init_authentication_user=AuthUser(username="root", password="root-secret"))
    empty_cluster.create_topic(PARENT, 2, attributes="+message.type=LITE")

    async def setup() -> None:
        async with Admin(empty_cluster.namesrv_addr, credentials=root) as admin:
            await admin.update_group(GROUP, attributes=f"+lite.bind.topic={PARENT}")
            await admin.create_user("alice", "alice-secret")
            await admin.create_user("bob", "bob-secret")
            await admin.create_acl("User:alice", [policy_entry(f"Topic:{PARENT}", "Sub"),
                                                  policy_entry(f"Group:{GROUP}", "Sub")])
            await admin.create_acl("User:bob", [policy_entry(f"Topic:{PARENT}", "Sub")])

    async def go() -> None:
        sender = Client(broker.broker_addr, root)
        alice = Client(broker.broker_addr, ("alice", "alice-secret"))
        bob = Client(broker.broker_addr, ("bob", "bob-secret"))
        try:
            assert (await sender.send("lena", b"hi")).code == ResponseCode.SUCCESS
            r = await bob.ctl("PARTIAL_ADD", "b1", ["lena"])  # (no Sub on the group)
            assert r.code == ResponseCode.NO_PERMISSION and f"Group:{GROUP}" in r.remark
            assert "b1" not in broker.lite.registry.clients  # type: ignore[union-attr]
            assert (await alice.ctl("PARTIAL_ADD", "a1", ["lena"])).code == ResponseCode.SUCCESS
            r, _ = await bob.pop("a1")  # (bob naming alice's client: refused before anything is taken)
            assert r.code == ResponseCode.NO_PERMISSION
            resp, msgs = await alice.pop("a1", poll_ms=5_000)
            assert [m.body for m in msgs] == [b"hi"]
            assert (await bob.ack(resp, msgs[0])).code == ResponseCode.NO_PERMISSION
            assert (await alice.ack(resp, msgs[0])).code == ResponseCode.SUCCESS
        finally:
            for c in (sender, alice, bob):
                await c.close()

    empty_cluster.loop.run(setup(), 60)
    empty_cluster.loop.run(go(), 60)


def test_the_periodic_check_deletes_idle_lite_topics_by_their_parents_expiration_and_orphans(
        empty_cluster: Cluster) -> None:
    """The check finds idle lite topics by the store's index of last store times (not by walking them all):
    at a clock 61 s on, the lite topics of a parent expiring after 1 minute go, a 60-minute parent's stay, and
    every lite topic of a deleted parent goes whatever its age."""
    broker = lite_cluster(empty_cluster, min_lite_ttl=0)
    empty_cluster.create_topic("long-lived", 1, attributes="+message.type=LITE,+lite.topic.expiration=60")
    empty_cluster.create_topic("doomed", 1, attributes="+message.type=LITE,+lite.topic.expiration=60")
    lifecycle = broker.lite.lifecycle  # type: ignore[union-attr]
    with Producer("lite-pg", namesrv=empty_cluster.namesrv_addr) as p:
        for parent, lites in ((PARENT, ("ann", "bea", "cid")), ("long-lived", ("dan",)), ("doomed", ("eve", "fay"))):
            for lite in lites:
                p.send(Message(parent, b"x", lite_topic=lite))
    assert empty_cluster.loop.run(lifecycle.clean_expired(lifecycle_now()), 30) == 0  # (nothing idle yet)
    broker.topic_config_manager.delete("doomed")
    assert empty_cluster.loop.run(lifecycle.clean_expired(lifecycle_now() + 61_000), 30) == 5
    left = broker.store.light_queue_names("%LMQ%$")
    assert left == [to_lmq_name("long-lived", "dan")]


def test_a_suspended_lite_pop_comes_back_whole_without_a_delivery_counted(empty_cluster: Cluster) -> None:
    """``suspend`` (RocketMQ 5.5's ChangeInvisibleDuration.suspend): the lite topic's pop comes back from its first
    message, and nobody's reconsume times grew; a plain nack counts the delivery."""
    broker = lite_cluster(empty_cluster)

    async def go() -> None:
        c = Client(broker.broker_addr)
        try:
            for i in range(2):
                await c.send("ivy", f"i-{i}".encode())
            assert (await c.ctl("PARTIAL_ADD", "c1", ["ivy"])).code == ResponseCode.SUCCESS
            resp, msgs = await c.pop("c1")
            assert [m.body for m in msgs] == [b"i-0", b"i-1"]
            assert (await c.nack(resp, msgs[1], suspend=True)).code == ResponseCode.SUCCESS
            resp, again = await c.pop("c1", poll_ms=5_000)
            assert [m.body for m in again] == [b"i-0", b"i-1"] and resp.ext_fields["orderCountInfo"] == "0;0"
            assert (await c.ack(resp, again[1])).code == ResponseCode.SUCCESS
            assert (await c.nack(resp, again[0])).code == ResponseCode.SUCCESS  # (counted)
            resp, third = await c.pop("c1", poll_ms=5_000)
            assert [m.body for m in third] == [b"i-0"] and resp.ext_fields["orderCountInfo"] == "1"
        finally:
            await c.close()

    empty_cluster.loop.run(go(), 60)


def test_the_expiry_check_gets_past_lite_topics_whose_last_store_time_is_not_known(empty_cluster: Cluster) -> None:
    """Queues made by an older store know no last store time (0): the check reads it, or notes one for an empty
    queue, so that more than a chunk of them never keeps it from the idle lite topics behind them."""
    broker = lite_cluster(empty_cluster, min_lite_ttl=0)
    light = broker.store.dispatcher.light
    assert light is not None
    with Producer("lite-pg", namesrv=empty_cluster.namesrv_addr) as p:
        p.send(Message(PARENT, b"x", lite_topic="really-idle"))
    for i in range(1_200):  # (more than a chunk: 1,000)
        light.create(to_lmq_name(PARENT, f"empty-{i}"))  # (next 0, last 0: as an older store's)
    lifecycle = broker.lite.lifecycle  # type: ignore[union-attr]
    calls: list[object] = []
    idle = lifecycle.store.idle
    lifecycle.store.idle = lambda *a: (calls.append(a), idle(*a))[1]  # type: ignore[method-assign]
    assert empty_cluster.loop.run(lifecycle.clean_expired(lifecycle_now() + 61_000), 60) == 1
    left = broker.store.light_queue_names(f"%LMQ%${PARENT}$")
    assert to_lmq_name(PARENT, "really-idle") not in left and len(left) == 1_200
    assert len(calls) <= 4  # (each chunk deleted or noted: the rounds end)
    calls.clear()
    assert empty_cluster.loop.run(lifecycle.clean_expired(lifecycle_now() + 61_000), 60) == 0
    assert len(calls) == 1  # (noted: not looked at again before their expiration)


def test_with_acl_on_the_lite_admin_requests_need_get_or_update_on_what_they_name(empty_cluster: Cluster) -> None:
    """GET_LITE_TOPIC_INFO and GET_PARENT_TOPIC_INFO need Get on the parent, GET_LITE_GROUP_INFO Get on the group,
    GET_LITE_CLIENT_INFO both, TRIGGER_LITE_DISPATCH Update on the group, GET_BROKER_LITE_INFO Get on the cluster:
    each refused to a user without it, served to one with it."""
    from sluice.common.config import AuthUser

    root = ("root", "root-secret")
    empty_cluster.credentials = root
    empty_cluster.start_broker("broker-a", **LITE, authentication_enabled=True, authorization_enabled=True,
                               init_authentication_user=AuthUser(username="root", password="root-secret"))
    empty_cluster.create_topic(PARENT, 2, attributes="+message.type=LITE")
    ns = empty_cluster.namesrv_addr

    async def setup() -> None:
        async with Admin(ns, credentials=root) as admin:
            await admin.update_group(GROUP, attributes=f"+lite.bind.topic={PARENT}")
            await admin.create_user("reader", "reader-secret")
            await admin.create_user("subber", "subber-secret")
            await admin.create_acl("User:reader", [policy_entry(f"Topic:{PARENT}", "Get"),
                                                   policy_entry(f"Group:{GROUP}", "Get")])
            await admin.create_acl("User:subber", [policy_entry(f"Topic:{PARENT}", "Sub"),
                                                   policy_entry(f"Group:{GROUP}", "Sub")])

    async def ask(user: tuple[str, str]) -> dict[str, int]:
        calls = {"topic": lambda a: a.lite_topic_info(PARENT, "x"), "parent": lambda a: a.parent_topic_info(PARENT),
                 "group": lambda a: a.lite_group_info(PARENT, GROUP), "client": lambda a: a.lite_client_info(
                     PARENT, GROUP, "c1"), "dispatch": lambda a: a.trigger_lite_dispatch(PARENT, GROUP),
                 "broker": lambda a: a.broker_lite_info("broker-a")}
        out = {}
        async with Admin(ns, credentials=user) as admin:
            for name, call in calls.items():
                try:
                    await call(admin)
                    out[name] = ResponseCode.SUCCESS
                except BrokerResponseError as exc:
                    out[name] = exc.code
        return out

    empty_cluster.loop.run(setup(), 60)
    no = ResponseCode.NO_PERMISSION
    ok = ResponseCode.SUCCESS
    assert empty_cluster.loop.run(ask(("reader", "reader-secret")), 60) == {
        "topic": ok, "parent": ok, "group": ok, "client": ok, "dispatch": no, "broker": no}
    assert empty_cluster.loop.run(ask(("subber", "subber-secret")), 60) == {
        "topic": no, "parent": no, "group": no, "client": no, "dispatch": no, "broker": no}
    assert empty_cluster.loop.run(ask(root), 60) == {name: ok for name in
                                                     ("topic", "parent", "group", "client", "dispatch", "broker")}
