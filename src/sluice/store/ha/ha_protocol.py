"""The frames of the HA connection between a master and a slave, sans-IO (docs/ha.md § Wire).

RocketMQ's plain HA framing (a slave reports its log end in 8 bytes; a master sends ``offset:8 size:4`` then
the bytes) with the handshake of its controller mode in front, so that a slave whose log diverged can be told
where to cut it: every frame starts with a one-byte type.

Slave to master:
  AUTH       5 | akLen:2 | ak | dateTime:16 | mac:20   (first, when the master has authentication on: the inner
             client credentials' access key, yyyyMMddTHHmmssZ in UTC, and HMAC-SHA1 under their secret of
             "sluice-ha|<ak>|<dateTime>"; a master refuses a slave without it, or with a stale or wrong one)
  HANDSHAKE  4 | brokerId:8 | maxOffset:8 | count:4 | count × (epoch:8 startOffset:8)
             (4: this version, whose transfers carry a confirm offset; the first version's handshake, type 1, is
             refused with a REFUSE that says to upgrade)
  REPORT     2 | ackOffset:8                       (everything below is stored on the slave)
Master to slave:
  WELCOME    1 | epoch:8 | masterMaxOffset:8 | cutAt:8 (-1: keep everything) | startOffset:8
               | count:4 | count × (epoch:8 startOffset:8)
  TRANSFER   2 | epoch:8 | offset:8 | confirm:8 | size:4 | size bytes (size 0: a heartbeat)
               confirm: how far the master's log may be seen by consumers (its dispatched offset: flushed,
               held by its in-sync replicas); the slave dispatches no record past it
  REFUSE     3 | size:4 | size bytes of UTF-8 (why; the master closes the connection)
"""

from __future__ import annotations

import abc
import hashlib
import hmac
import struct
from typing import Final, NamedTuple

from sluice.store.ha.epoch_file import EpochEntry

HANDSHAKE: Final = 4
AUTH: Final = 5
OLD_HANDSHAKE: Final = 1  # the first version's (its transfers had no confirm offset)
REPORT: Final = 2
WELCOME: Final = 1
TRANSFER: Final = 2
REFUSE: Final = 3

_HANDSHAKE = struct.Struct(">bqqi")
_REPORT = struct.Struct(">bq")
_WELCOME = struct.Struct(">bqqqqi")
_TRANSFER = struct.Struct(">bqqqi")
_REFUSE = struct.Struct(">bi")
_EPOCH = struct.Struct(">qq")
_AUTH = struct.Struct(">bH")
DATE_TIME_SIZE: Final = 16
MAC_SIZE: Final = 20
MAX_ACCESS_KEY: Final = 1024
# Bounds on what a peer may make us hold: epochs in a handshake, bytes of a refusal.
MAX_EPOCHS: Final = 1 << 16
MAX_REASON: Final = 4096


class HAProtocolError(Exception):
    """Bytes that are not a frame of this protocol: the connection is closed."""


class HAVersionError(HAProtocolError):
    """A slave of another version of this protocol: refused, with why."""


class Handshake(NamedTuple):
    broker_id: int
    max_offset: int
    epochs: list[EpochEntry]


class Report(NamedTuple):
    ack_offset: int


class Auth(NamedTuple):
    access_key: str
    date_time: str
    mac: bytes


def auth_mac(secret_key: str, access_key: str, date_time: str) -> bytes:
    return hmac.new(secret_key.encode("utf-8"), f"sluice-ha|{access_key}|{date_time}".encode(),
                    hashlib.sha1).digest()


def auth_matches(auth: Auth, access_key: str, secret_key: str) -> bool:
    """Constant-time: whether ``auth`` is signed with these credentials (its age is the caller's to check)."""
    same_key = hmac.compare_digest(auth.access_key.encode("utf-8", "replace"), access_key.encode("utf-8"))
    return hmac.compare_digest(auth.mac, auth_mac(secret_key, access_key, auth.date_time)) and same_key


def encode_auth(access_key: str, secret_key: str, date_time: str) -> bytes:
    raw = access_key.encode("utf-8")
    stamp = date_time.encode("ascii")
    if len(stamp) != DATE_TIME_SIZE:
        raise ValueError(f"date time {date_time!r} is not yyyyMMddTHHmmssZ")
    return _AUTH.pack(AUTH, len(raw)) + raw + stamp + auth_mac(secret_key, access_key, date_time)


class Welcome(NamedTuple):
    epoch: int
    master_max_offset: int
    cut_at: int
    start_offset: int
    epochs: list[EpochEntry]


class Transfer(NamedTuple):
    epoch: int
    offset: int
    confirm: int
    data: bytes


class Refuse(NamedTuple):
    reason: str


def _epochs(entries: list[EpochEntry]) -> bytes:
    return b"".join(_EPOCH.pack(e.epoch, e.start_offset) for e in entries)


def encode_handshake(h: Handshake) -> bytes:
    return _HANDSHAKE.pack(HANDSHAKE, h.broker_id, h.max_offset, len(h.epochs)) + _epochs(h.epochs)


def encode_report(ack_offset: int) -> bytes:
    return _REPORT.pack(REPORT, ack_offset)


def encode_welcome(w: Welcome) -> bytes:
    return _WELCOME.pack(WELCOME, w.epoch, w.master_max_offset, w.cut_at, w.start_offset,
                         len(w.epochs)) + _epochs(w.epochs)


