"""Which broker of a group a client request goes to (RocketMQ findBrokerAddressIn*), and how often a failed
request makes the client ask the name server for the route again."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.client import mq_client
from sluice.client.broker_select import admin_addr, publish_addr, subscribe_addr
from sluice.client.mq_client import MQClientInstance
from sluice.common.config import ClientConfig
from sluice.common.structs import BrokerData, QueueData, TopicRouteData

M, S1, S2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


def test_sends_go_to_the_master_only():
    assert publish_addr({0: M, 1: S1}) == M
    assert publish_addr({1: S1, 2: S2}) is None
    assert publish_addr({}) is None and publish_addr(None) is None


def test_offsets_go_to_the_master_else_the_lowest_slave():
    assert admin_addr({0: M, 1: S1}) == (M, False)
    assert admin_addr({2: S2, 1: S1}) == (S1, True)
    assert admin_addr({}) is None


def test_pull_goes_where_the_last_answer_suggested():
    assert subscribe_addr({0: M, 1: S1}, 1) == (S1, True)
    assert subscribe_addr({0: M, 1: S1}, 0) == (M, False)


def test_pull_suggested_to_a_missing_slave_tries_the_next_id_then_the_master():
    assert subscribe_addr({0: M, 2: S2}, 1) == (S2, True)
    assert subscribe_addr({0: M}, 1) == (M, False)


def test_pull_without_a_master_goes_to_a_slave():
    assert subscribe_addr({1: S1}, 0) == (S1, True)
    assert subscribe_addr({2: S2, 1: S1}, 0) == (S1, True)
    assert subscribe_addr({}, 0) is None


@given(st.sets(st.integers(0, 4), min_size=1), st.integers(0, 5))
def test_pull_always_finds_a_broker_of_a_non_empty_group_and_says_whether_it_is_a_slave(ids, suggested):
    addrs = {i: f"10.0.0.{i}:10911" for i in ids}
    found = subscribe_addr(addrs, suggested)
    assert found is not None
    addr, slave = found
    assert addr in addrs.values()
    assert slave == (addr != addrs.get(0))
    if suggested in addrs:
        assert addr == addrs[suggested]
    elif 0 in addrs and suggested + 1 not in addrs:
        assert addr == addrs[0]


# == route refresh after a failure ===================================================================
def _route(addrs: dict[int, str]) -> TopicRouteData:
    return TopicRouteData([QueueData("broker-a", 4, 4, 6)], [BrokerData("c", "broker-a", addrs)])


class _FakeApi:
    def __init__(self) -> None:
        self.calls = 0
        self.answer = _route({0: M})

    async def get_topic_route(self, topic: str, timeout_ms: int = 3000) -> TopicRouteData | None:
        self.calls += 1
        await asyncio.sleep(0)
        return self.answer


@pytest.fixture
def client() -> tuple[MQClientInstance, _FakeApi]:
    c = MQClientInstance(ClientConfig(namesrv_addr="127.0.0.1:1"))
    api = _FakeApi()
    c.api = api  # type: ignore[assignment]
    c.running = True  # (no timers: the test drives the refreshes)
    return c, api


def _a_second_passes(c: MQClientInstance, topic: str) -> None:
    c._route_fetched_at[topic] -= mq_client.ROUTE_REFRESH_MIN_INTERVAL


def test_failure_refreshes_the_route_at_most_once_a_second_per_topic(client):
    c, api = client

    async def go() -> None:
        await c.update_route("T")
        assert c.refresh_route_soon("T") is None  # just fetched
        _a_second_passes(c, "T")
        api.answer = _route({0: S1})  # a slave was promoted
        fetch = c.refresh_route_soon("T")
        assert fetch is not None
        assert c.refresh_route_soon("T") is fetch  # a fetch under way is shared
        await fetch
        assert c.find_publish_addr("broker-a") == S1
        assert c.refresh_route_soon("T") is None
        other = c.refresh_route_soon("U")
        assert other is not None  # another topic has its own allowance
        await other

    asyncio.run(go())
    assert api.calls == 3


def test_no_refresh_once_the_client_is_shut_down(client):
    c, api = client
    c.running = False
    assert c.refresh_route_soon("T") is None
    assert api.calls == 0


def test_producers_heartbeat_masters_and_consumers_every_broker(client):
    c, _ = client
    c.broker_addrs = {"broker-a": {0: M, 1: S1}, "broker-b": {1: S2}}
    assert c.heartbeat_addrs() == [M]
    c.consumers["g"] = object()  # type: ignore[assignment]
    assert c.heartbeat_addrs() == sorted([M, S1, S2])


@pytest.mark.parametrize(("code", "avoided"), [(2, True), (14, True), (16, True), (13, False), (1, False)])
def test_a_broker_that_pushes_back_or_refuses_writes_is_avoided_for_a_while(code: int, avoided: bool):
    """SYSTEM_BUSY (2), SERVICE_NOT_AVAILABLE (14), NO_PERMISSION (16): the next attempt goes to another broker
    (RocketMQ 5 isolates such a broker for 10 s); a refusal of the message itself (MESSAGE_ILLEGAL 13) or a
    SYSTEM_ERROR says nothing of the broker."""
    from sluice.client.aio.producer import Producer
    from sluice.client.aio.sender import AVOID_SECONDS
    from sluice.common.errors import BrokerResponseError
    from sluice.common.structs import MessageQueue
    from sluice.remoting.command import RemotingCommand

    async def go() -> None:
        producer = Producer("avoid-pg", "127.0.0.1:1")
        mq = MessageQueue("T", "broker-a", 0)
        resp = RemotingCommand(code, {}, b"", 1, 1, "refused")
        try:
            outcome = producer.sender.outcome(mq, M, 1.0, resp, None)
        except BrokerResponseError as exc:  # not retried at all
            outcome = exc
        assert isinstance(outcome, BrokerResponseError) and outcome.code == code
        assert producer.faults.is_available("broker-a") is not avoided
        if avoided:
            assert AVOID_SECONDS <= 10.0

    asyncio.run(go())
