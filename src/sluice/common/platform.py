"""What differs between the operating systems Sluice runs on: the sync a durable write needs, and whether the
servers run here at all.

The client (producers, consumers, ``sluice.aio``, the Spark data source) is asyncio over sockets and runs on
Linux, macOS and Windows. The servers need POSIX files (the store's ``pwrite``/``pread``, ``flock``, ``O_DSYNC``,
a mapping kept over a file that is renamed and truncated): they run on Linux and macOS, and refuse Windows with
one line (``server_platform_error``).
"""

from __future__ import annotations

import errno
import os
import sys

if sys.platform == "darwin":
    import fcntl

    # The errors that say a file system has no F_FULLFSYNC (some network and FUSE ones): fsync is all there is.
    _NO_FULLFSYNC = (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL)

    def fsync(fd: int) -> None:
        """macOS's fsync hands the data to the drive, whose cache can still lose it at a power cut; F_FULLFSYNC
        has the drive write its cache out too (SQLite's ``fullfsync``, Go's ``File.Sync`` on Darwin)."""
        try:
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
        except OSError as exc:
            if exc.errno not in _NO_FULLFSYNC:
                raise
            os.fsync(fd)

    fdatasync = fsync  # macOS has no fdatasync: F_FULLFSYNC is the one call that reaches stable storage
else:
    # ``os.fsync`` / ``os.fdatasync`` looked up at each call, so that a test can stand in for the disk there.
    def fsync(fd: int) -> None:
        """Make ``fd``'s data and metadata durable."""
        os.fsync(fd)

    def fdatasync(fd: int) -> None:
        """Make ``fd``'s data durable (and the metadata a read needs: its size, not its mtime)."""
        os.fdatasync(fd)

# Linux has one page cache: a write through a shared mapping is in the file's pages at once, and fdatasync writes
# it back. POSIX leaves such writes to msync, so elsewhere a mapped file is msync'ed before its data sync.
MAPPED_WRITES_NEED_MSYNC = not sys.platform.startswith("linux")


def server_platform_error() -> str | None:
    """Why Sluice's servers cannot run on this system, in one line; None where they can."""
    if sys.platform == "win32":
        return ("the servers run on Linux and macOS, not on Windows (the broker's store needs POSIX file calls: "
                "pwrite, flock, O_DSYNC); run them under WSL or in a container: the client works on Windows")
    return None


def open_file_limit() -> int | None:
    """The process's soft limit on open files (``ulimit -n``); None where there is none (Windows, unlimited)."""
    try:
        import resource
    except ImportError:
        return None
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)
