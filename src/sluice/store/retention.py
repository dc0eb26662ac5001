"""Retention and disk safety (RocketMQ CleanCommitLogService / CleanConsumeQueueService).

Expired commit-log segments (older than ``file_reserved_time`` hours) are deleted at the ``delete_when``
hour, or at any hour once disk usage passes ``disk_max_used_space_ratio``; past
``disk_space_clean_forcibly_ratio`` the oldest segments go even if not expired. Consume-queue and index
files whose messages are all gone follow, moving the queues' min offsets. Past
``disk_space_warning_level_ratio`` the store refuses writes until space comes back.
"""

from __future__ import annotations

import logging
import shutil
import time
from typing import Protocol

from sluice.common.config import MessageStoreConfig
from sluice.store.commit_log import CommitLog
from sluice.store.consume_queue import ConsumeQueue
from sluice.store.consumer_offset_manager import ConsumerOffsetManager
from sluice.store.service_thread import ServiceThread

log = logging.getLogger(__name__)


class RetainedStore(Protocol):
    """What retention uses of the store: its log and queues, the consumers' offsets, and the disk's state."""

    @property
    def config(self) -> MessageStoreConfig: ...

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def consume_queues(self) -> dict[tuple[str, int], ConsumeQueue]: ...

    @property
    def consumer_offsets(self) -> ConsumerOffsetManager: ...

    def check_disk_space(self) -> float: ...

    def clean_logics(self, commit_log_min_offset: int) -> None: ...


def disk_usage_ratio(path: str) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


class CleanCommitLogService(ServiceThread):
    name = "clean-commit-log"

    def __init__(self, store: RetainedStore) -> None:
        super().__init__(store.config.clean_resource_interval / 1000)
        self.store = store

    def on_start(self) -> None:
        self.store.commit_log.refresh_earliest_store_time()

    def run_once(self) -> None:
        self.clean(time.time())
        # (here, not where it is asked for: reading the oldest record may fault a cold page in)
        self.store.commit_log.refresh_earliest_store_time()

    def is_time_to_delete(self, now: float) -> bool:
        hour = time.localtime(now).tm_hour
        hours = {int(h) for h in self.store.config.delete_when.split(";") if h.strip().isdigit()}
        return hour in hours

    def clean(self, now: float, manual: bool = False) -> int:
        """One round: returns how many commit-log segments were deleted."""
        cfg = self.store.config
        ratio = self.store.check_disk_space()
        space_full = ratio > cfg.disk_max_used_space_ratio / 100
        forcibly = ratio > cfg.disk_space_clean_forcibly_ratio
        if not (manual or space_full or self.is_time_to_delete(now)):
            return 0
        reserved_s = cfg.file_reserved_time * 3600
        queue = self.store.commit_log.queue
        deleted = 0
        early = False  # a segment went before its time, to free the disk
        for mf in list(queue.files[:-1]):
            if deleted >= cfg.delete_files_batch_max:
                break
            expired = mf.last_modified() + reserved_s <= now
            if not (expired or forcibly):
                break
            if deleted and self._stop.wait(cfg.delete_commit_log_files_interval / 1000):
                break  # (spreads the deletes' disk work; stopping ends the round)
            log.info("deleting commit log segment %s (%s)", mf.path, "expired" if expired else "disk full")
            queue.delete_first_files(1)
            deleted += 1
            early = early or not expired
            if forcibly and not expired:
                forcibly = disk_usage_ratio(queue.directory) > cfg.disk_space_clean_forcibly_ratio
        if deleted:
            before = self._queue_min_offsets()
            self.store.clean_logics(queue.min_offset)
            if early:
                self._report_unconsumed_loss(before, ratio)
            self.store.check_disk_space()
        return deleted

    def _queue_min_offsets(self) -> dict[tuple[str, int], int]:
        return {key: cq.min_offset for key, cq in list(self.store.consume_queues.items())}

    def _report_unconsumed_loss(self, before: dict[tuple[str, int], int], ratio: float) -> None:
        """One WARNING per topic that lost messages some consumer group had not consumed yet (or, when no group
        reads the topic, any message): deleted to free the disk, before their retention time."""
        offsets = self.store.consumer_offsets
        lost: dict[str, int] = {}
        groups_of: dict[str, set[str]] = {}
        for (topic, qid), old_min in before.items():
            cq = self.store.consume_queues.get((topic, qid))
            if cq is None or cq.min_offset <= old_min:
                continue
            groups = groups_of.setdefault(topic, offsets.groups_of_topic(topic))
            committed = [offsets.query_offset(g, topic, qid) for g in groups]
            slowest = min(committed) if committed else old_min
            gone = cq.min_offset - max(old_min, slowest)
            if gone > 0:
                lost[topic] = lost.get(topic, 0) + gone
        for topic, n in sorted(lost.items()):
            readers = ", ".join(sorted(groups_of[topic])) or "no consumer group (none has read it)"
            log.warning("disk usage %.1f%% is above disk_space_clean_forcibly_ratio %.0f%%: deleted %d message(s) "
                        "of topic %s before their retention time, not consumed yet by %s", ratio * 100,
                        self.store.config.disk_space_clean_forcibly_ratio * 100, n, topic, readers)
