"""The delayed-delivery service's stop: a delivery under way when the broker stops finishes and moves its level's
offset, so that the restarted service does not deliver the same messages again."""

from __future__ import annotations

import asyncio
from typing import Any

from sluice.broker.schedule_message_service import ScheduleMessageService
from sluice.store import MessageStore
from tests.unit.helpers import msg

COUNT = 300


def test_a_stop_during_a_delivery_neither_loses_nor_repeats_a_delayed_message(store: MessageStore) -> None:
    async def first_run() -> int:
        store.bind_loop(asyncio.get_running_loop())
        service = ScheduleMessageService(store, [1], 10, 60_000)
        service.load()
        for i in range(COUNT):
            m = msg("Late", b"d%d" % i)
            m.properties["DELAY"] = "1"
            store.put([service.redirect(m)])
        real_put = store.put_async
        in_flight = asyncio.Event()

        async def observed_put(put: Any, *args: Any, **kwargs: Any) -> Any:
            in_flight.set()  # (the stop below lands while this put is in the store's hands)
            return await real_put(put, *args, **kwargs)

        store.put_async = observed_put  # type: ignore[method-assign]
        service.start()
        await asyncio.wait_for(in_flight.wait(), 10)
        await service.stop()
        store.put_async = real_put  # type: ignore[method-assign]
        return service.offsets.get(1, 0)

    offset = asyncio.run(first_run())
    delivered = sum(store.get_max_offset_in_queue("Late", q) for q in range(4))
    assert 0 < offset and delivered == offset  # what was stored is what the offset says was delivered

    async def second_run() -> None:
        store.bind_loop(asyncio.get_running_loop())
        service = ScheduleMessageService(store, [1], 10, 60_000)
        service.load()
        assert service.offsets.get(1, 0) == offset
        while await service.deliver_due() is not None or service.offsets.get(1, 0) < COUNT:
            await asyncio.sleep(0.01)
        service.close()

    asyncio.run(second_run())
    assert sum(store.get_max_offset_in_queue("Late", q) for q in range(4)) == COUNT
