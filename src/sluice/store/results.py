"""What the store answers: put and get statuses and results (RocketMQ PutMessageStatus, GetMessageStatus)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    SYSTEM_BUSY = "SYSTEM_BUSY"  # turned down by back-pressure before it was stored (the remark says why)
    LMQ_CONSUME_QUEUE_NUM_EXCEEDED = "LMQ_CONSUME_QUEUE_NUM_EXCEEDED"  # no more light queues
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


@dataclass(slots=True)
class PutMessageResult:
    """Outcome of a put. On success, where the message (or the first of a batch) went."""

    status: PutMessageStatus
    remark: str = ""
    wrote_offset: int = 0  # commit-log offset of the first record
    wrote_bytes: int = 0
    queue_offset: int = 0  # logical offset of the first message
    msg_num: int = 0
    store_timestamp: int = 0
    phys_offsets: list[int] = field(default_factory=list)  # every record's commit-log offset

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def stored(self) -> bool:
        """Written to the log, if not (yet) as durable as asked: PUT_OK, or a flush or a slave late."""
        return self.status in _STORED


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    """A pull's worth of stored records, as zero-copy views of the mapped commit log: one view per run of
    records that lie end to end, ``queue_offsets`` one per record."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0

    @property
    def message_count(self) -> int:
        """Records found (``buffers`` may hold several records back to back in one view)."""
        return len(self.queue_offsets)

    def release(self) -> None:
        """Drop the views (lets retention unmap deleted segments at once)."""
        for b in self.buffers:
            b.release()
        self.buffers = []


_STORED = frozenset({PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                     PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE})
