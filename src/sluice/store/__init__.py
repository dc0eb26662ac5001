"""The message store: CommitLog, ConsumeQueue, IndexFile, flush, checkpoint and recovery. No networking."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:  # the names below are imported on first use (sluice._lazy)
    from sluice.store.commit_log import RawBatch
    from sluice.store.message_store import MessageStore
    from sluice.store.put_path import Put, PutDone
    from sluice.store.results import (
        GetMessageResult,
        GetMessageStatus,
        PutMessageResult,
        PutMessageStatus,
    )

_EXPORTS = {
    "GetMessageResult": "sluice.store.results",
    "GetMessageStatus": "sluice.store.results",
    "MessageStore": "sluice.store.message_store",
    "Put": "sluice.store.put_path",
    "PutDone": "sluice.store.put_path",
    "PutMessageResult": "sluice.store.results",
    "PutMessageStatus": "sluice.store.results",
    "RawBatch": "sluice.store.commit_log",
}
__all__ = [
    "GetMessageResult", "GetMessageStatus", "MessageStore", "Put", "PutDone", "PutMessageResult",
    "PutMessageStatus", "RawBatch",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
