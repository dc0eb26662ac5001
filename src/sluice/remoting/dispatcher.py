"""Request dispatch: request codes to handlers named after them (``send_message`` serves SEND_MESSAGE)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection, HandlerResult, RequestHandler

log = logging.getLogger(__name__)


class RequestDispatcher:
    """Calls the handler registered for a request's code; unknown codes get REQUEST_CODE_NOT_SUPPORTED.

    Unknown codes are logged (WARNING) and counted per code in ``unsupported_seen``: a client sending one means a
    feature it relies on is missing here (the interop tests assert that the RocketMQ C++ client never does).
    """

    def __init__(self) -> None:
        self.handlers: dict[int, RequestHandler] = {}
        self.unsupported_seen: dict[int, int] = {}
        # Called with the next request's code before its handler, while set: a handler holding work back for
        # the requests read with it (the send processor's group) finishes it before a request it must precede.
        self.before_next: Callable[[int], None] | None = None
        # While set, asked of every request before its handler: None lets it through, a text refuses it with
        # NO_PERMISSION and that remark (authentication and authorization, sluice.auth).
        self.refusal: Callable[[str, RemotingCommand], str | None] | None = None

    def register(self, code: int, handler: RequestHandler) -> None:
        self.handlers[int(code)] = handler

    def register_processor(self, processor: object) -> list[RequestCode]:
        """Register every method of ``processor`` named after a request code (lower case)."""
        served = []
        for code in RequestCode:
            fn = getattr(processor, code.name.lower(), None)
            if callable(fn):
                self.handlers[int(code)] = fn
                served.append(code)
        return served

    def __call__(self, conn: Connection, request: RemotingCommand) -> HandlerResult:
        if self.before_next is not None:
            self.before_next(request.code)
        if self.refusal is not None:
            remark = self.refusal(conn.remote_addr, request)
            if remark is not None:
                return None if request.is_oneway else request.response(ResponseCode.NO_PERMISSION, remark)
        handler = self.handlers.get(request.code)
        if handler is None:
            return self.not_supported(conn, request)
        return handler(conn, request)

    def not_supported(self, conn: Connection, request: RemotingCommand, where: str = "") -> RemotingCommand:
        """REQUEST_CODE_NOT_SUPPORTED, logged and counted."""
        self.unsupported_seen[request.code] = self.unsupported_seen.get(request.code, 0) + 1
        log.warning("request code %d from %s (%s client, version %d) is not supported%s", request.code,
                    conn.remote_addr, request.language, request.version, where)
        return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported")


class RestrictedDispatcher:
    """A dispatcher serving every code but ``refused``, which are answered as codes it does not know.

    RocketMQ's fast (VIP) channel: the same handlers as the main port, without the long-polling reads.
    """

    def __init__(self, dispatcher: RequestDispatcher, refused: frozenset[int]) -> None:
        self.dispatcher = dispatcher
        self.refused = refused

    def __call__(self, conn: Connection, request: RemotingCommand) -> HandlerResult:
        if request.code in self.refused:
            d = self.dispatcher
            if d.refusal is not None:  # (authenticated and allowed first, as every request)
                remark = d.refusal(conn.remote_addr, request)
                if remark is not None:
                    return None if request.is_oneway else request.response(ResponseCode.NO_PERMISSION, remark)
            return d.not_supported(conn, request, " on this port")
        return self.dispatcher(conn, request)
