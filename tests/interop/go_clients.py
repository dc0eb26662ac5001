"""The Go remoting client's programs (tests/interop/go: rocketmq-client-go v2.1.2), built once per machine into
``$XDG_CACHE_HOME/sluice-interop/go-<hash of the project>`` (else ``~/.cache``), and run as child processes that
write one JSON object per line. The Go tests skip when no ``go`` is installed, unless ``$SLUICE_REQUIRE_GO`` is set
(CI), which fails them instead."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.interop.java_clients import ClientProgram

GO_PROJECT = Path(__file__).resolve().parent / "go"
PROGRAMS = ("requestreply",)


def go_missing() -> str | None:
    return None if shutil.which("go") else "no go toolchain on PATH (the Go interop tests need one)"


def go_required() -> bool:
    return bool(os.environ.get("SLUICE_REQUIRE_GO"))


def _project_hash() -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in GO_PROJECT.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(GO_PROJECT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def ensure_go_build(timeout: float = 600) -> Path:
    """The directory of the built programs (built unless a finished build is there); RuntimeError with the go
    command's output when the build fails."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice-interop"
    directory = root / f"go-{_project_hash()}"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all((directory / p).exists() for p in PROGRAMS):
            return directory
        directory.mkdir(exist_ok=True)
        env = {**os.environ, "GOFLAGS": "-mod=readonly"}
        for program in PROGRAMS:
            argv = ["go", "build", "-o", str(directory / f"{program}.tmp"), f"./{program}"]
            try:
                r = subprocess.run(argv, cwd=GO_PROJECT, capture_output=True, text=True, timeout=timeout, env=env,
                                   stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise RuntimeError(f"building the Go programs ({' '.join(argv)}) failed: {exc}") from None
            if r.returncode != 0:
                raise RuntimeError(f"building the Go programs failed (go exit code {r.returncode}):\n"
                                   f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
            (directory / f"{program}.tmp").rename(directory / program)
        return directory


class GoProcess(ClientProgram):
    """One running Go program."""

    kind = "Go"


class GoClients:
    """Starts programs: ``start("requestreply", role="requester", topic="t")`` passes ``-role requester -topic t``;
    every process still running is killed when the test ends (``close``)."""

    def __init__(self, build: Path, root: Path) -> None:
        self.build, self.root = build, root
        self.started: list[GoProcess] = []
        self._naming = threading.Lock()  # (a differential test starts programs from two threads)
        self._count = 0

    def start(self, program: str, **options: Any) -> GoProcess:
        with self._naming:
            name = f"{program}-{self._count}"
            self._count += 1
            home = self.root / name
            home.mkdir(parents=True)
        out, err = home / "out.jsonl", home / "stderr.txt"
        argv = [str(self.build / program)]
        for key, value in options.items():
            argv += [f"-{key}", str(value)]
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(argv, stdout=o, stderr=e, stdin=subprocess.DEVNULL, cwd=home,
                                    env={**os.environ, "HOME": str(home)})
        p = GoProcess(name, proc, out, err)
        with self._naming:
            self.started.append(p)
        return p

    def close(self) -> None:
        for p in self.started:
            p.kill()
