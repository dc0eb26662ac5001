"""The remoting codec: frames round-trip in both header types, partial feeds, and the real clients' bytes."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.remoting.codec import FrameDecoder, FrameTooLargeError, ProtocolError, decode_frame, encode_command_bytes
from sluice.remoting.codes import RequestCode, ResponseCode, SerializeType
from sluice.remoting.command import RemotingCommand

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
commands = st.builds(
    RemotingCommand,
    code=st.integers(0, 32767),
    ext_fields=st.dictionaries(text.filter(bool), text, max_size=6),
    body=st.binary(max_size=2000),
    opaque=st.integers(0, 2**31 - 1),
    flag=st.sampled_from([0, 1, 2]),
    remark=st.one_of(st.none(), text.filter(bool)),
    language=st.sampled_from(["JAVA", "CPP", "PYTHON", "GO"]),
    version=st.integers(0, 32767),
    serialize_type=st.sampled_from(list(SerializeType)),
)


@given(cmd=commands)
def test_command_round_trips(cmd: RemotingCommand):
    frame = encode_command_bytes(cmd)
    (length,) = struct.unpack_from(">I", frame)
    assert length == len(frame) - 4
    (got,) = FrameDecoder().feed(frame)
    assert (got.code, got.ext_fields, bytes(got.body), got.opaque, got.flag) == (
        cmd.code, cmd.ext_fields, bytes(cmd.body), cmd.opaque, cmd.flag)
    assert (got.remark, got.language, got.version, got.serialize_type) == (
        cmd.remark, cmd.language, cmd.version, cmd.serialize_type)


@given(cmds=st.lists(commands, min_size=1, max_size=5), chunk=st.integers(1, 64))
def test_frames_split_anywhere_decode_in_order(cmds: list[RemotingCommand], chunk: int):
    data = b"".join(encode_command_bytes(c) for c in cmds)
    dec = FrameDecoder()
    got = []
    for i in range(0, len(data), chunk):
        got += dec.feed(data[i : i + chunk])
    assert [c.opaque for c in got] == [c.opaque for c in cmds]
    assert dec.buffered == 0


def test_decodes_the_cpp_clients_route_request():
    header = (b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"N/YT7X6t=",'
              b'"topic":"TopicTest"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}\n')
    frame = struct.pack(">II", 4 + len(header), len(header)) + header
    (cmd,) = FrameDecoder().feed(frame)
    assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and cmd.language == "CPP" and cmd.version == 63
    assert cmd.ext_fields["topic"] == "TopicTest" and not cmd.is_response and not cmd.is_oneway


def test_numeric_ext_fields_are_read_as_strings():
    header = b'{"code":11,"extFields":{"queueId":3,"queueOffset":1000,"commitOffset":-1,"x":true},"flag":0}'
    cmd = decode_frame(struct.pack(">I", len(header)) + header)
    assert cmd.ext_fields == {"queueId": "3", "queueOffset": "1000", "commitOffset": "-1", "x": "true"}
    assert cmd.ext_int("queueOffset") == 1000 and cmd.ext_bool("x")


def test_decodes_the_java_brokers_send_response():
    header = (b'{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000000000","queueId":"0",'
              b'"queueOffset":"0"},"flag":1,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON",'
              b'"version":409}')
    frame = struct.pack(">II", 4 + len(header), len(header)) + header
    assert frame[:8].hex() == "000000bc000000b8"  # the spec's example frame
    (cmd,) = FrameDecoder().feed(frame)
    assert cmd.is_response and cmd.opaque == 1 and cmd.ext_fields["queueOffset"] == "0"


def test_response_keeps_opaque_and_type_and_writes_ext_values_as_strings():
    req = RemotingCommand(RequestCode.SEND_MESSAGE, {"topic": "T"}, opaque=77, serialize_type=SerializeType.JSON)
    resp = req.response(ResponseCode.SUCCESS, ext_fields={"queueOffset": 5, "queueId": 0})  # type: ignore[dict-item]
    frame = encode_command_bytes(resp)
    header = json.loads(frame[8:])
    assert header["opaque"] == 77 and header["flag"] == 1 and header["code"] == 0
    assert header["extFields"] == {"queueOffset": "5", "queueId": "0"}
    assert isinstance(header["version"], int) and "remark" not in header


def test_body_parts_are_sent_after_the_body_without_joining():
    parts = [memoryview(b"abc"), memoryview(b"defg")]
    cmd = RemotingCommand(ResponseCode.SUCCESS, body=b"01", body_parts=parts, flag=1)
    (got,) = FrameDecoder().feed(encode_command_bytes(cmd))
    assert got.body == b"01abcdefg"


def test_oversized_frame_is_refused_before_buffering():
    dec = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameTooLargeError, match="1024"):
        dec.feed(struct.pack(">I", 1025) + b"x" * 10)


@pytest.mark.parametrize("frame", [
    struct.pack(">II", 8, 100) + b"{}{}",                      # header longer than the frame
    struct.pack(">II", 6, 2) + b"{x",                          # not JSON
    struct.pack(">II", 6, 2) + b"[]",                          # not an object
    struct.pack(">II", 4 + 13, 13) + b'{"code":"ab"}',         # code not a number
    struct.pack(">II", 6, (5 << 24) | 2) + b"{}",              # unknown serialize type
    struct.pack(">II", 4 + 5, (1 << 24) | 5) + b"\x00" * 5,    # truncated binary header
    struct.pack(">I", 2) + b"ab",                              # shorter than the header-length word
])
def test_malformed_frames_raise_protocol_errors(frame: bytes):
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(frame)
