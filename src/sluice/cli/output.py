"""What CLI verbs print: tables, JSON, times, message bodies and a progress line."""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from sluice.client.admin import AdminError
from sluice.common.message import MessageExt

TEXT_BODY_LIMIT = 4096  # characters of a text body shown by get-by-id (--body-only prints it all)
BINARY_BODY_LIMIT = 256  # bytes of a binary body shown as hex
PREVIEW = 32  # characters of a body shown in a get-by-key row


# == formatting ===================================================================================
def out(line: str = "") -> None:
    print(line, flush=False)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> list[str]:
    """Rows under headers, columns two spaces apart; columns in ``right`` (numbers) right-aligned."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  ".join(parts).rstrip())
    return lines


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> None:
    for line in table(headers, rows, right):
        out(line)


def fmt_time(ms: int) -> str:
    """Local time with milliseconds; '-' for 0 (never)."""
    if ms <= 0:
        return "-"
    try:
        return dt.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, or a local date / time such as ``2024-05-01`` or ``2024-05-01T12:30``."""
    t = text.strip()
    if t.isdigit():
        return int(t)
    try:
        return int(dt.datetime.fromisoformat(t).timestamp() * 1000)
    except ValueError:
        raise AdminError(f"time {text!r} is neither milliseconds since the epoch "
                         "nor a date like 2024-05-01 12:30") from None


def text_body(body: bytes) -> str | None:
    """The body as text when it is UTF-8 without control characters (bar tab and newlines), else None."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any((c < " " and c not in "\t\n\r") or c == "\x7f" for c in text):
        return None
    return text


def body_preview(body: bytes, width: int = PREVIEW) -> str:
    text = text_body(body)
    if text is None:
        return f"<{len(body)} bytes binary>"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def message_json(m: MessageExt) -> dict[str, Any]:
    text = text_body(m.body)
    return {"topic": m.topic, "msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "tags": m.tags, "keys": m.keys,
            "queueId": m.queue_id, "queueOffset": m.queue_offset, "commitLogOffset": m.commit_log_offset,
            "bornTimestamp": m.born_timestamp, "bornHost": m.born_host, "storeTimestamp": m.store_timestamp,
            "storeHost": m.store_host, "reconsumeTimes": m.reconsume_times, "flag": m.flag, "sysFlag": m.sys_flag,
            "bodyCRC": m.body_crc, "storeSize": m.store_size, "properties": dict(sorted(m.properties.items())),
            "bodySize": len(m.body), "bodyEncoding": "utf-8" if text is not None else "base64",
            "body": text if text is not None else base64.b64encode(m.body).decode()}


def message_lines(m: MessageExt) -> list[str]:
    uniq = m.uniq_key
    rows: list[tuple[str, str]] = [
        ("topic", m.topic),
        ("msg id", uniq or m.offset_msg_id),
        ("offset msg id", m.offset_msg_id),
        ("tags", m.tags or "-"),
        ("keys", " ".join(m.keys) or "-"),
        ("queue", f"{m.queue_id} (queue offset {m.queue_offset})"),
        ("commit log offset", str(m.commit_log_offset)),
        ("born", f"{fmt_time(m.born_timestamp)} from {m.born_host}"),
        ("stored", f"{fmt_time(m.store_timestamp)} on {m.store_host}"),
        ("reconsume times", str(m.reconsume_times)),
        ("flag / sys flag", f"{m.flag} / {m.sys_flag:#x}"),
    ]
    props = sorted(m.properties.items())
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    for i, (k, v) in enumerate(props or [("-", "")]):
        label = "properties" if i == 0 else ""
        lines.append(f"{label.ljust(width)}  {k}={v}" if props else f"{label.ljust(width)}  -")
    text = text_body(m.body)
    if text is not None:
        lines.append(f"{'body'.ljust(width)}  {len(m.body)} bytes, UTF-8 text")
        shown = text if len(text) <= TEXT_BODY_LIMIT else text[:TEXT_BODY_LIMIT]
        lines.extend(shown.splitlines() or [""])
        if len(text) > TEXT_BODY_LIMIT:
            lines.append(f"... ({len(text) - TEXT_BODY_LIMIT} more characters; --body-only prints it all)")
    else:
        lines.append(f"{'body'.ljust(width)}  {len(m.body)} bytes, binary (hex)")
        shown_b = m.body[:BINARY_BODY_LIMIT]
        lines.extend(shown_b[i : i + 32].hex(" ") for i in range(0, len(shown_b), 32))
        if len(m.body) > BINARY_BODY_LIMIT:
            lines.append(f"... ({len(m.body) - BINARY_BODY_LIMIT} more bytes; --body-only prints it all)")
    return lines


def write_body(body: bytes) -> None:
    """The raw body on stdout, byte for byte."""
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        buffer.write(body)
        buffer.flush()
    else:  # a text-only stdout (some test harnesses)
        sys.stdout.write(body.decode("utf-8", "replace"))
        sys.stdout.flush()


# == topic ========================================================================================


class Progress:
    """A progress line on stderr, at most twice a second: redrawn in place on a terminal, else one line each."""

    def __init__(self, total: int, what: str) -> None:
        self.total = total
        self.what = what
        self.start = time.monotonic()
        self.last = self.start
        self.tty = sys.stderr.isatty()
        self.drawn = False

    def update(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.5:
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        line = f"{self.what} {done}/{self.total} ({rate:,.0f} msg/s)"
        if self.tty:
            sys.stderr.write("\r" + line)
            self.drawn = True
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.drawn = False
