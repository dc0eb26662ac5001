"""Errors of the remoting layer."""

from __future__ import annotations

from sluice.common.errors import SluiceError


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
