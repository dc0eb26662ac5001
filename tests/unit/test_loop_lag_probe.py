"""The loop-lag probe counts a garbage collection's pause as lateness, apart from the loop's own work."""

from __future__ import annotations

import asyncio
import gc

from sluice.common.loop_lag import LoopLagProbe


def test_a_full_collection_is_a_gc_pause_not_busy_loop_work() -> None:
    async def run() -> LoopLagProbe:
        junk = [[{"i": i}] for i in range(400_000)]  # a heap a full collection takes a while to walk
        probe = LoopLagProbe(0.001).start()
        await asyncio.sleep(0.01)
        gc.collect()  # on the loop, between two ticks
        await asyncio.sleep(0.01)
        probe.stop()
        del junk
        return probe

    probe = asyncio.run(run())
    assert probe.max_gc_pause > 0.005
    assert probe.max_lag >= probe.max_gc_pause * 0.9
    assert probe.max_busy < probe.max_gc_pause
