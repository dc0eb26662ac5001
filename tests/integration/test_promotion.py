"""A slave made master goes on from where its master was: timer messages the master delivered are not delivered
again (the slave copies the timer service's progress with the rest of its master's metadata), and the ones still
waiting are delivered once."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from sluice import Message, Producer
from sluice.broker.broker_runner import BrokerRunner
from sluice.common.config import BrokerRole
from sluice.common.naming import TIMER_TOPIC
from tests.conftest import Cluster
from tests.ha.ha_cluster import consume_all
from tests.integration.helpers import wait_until
from tests.integration.test_replication import _caught_up, _start, _stop, ha  # noqa: F401

N = 5


def _delivered(cluster: Cluster, runner: BrokerRunner) -> int:
    async def count() -> int:
        assert runner.broker is not None
        store = runner.broker.store
        return sum(store.get_max_offset_in_queue("TopicTimed", q) for q in range(16))

    return cluster.loop.run(count())


def _timers_settled(cluster: Cluster, runner: BrokerRunner) -> bool:
    """The timer service has taken the whole timer queue and delivered whatever was due."""
    async def check() -> bool:
        b = runner.broker
        if b is None or b.timer_service is None:
            return False
        t = b.timer_service
        end = b.store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        return t.enqueue_offset >= end and t._undelivered_from is None and t.delivered_ms >= t.dequeue_ms - 1000

    return cluster.loop.run(check())


def test_a_promoted_slave_does_not_deliver_timer_messages_again(ha: Cluster, tmp_path: Path) -> None:  # noqa: F811
    m = _start(ha, "m")
    s = _start(ha, "s", broker_role=BrokerRole.SLAVE, broker_id=1)
    with Producer("ha-timer", namesrv=ha.namesrv_addr) as producer:
        for i in range(N):
            producer.send(Message("TopicTimed", f"t{i}".encode(), delay=timedelta(milliseconds=500)))
        waiting = producer.send(Message("TopicTimed", b"later", delay=timedelta(seconds=4)))
    assert waiting.status.name == "SEND_OK"
    wait_until(lambda: _delivered(ha, m) == N, 30, "the master to deliver the first timer messages")
    wait_until(lambda: _caught_up(ha, m, s), 30, "the slave to copy the master")
    checkpoint = tmp_path / "s" / "config" / "timercheck.json"

    def progress_copied() -> bool:
        try:
            copied = json.loads(checkpoint.read_text())["masterCheckpoint"]
        except (OSError, ValueError, KeyError):
            return False
        return copied["enqueueOffset"] >= N + 1  # the master took all six, and said so

    wait_until(progress_copied, 30, "the slave to copy the timer service's progress")
    _stop(ha, s, m)
    s = _start(ha, "s")  # the slave made master by hand
    wait_until(lambda: _delivered(ha, s) >= N + 1, 30, "the waiting timer message, delivered by the new master")
    wait_until(lambda: _timers_settled(ha, s), 30, "the new master's timer service to take the whole timer queue")
    bodies = consume_all(ha.namesrv_addr, "TopicTimed")
    _stop(ha, s)
    # Each one the old master delivered (and said so) is there once; the one still waiting arrived (twice at
    # worst, had the master delivered it after its progress was last copied: a duplicate, never a loss).
    assert {f"t{i}": 1 for i in range(N)}.items() <= bodies.items(), bodies
    assert bodies["later"] >= 1
