"""RocketMQ's remoting protocol: a sans-IO codec (``codec``) and, later, thin asyncio shells."""

from sluice.remoting.codec import FrameDecoder, encode_command
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import FrameTooLargeError, ProtocolError

__all__ = ["FrameDecoder", "FrameTooLargeError", "ProtocolError", "RemotingCommand", "encode_command"]
