"""How values read on a page: sizes, times, rates, message bodies (text, pretty JSON or hex, cut when long)."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any


def human_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def ms_time(ms: int | float | None) -> str:
    """A store or born time in milliseconds as local time (``-`` for none)."""
    if not ms or ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{int(ms) % 1000:03d}"


def time_ms(text: str) -> int:
    """A time as a form gives it: ``2026-11-29T10:15`` (local time) or milliseconds since the epoch; ValueError
    saying what is allowed otherwise."""
    text = text.strip()
    if text.isascii() and text.isdecimal() and len(text) <= 15:
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise ValueError(f"time {text!r}: give a date and time such as 2026-11-29T10:15") from None


def rate(value: float) -> str:
    return f"{value:,.1f}/s" if value < 100 else f"{value:,.0f}/s"


def number(value: int | float) -> str:
    return f"{value:,}"


def duration_ms(ms: int | float) -> str:
    """A wait in milliseconds as people read one: ``0 ms``, ``850 ms``, ``12.5 s``, ``3 min 20 s``, ``2 h 5 min``."""
    ms = max(float(ms), 0.0)
    if ms < 1000:
        return f"{ms:.0f} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def body_view(body: bytes, limit: int) -> dict[str, Any]:
    """How a body is shown: ``kind`` text, json or hex, ``text`` (at most ``limit`` bytes of it), ``cut``."""
    cut = len(body) > limit
    shown = body[:limit]
    try:
        text = shown.decode("utf-8") if not cut else shown.decode("utf-8", "ignore")
    except UnicodeDecodeError:
        text = None
    if text is not None and not cut:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict | list):
            return {"kind": "json", "text": json.dumps(parsed, indent=2, ensure_ascii=False), "cut": False,
                    "size": len(body)}
    if text is not None and all(c.isprintable() or c in "\n\r\t" for c in text):
        return {"kind": "text", "text": text, "cut": cut, "size": len(body)}
    lines = []
    for off in range(0, len(shown), 16):
        chunk = shown[off:off + 16]
        lines.append(f"{off:08x}  {chunk.hex(' '):<47}  " + "".join(chr(b) if 32 <= b < 127 else "." for b in chunk))
    return {"kind": "hex", "text": "\n".join(lines), "cut": cut, "size": len(body)}


FILTERS = {"bytes": human_bytes, "ms_time": ms_time, "rate": rate, "number": number, "duration_ms": duration_ms}
