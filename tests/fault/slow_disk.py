"""A slow or failing disk for the fault tests: ``tests/fault/slowfs.c`` (FUSE, libfuse3), built once per run
with gcc and mounted over a directory of the test.

``SlowDisk(root)`` mounts ``root/mnt`` over ``root/backing``; ``slow(write_ms, fsync_ms)``, ``fail()`` and
``fast()`` change how its writes and fsyncs behave, at once; ``close()`` unmounts it (the daemon then exits) and
ends the daemon by PID if it has not. Needs root, /dev/fuse, gcc, pkg-config and libfuse3
(``scripts/ensure_fuse.sh`` installs Debian's fuse3 and libfuse3-dev); ``require_fuse()`` skips (fails with
``$SLUICE_REQUIRE_FAULT``) where something is missing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.fault.netns import skip_or_fail

SOURCE = Path(__file__).with_name("slowfs.c")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sluice-fault"


def require_fuse() -> Path:
    """The slowfs binary, built from ``slowfs.c`` when it changed."""
    if os.geteuid() != 0:
        skip_or_fail("mounting a FUSE file system here needs root")
    if not os.path.exists("/dev/fuse"):
        skip_or_fail("there is no /dev/fuse")
    for tool in ("gcc", "pkg-config", "fusermount3"):
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} is not installed (scripts/ensure_fuse.sh)")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True)
    if flags.returncode != 0:
        skip_or_fail("libfuse3 is not installed (scripts/ensure_fuse.sh: Debian's libfuse3-dev)")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    binary = CACHE / f"slowfs-{digest}"
    if not binary.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(f".{os.getpid()}")
        r = subprocess.run(["gcc", "-O2", "-Wall", "-o", str(tmp), str(SOURCE), *flags.stdout.split()],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"slowfs.c does not build:\n{r.stderr}")
        os.replace(tmp, binary)
    return binary


class SlowDisk:
    def __init__(self, root: Path, binary: Path) -> None:
        self.backing = root / "backing"
        self.mnt = root / "mnt"
        self.control = root / "slowfs.control"
        self.backing.mkdir(parents=True)
        self.mnt.mkdir(parents=True)
        self._set("0 0 0")
        self.log = root / "slowfs.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([str(binary), str(self.backing), str(self.mnt), str(self.control),
                                          "-o", "fsname=slowfs,max_threads=64"],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"slowfs did not mount: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.02)

    def _set(self, text: str) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.control)  # (a new file: the daemon sees its new modification time)

    def slow(self, write_ms: int, fsync_ms: int) -> None:
        """Every write and fsync from now on takes this long."""
        self._set(f"{write_ms} {fsync_ms} 0")

    def fail(self) -> None:
        """Every write and fsync from now on fails with EIO."""
        self._set("0 0 1")

    def fast(self) -> None:
        self._set("0 0 0")

    def close(self) -> None:
        self.fast()
        if os.path.ismount(self.mnt):
            subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True, timeout=60)
        if self.proc.poll() is None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
