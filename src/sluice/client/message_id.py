"""Client-generated message ids (the ``UNIQ_KEY`` property users see as "msgId").

Layout, as RocketMQ's ``MessageClientIDSetter`` writes it, 16 bytes → 32 upper-case hex characters::

    ip (4) | pid (2) | random (4) | ms since the start of the current month (4) | counter (2)

The first 10 bytes never change within a process, so they are formatted once; making an id is a clock
read, a counter bump and one f-string. The month is local time, as Java's ``Calendar`` uses, so that
``uniq_id_timestamp`` reads ids made by Java clients on the same machine correctly.
"""

from __future__ import annotations

import datetime as _dt
import os
import secrets
import socket
import threading
import time

from sluice.common.speedups import speedups

_U32 = 0xFFFFFFFF
_U16 = 0xFFFF


def _month_bounds_ms(now_ms: int) -> tuple[int, int]:
    """(start of the local month holding ``now_ms``, start of the next one), both in epoch ms."""
    # Naive datetimes are local time; ``timestamp()`` applies the UTC offset in force at that instant.
    start = _dt.datetime.fromtimestamp(now_ms / 1000).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return round(start.timestamp() * 1000), round(nxt.timestamp() * 1000)


def local_ipv4() -> bytes:
    """This host's outward IPv4 address (4 bytes), without sending anything.

    Connecting a UDP socket only asks the kernel for a route. Without a route the bytes are made from the
    clock, as Java's ``createFakeIP`` does, which is still good enough for uniqueness.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            addr = socket.inet_aton(s.getsockname()[0])
            if addr != b"\0\0\0\0":
                return addr
    except OSError:
        pass
    return (time.time_ns() // 1_000_000 & _U32).to_bytes(4, "big")


class MessageIdGenerator:
    """Makes ``UNIQ_KEY`` ids. Thread-safe; one per process is enough (see ``create_uniq_id``).

    ``ip`` (4 bytes or dotted string), ``pid`` and ``salt`` (the 4 bytes Java fills with a class loader's
    hash) default to this host's address, ``os.getpid()`` and random bytes.
    """

    __slots__ = ("_clock", "_counter", "_lock", "_next_month_ms", "_month_start_ms", "prefix")

    def __init__(self, ip: bytes | str | None = None, pid: int | None = None, salt: int | None = None) -> None:
        if ip is None:
            ip_bytes = local_ipv4()
        elif isinstance(ip, str):
            ip_bytes = socket.inet_aton(ip)
        else:
            ip_bytes = bytes(ip)
        if len(ip_bytes) != 4:
            raise ValueError(f"ip must be 4 bytes (IPv4), not {len(ip_bytes)}")
        pid = os.getpid() if pid is None else pid
        salt = secrets.randbits(32) if salt is None else salt
        fixed = ip_bytes + (pid & _U16).to_bytes(2, "big") + (salt & _U32).to_bytes(4, "big")
        self.prefix: str = fixed.hex().upper()
        self._lock = threading.Lock()
        self._counter = 0
        self._month_start_ms = 0
        self._next_month_ms = 0
        # The compiled clock and counter when there is one (the same ids; ``_py_create`` is the reference).
        self._clock = speedups.UniqIdClock(self.prefix, _month_bounds_ms) if speedups is not None else None

    def create(self, now_ms: int | None = None) -> str:
        """A new id (32 hex characters). ``now_ms`` overrides the clock (tests)."""
        clock = self._clock
        if clock is not None:
            return clock.create(now_ms)  # type: ignore[no-any-return]
        return self._py_create(now_ms)

    def _py_create(self, now_ms: int | None = None) -> str:
        """``create`` in Python (the reference; it keeps its own counter: a generator uses one or the other)."""
        if now_ms is None:
            now_ms = time.time_ns() // 1_000_000
        with self._lock:
            if not self._month_start_ms <= now_ms < self._next_month_ms:
                # A new month, or the clock stepped back across a month start: recompute the bounds.
                self._month_start_ms, self._next_month_ms = _month_bounds_ms(now_ms)
            counter = self._counter
            self._counter = (counter + 1) & _U16
            start = self._month_start_ms
        # Java casts the span to int; it can exceed 2**31 late in a 31-day month, so keep the raw 32 bits.
        return f"{self.prefix}{(now_ms - start) & _U32:08X}{counter:04X}"

    def create_many(self, n: int) -> list[str]:
        """``n`` new ids from one clock read (a batch's messages), as ``n`` calls of ``create`` at that instant."""
        if n < 0:
            raise ValueError(f"create_many(n) needs n >= 0, not {n}")
        if self._clock is not None:
            return self._clock.create_many(n)  # type: ignore[no-any-return]
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            if not self._month_start_ms <= now_ms < self._next_month_ms:
                self._month_start_ms, self._next_month_ms = _month_bounds_ms(now_ms)
            first = self._counter
            self._counter = (first + n) & _U16
            start = self._month_start_ms
        head = f"{self.prefix}{(now_ms - start) & _U32:08X}"
        return [f"{head}{c & _U16:04X}" for c in range(first, first + n)]


_default: MessageIdGenerator | None = None
_default_lock = threading.Lock()


def default_generator() -> MessageIdGenerator:
    """The process-wide generator, made on first use (which looks up the local address once)."""
    global _default
    gen = _default
    if gen is None:
        with _default_lock:
            gen = _default
            if gen is None:
                gen = _default = MessageIdGenerator()
    return gen


def _forget_default_after_fork() -> None:
    # A forked child would go on with its parent's pid, salt and counter, and make the ids its parent makes.
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()  # (another thread of the parent may have held it at the fork)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_default_after_fork)


def create_uniq_id() -> str:
    """A new ``UNIQ_KEY`` from the process-wide generator."""
    gen = _default or default_generator()
    return gen.create()


def create_uniq_ids(n: int) -> list[str]:
    """``n`` new ``UNIQ_KEY`` ids from the process-wide generator."""
    gen = _default or default_generator()
    return gen.create_many(n)


def _id_bytes(uniq_id: str) -> bytes:
    if len(uniq_id) not in (32, 56):
        raise ValueError(f"a UNIQ_KEY is 32 (IPv4) or 56 (IPv6) hex characters, not {len(uniq_id)}: {uniq_id!r}")
    try:
        return bytes.fromhex(uniq_id)
    except ValueError as exc:
        raise ValueError(f"UNIQ_KEY {uniq_id!r} is not hexadecimal") from exc


def uniq_id_timestamp(uniq_id: str, now_ms: int | None = None) -> int:
    """Approximately when ``uniq_id`` was made (epoch ms), as Java's ``getNearlyTimeFromID`` computes it.

    The id only holds ms since the start of *a* month: the current month is assumed, or the previous one
    when that would put the id in the future (Java also moves an id made in this very ms back a month).
    """
    raw = _id_bytes(uniq_id)
    span = int.from_bytes(raw[-6:-2], "big")
    if now_ms is None:
        now_ms = time.time_ns() // 1_000_000
    start, _ = _month_bounds_ms(now_ms)
    if start + span > now_ms:
        start, _ = _month_bounds_ms(start - 1)
    return start + span


def uniq_id_ip(uniq_id: str) -> str:
    """The producer's address recorded in ``uniq_id`` (dotted IPv4, or IPv6 text for 56-character ids)."""
    raw = _id_bytes(uniq_id)
    if len(raw) == 16:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    return socket.inet_ntop(socket.AF_INET6, raw[:16])


def uniq_id_pid(uniq_id: str) -> int:
    """The low 16 bits of the producer's process id recorded in ``uniq_id``."""
    raw = _id_bytes(uniq_id)
    return int.from_bytes(raw[-12:-10], "big")


__all__ = [
    "MessageIdGenerator",
    "create_uniq_id",
    "default_generator",
    "local_ipv4",
    "uniq_id_ip",
    "uniq_id_pid",
    "uniq_id_timestamp",
]
