"""A master cut off from etcd and from its slaves, while clients and the name server still reach it (each
process on a host of its own: network namespaces): a slave is elected, the old master is fenced and leaves the
route, sends resume on the new master, and once the network heals the old master rejoins as a slave. A consumer
group subscribed throughout gets every acknowledged message, and nothing that was not kept (the old master's
unreplicated tail, cut when it rejoins, is never served)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.etcd_server import require_etcd
from tests.fault.cluster import NetCluster
from tests.fault.netns import require_netns

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(600)]

ROUNDS = 3
PARTITION_S = 6.0  # the old master stays cut off this long (its lease: 2 s)
# Seconds from an election to the first send acknowledged after it: 0.5 - 1.6 s on a quiet machine; under the whole
# suite's load 7.8 s and once 15.0 s (CI, 2026-11-28: why exactly 15 is not known yet); before the fencing work it
# was 15.7 s on a quiet machine (docs/ha.md). The bound catches a send path that stops resuming, not slowness.
RESUME_BOUND = 30.0


@pytest.fixture
def net_cluster(tmp_path: Path) -> Iterator[NetCluster]:
    require_netns()
    require_etcd()
    cluster = NetCluster(tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def test_a_partitioned_master_is_replaced_and_consumers_see_only_what_is_kept(net_cluster: NetCluster) -> None:
    c = net_cluster
    out = c.start_load("TopicPartition")
    rounds: list[tuple[float, float]] = []  # (cut → election, election → first ack after it)
    try:
        for _ in range(ROUNDS):
            old = c.master()
            t_cut = time.time()
            c.net.isolate(f"b{old}", ["etcd", *(f"b{i}" for i in c.ids if i != old)])
            new = c.wait_new_master(old, 30)
            t_elected = time.time()
            rest = PARTITION_S - (time.time() - t_cut)
            if rest > 0:
                time.sleep(rest)  # (the partition's length is the fault being made, not a wait for a condition)
            c.net.heal_all()
            c.wait_in_sync(3, 90)  # the old master rejoins as a slave of the new one and catches up
            rounds.append((t_elected - t_cut, t_elected))
            assert c.master() == new
    except BaseException:
        try:
            c.stop_load(out, 30)  # (what went wrong first is what the test reports)
        except AssertionError:
            pass
        raise
    result = c.stop_load(out)
    acked: dict[str, float] = result["acked"]
    delivered = set(result["delivered"])
    stored = set(result["stored"])
    lost = set(acked) - stored
    assert not lost, f"acknowledged but not stored: {sorted(lost)[:20]}"
    skipped = set(acked) - delivered
    assert not skipped, f"acknowledged but never delivered to the group subscribed throughout: {sorted(skipped)[:20]}"
    phantom = delivered - stored
    assert not phantom, f"delivered but not kept (a read of what a failover took back): {sorted(phantom)[:20]}"
    resumed = []
    for _took, t_elected in rounds:
        after = [t for t in acked.values() if t >= t_elected]
        assert after, "no send was acknowledged after an election"
        resumed.append(min(after) - t_elected)
    print(f"\npartition: elections {[round(t, 2) for t, _ in rounds]} s after the cut; sends resumed "
          f"{[round(r, 2) for r in resumed]} s after each election; acknowledged {len(acked)}, delivered "
          f"{len(result['delivered'])} ({len(result['delivered']) - len(delivered)} twice), stored {len(stored)}; "
          f"outcomes {result['outcomes']}")
    assert max(resumed) < RESUME_BOUND, f"sends resumed {resumed} s after the elections"
