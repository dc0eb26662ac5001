"""Manual switch-over: two brokers made master in turn by hand, each writing what the other never copied, take
epochs of their own (not the same number at the same offset); the one that comes back as a slave has its own
bytes cut and becomes a copy of the master."""

from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Any

from sluice import Message, Producer
from sluice.broker.broker_runner import BrokerRunner
from sluice.client.admin import Admin
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
    # What GET_BROKER_EPOCH_CACHE (mqadmin getBrokerEpoch) reports: each broker's epoch file, the slave's now the
    # master's, each term ending where the next began.
    reported = {r: ha.loop.run(_epoch_cache(ha, r)) for r in (a, b)}
    assert reported[a]["epochList"] == reported[b]["epochList"], reported
    for r in (a, b):
        assert r.broker is not None
        entries = r.broker.epochs.entries
        assert [(e["epoch"], e["startOffset"]) for e in reported[r]["epochList"]] == [tuple(e) for e in entries]
        assert [e["endOffset"] for e in reported[r]["epochList"]] == [e.start_offset for e in entries[1:]] + [
            (1 << 63) - 1]
    assert len(reported[a]["epochList"]) == 2 and reported[b]["brokerId"] == 1 and reported[b]["maxOffset"] == b_end
    _stop(ha, b, a)
    same = filecmp.cmp(tmp_path / "a" / "commitlog" / f"{0:020d}", tmp_path / "b" / "commitlog" / f"{0:020d}",
                       shallow=False)
    assert x < a_end
    assert same and a_end == b_end, (f"slave b did not become a copy of master a: a ends at {a_end}, b at {b_end}; "
                                     f"epochs a={a_epochs} b={b_epochs}")


async def _epoch_cache(cluster: Cluster, runner: BrokerRunner) -> dict[str, Any]:
    assert runner.broker is not None
    async with Admin(cluster.namesrv_addr) as admin:
        return await admin.broker_epochs(runner.broker.broker_addr)


def test_a_slave_that_never_copied_a_byte_reports_no_epochs(ha: Cluster) -> None:  # noqa: F811
    s = _start(ha, "s", broker_role=BrokerRole.SLAVE, broker_id=1)  # (no master: nothing to copy)
    try:
        cache = ha.loop.run(_epoch_cache(ha, s))
        assert (cache["epochList"], cache["maxOffset"], cache["brokerId"]) == ([], 0, 1)
    finally:
        _stop(ha, s)
