"""Broker bookkeeping without sockets: queue locks, group membership, held pulls, topic auto-creation."""

import asyncio
import time
from collections.abc import Callable

import pytest

from sluice.broker.client_channel_info import ClientChannelInfo
from sluice.broker.consumer_manager import ConsumerManager
from sluice.broker.pull_request_hold_service import PullRequestHoldService, TooManyHeldPulls
from sluice.broker.rebalance_lock_manager import RebalanceLockManager
from sluice.broker.topic_config_manager import TopicConfigManager
from sluice.common.config import BrokerConfig, MessageStoreConfig
from sluice.common.structs import ConsumeFromWhere, ConsumeType, MessageModel, MessageQueue, SubscriptionData


class FakeConn:
    """Stands in for a socket connection (only identity and close() matter to the managers)."""

    def __init__(self) -> None:
        self.closed = False
        self.remote_addr = "127.0.0.1:1"

    def close(self) -> None:
        self.closed = True


async def until(cond: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll ``cond`` while the running loop runs its callbacks; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


MQ0 = MessageQueue("T", "b", 0)
MQ1 = MessageQueue("T", "b", 1)


def test_queue_lock_is_exclusive_until_it_expires():
    m = RebalanceLockManager(max_live_ms=60_000)
    assert m.try_lock_batch("g", [MQ0, MQ1], "c1", now=0) == [MQ0, MQ1]
    assert m.try_lock_batch("g", [MQ0, MQ1], "c2", now=59_000) == []
    assert m.try_lock_batch("other-group", [MQ0], "c2", now=59_000) == [MQ0]
    assert m.try_lock_batch("g", [MQ0], "c2", now=60_001) == [MQ0]
    assert m.owner("g", MQ0, now=60_001) == "c2" and m.owner("g", MQ1, now=60_001) is None


def test_unlock_only_releases_the_owners_locks():
    m = RebalanceLockManager(max_live_ms=60_000)
    m.try_lock_batch("g", [MQ0], "c1", now=0)
    m.unlock_batch("g", [MQ0], "c2")
    assert m.owner("g", MQ0, now=1) == "c1"
    m.unlock_batch("g", [MQ0], "c1")
    assert m.try_lock_batch("g", [MQ0], "c2", now=2) == [MQ0]


def test_unlock_all_releases_every_lock_of_one_client_in_one_group():
    m = RebalanceLockManager(max_live_ms=60_000)
    m.try_lock_batch("g", [MQ0, MQ1], "c1", now=0)
    m.try_lock_batch("other-group", [MQ0], "c1", now=0)
    assert m.unlock_all("g", "c2") == [] and m.owner("g", MQ0, now=1) == "c1"
    assert sorted(m.unlock_all("g", "c1"), key=lambda mq: mq.queue_id) == [MQ0, MQ1]
    assert m.try_lock_batch("g", [MQ0, MQ1], "c2", now=2) == [MQ0, MQ1]
    assert m.owner("other-group", MQ0, now=2) == "c1"


def _register(m: ConsumerManager, group: str, cid: str, conn: FakeConn, subs: list[SubscriptionData],
              now: int = 0) -> bool:
    return m.register_consumer(group, ClientChannelInfo(cid, conn, last_update=now),  # type: ignore[arg-type]
                               ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
                               ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, subs)


def test_members_are_told_when_a_group_changes_and_not_on_plain_heartbeats():
    told: list[tuple[str, list[str]]] = []
    m = ConsumerManager(120_000, lambda g, members: told.append((g, sorted(c.client_id for c in members))))
    a, b = FakeConn(), FakeConn()
    sub = [SubscriptionData("T", "*")]
    assert _register(m, "g", "c1", a, sub)
    assert not _register(m, "g", "c1", a, sub)  # same member, same subscription
    assert _register(m, "g", "c2", b, sub)
    assert m.consumer_ids("g") == ["c1", "c2"]
    m.on_connection_closed(b)  # type: ignore[arg-type]
    assert told == [("g", ["c1"]), ("g", ["c1", "c2"]), ("g", ["c1"])]
    assert m.consumer_ids("g") == ["c1"]


def test_silent_consumers_are_dropped_and_their_connection_closed():
    m = ConsumerManager(expire_ms=1_000)
    conn = FakeConn()
    _register(m, "g", "c1", conn, [SubscriptionData("T", "*")], now=0)
    assert m.scan_not_active(now=500) == 0
    assert m.scan_not_active(now=1_001) == 1
    assert conn.closed and m.consumer_ids("g") == [] and m.get("g") is None


def test_held_pull_wakes_on_arrival_past_its_offset_only():
    async def scenario() -> tuple[list, list, int]:
        hold = PullRequestHoldService(max_held=10)
        woken: list[tuple[str, bool]] = []
        hold.hold("T", 0, 5, 60.0, lambda arrived: woken.append(("q0", arrived)))
        hold.notify_message_arriving("T", 0, 5)  # max offset 5: nothing past offset 5 yet
        for _ in range(3):  # a wake-up comes a loop turn later: three turns leave room for one
            await asyncio.sleep(0)
        before = list(woken)
        hold.notify_message_arriving("T", 0, 6)
        hold.notify_message_arriving("T", 0, 7)  # woken once, however many messages land before it answers
        # A timer set after those arrivals: once it has fired, a second wake-up of q0 would have come too.
        hold.hold("T", 1, 0, 0.05, lambda arrived: woken.append(("q1", arrived)))
        deadline = time.monotonic() + 60
        while ("q1", False) not in woken:
            assert time.monotonic() < deadline, "the timer never fired"
            await asyncio.sleep(0.01)
        return before, woken, hold.count

    before, woken, count = asyncio.run(scenario())
    assert before == []
    assert woken == [("q0", True), ("q1", False)]  # q1 by its timer
    assert count == 0


def test_held_pull_arrival_is_answered_a_loop_turn_later():
    async def scenario() -> tuple[list, list]:
        hold = PullRequestHoldService(max_held=10)
        woken: list[bool] = []
        hold.hold("T", 0, 0, 5.0, woken.append)
        hold.notify_message_arriving("T", 0, 1)
        at_once = list(woken)
        await asyncio.sleep(0)
        return at_once, woken

    assert asyncio.run(scenario()) == ([], [True])


def test_held_pull_sees_a_message_that_landed_before_it_was_registered():
    async def scenario() -> list[bool]:
        hold = PullRequestHoldService(max_held=10)
        woken: list[bool] = []
        hold.hold("T", 0, 0, 5.0, woken.append, arrived=lambda: True)
        await until(lambda: hold.count == 0, "the pull woken")
        return woken

    assert asyncio.run(scenario()) == [True]


def test_dropped_held_pull_is_forgotten_and_never_woken():
    async def scenario() -> tuple[list, int, dict]:
        hold = PullRequestHoldService(max_held=10)
        woken: list[bool] = []
        pull = hold.hold("T", 0, 0, 0.02, woken.append)
        pull.drop()
        hold.notify_message_arriving("T", 0, 1)
        # Longer than the pull's 20 ms timeout: neither the arrival nor the timer may wake it in this window.
        await asyncio.sleep(0.05)
        return woken, hold.count, hold.held_queues("T")

    assert asyncio.run(scenario()) == ([], 0, {})


def test_held_pulls_are_bounded_by_max_held():
    async def scenario() -> int:
        hold = PullRequestHoldService(max_held=2)
        hold.hold("T", 0, 0, 5.0, lambda _: None)
        hold.hold("T", 1, 0, 5.0, lambda _: None)
        with pytest.raises(TooManyHeldPulls):
            hold.hold("T", 2, 0, 5.0, lambda _: None)
        hold.wake_all()
        return hold.count

    assert asyncio.run(scenario()) == 0


def test_unknown_topics_are_created_from_tbw102_only_when_auto_create_is_on(tmp_path):
    on = TopicConfigManager(BrokerConfig(store=MessageStoreConfig(store_path_root_dir=str(tmp_path / "a"))))
    on.load()
    tc = on.create_in_send("NewTopic", "TBW102", 4)
    assert tc is not None and tc.write_queue_nums == 4 and tc.perm == 6
    off = TopicConfigManager(BrokerConfig(auto_create_topic_enable=False,
                                          store=MessageStoreConfig(store_path_root_dir=str(tmp_path / "b"))))
    off.load()
    assert off.create_in_send("NewTopic", "TBW102", 4) is None
    on.close()  # its last change written
    off.close()
    again = TopicConfigManager(BrokerConfig(store=MessageStoreConfig(store_path_root_dir=str(tmp_path / "a"))))
    again.load()
    assert again.get("NewTopic") == tc
    again.close()


class _AnsweringConn:
    """Stands in for the connection a DeferredResponse is bound to: records what it would send."""

    def __init__(self) -> None:
        self.sent: list = []
        self.remote_addr = "127.0.0.1:1"

    def deferred_done(self, deferred, req, resp) -> None:
        self.sent.append(resp)


def _ours(obj: object) -> bool:
    """An object of Sluice's or of this test's (a function, a frame, a cell's owner are reached through these)."""
    module = getattr(obj, "__module__", None) or type(obj).__module__ or ""
    return module.startswith(("sluice.", __name__))


@pytest.mark.parametrize("end", ["arrival", "timeout", "cancel"])
def test_held_pull_answer_leaves_no_reference_cycles(end):
    """The broker holds thousands of pulls a second; a cycle per pull makes the collector pause the loop for
    milliseconds (seen as a 15 ms stall every 0.7 s in the e2e latency tail)."""
    import gc

    from sluice.remoting.command import RemotingCommand
    from sluice.remoting.deferred_response import DeferredResponse

    async def scenario() -> tuple[int, int]:
        hold = PullRequestHoldService(max_held=10)
        conn = _AnsweringConn()
        gc.collect()
        gc.disable()
        try:
            for i in range(50):
                req = RemotingCommand.request(11)
                deferred = DeferredResponse()
                deferred.bind(conn, req)  # type: ignore[arg-type]
                held = hold.hold("T", 0, 0, 0.001 if end == "timeout" else 5.0,
                                 lambda _arrived, d=deferred, r=req: d.resolve(lambda: r.response(0)))
                deferred.on_cancel = held.drop
                if end == "arrival":
                    hold.notify_message_arriving("T", 0, 1)
                elif end == "cancel":
                    deferred.cancel()

                def ended(answers: int = 0 if end == "cancel" else i + 1) -> bool:
                    return hold.count == 0 and len(conn.sent) == answers

                await until(ended, "the held pull's end")
            del req, deferred, held
            # Only this test's objects count: other threads (a client loop left by an earlier test) may make
            # garbage of their own meanwhile.
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            ours = [o for o in gc.garbage if _ours(o)]
            return len(ours), len(conn.sent)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()

    garbage, answered = asyncio.run(scenario())
    assert garbage == 0
    assert answered == (0 if end == "cancel" else 50)


def test_a_failing_held_pull_answer_does_not_stop_the_others():
    async def scenario() -> tuple[list, int]:
        hold = PullRequestHoldService(max_held=10)
        woken: list[int] = []

        def boom(_arrived: bool) -> None:
            raise RuntimeError("answer failed")

        hold.hold("T", 0, 0, 5.0, boom)
        hold.hold("T", 0, 0, 5.0, lambda _a: woken.append(2))
        hold.hold("T", 1, 0, 5.0, lambda _a: woken.append(3))
        hold.notify_message_arriving("T", 0, 1)
        await until(lambda: hold.count == 1, "queue 0's pulls woken")  # the failing one and the next
        hold.wake_all()  # at broker stop: the rest answer, whatever the first did
        return woken, hold.count

    assert asyncio.run(scenario()) == ([2, 3], 0)


def test_an_arrival_from_another_thread_wakes_the_held_pull_on_its_loop():
    import threading

    async def scenario() -> tuple[list, int]:
        hold = PullRequestHoldService(max_held=10)
        woken: list[tuple[bool, int]] = []
        hold.hold("T", 0, 0, 60.0, lambda arrived: woken.append((arrived, threading.get_ident())))
        t = threading.Thread(target=hold.notify_message_arriving, args=("T", 0, 1))
        t.start()
        t.join()
        deadline = time.monotonic() + 60
        while not woken and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return woken, hold.count

    woken, count = asyncio.run(scenario())
    assert len(woken) == 1 and woken[0][0] is True and woken[0][1] == threading_main_ident()
    assert count == 0


def threading_main_ident() -> int:
    import threading

    return threading.main_thread().ident or 0
