"""RocketMQ's remoting protocol: a sans-IO codec (``codec``) and thin asyncio shells around it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:  # the names below are imported on first use (sluice._lazy)
    from sluice.remoting.client import RemotingClient
    from sluice.remoting.codec import FrameDecoder, FrameTooLargeError, ProtocolError, encode_command
    from sluice.remoting.codes import RequestCode, ResponseCode
    from sluice.remoting.command import RemotingCommand
    from sluice.remoting.connection import Connection
    from sluice.remoting.dispatcher import RequestDispatcher
    from sluice.remoting.errors import RemotingConnectError, RemotingError, RemotingTimeoutError
    from sluice.remoting.server import RemotingServer

_EXPORTS = {
    "Connection": "sluice.remoting.connection",
    "FrameDecoder": "sluice.remoting.codec",
    "FrameTooLargeError": "sluice.remoting.codec",
    "ProtocolError": "sluice.remoting.codec",
    "RemotingClient": "sluice.remoting.client",
    "RemotingCommand": "sluice.remoting.command",
    "RemotingConnectError": "sluice.remoting.errors",
    "RemotingError": "sluice.remoting.errors",
    "RemotingServer": "sluice.remoting.server",
    "RemotingTimeoutError": "sluice.remoting.errors",
    "RequestCode": "sluice.remoting.codes",
    "RequestDispatcher": "sluice.remoting.dispatcher",
    "ResponseCode": "sluice.remoting.codes",
    "encode_command": "sluice.remoting.codec",
}
__all__ = [
    "Connection", "FrameDecoder", "FrameTooLargeError", "ProtocolError", "RemotingClient", "RemotingCommand",
    "RemotingConnectError", "RemotingError", "RemotingServer", "RemotingTimeoutError", "RequestCode",
    "RequestDispatcher", "ResponseCode", "encode_command",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