def encode_transfer_header(epoch: int, offset: int, confirm: int, size: int) -> bytes:
    return _TRANSFER.pack(TRANSFER, epoch, offset, confirm, size)


def encode_refuse(reason: str) -> bytes:
    raw = reason.encode()[:MAX_REASON]
    return _REFUSE.pack(REFUSE, len(raw)) + raw


class _Reader(abc.ABC):
    """Accumulates bytes and cuts frames; ``feed`` returns the whole frames so far (``_next``: one side's frames)."""

    def __init__(self, max_body: int) -> None:
        self.buf = bytearray()
        self.max_body = max_body

    def feed(self, data: bytes) -> list:
        self.buf += data
        out: list = []
        while True:
            frame = self._next()
            if frame is None:
                return out
            out.append(frame)

    @abc.abstractmethod
    def _next(self) -> object | None:
        """The next whole frame taken off the buffer, or None until more bytes come."""

    def _epoch_list(self, at: int, count: int) -> list[EpochEntry] | None:
        if not 0 <= count <= MAX_EPOCHS:
            raise HAProtocolError(f"{count} epochs in a handshake")
        end = at + count * _EPOCH.size
        if len(self.buf) < end:
            return None
        entries = [EpochEntry(*_EPOCH.unpack_from(self.buf, at + i * _EPOCH.size)) for i in range(count)]
        del self.buf[:end]
        return entries


class MasterReader(_Reader):
    """The master's side: cuts the slave's HANDSHAKE and REPORT frames."""

    def __init__(self) -> None:
        super().__init__(0)

    def _next(self) -> Handshake | Report | Auth | None:
        buf = self.buf
        if not buf:
            return None
        kind = buf[0]
        if kind == AUTH:
            if len(buf) < _AUTH.size:
                return None
            _, size = _AUTH.unpack_from(buf)
            if size > MAX_ACCESS_KEY:
                raise HAProtocolError(f"an access key of {size} bytes")
            end = _AUTH.size + size + DATE_TIME_SIZE + MAC_SIZE
            if len(buf) < end:
                return None
            at = _AUTH.size + size
            auth = Auth(bytes(buf[_AUTH.size:at]).decode("utf-8", "replace"),
                        bytes(buf[at:at + DATE_TIME_SIZE]).decode("ascii", "replace"),
                        bytes(buf[at + DATE_TIME_SIZE:end]))
            del buf[:end]
            return auth
        if kind == REPORT:
            if len(buf) < _REPORT.size:
                return None
            _, ack = _REPORT.unpack_from(buf)
            del buf[:_REPORT.size]
            if ack < 0:
                raise HAProtocolError(f"negative offset {ack} reported")
            return Report(ack)
        if kind == OLD_HANDSHAKE:
            raise HAVersionError("the slave speaks the first version of the HA protocol (transfers without a "
                                 "confirm offset): upgrade it to this master's Sluice version")
        if kind == HANDSHAKE:
            if len(buf) < _HANDSHAKE.size:
                return None
            _, broker_id, max_offset, count = _HANDSHAKE.unpack_from(buf)
            if broker_id < 0 or max_offset < 0:
                raise HAProtocolError("negative broker id or offset in a handshake")
            epochs = self._epoch_list(_HANDSHAKE.size, count)
            return None if epochs is None else Handshake(broker_id, max_offset, epochs)
        raise HAProtocolError(f"unknown frame type {kind} from a slave")


class SlaveReader(_Reader):
    """The slave's side: cuts the master's WELCOME, TRANSFER and REFUSE frames; a TRANSFER over ``max_body``
    bytes is refused."""

    def _next(self) -> Welcome | Transfer | Refuse | None:
        buf = self.buf
        if not buf:
            return None
        kind = buf[0]
        if kind == TRANSFER:
            if len(buf) < _TRANSFER.size:
                return None
            _, epoch, offset, confirm, size = _TRANSFER.unpack_from(buf)
            if not 0 <= size <= self.max_body or offset < 0 or confirm < 0:
                raise HAProtocolError(f"a transfer of {size} bytes at {offset} (confirmed to {confirm})")
            end = _TRANSFER.size + size
            if len(buf) < end:
                return None
            data = bytes(buf[_TRANSFER.size:end])
            del buf[:end]
            return Transfer(epoch, offset, confirm, data)
        if kind == WELCOME:
            if len(buf) < _WELCOME.size:
                return None
            _, epoch, master_max, cut_at, start, count = _WELCOME.unpack_from(buf)
            epochs = self._epoch_list(_WELCOME.size, count)
            return None if epochs is None else Welcome(epoch, master_max, cut_at, start, epochs)
        if kind == REFUSE:
            if len(buf) < _REFUSE.size:
                return None
            _, size = _REFUSE.unpack_from(buf)
            if not 0 <= size <= MAX_REASON:
                raise HAProtocolError(f"a refusal of {size} bytes")
            if len(buf) < _REFUSE.size + size:
                return None
            reason = bytes(buf[_REFUSE.size:_REFUSE.size + size]).decode(errors="replace")
            del buf[:_REFUSE.size + size]
            return Refuse(reason)
        raise HAProtocolError(f"unknown frame type {kind} from a master")
