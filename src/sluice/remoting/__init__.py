"""RocketMQ's remoting protocol: a sans-IO codec (``codec``) and thin asyncio shells around it."""

from sluice.remoting.client import RemotingClient
from sluice.remoting.codec import FrameDecoder, encode_command
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.dispatcher import RequestDispatcher
from sluice.remoting.errors import (
    FrameTooLargeError,
    ProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from sluice.remoting.server import RemotingServer

__all__ = [
    "Connection",
    "FrameDecoder",
    "FrameTooLargeError",
    "ProtocolError",
    "RemotingClient",
    "RemotingCommand",
    "RemotingConnectError",
    "RemotingError",
    "RemotingServer",
    "RemotingTimeoutError",
    "RequestCode",
    "RequestDispatcher",
    "ResponseCode",
    "encode_command",
]
