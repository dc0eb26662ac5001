"""The message store: CommitLog, ConsumeQueue, IndexFile, flush, checkpoint and recovery. No networking."""

from sluice.store.commit_log import RawBatch
from sluice.store.message_store import MessageStore, Put, PutDone
from sluice.store.results import (
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)

__all__ = [
    "GetMessageResult",
    "GetMessageStatus",
    "MessageStore",
    "Put",
    "PutDone",
    "PutMessageResult",
    "PutMessageStatus",
    "RawBatch",
]
