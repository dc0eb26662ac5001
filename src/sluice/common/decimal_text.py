"""Integers written as text by clients (properties, header fields): ASCII decimal digits that fit a Java long.

``str.isdigit`` passes "²" and "١", which ``int`` refuses or reads; ``int`` alone takes " 7", "1_000" and numbers
of any length. Java's ``Long.parseLong`` takes neither, so neither does Sluice.
"""

from __future__ import annotations

import re
from typing import Final, overload

_LONG: Final = re.compile(r"-?[0-9]{1,18}")


def is_long(raw: str) -> bool:
    return _LONG.fullmatch(raw) is not None


@overload
def parse_long(raw: str | None, default: int) -> int: ...


@overload
def parse_long(raw: str | None, default: None = None) -> int | None: ...


def parse_long(raw: str | None, default: int | None = None) -> int | None:
    """``raw`` as an integer, or ``default`` when it is missing or not one (RocketMQ's getLong falls back
    likewise)."""
    return int(raw) if raw is not None and _LONG.fullmatch(raw) else default


__all__ = ["is_long", "parse_long"]
