"""Who joins the in-sync set (ReplicasManager._maintain_sync_state_set against the master's HAService): only a
slave that holds every message acknowledged through the slaves so far."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

from sluice.broker.replicas_manager import Leader, ReplicasManager
from sluice.common.config import BrokerConfig
from sluice.etcd.etcd_client import KeyValue, TxnResult
from sluice.store.ha.epoch_file import EpochFile
from sluice.store.ha.ha_service import HAService, SlaveState


def _fake_store(max_offset: int, dispatched: int) -> SimpleNamespace:
    return SimpleNamespace(commit_log=SimpleNamespace(max_offset=max_offset), dispatched_offset=dispatched,
                           config=SimpleNamespace(sync_flush_timeout=5000), arrival_listeners=[],
                           append_listeners=[], request_drain=lambda: None)


def _setup(tmp_path, max_offset: int, dispatched: int = 0):
    cfg = BrokerConfig(broker_id=1, controller_etcd_endpoints="127.0.0.1:1", listen_port=30911)
    ha = HAService(_fake_store(max_offset, dispatched), EpochFile(str(tmp_path / "epochs")),  # type: ignore[arg-type]
                   cfg)
    runner = SimpleNamespace(config=cfg, broker=SimpleNamespace(ha_service=ha))
    rm = ReplicasManager(runner)  # type: ignore[arg-type]
    rm.lease = 7
    rm.leader = Leader(1, "a", "b", 3)
    rm.became_master_at = time.monotonic() - 60
    written: list[bytes] = []

    async def txn(compares, ops, *a, **k):
        written.append(ops[0].value)
        return TxnResult(True, 1)

    rm.etcd.txn = txn  # type: ignore[method-assign]
    return ha, rm, written


def test_a_slave_behind_the_acknowledged_offset_does_not_join_the_in_sync_set(tmp_path):
    """Slave 3 was caught up 1 s ago (caught_up_at), but puts up to 10_000 have since been acknowledged by slave
    2 alone; slave 3 stored only 5_000. It joins the in-sync set (etcd too) although it lacks acknowledged
    messages: if the master dies now, slave 3 may win the election and those SEND_OKs are lost. RocketMQ
    expands the set only when slaveAckOffset >= confirmOffset."""
    ha, rm, written = _setup(tmp_path, 10_000)

    async def run() -> None:
        ha._loop = asyncio.get_running_loop()
        ha.set_sync_state_set({1, 2})
        now = time.monotonic()
        ha.slaves[2] = SlaveState(2, "x", ack_offset=10_000, caught_up_at=now)
        ha.slaves[3] = SlaveState(3, "y", ack_offset=5_000, caught_up_at=now - 1.0)
        acked: list = []
        ha.wait_for_replicas(10_000, acked.append)
        assert acked == [None]  # SEND_OK for everything up to 10_000 (slave 2 has it)
        sss = KeyValue(rm.key("syncStateSet"), json.dumps({"members": [1, 2], "epoch": 3}).encode(), 1, 1, 1)
        leader_kv = KeyValue(rm.key("leader"), rm.leader.to_json(), 1, 1, 1, lease=7)
        await rm._maintain_sync_state_set({"syncStateSet": sss, "leader": leader_kv}, leader_kv)
        members = set(json.loads(written[-1])["members"]) if written else {1, 2}
        assert 3 not in members, (f"slave 3 (stored to 5000) was put in the in-sync set {sorted(members)} after "
                                  "puts to 10000 were acknowledged")

    asyncio.run(run())


def test_a_slave_without_every_dispatched_message_joins_the_local_set_before_etcd_names_it(tmp_path):
    """Slave 3 has every acknowledged message but not all those consumers may have seen (dispatched while the
    set was the master alone). Named in etcd now, it could be elected without them: a consumer would have read
    a message that is gone. It joins the master's own set first (dispatch waits for it), etcd's once it has
    them."""
    ha, rm, written = _setup(tmp_path, 10_000, dispatched=10_000)

    async def run() -> None:
        ha._loop = asyncio.get_running_loop()
        ha.set_sync_state_set({1})
        ha.slaves[3] = SlaveState(3, "y", ack_offset=9_000, caught_up_at=time.monotonic())
        sss = KeyValue(rm.key("syncStateSet"), json.dumps({"members": [1], "epoch": 3}).encode(), 1, 1, 1)
        leader_kv = KeyValue(rm.key("leader"), rm.leader.to_json(), 1, 1, 1, lease=7)
        await rm._maintain_sync_state_set({"syncStateSet": sss, "leader": leader_kv}, leader_kv)
        assert written == [] and ha.sync_state_set == {1, 3}
        assert ha.replica_bound() == 9_000  # nothing past what slave 3 holds is dispatched now
        ha.slaves[3].ack_offset = 10_000
        await rm._maintain_sync_state_set({"syncStateSet": sss, "leader": leader_kv}, leader_kv)
        assert set(json.loads(written[-1])["members"]) == {1, 3}

    asyncio.run(run())
