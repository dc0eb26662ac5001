"""BrokerRunner.stop() during a restart (a slave cutting its log) lets it finish or skips it: no broker is left
half-stopped and no store half-open (its lock is free afterwards). The delays move the stop across the restart."""

from __future__ import annotations

import asyncio

import pytest

from sluice.broker.broker_runner import BrokerRunner
from sluice.common.config import BrokerRole
from sluice.common.errors import StoreLockedError
from sluice.store.message_store import MessageStore
from tests.conftest import Cluster
from tests.integration.test_replication import _config, ha  # noqa: F401


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.1])
def test_stop_during_a_cut_restart_leaves_nothing_running(ha: Cluster, delay: float) -> None:  # noqa: F811
    cfg = _config(ha, f"s{int(delay * 1000)}", broker_role=BrokerRole.SLAVE, broker_id=1,
                  ha_master_address="127.0.0.1:1")

    async def go() -> str:
        runner = BrokerRunner(cfg)
        await runner.start()
        await runner._on_cut(0)
        await asyncio.sleep(delay)
        await runner.stop()
        try:
            s = await asyncio.get_running_loop().run_in_executor(None, MessageStore(cfg.store).start)
        except StoreLockedError as exc:
            return f"store still locked after stop(): {exc}"
        await asyncio.get_running_loop().run_in_executor(None, s.shutdown)
        return ""

    problem = ha.loop.run(go())
    assert problem == ""
