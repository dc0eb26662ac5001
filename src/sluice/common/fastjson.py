"""JSON as RocketMQ's Java side writes it (fastjson / fastjson2), read and written (sans-IO).

RocketMQ serializes its remoting bodies with fastjson, which writes two things standard JSON does not have:

- maps with number keys keep them bare: ``{"brokerAddrs":{0:"127.0.0.1:10911"}}`` (ClusterInfo, routes for old
  clients, consumer offsets);
- maps keyed by an object write the key as a JSON object: ``{"offsetTable":{{"brokerName":"b","queueId":0,
  "topic":"t"}:{"brokerOffset":5,...}}}`` (ConsumeStats, TopicStatsTable, ResetOffsetBody). The Java side reads
  nothing else there: a list or a string key fails to parse.

``loads`` reads standard JSON at full speed and falls back to a small parser for those two; an object key comes
back as an ``ObjectKey`` (a hashable, read-only view of that object). ``dumps`` writes ``ObjectKey`` keys the way
fastjson does, with the key's fields in alphabetical order, as fastjson orders a bean's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson

_WS: Final = frozenset(" \t\r\n")
_MAX_DEPTH: Final = 200  # two Python frames a level: well inside the interpreter's recursion limit


class ObjectKey(Mapping[str, Any]):
    """A map key that is a JSON object (a MessageQueue, mostly): hashable and read-only."""

    __slots__ = ("_items", "_hash")

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self._items: dict[str, Any] = dict(sorted(fields.items()))
        self._hash = hash(frozenset(self._items.items()))  # equal mappings, equal hashes (1 == 1.0 == True too)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __repr__(self) -> str:
        return f"ObjectKey({self._items!r})"


class FastjsonDecodeError(ValueError):
    """The bytes are neither JSON nor fastjson's variant of it."""


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse a body: standard JSON, or fastjson's bare number keys and object keys."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FastjsonDecodeError(f"not UTF-8: {exc}") from None
    return _Parser(text).document()


def dumps(obj: Any) -> bytes:
    """Standard JSON, except that ``ObjectKey`` map keys are written as objects (fastjson's form)."""
    return "".join(_encode(obj, 0)).encode("utf-8")


_SURROGATE = re.compile("[\ud800-\udfff]")
_scalar = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _encode(obj: Any, depth: int) -> Iterator[str]:
    if depth > _MAX_DEPTH:
        raise ValueError("nesting too deep")
    if isinstance(obj, Mapping):
        yield "{"
        first = True
        for k, v in obj.items():
            if not first:
                yield ","
            first = False
            if isinstance(k, ObjectKey):
                yield from _encode(dict(k), depth + 1)
            else:
                yield _scalar(k if isinstance(k, str) else str(k))
            yield ":"
            yield from _encode(v, depth + 1)
        yield "}"
    elif isinstance(obj, list | tuple):
        yield "["
        for i, v in enumerate(obj):
            if i:
                yield ","
            yield from _encode(v, depth + 1)
        yield "]"
    else:
        yield _scalar(obj)


class _Parser:
    """Recursive descent over the text; standard JSON values through ``json``'s own scanner."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self._decoder = json.JSONDecoder()

    def fail(self, what: str) -> FastjsonDecodeError:
        return FastjsonDecodeError(f"{what} at offset {self.i}")

    def ws(self) -> None:
        s, i = self.s, self.i
        while i < len(s) and s[i] in _WS:
            i += 1
        self.i = i

    def document(self) -> Any:
        value = self.value(0)
        self.ws()
        if self.i != len(self.s):
            raise self.fail("extra data")
        return value

    def value(self, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise self.fail("nesting too deep")
        self.ws()
        if self.i >= len(self.s):
            raise self.fail("unexpected end")
        c = self.s[self.i]
        if c == "{":
            return self.obj(depth)
        if c == "[":
            return self.arr(depth)
        try:
            v, end = self._decoder.raw_decode(self.s, self.i)
        except json.JSONDecodeError as exc:
            raise self.fail(f"bad value ({exc.msg})") from None
        if isinstance(v, str) and _SURROGATE.search(v):  # (a pair decodes to one character: this one is alone)
            raise self.fail("a string holds a lone surrogate (\\ud800-\\udfff), which is no character")
        self.i = end
        return v

    def obj(self, depth: int) -> dict[Any, Any]:
        if depth > _MAX_DEPTH:
            raise self.fail("nesting too deep")
        self.i += 1
        out: dict[Any, Any] = {}
        self.ws()
        if self.s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            self.ws()
            if self.i >= len(self.s):
                raise self.fail("unexpected end")
            c = self.s[self.i]
            key: Any
            if c == "{":
                fields = self.obj(depth + 1)
                if any(not isinstance(k, str) or isinstance(v, dict | list) for k, v in fields.items()):
                    raise self.fail("an object key holds more than plain fields")
                key = ObjectKey(fields)
            elif c == '"':
                key = self.value(depth + 1)
            elif c == "-" or "0" <= c <= "9":
                start = self.i
                self.i += 1
                while self.i < len(self.s) and "0" <= self.s[self.i] <= "9":
                    self.i += 1
                key = self.s[start:self.i]
                if key == "-":
                    raise self.fail("bad key")
            else:
                raise self.fail("expected a key")
            self.ws()
            if not self.s.startswith(":", self.i):
                raise self.fail("expected ':'")
            self.i += 1
            out[key] = self.value(depth + 1)
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            if self.s.startswith("}", self.i):
                self.i += 1
                return out
            raise self.fail("expected ',' or '}'")

    def arr(self, depth: int) -> list[Any]:
        self.i += 1
        out: list[Any] = []
        self.ws()
        if self.s.startswith("]", self.i):
            self.i += 1
            return out
        while True:
            out.append(self.value(depth + 1))
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            if self.s.startswith("]", self.i):
                self.i += 1
                return out
            raise self.fail("expected ',' or ']'")
