"""Sans-IO codec for remoting frames: bytes in, ``RemotingCommand``s out, and back (RocketMQ's
``RemotingCommand`` framing).

Frame: ``[uint32 L = 4 + H + B][uint32 (serializeType << 24) | H][header H bytes][body B bytes]``.
JSON headers (type 0) and ROCKETMQ binary headers (type 1) are both read; a response is written in its
request's type. extFields values are always written as JSON strings (the C++ client ignores numbers)
and are read whatever their JSON type (the C++ client sends some as numbers).
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any, Final

import orjson

from sluice.common.errors import SluiceError
from sluice.remoting.codes import LanguageCode, SerializeType
from sluice.remoting.command import RemotingCommand

DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
_PREFIX: Final = struct.Struct(">II")
_U32: Final = struct.Struct(">I")
_BIN_FIXED: Final = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_I32: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")
_LANG_BY_CODE: Final = {lc.value: lc.name for lc in LanguageCode}
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_DECIMAL: Final = re.compile(r"-?[0-9]{1,10}")
_json_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_json_encode_ascii = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


class ProtocolError(SluiceError):
    """Bytes on a connection that are not a valid remoting frame: the connection must be closed.

    ``decoded`` holds the whole frames ``FrameDecoder.feed`` read before the bad bytes, still to be served.
    """

    decoded: list[RemotingCommand] = []  # noqa: RUF012  # replaced per instance by FrameDecoder.feed, never mutated


class FrameTooLargeError(ProtocolError):
    """A frame longer than the configured limit (16 MiB by default)."""


def _ext_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    if isinstance(v, int | float):
        return str(v)
    return json.dumps(v, separators=(",", ":"))


def _all_str(values: dict[str, Any]) -> bool:
    for v in values.values():  # a plain loop: twice as fast as all() over a generator, per frame
        if type(v) is not str:
            return False
    return True


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type is SerializeType.ROCKETMQ:
        return _encode_binary_header(cmd)
    obj: dict[str, Any] = {"code": cmd.code, "extFields": cmd.ext_fields, "flag": cmd.flag,
                           "language": cmd.language, "opaque": cmd.opaque, "version": cmd.version}
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    try:
        return orjson.dumps(obj)  # the same bytes as _json_encode, ~10x faster
    except TypeError:  # what orjson refuses (a lone surrogate in a remark, say), json writes as \u escapes
        return _json_encode_ascii(obj).encode("ascii")


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    lang = LanguageCode[cmd.language].value if cmd.language in LanguageCode.__members__ else LanguageCode.OTHER
    parts = [_BIN_FIXED.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    parts += [_I32.pack(len(remark)), remark]
    ext = b"".join(
        _I16.pack(len(kb)) + kb + _I32.pack(len(vb)) + vb
        for kb, vb in ((k.encode("utf-8"), _ext_str(v).encode("utf-8")) for k, v in cmd.ext_fields.items())
    )
    parts += [_I32.pack(len(ext)), ext]
    return b"".join(parts)


def encode_command(cmd: RemotingCommand) -> list[bytes | memoryview]:
    """The frame as buffers for ``transport.writelines`` (the body is not copied)."""
    if not _all_str(cmd.ext_fields):
        cmd.ext_fields = {k: _ext_str(v) for k, v in cmd.ext_fields.items()}
    header = encode_header(cmd)
    body_len = len(cmd.body) + (sum(len(p) for p in cmd.body_parts) if cmd.body_parts else 0)
    h = len(header)
    out: list[bytes | memoryview] = [_PREFIX.pack(4 + h + body_len, (int(cmd.serialize_type) << 24) | h) + header]
    if cmd.body:
        out.append(cmd.body)
    if cmd.body_parts:
        out.extend(cmd.body_parts)
    return out


def encode_command_bytes(cmd: RemotingCommand) -> bytes:
    return b"".join(encode_command(cmd))


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """Decode ``T | header | body`` (the frame without its leading length word)."""
    if len(frame) < 4:
        raise ProtocolError("frame shorter than its header-length word")
    (word,) = _U32.unpack_from(frame, 0)
    stype, h = word >> 24, word & 0xFFFFFF
    if 4 + h > len(frame):
        raise ProtocolError(f"header length {h} exceeds the frame ({len(frame) - 4} bytes)")
    header = bytes(frame[4 : 4 + h])
    body = bytes(frame[4 + h :])
    try:
        if stype == SerializeType.JSON:
            cmd = _decode_json_header(header)
        elif stype == SerializeType.ROCKETMQ:
            cmd = _decode_binary_header(header)
        else:
            raise ProtocolError(f"unknown serialize type {stype}")
    except RecursionError:  # JSON nested past what json.loads, repr or json.dumps can walk
        raise ProtocolError("header nested too deeply") from None
    cmd.body = body
    return cmd


def _int_field(obj: dict[str, Any], name: str, default: int | None = None) -> int:
    """A header field that Java declares ``int``: a JSON integer, or a decimal string of one (ASCII digits
    only: ``str.isdigit`` passes "²", which ``int`` refuses)."""
    v = obj.get(name, default)
    if isinstance(v, str) and _DECIMAL.fullmatch(v):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not _INT32_MIN <= v <= _INT32_MAX:
        raise ProtocolError(f"header field {name!r} must be a 32-bit integer, not {v!r:.60}")
    return v


def _decode_json_header(header: bytes) -> RemotingCommand:
    try:
        obj = orjson.loads(header)
    except orjson.JSONDecodeError:
        try:  # what orjson is stricter about (a BOM, NaN, a lone surrogate escape) json.loads still reads
            obj = json.loads(header)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProtocolError(f"header is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError("header is not a JSON object")
    ext = obj.get("extFields") or {}
    if not isinstance(ext, dict):
        raise ProtocolError("extFields is not a JSON object")
    get = obj.get
    remark = get("remark")
    code, opaque, flag, version = get("code"), get("opaque", 0), get("flag", 0), get("version", 0)
    if not (type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int
            and _INT32_MIN <= code <= _INT32_MAX and _INT32_MIN <= opaque <= _INT32_MAX
            and _INT32_MIN <= flag <= _INT32_MAX and _INT32_MIN <= version <= _INT32_MAX):
        code, opaque = _int_field(obj, "code"), _int_field(obj, "opaque", 0)
        flag, version = _int_field(obj, "flag", 0), _int_field(obj, "version", 0)
    language = get("language", "OTHER")
    return RemotingCommand(code, ext if _all_str(ext) else {k: _ext_str(v) for k, v in ext.items()}, b"", opaque,
                           flag, remark if isinstance(remark, str) else None,
                           language if type(language) is str else str(language), version, SerializeType.JSON)


def _decode_binary_header(header: bytes) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
        pos = _BIN_FIXED.size
        (rlen,) = _I32.unpack_from(header, pos)
        pos += 4
        if rlen < 0 or pos + rlen > len(header):
            raise ProtocolError("remark length out of bounds")
        remark = header[pos : pos + rlen].decode("utf-8") if rlen else None
        pos += rlen
        (elen,) = _I32.unpack_from(header, pos)
        pos += 4
        end = pos + elen
        if elen < 0 or end > len(header):
            raise ProtocolError("extFields length out of bounds")
        ext: dict[str, str] = {}
        while pos < end:
            (klen,) = _I16.unpack_from(header, pos)
            pos += 2
            key = header[pos : pos + klen].decode("utf-8")
            pos += klen
            (vlen,) = _I32.unpack_from(header, pos)
            pos += 4
            if klen < 0 or vlen < 0 or pos + vlen > end:
                raise ProtocolError("extFields entry out of bounds")
            ext[key] = header[pos : pos + vlen].decode("utf-8")
            pos += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed ROCKETMQ header: {exc}") from exc
    return RemotingCommand(code=code, ext_fields=ext, opaque=opaque, flag=flag, remark=remark,
                           language=_LANG_BY_CODE.get(lang, "OTHER"), version=version,
                           serialize_type=SerializeType.ROCKETMQ)


class FrameDecoder:
    """Feed bytes as they arrive; get whole commands back. Raises ``ProtocolError`` on bad input.

    The length word is checked before the frame is buffered, so an oversized frame is refused at once.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        buf = self._buf
        buf += data
        out: list[RemotingCommand] = []
        pos = 0
        n = len(buf)
        try:
            while n - pos >= 4:
                (length,) = _U32.unpack_from(buf, pos)
                if length > self.max_frame_size:
                    raise FrameTooLargeError(f"frame of {length} bytes exceeds the {self.max_frame_size}-byte limit")
                if length < 4:
                    raise ProtocolError(f"frame length {length} is shorter than its header-length word")
                if n - pos - 4 < length:
                    break
                out.append(decode_frame(memoryview(buf)[pos + 4 : pos + 4 + length]))
                pos += 4 + length
        except ProtocolError as exc:
            exc.decoded = out  # the good frames before the bad one: the caller still serves them
            raise
        if pos:
            del buf[:pos]
        return out
