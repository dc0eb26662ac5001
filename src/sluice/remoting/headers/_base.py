"""What every request header shares: its fields read from a command's ext fields as RocketMQ's decoder reads them
(an error naming the field that is missing or malformed), and the topic and group the request is about."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from sluice.remoting.errors import BadRequestError


def field_str(ext: Mapping[str, str], name: str, default: str | None = None) -> str:
    """A field's text; ``default`` when it is missing or empty, else ``BadRequestError`` naming it."""
    raw = ext.get(name)
    if raw is None or (raw == "" and default is not None):
        if default is None:
            raise BadRequestError(f"the request has no {name!r} field")
        return default
    return raw


def field_int(ext: Mapping[str, str], name: str, default: int | None = None) -> int:
    """A field as an integer; ``default`` when it is missing or empty, else ``BadRequestError`` naming it."""
    raw = ext.get(name)
    if raw is None or raw == "":
        if default is None:
            raise BadRequestError(f"the request has no {name!r} field")
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise BadRequestError(f"field {name!r} must be an integer, not {raw!r}") from exc


def field_bool(ext: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = ext.get(name)
    return default if raw is None or raw == "" else raw.lower() == "true"


def text_bool(value: bool) -> str:
    """A boolean as Java writes it."""
    return "true" if value else "false"


class RequestHeader(abc.ABC):
    """One request's custom header (RocketMQ's ``CommandCustomHeader``): ``decode`` from ext fields, ``encode`` to
    them, under RocketMQ's field names.

    ``TOPIC_FIELD`` / ``GROUP_FIELD`` name the attribute that holds the topic / the group the request is about
    (the fields RocketMQ marks ``@RocketMQResource``), so that authorization reads any request's resources the same
    way: ``resource_topic`` and ``resource_group``.
    """

    __slots__ = ()
    TOPIC_FIELD: ClassVar[str | None] = None
    GROUP_FIELD: ClassVar[str | None] = None

    @classmethod
    @abc.abstractmethod
    def decode(cls, ext: Mapping[str, str]) -> Self:
        """The header in ``ext``; ``BadRequestError`` naming a missing or malformed field."""

    @abc.abstractmethod
    def encode(self) -> dict[str, str]:
        """The ext fields of this header."""

    @property
    def resource_topic(self) -> str | None:
        return getattr(self, self.TOPIC_FIELD) or None if self.TOPIC_FIELD else None

    @property
    def resource_group(self) -> str | None:
        return getattr(self, self.GROUP_FIELD) or None if self.GROUP_FIELD else None

    def _names(self) -> tuple[str, ...]:
        return tuple(name for c in reversed(type(self).__mro__) for name in c.__dict__.get("__slots__", ()))

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._names())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RequestHeader):
            return NotImplemented
        return type(other) is type(self) and self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclasses it replaces

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._names())
        return f"{type(self).__name__}({fields})"


__all__ = ["RequestHeader", "field_bool", "field_int", "field_str", "text_bool"]
