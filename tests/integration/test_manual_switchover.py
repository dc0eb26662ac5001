"""Manual switch-over: two brokers made master in turn by hand, each writing what the other never copied, take
epochs of their own (not the same number at the same offset); the one that comes back as a slave has its own
bytes cut and becomes a copy of the master."""

from __future__ import annotations

import filecmp
from pathlib import Path

from sluice import Message, Producer
from sluice.common.config import BrokerRole
from tests.conftest import Cluster
from tests.integration.helpers import wait_until
from tests.integration.test_replication import _caught_up, _end, _start, _stop, ha  # noqa: F401


def test_two_masters_promoted_in_turn_do_not_share_an_epoch(ha: Cluster, tmp_path: Path) -> None:  # noqa: F811
    a = _start(ha, "a")  # master, epoch 1
    b = _start(ha, "b", broker_role=BrokerRole.SLAVE, broker_id=1)
    with Producer("ha-p", namesrv=ha.namesrv_addr) as producer:
        for i in range(100):
            producer.send(Message("TopicE", f"both-{i}".encode() * 20))
        wait_until(lambda: _caught_up(ha, a, b), 30, "b to copy a")
    x = _end(ha, a)
    _stop(ha, b, a)  # both down; a had nothing b lacks
    b = _start(ha, "b")  # b made master by hand: epoch 2 at x
    with Producer("ha-p2", namesrv=ha.namesrv_addr) as producer:
        for i in range(50):
            producer.send(Message("TopicE", f"b-only-{i}".encode() * 7))
    _stop(ha, b)
    a = _start(ha, "a")  # b is down: a is made master again by hand: epoch 2 at x too
    with Producer("ha-p3", namesrv=ha.namesrv_addr) as producer:
        for i in range(80):
            producer.send(Message("TopicE", f"a-only-{i}".encode() * 11))
    b = _start(ha, "b", broker_role=BrokerRole.SLAVE, broker_id=1)
    a_epochs = (tmp_path / "a" / "epochFileCheckpoint").read_text()
    b_epochs = (tmp_path / "b" / "epochFileCheckpoint").read_text()
    wait_until(lambda: _caught_up(ha, a, b), 30, f"b to copy a (epochs a={a_epochs} b={b_epochs})")
    a_end, b_end = _end(ha, a), _end(ha, b)
    _stop(ha, b, a)
    same = filecmp.cmp(tmp_path / "a" / "commitlog" / f"{0:020d}", tmp_path / "b" / "commitlog" / f"{0:020d}",
                       shallow=False)
    assert x < a_end
    assert same and a_end == b_end, (f"slave b did not become a copy of master a: a ends at {a_end}, b at {b_end}; "
                                     f"epochs a={a_epochs} b={b_epochs}")
