"""An answer made later by a callback: what a request handler returns when the answer waits for something
(a group commit) but a task per request would cost more than the wait's own work.

The handler returns a ``DeferredResponse``; the connection binds it to the request; whoever has the outcome
calls ``resolve`` on the connection's event loop thread with a function that builds the answer. Built and
sent at once, with no Task, Future or timer of its own. Whoever resolves owns the timeout. When the
connection closes first, the response is cancelled: ``on_cancel`` (if set) lets its owner drop the wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand

log = logging.getLogger(__name__)


class AnsweringConnection(Protocol):
    """What a deferred response asks of the connection it is bound to (``sluice.remoting.connection``)."""

    remote_addr: str

    def deferred_done(self, deferred: DeferredResponse, req: RemotingCommand, resp: RemotingCommand | None) -> None:
        """Send ``resp`` (None: nothing, a oneway request) as the answer to ``req``."""


class DeferredResponse:
    """One request's answer, to be made later on the connection's loop."""

    __slots__ = ("_conn", "_req", "_resolved", "_early", "on_cancel", "read_at")

    def __init__(self, on_cancel: Callable[[], None] | None = None) -> None:
        self._conn: AnsweringConnection | None = None
        self._req: RemotingCommand | None = None
        self._resolved = False
        self._early: Callable[[], RemotingCommand | None] | None = None  # resolved before it was bound
        self.on_cancel = on_cancel
        self.read_at = 0.0  # when the request was read (time.monotonic(): its answer's latency)

    def bind(self, conn: AnsweringConnection, req: RemotingCommand) -> None:
        """Called by the connection the handler returned this to (an answer made already is sent now)."""
        self._conn = conn
        self._req = req
        early, self._early = self._early, None
        if early is not None:
            self._resolved = False
            self.resolve(early)

    @property
    def resolved(self) -> bool:
        return self._resolved

    def resolve(self, make: Callable[[], RemotingCommand | None]) -> None:
        """Build the answer with ``make`` and send it (once; later calls do nothing). An exception from
        ``make`` is answered with SYSTEM_ERROR, as a failing handler is."""
        if self._resolved:
            return
        self._resolved = True
        conn, req = self._conn, self._req
        if conn is None or req is None:  # resolved inside the handler: answered when the connection binds it
            self._early = make
            return
        # Drop what may refer back to this response (an owner's wait does), so no cycle outlives it.
        self._conn = self._req = self.on_cancel = None
        try:
            resp = make()
        except Exception as exc:
            log.exception("request code %s from %s failed", req.code, conn.remote_addr)
            resp = req.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        conn.deferred_done(self, req, resp)

    def cancel(self) -> None:
        """The connection closed before the answer: nothing will be sent; the owner hears of it once."""
        if self._resolved:
            return
        self._resolved = True
        on_cancel, self.on_cancel = self.on_cancel, None
        self._conn = self._req = self._early = None
        if on_cancel is not None:
            try:
                on_cancel()
            except Exception:  # the connection is closing: log, and let the other cancellations run
                log.exception("cancelling a deferred response failed")


__all__ = ["AnsweringConnection", "DeferredResponse"]
