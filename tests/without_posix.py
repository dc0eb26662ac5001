"""Run Python code in a child interpreter that lacks what only Linux (or only POSIX) has, as on Windows: the
modules ``fcntl``, ``resource``, ``termios``, ``pwd``, ``grp`` and uvloop cannot be imported, and ``os`` has no
``pwrite``, ``pread``, ``posix_fallocate``, ``fdatasync``, ``O_DSYNC``, ``fork`` or ``register_at_fork``.

The interpreter stays a Linux one (asyncio's Windows loop cannot be had here), so this shows what the code
imports and calls, not how Windows behaves: enough to keep a POSIX-only call from creeping into the client.
"""

from __future__ import annotations

import subprocess
import sys

BLOCKED_MODULES = ("fcntl", "resource", "termios", "pwd", "grp", "uvloop")
REMOVED_OS_NAMES = ("pwrite", "pread", "posix_fallocate", "posix_fadvise", "fdatasync", "O_DSYNC", "O_DIRECT", "fork",
                    "register_at_fork")

PRELUDE = f"""
import importlib.abc, os, sys

class _NotHere(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED_MODULES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not on this platform)", name=name)
        return None

sys.meta_path.insert(0, _NotHere())
for _name in {BLOCKED_MODULES!r}:
    sys.modules.pop(_name, None)
for _name in {REMOVED_OS_NAMES!r}:
    if hasattr(os, _name):
        delattr(os, _name)
"""


def run_without_posix(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (``sys.argv[1:]`` = ``args``) after ``PRELUDE``; raises with its output if it fails."""
    res = subprocess.run([sys.executable, "-c", PRELUDE + code, *args], capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
    return res
