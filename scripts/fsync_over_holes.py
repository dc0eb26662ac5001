"""Probe: what a group commit's fdatasync and an append through the mapping cost over holes and over zeros.

    python scripts/fsync_over_holes.py [DIR]      (DIR on the file system the store lives on; default: .)

For each way of preparing a file (sparse, fallocate()d, zeros written beforehand) it appends 4 KiB records
through a shared mapping, eight at a time, and fdatasyncs after each eight, as a sync-flush broker's group commit
does; it prints the fdatasync percentiles and the mean cost of one append. docs/benchmarks.md has its figures.
"""

from __future__ import annotations

import mmap
import os
import sys
import time

SIZE = 128 << 20
RECORD = b"x" * 4096
STEP = 4096 + 200  # records are not page-aligned in a commit log
GROUPS = 3000


def prepare(path: str, how: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, SIZE)
    if how == "fallocate":
        os.posix_fallocate(fd, 0, SIZE)
    elif how == "zeros":
        zeros = bytes(1 << 20)
        for pos in range(0, SIZE, len(zeros)):
            os.pwrite(fd, zeros, pos)
    os.fsync(fd)
    return fd


def run(directory: str, how: str) -> str:
    path = os.path.join(directory, f"fsync-probe-{how}")
    fd = prepare(path, how)
    mm = mmap.mmap(fd, SIZE)
    buf = memoryview(mm)
    syncs: list[float] = []
    append_s = 0.0
    pos = 0
    try:
        for _ in range(GROUPS):
            t = time.perf_counter()
            for _ in range(8):
                buf[pos : pos + len(RECORD)] = RECORD
                pos += STEP
            append_s += time.perf_counter() - t
            t = time.perf_counter()
            os.fdatasync(fd)
            syncs.append(time.perf_counter() - t)
    finally:
        buf.release()
        mm.close()
        os.close(fd)
        os.unlink(path)
    syncs.sort()

    def ms(q: float) -> float:
        return syncs[int(q * (len(syncs) - 1))] * 1e3

    return (f"{how:10} fdatasync p50 {ms(0.5):.3f} ms  p90 {ms(0.9):.3f}  p99 {ms(0.99):.3f}  "
            f"append {append_s / (GROUPS * 8) * 1e6:.2f} us")


def main() -> None:
    directory = sys.argv[1] if len(sys.argv) > 1 else "."
    for how in ("sparse", "fallocate", "zeros"):
        print(run(directory, how), flush=True)


if __name__ == "__main__":
    main()
