"""The epoch file: at which log offset each master term (epoch) began (RocketMQ 5's EpochFileCache).

Two logs agree up to the end of the last epoch both have with the same start: from there on they may hold
different bytes (an old master kept writing what its slaves never got). A slave joining a master cuts its log
back to that point before it takes the master's bytes.
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

from sluice.common.files import fsync_dir
from sluice.common.platform import fsync


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def consistent_point(mine: list[EpochEntry], my_end: int, theirs: list[EpochEntry], their_end: int) -> int:
    """The offset up to which two logs hold the same bytes, given each one's epochs and end: the end of the
    last epoch both began at the same offset (the shorter log's end, if that epoch is either one's last); -1
    when they share no epoch (nothing can be trusted to agree)."""
    other = {e.epoch: (e.start_offset, end) for e, end in zip(theirs, _ends(theirs, their_end), strict=True)}
    for e, end in reversed(list(zip(mine, _ends(mine, my_end), strict=True))):
        found = other.get(e.epoch)
        if found is not None and found[0] == e.start_offset:
            return min(end, found[1])
    return -1


def _ends(entries: list[EpochEntry], log_end: int) -> list[int]:
    """Where each epoch ends: where the next began, the log's end for the last."""
    return [entries[i + 1].start_offset if i + 1 < len(entries) else log_end for i in range(len(entries))]


class EpochFile:
    """``<store>/epochFileCheckpoint``: the epochs, oldest first, written whole and fsynced at every change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[EpochEntry] = []

    def load(self) -> EpochFile:
        try:
            with open(self.path, "rb") as f:
                raw = json.loads(f.read() or b"[]")
        except FileNotFoundError:
            return self
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self.path}: not an epoch file ({exc})") from exc
        entries = [EpochEntry(int(e), int(s)) for e, s in raw]
        for a, b in zip(entries, entries[1:], strict=False):
            if not (a.epoch < b.epoch and a.start_offset <= b.start_offset):
                raise ValueError(f"{self.path}: epochs out of order ({a} then {b})")
        self.entries = entries
        return self

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def append(self, epoch: int, start_offset: int) -> None:
        """A new term from ``start_offset``; a later start than the last (or a new epoch at the same start)."""
        if self.entries and epoch <= self.last_epoch:
            raise ValueError(f"epoch {epoch} is not after {self.last_epoch}")
        if self.entries and start_offset < self.entries[-1].start_offset:
            raise ValueError(f"epoch {epoch} starts at {start_offset}, before epoch {self.last_epoch}")
        self.entries.append(EpochEntry(epoch, start_offset))
        self.save()

    def replace(self, entries: list[EpochEntry]) -> None:
        if entries != self.entries:
            self.entries = list(entries)
            self.save()

    def truncate_to(self, offset: int) -> None:
        """Forget the epochs that began past ``offset`` (the log was cut there)."""
        self.replace([e for e in self.entries if e.start_offset <= offset])

    def save(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump([list(e) for e in self.entries], f)
            f.flush()
            fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(os.path.dirname(self.path))
