"""``send_async``'s bookkeeping, step by step: answers are handed in by hand through a scripted transport.

The transport stands in for the network only (the broker's side of each request); routes, queues and the
producer are the real ones. The integration tests in tests/integration/test_async_send.py run the same
behaviours against a real broker where its timing allows.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sluice.aio import Producer
from sluice.client.message import Message
from sluice.client.queue_router import TopicPublishInfo
from sluice.common.errors import ClientError
from sluice.common.structs import MessageQueue
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import RemotingError

TOPIC = "T"


class ScriptedConnection:
    def __init__(self, remoting: ScriptedRemoting) -> None:
        self.remoting = remoting

    async def invoke(self, req: RemotingCommand, timeout: float) -> RemotingCommand:
        return await self.remoting._request(req)

    def abandon(self, opaque: int, fut: asyncio.Future[Any]) -> None:
        if not fut.done():
            fut.cancel()


class ScriptedRemoting:
    """Requests go into ``wire`` with the future of their answer, which the test completes."""

    def __init__(self) -> None:
        self.wire: list[tuple[RemotingCommand, asyncio.Future[RemotingCommand]]] = []
        self.conn = ScriptedConnection(self)

    def _request(self, req: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.wire.append((req, fut))
        return fut

    def start_request(self, addr: str, req: RemotingCommand, timeout_ms: int) -> tuple[Any, Any]:
        return self.conn, self._request(req)

    async def invoke(self, addr: str, req: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        return await self._request(req)

    async def connection(self, addr: str) -> ScriptedConnection:
        return self.conn

    def answer(self, i: int, code: int = ResponseCode.SUCCESS) -> None:
        req, fut = self.wire[i]
        fut.set_result(RemotingCommand(code, {"msgId": "id", "queueId": "0", "queueOffset": str(i)}, b"",
                                       req.opaque, 1, "" if code == ResponseCode.SUCCESS else "busy"))

    def bodies(self) -> list[bytes]:
        return [req.body or b"" for req, _ in self.wire]


def scripted_producer(max_inflight: int = 1, auto_batch: bool = False) -> tuple[Producer, ScriptedRemoting]:
    """A producer on the scripted transport; by default one request per send (the unbatched path's bookkeeping)."""
    p = Producer("pg", namesrv="127.0.0.1:1", max_inflight_async_sends=max_inflight, retry_times_when_send_failed=2,
                 auto_batch=auto_batch)
    route = object()
    p.client.routes[TOPIC] = route  # type: ignore[assignment]
    p.router._publish[TOPIC] = (route, TopicPublishInfo([MessageQueue(TOPIC, "b", 0)], False))  # type: ignore[assignment]
    p.client.broker_addrs = {"b": {0: "addr-b"}}
    remoting = ScriptedRemoting()
    p.client.remoting = remoting  # type: ignore[assignment]
    p.started = True

    async def client_shutdown() -> None:
        for _, fut in remoting.wire:
            if not fut.done():
                fut.set_exception(RemotingError("closed"))

    p.client.shutdown = client_shutdown  # type: ignore[method-assign]
    return p, remoting


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_send_made_while_full_is_not_overtaken_by_a_later_one():
    async def go() -> list[bytes]:
        p, wire = scripted_producer(max_inflight=1)
        loop = asyncio.get_running_loop()
        a = p.send_async(Message(TOPIC, b"a"))
        wire.answer(0)  # a's answer is in: the slot frees when its callback runs, before b's task does
        loop.call_soon(lambda: p.send_async(Message(TOPIC, b"c")))
        p.send_async(Message(TOPIC, b"b"))  # made while a held the only slot
        await turns()
        assert (await a).queue_offset == 0
        return wire.bodies()

    assert asyncio.run(go()) == [b"a", b"b"]  # c waits behind b


def test_cancelling_a_send_async_stops_its_retries():
    async def go() -> tuple[int, int]:
        p, wire = scripted_producer()
        fut = p.send_async(Message(TOPIC, b"x"))
        wire.answer(0, ResponseCode.SYSTEM_BUSY)  # the first attempt is refused: a retry goes out
        await turns()
        assert len(wire.wire) == 2
        wire.answer(1, ResponseCode.SYSTEM_BUSY)  # the retry's refusal is in, and then the caller gives up
        fut.cancel()
        await turns()
        return len(wire.wire), p.in_flight.count

    assert asyncio.run(go()) == (2, 0)


def test_shutdown_fails_a_retrying_send_async_instead_of_cancelling_it():
    async def go() -> BaseException:
        p, wire = scripted_producer()
        fut = p.send_async(Message(TOPIC, b"x"))
        wire.answer(0, ResponseCode.SYSTEM_BUSY)
        await turns()  # the retry is waiting for its answer
        await p.shutdown()
        with pytest.raises(ClientError) as info:
            await fut
        return info.value

    assert "shut down" in str(asyncio.run(go()))


def test_a_send_async_cancelled_before_its_task_ran_gives_its_place_back():
    async def go() -> tuple[int, int, int]:
        p, wire = scripted_producer(max_inflight=1)
        p.send_async(Message(TOPIC, b"a"))
        b = p.send_async(Message(TOPIC, b"b"))  # waits for a's slot, in a task
        b.cancel()
        await turns()
        parked = len([w for w in p.in_flight.waiters if not w.done()])
        wire.answer(0)
        await turns()
        c = p.send_async(Message(TOPIC, b"c"))  # the slot is free again
        wire.answer(1)
        await c
        return parked, p.in_flight.count, len(wire.wire)

    assert asyncio.run(go()) == (0, 0, 2)


def test_a_batch_whose_callers_all_gave_up_is_not_retried():
    async def go() -> tuple[int, int]:
        p, wire = scripted_producer(max_inflight=10, auto_batch=True)
        futures = [p.send_async(Message(TOPIC, b"m%d" % i)) for i in range(3)]
        await turns()  # the turn ended: one batch on the wire
        assert len(wire.wire) == 1
        for f in futures:
            f.cancel()
        wire.answer(0, ResponseCode.SYSTEM_BUSY)
        await turns()
        return len(wire.wire), p.in_flight.count

    assert asyncio.run(go()) == (1, 0)


def test_sends_held_for_a_batch_count_against_max_inflight_async_sends():
    async def go() -> tuple[int, int, int]:
        p, wire = scripted_producer(max_inflight=3, auto_batch=True)
        held = [p.send_async(Message(TOPIC, b"h%d" % i)) for i in range(2)]
        more = [p.send_async(Message(TOPIC, b"m%d" % i)) for i in range(3)]  # one fits; two wait for room
        await turns()
        in_flight = p.in_flight.count
        wire.answer(0)
        await turns()
        for i in range(1, len(wire.wire)):
            wire.answer(i)
        await asyncio.gather(*held, *more)
        return in_flight, len(wire.wire), p.in_flight.count

    in_flight, requests, left = asyncio.run(go())
    assert in_flight <= 3 and left == 0 and requests >= 2
