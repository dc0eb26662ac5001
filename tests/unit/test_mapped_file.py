"""MappedFile's readahead advice: off for the unwritten tail, back to normal for what was written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice.store import mapped_file as mapped_file_module
from sluice.store.mapped_file import MappedFile

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc/self/smaps")


def _random_read_ranges(path: str) -> list[tuple[int, int, bool]]:
    """(start, end, random-read advice) of each mapping of ``path`` in this process, by address."""
    out = []
    current: list | None = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's first line
                current = None
                if len(head) >= 6 and head[5] == path:
                    lo, hi = (int(x, 16) for x in head[0].split("-"))
                    current = [lo, hi, False]
                    out.append(current)
            elif current is not None and line.startswith("VmFlags:"):
                current[2] = " rr" in line
    return sorted((lo, hi, rr) for lo, hi, rr in out)


def test_unwritten_tail_has_readahead_off_and_written_steps_get_it_back(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch):
    step = 1 << 20
    monkeypatch.setattr(mapped_file_module, "ADVICE_STEP", step)
    path = str(tmp_path / f"{0:020d}")
    mf = MappedFile(path, 4 * step)
    try:
        fresh = _random_read_ranges(path)
        assert [rr for *_, rr in fresh] == [True] and fresh[0][1] - fresh[0][0] == 4 * step

        chunk = b"x" * 4096
        while mf.wrote_position < step + 4096:
            mf.append(chunk)
        split = _random_read_ranges(path)
        assert [(hi - lo, rr) for lo, hi, rr in split] == [(step, False), (3 * step, True)]

        while mf.wrote_position < 3 * step:
            mf.append(chunk)
        later = _random_read_ranges(path)
        assert [(hi - lo, rr) for lo, hi, rr in later] == [(3 * step, False), (step, True)]
        assert bytes(mf.buf[:4096]) == chunk and bytes(mf.buf[3 * step : 3 * step + 10]) == b"\0" * 10
    finally:
        mf.close()
