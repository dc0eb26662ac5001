"""The threaded producer's ``send_async`` bridges the aio send's future to a ``concurrent.futures.Future``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import sluice
from sluice.client import _loop
from sluice.client.message import Message


class ScriptedAio:
    """Stands in for the aio producer: each ``send_async`` hands back a future the test settles."""

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[Any]] = []
        self.called = threading.Event()

    def send_async(self, msg: Message, **_: Any) -> asyncio.Future[Any]:
        fut = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        self.called.set()
        return fut


def _on_loop(fn: Any) -> None:
    done = threading.Event()
    _loop.background_loop().call_soon_threadsafe(lambda: (fn(), done.set()))
    assert done.wait(5)


def _producer() -> tuple[sluice.Producer, ScriptedAio]:
    p = sluice.Producer("scripted")
    aio = ScriptedAio()
    p.aio = aio  # type: ignore[assignment]
    return p, aio


def test_the_future_stays_pending_and_cancellable_while_the_send_runs():
    p, aio = _producer()
    out = p.send_async(Message("t", b"m"))
    assert aio.called.wait(5)
    assert not out.running() and not out.done()
    assert out.cancel()
    _on_loop(lambda: None)  # the cancel travels to the loop
    _on_loop(lambda: None)
    assert aio.futures[0].cancelled()


def test_the_send_result_and_error_reach_the_future():
    p, aio = _producer()
    ok = p.send_async(Message("t", b"a"))
    bad = p.send_async(Message("t", b"b"))
    _on_loop(lambda: None)
    assert len(aio.futures) == 2
    _on_loop(lambda: aio.futures[0].set_result("result"))
    _on_loop(lambda: aio.futures[1].set_exception(ValueError("refused")))
    assert ok.result(5) == "result"
    with pytest.raises(ValueError, match="refused"):
        bad.result(5)


def test_a_send_cancelled_on_the_loop_cancels_the_future():
    p, aio = _producer()
    out = p.send_async(Message("t", b"m"))
    _on_loop(lambda: None)
    _on_loop(lambda: aio.futures[0].cancel())
    _on_loop(lambda: None)
    assert out.cancelled()
