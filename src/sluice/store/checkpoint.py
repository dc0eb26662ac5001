"""The checkpoint file: when and how far each part of the store was last known durable.

4096 bytes. RocketMQ's three timestamps at 0, 8 and 16; then Sluice's safe offsets, which recovery
starts from: commit log flushed up to @24, consume queues complete and flushed up to @32, index
complete and flushed up to @40, the commit log's end at the last clean shutdown @48 (-1 while
running), and a CRC32 of bytes 0..56 @56 so a torn checkpoint is detected rather than trusted.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from typing import Final

from sluice.common.files import fsync_dir
from sluice.common.platform import fdatasync

CHECKPOINT_SIZE: Final = 4096
_LAYOUT: Final = struct.Struct(">qqqqqqq")
_CRC: Final = struct.Struct(">I")


@dataclass(slots=True)
class StoreCheckpoint:
    path: str
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    physic_safe_offset: int = 0
    logics_safe_offset: int = 0
    index_safe_offset: int = 0
    clean_shutdown_offset: int = -1
    valid: bool = False  # the file existed and its CRC matched
    frozen: bool = False  # set after a failed fsync: the file is written no more

    @classmethod
    def load(cls, path: str) -> StoreCheckpoint:
        cp = cls(path)
        try:
            with open(path, "rb") as f:
                data = f.read(_LAYOUT.size + _CRC.size)
        except FileNotFoundError:
            return cp
        if len(data) < _LAYOUT.size + _CRC.size:
            return cp
        (crc,) = _CRC.unpack_from(data, _LAYOUT.size)
        if zlib.crc32(data[: _LAYOUT.size]) != crc:
            return cp
        (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp, cp.physic_safe_offset,
         cp.logics_safe_offset, cp.index_safe_offset, cp.clean_shutdown_offset) = _LAYOUT.unpack_from(data)
        cp.valid = True
        return cp

    @property
    def recover_from(self) -> int:
        """The offset below which the commit log, consume queues and index are all known good."""
        return min(self.physic_safe_offset, self.logics_safe_offset, self.index_safe_offset)

    def flush(self) -> None:
        if self.frozen:  # after a failed fsync: recovery must start where the last good flush left it
            return
        body = _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
                            self.physic_safe_offset, self.logics_safe_offset, self.index_safe_offset,
                            self.clean_shutdown_offset)
        data = (body + _CRC.pack(zlib.crc32(body))).ljust(CHECKPOINT_SIZE, b"\0")
        created = not os.path.exists(self.path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
            fdatasync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(os.path.dirname(self.path))
        self.valid = True
