"""Remoting frames off a connection: ``FrameDecoder.feed`` with JSON and ROCKETMQ headers, then the request
headers the broker reads from extFields.

Property: any byte stream gives whole commands or ``ProtocolError`` (``FrameTooLargeError`` past the frame
limit), the same however reads cut it; the decoder never holds more than one frame's worth; every command
decoded re-encodes to a frame that decodes equal; every request header (``sluice.remoting.headers``) decodes
or raises ``BadRequestError``. The first byte says how reads cut the stream and, with its top bit set,
that the rest is one header (ROCKETMQ when its low bit is set, else JSON) for the target to frame.
"""

from __future__ import annotations

from sluice.remoting.codec import FrameDecoder, ProtocolError, decode_frame, encode_command_bytes
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import BadRequestError
from sluice.remoting.headers import DECODERS, SendMessageRequestHeader

from ._common import expect, pieces

# The length word alone trips the limit (checked before the frame is buffered): short inputs reach it too.
MAX_FRAME = 64 * 1024


def _feed(chunks: list[bytes]) -> tuple[list[RemotingCommand], type[ProtocolError] | None]:
    decoder = FrameDecoder(MAX_FRAME)
    out: list[RemotingCommand] = []
    for chunk in chunks:
        try:
            out += decoder.feed(chunk)
        except ProtocolError as exc:
            return out + exc.decoded, type(exc)
        expect(decoder.buffered < MAX_FRAME + 4, f"decoder holds {decoder.buffered} bytes, over one frame")
    return out, None


def _round_trip(cmd: RemotingCommand) -> None:
    frame = encode_command_bytes(cmd)
    expect(int.from_bytes(frame[:4], "big") == len(frame) - 4, "encoded length word disagrees with the frame")
    again = decode_frame(frame[4:])
    expect(again == cmd, f"re-encoded command decodes differently: {cmd!r} -> {again!r}")


def _request_headers(cmd: RemotingCommand) -> None:
    for decode in DECODERS.values():
        try:
            h = decode(cmd.ext_fields)
        except BadRequestError:
            continue
        if isinstance(h, SendMessageRequestHeader):
            expect(isinstance(h.queue_id, int) and isinstance(h.topic, str), "send header with mistyped fields")


def framed(header: bytes, serialize_type: int, body: bytes = b"") -> bytes:
    """``header`` and ``body`` as one frame with its length words right."""
    return (4 + len(header) + len(body)).to_bytes(4, "big") + (serialize_type << 24 | len(header)).to_bytes(4, "big") \
        + header + body


def check(data: bytes) -> None:
    if not data:
        return
    mode = data[0]
    if mode & 0x80:  # the rest is one header, framed here: a mutation inside it leaves the length words right
        stream = framed(data[1:], mode & 1, b"body")
    else:
        stream = data[1:]
    whole = _feed([stream])
    cut = _feed(pieces(stream, mode))
    expect(whole == cut, f"reads cut differently decode differently: {whole!r} vs {cut!r}")
    for cmd in whole[0]:
        _round_trip(cmd)
        _request_headers(cmd)
