"""Message value types: what the store takes in (``MessageExtBrokerInner``) and gives back (``MessageExt``)."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from functools import lru_cache

from sluice.common.properties import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_LITE_TOPIC,
    PROPERTY_PRIORITY,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    decode_properties,
    encode_properties,
    property_value,
)


@lru_cache(maxsize=4096)
def host_to_bytes(host: str) -> tuple[bytes, int]:
    """``"ip:port"`` → (4 IPv4 address bytes, port). Raises ``ValueError`` for anything else."""
    ip, sep, port = host.rpartition(":")
    if not sep:
        raise ValueError(f"host must be ip:port, not {host!r}")
    try:
        return socket.inet_aton(ip), int(port)
    except OSError as exc:
        raise ValueError(f"host {host!r} is not an IPv4 address") from exc


def bytes_to_host(addr: bytes, port: int) -> str:
    return f"{socket.inet_ntoa(addr)}:{port}"


_MSG_ID = struct.Struct(">4siq")


def create_message_id(store_host: str, commit_log_offset: int) -> str:
    """The broker-side ``offsetMsgId``: store host address + port + commit-log offset, upper hex."""
    addr, port = host_to_bytes(store_host)
    return _MSG_ID.pack(addr, port, commit_log_offset).hex().upper()


def create_message_ids(store_host: str, commit_log_offsets: list[int]) -> str:
    """The ``offsetMsgId``s of a put, comma-separated (a batch's SEND_OK ``msgId``)."""
    host = _store_host_hex(store_host)
    return ",".join([f"{host}{off:016X}" for off in commit_log_offsets])


@lru_cache(maxsize=16)
def _store_host_hex(store_host: str) -> str:
    """The STOREHOST part of an offset message id: IPv4 address and port as 24 hex digits."""
    ip, port = host_to_bytes(store_host)
    return f"{ip.hex().upper()}{port:08X}"


def decode_message_id(msg_id: str) -> tuple[str, int]:
    """Inverse of ``create_message_id``: (store host, commit-log offset)."""
    if len(msg_id) != 32:
        raise ValueError(f"message id must be 32 hex characters, not {len(msg_id)}")
    try:
        addr, port, offset = _MSG_ID.unpack(bytes.fromhex(msg_id))
    except ValueError as exc:
        raise ValueError(f"message id {msg_id!r} is not hexadecimal") from exc
    return bytes_to_host(addr, port), offset


class _PropertyAccessors:
    """Well-known properties of a message, read from its ``properties`` dict."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROPERTY_KEYS)
        return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


@dataclass(slots=True)
class MessageExtBrokerInner(_PropertyAccessors):
    """A message on its way into the store."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_host: str | None = None
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


    @property
    def wait_store_msg_ok(self) -> bool:
        return self.properties.get(PROPERTY_WAIT_STORE_MSG_OK, "true") != "false"

    def properties_bytes(self) -> bytes:
        return encode_properties(self.properties)


_EXT_FIELDS = ("topic", "body", "queue_id", "flag", "queue_offset", "commit_log_offset", "sys_flag", "born_timestamp",
               "born_host", "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
               "properties", "store_size", "body_crc")


class MessageExt(_PropertyAccessors):
    """A stored message, decoded from its record.

    ``properties`` may be given as the record's encoded properties bytes: they are decoded the first time
    ``properties`` is read (a consumer that reads only bodies never pays for it), and ``tags``, ``keys`` and
    ``uniq_key`` read their one property from the bytes until then.
    """

    __slots__ = ("topic", "body", "queue_id", "flag", "queue_offset", "commit_log_offset", "sys_flag",
                 "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
                 "prepared_transaction_offset", "_properties", "_raw_properties", "store_size", "body_crc")
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __init__(self, topic: str, body: bytes, queue_id: int, flag: int, queue_offset: int, commit_log_offset: int,
                 sys_flag: int, born_timestamp: int, born_host: str, store_timestamp: int, store_host: str,
                 reconsume_times: int, prepared_transaction_offset: int, properties: dict[str, str] | bytes,
                 store_size: int, body_crc: int) -> None:
        self.topic = topic
        self.body = body
        self.queue_id = queue_id
        self.flag = flag
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        if isinstance(properties, bytes):
            self._properties: dict[str, str] | None = None
            self._raw_properties = properties
        else:
            self._properties = properties
            self._raw_properties = b""
        self.store_size = store_size
        self.body_crc = body_crc

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = self._properties = decode_properties(self._raw_properties) if self._raw_properties else {}
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value

    def get_property(self, name: str) -> str | None:
        """One property (Java's ``getProperty``), without decoding the others when they are still encoded."""
        return self._property(name)

    def _property(self, name: str) -> str | None:
        if self._properties is None:
            return property_value(self._raw_properties, name) if self._raw_properties else None
        return self._properties.get(name)

    @property
    def tags(self) -> str | None:
        return self._property(PROPERTY_TAGS)

    @property
    def uniq_key(self) -> str | None:
        return self._property(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def keys(self) -> list[str]:
        raw = self._property(PROPERTY_KEYS)
        return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []

    @property
    def priority(self) -> int | None:
        """The priority the message was sent with (RIP-80), None when it has none (or one no int32 holds)."""
        raw = self._property(PROPERTY_PRIORITY)
        if raw is None or not raw.isascii() or not raw.isdigit() or len(raw) > 10:
            return None
        value = int(raw)
        return value if value < 2**31 else None

    @property
    def lite_topic(self) -> str | None:
        """The lite topic the message was sent to (RocketMQ 5.5), None when it was sent to none."""
        return self._property(PROPERTY_LITE_TOPIC) or None

    @property
    def offset_msg_id(self) -> str:
        return create_message_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """What users see as the message id: UNIQ_KEY when the producer set one, else the offset id."""
        return self.uniq_key or self.offset_msg_id

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in _EXT_FIELDS)

    def replace(self, **changes: object) -> MessageExt:
        """A copy with some fields changed (``dataclasses.replace`` for this class)."""
        values = dict(zip(_EXT_FIELDS, self._values(), strict=True))
        values.update(changes)
        return MessageExt(**values)  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not MessageExt:
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self) -> str:
        return "MessageExt(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in _EXT_FIELDS) + ")"


__all__ = [
    "MessageExt",
    "MessageExtBrokerInner",
    "bytes_to_host",
    "create_message_id",
    "create_message_ids",
    "decode_message_id",
    "decode_properties",
    "host_to_bytes",
]
