"""RemotingCommand: one request or response frame, decoded."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from sluice.remoting.codes import ONEWAY_FLAG, RESPONSE_FLAG, SerializeType
from sluice.remoting.headers._base import field_bool, field_int, field_str

# Sluice's MQVersion as sent in every command: V4_9_8 (409), what Java 4.9.8 clients send.
SLUICE_VERSION = 409

_opaques = itertools.count()


def next_opaque() -> int:
    """Process-wide request ids, non-negative int32 (as Java and C++ clients do)."""
    return next(_opaques) & 0x7FFFFFFF


@dataclass(slots=True)
class RemotingCommand:
    code: int
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes | memoryview = b""
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    language: str = "PYTHON"
    version: int = SLUICE_VERSION
    serialize_type: SerializeType = SerializeType.JSON
    # Extra body parts sent after ``body`` without being joined (pull responses: views of the commit log).
    body_parts: Sequence[bytes | memoryview] | None = None

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    @classmethod
    def request(cls, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"",
                oneway: bool = False) -> RemotingCommand:
        return cls(code, ext_fields or {}, body, next_opaque(), ONEWAY_FLAG if oneway else 0)

    def response(self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None,
                 body: bytes | memoryview = b"") -> RemotingCommand:
        """The response to this request: same opaque and serialize type, response flag set."""
        return RemotingCommand(code, ext_fields or {}, body, self.opaque, RESPONSE_FLAG, remark,
                               serialize_type=self.serialize_type)

    def ext_int(self, name: str, default: int | None = None) -> int:
        """An extFields value as an int; raises ``BadRequestError`` naming the field."""
        return field_int(self.ext_fields, name, default)

    def ext_str(self, name: str, default: str | None = None) -> str:
        """An extFields value; raises ``BadRequestError`` when it is missing and has no default."""
        return field_str(self.ext_fields, name, default)

    def ext_bool(self, name: str, default: bool = False) -> bool:
        return field_bool(self.ext_fields, name, default)
