"""Errors of the remoting layer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.common.errors import SluiceError

if TYPE_CHECKING:
    from sluice.remoting.command import RemotingCommand


class ProtocolError(SluiceError):
    """Bytes on a connection that are not a valid remoting frame: the connection must be closed.

    ``decoded`` holds the whole frames ``FrameDecoder.feed`` read before the bad bytes, still to be served.
    """

    decoded: list[RemotingCommand] = []  # noqa: RUF012  # replaced per instance by FrameDecoder.feed, never mutated


class FrameTooLargeError(ProtocolError):
    """A frame longer than the configured limit (16 MiB by default)."""


class RemotingError(SluiceError):
    """A request could not be completed over the network."""


class RemotingConnectError(RemotingError):
    """No connection to the peer, or the connection closed while a request was in flight."""


class ConnectionClosedError(RemotingConnectError):
    """The connection was made, then closed (by the peer, or as unusable) before the request was answered."""


class RemotingTimeoutError(RemotingError, TimeoutError):
    """The peer did not answer in time."""


class BadRequestError(SluiceError, ValueError):
    """A request whose header or body cannot be used (missing field, malformed value or JSON body).

    Handlers raise it; the connection answers SYSTEM_ERROR with its message as the remark.
    """
