"""The Apache RocketMQ Java client, admin tools and reference servers: built once per machine, run as processes.

``tests/interop/java/`` is a small Maven project (``pom.xml``: ``rocketmq-client``, ``rocketmq-tools``,
``rocketmq-namesrv``, ``rocketmq-broker`` and ``rocketmq-example`` of one 5.x release) whose programs
(``sluice.interop.Main``) the tests run as child processes. ``ensure_java_build()`` compiles it into
``$SLUICE_JAVA_CACHE`` (default ``$XDG_CACHE_HOME/sluice-interop/java-<hash of the project>``, else ``~/.cache``)
and keeps the classpath; Maven keeps the artifacts in ``~/.m2``. A lock makes parallel runs build it once; a
change to the project's files gives a new directory.

Where ``java`` or ``mvn`` is missing the Java tests skip with that reason, unless ``$SLUICE_REQUIRE_JAVA`` is
set (CI sets it): then they fail.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JAVA_PROJECT = Path(__file__).parent / "java"
ROCKETMQ_VERSION = re.search(r"<rocketmq.version>([^<]+)<", (JAVA_PROJECT / "pom.xml").read_text()).group(1)
# Client programs: C1 only (they are short-lived), a small heap, a rebalance every 2 s instead of 20 s.
CLIENT_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-Xss512k", "-Xmx256m", "-XX:+UseSerialGC",
                      "-Drocketmq.client.rebalance.waitInterval=2000")


def java_tools_missing() -> str | None:
    """Why the Java tests cannot run here, or None: they need a Java 17+ JDK (java, javac) and Maven."""
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    if missing:
        return (f"{', '.join(missing)} not found on PATH (the Java interop and reference tests need a Java 17+ "
                "JDK and Maven)")
    version = java_major_version()
    if version is not None and version < 17:
        return f"java is version {version}; the Java interop and reference tests need Java 17+"
    return None


def java_major_version() -> int | None:
    """The major version ``java -version`` reports (``17`` of ``17.0.15``, ``8`` of ``1.8.0``), None if unclear."""
    try:
        r = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', r.stderr + r.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def java_required() -> bool:
    return bool(os.environ.get("SLUICE_REQUIRE_JAVA"))


@dataclass(frozen=True)
class JavaBuild:
    """The compiled programs and their dependencies, ready for ``java -cp``."""

    directory: Path
    classpath: str

    def argv(self, main_class: str, *args: str, jvm: tuple[str, ...] = CLIENT_JVM_OPTIONS,
             home: Path | None = None) -> list[str]:
        props = [f"-Duser.home={home}", f"-Drocketmq.client.logRoot={home / 'logs'}"] if home else []
        return ["java", *jvm, *props, "-cp", self.classpath, main_class, *args]


# AppCDS (JEP 350): the first run of each program archives the classes it loaded (``-XX:ArchiveClassesAtExit``) and
# every later run maps that archive instead of loading and verifying them again: about a second of CPU less per JVM
# start, and the suite starts some hundreds of them on two cores. The JVM's own log goes to stderr (a stale archive
# is then a warning there, and the run goes on without it), so that a program's stdout holds its output only.
QUIET_JVM_LOG = ("-Xlog:disable", "-Xlog:all=warning:stderr")


class ClassArchive:
    """The class archive of one program of one build: ``options()`` to start a JVM with (mapping the archive, or,
    while there is none, dumping one), ``finished(ok)`` when that JVM has ended."""

    def __init__(self, build: JavaBuild, program: str) -> None:
        self.final = build.directory / "cds" / f"{program}.jsa"
        self.dumping: Path | None = None

    def options(self) -> tuple[str, ...]:
        if os.environ.get("SLUICE_JAVA_NO_CDS"):
            return QUIET_JVM_LOG
        if self.final.exists():
            return (*QUIET_JVM_LOG, f"-XX:SharedArchiveFile={self.final}")
        self.final.parent.mkdir(exist_ok=True)
        self.dumping = self.final.with_name(f"{self.final.name}.{os.getpid()}-{next(_DUMPS)}.tmp")
        return (*QUIET_JVM_LOG, f"-XX:ArchiveClassesAtExit={self.dumping}")

    def finished(self, ok: bool) -> None:
        """A dump is put in place once its JVM ended well (several first runs at once: the last one wins)."""
        tmp, self.dumping = self.dumping, None
        if tmp is None:
            return
        try:
            if ok and tmp.exists() and tmp.stat().st_size > 0:
                os.replace(tmp, self.final)
            else:
                tmp.unlink(missing_ok=True)
        except OSError:
            pass


_DUMPS = itertools.count()


def _project_hash(project: Path = JAVA_PROJECT) -> str:
    h = hashlib.sha256(ROCKETMQ_VERSION.encode())
    for path in sorted(p for p in project.rglob("*") if p.is_file() and "target" not in p.parts):
        h.update(str(path.relative_to(project)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_dir(project: Path = JAVA_PROJECT) -> Path:
    override = os.environ.get("SLUICE_JAVA_CACHE")
    if override:
        return Path(override) if project == JAVA_PROJECT else Path(override) / project.name
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice-interop"
    return root / f"{'java' if project == JAVA_PROJECT else project.name}-{_project_hash(project)}"


def ensure_java_build(directory: Path | None = None, timeout: float = 900, project: Path = JAVA_PROJECT,
                      jar: str = "sluice-interop.jar") -> JavaBuild:
    """Build the project unless a finished build is there; RuntimeError with Maven's output when it fails."""
    directory = directory or cache_dir(project)
    directory.parent.mkdir(parents=True, exist_ok=True)
    build = directory / "build"
    ready = directory / "classpath"
    with open(directory.parent / f".{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists() and not _classpath_complete(ready.read_text().strip()):
            ready.unlink()  # ~/.m2 was cleaned since: build again
        if not ready.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            argv = ["mvn", "-B", "-q", "-f", str(project / "pom.xml"), f"-Dsluice.build.dir={build}", "package"]
            try:
                r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise RuntimeError(f"building the Java programs ({' '.join(argv)}) failed: {exc}") from None
            if r.returncode != 0:
                raise RuntimeError(f"building the Java programs failed (mvn exit code {r.returncode}):\n"
                                   f"{r.stdout[-4000:]}\n{r.stderr[-2000:]}")
            deps = (build / "classpath.txt").read_text().strip()
            tmp = ready.with_suffix(".tmp")
            tmp.write_text(f"{build / jar}:{deps}\n")
            tmp.rename(ready)
            _prune_old_builds(directory)
        os.utime(ready)  # in use: not to be pruned
        return JavaBuild(directory, ready.read_text().strip())


def java_build_for_tests(project: Path, jar: str, what: str) -> JavaBuild:
    """``ensure_java_build`` for a test fixture: a skip where Java or Maven is missing (a failure when
    $SLUICE_REQUIRE_JAVA is set), a failure naming ``what`` when the build fails."""
    import pytest

    reason = java_tools_missing()
    if reason is not None:
        if java_required():
            pytest.fail(f"{reason}; $SLUICE_REQUIRE_JAVA is set, so the Java tests may not skip", pytrace=False)
        pytest.skip(reason)
    try:
        return ensure_java_build(project=project, jar=jar)
    except RuntimeError as exc:
        problem = str(exc)
    pytest.fail(f"cannot build {what}: {problem}", pytrace=False)


def _classpath_complete(classpath: str) -> bool:
    return all(os.path.exists(p) for p in classpath.split(":") if p)


# Builds of other versions of the project (other checkouts, earlier commits) untouched this long are removed.
PRUNE_AFTER_DAYS = 14


def _prune_old_builds(current: Path) -> None:
    if os.environ.get("SLUICE_JAVA_CACHE"):
        return
    cutoff = time.time() - PRUNE_AFTER_DAYS * 86400
    for old in current.parent.glob(current.name.rsplit("-", 1)[0] + "-*"):
        try:
            if old != current and old.is_dir() and (old / "classpath").stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue


# == client programs ================================================================================
class ClientProgram:
    """One client program writing JSON lines to ``out``; ``records()`` are the lines it wrote so far."""

    kind = "client"

    def __init__(self, name: str, proc: subprocess.Popen[bytes], out: Path, err: Path) -> None:
        self.name = name
        self.proc = proc
        self.out = out
        self.err = err

    def records(self, event: str | None = None) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        lines = self.out.read_bytes().split(b"\n")[:-1]  # a line is whole once its newline is there
        recs = [json.loads(line) for line in lines]
        return [r for r in recs if event is None or r.get("event") == event]

    def received(self) -> list[dict[str, Any]]:
        return self.records("received")

    def wait(self, timeout: float) -> list[dict[str, Any]]:
        """Wait for the program to end by itself; fail if it does not, or if it did not exit with 0."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.kind} program {self.name} did not end within {timeout} s"
                                 f"{self.diagnostics()}") from None
        self.check_exit()
        return self.records()

    def check_exit(self) -> None:
        rc = self.proc.returncode
        if rc is None or rc == 0:
            return
        how = f"died of {signal.Signals(-rc).name}" if rc < 0 else f"exited with {rc}"
        raise AssertionError(f"{self.kind} program {self.name} {how}{self.diagnostics()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def diagnostics(self) -> str:
        err = self.err.read_text(errors="replace")[-4000:] if self.err.exists() else ""
        return f"\n--- its last lines ---\n{self.records()[-5:]}\n--- stderr ---\n{err}"


class JavaProcess(ClientProgram):
    """One ``sluice.interop.Main`` program."""

    kind = "Java"

    def __init__(self, name: str, proc: subprocess.Popen[bytes], out: Path, err: Path, home: Path,
                 archive: ClassArchive | None = None) -> None:
        super().__init__(name, proc, out, err)
        self.home = home
        self.archive = archive

    def check_exit(self) -> None:
        if self.archive is not None and self.proc.returncode is not None:
            self.archive.finished(self.proc.returncode in (0, 1))
        super().check_exit()

    def kill(self) -> None:
        super().kill()
        if self.archive is not None:
            self.archive.finished(False)

    def diagnostics(self) -> str:
        err = self.err.read_text(errors="replace")[-4000:] if self.err.exists() else ""
        logs = sorted((self.home / "logs").rglob("*.log"))
        tail = "".join(f"--- {p.name} ---\n{p.read_text(errors='replace')[-3000:]}" for p in logs[:2])
        return f"\n--- stderr ---\n{err}\n{tail}"


class JavaClients:
    """Starts programs: ``start("push-consume", topic="t", expect=10, orderly=True)`` passes
    ``--topic t --expect 10 --orderly`` (plus ``--out``); every process is ended when the test ends."""

    def __init__(self, build: JavaBuild, root: Path) -> None:
        self.build = build
        self.root = root
        self.started: list[JavaProcess] = []
        self._naming = threading.Lock()  # (tests may start programs from several threads)
        self._count = 0

    def start(self, program: str, **options: Any) -> JavaProcess:
        with self._naming:
            name = f"{program}-{self._count}"
            self._count += 1
            home = self.root / name
            home.mkdir(parents=True)
        out, err = home / "out.jsonl", home / "stderr.txt"
        args = [program, "--out", str(out)]
        for key, value in options.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                args += [flag, "true"]
            elif value not in (None, False):
                args += [flag, str(value)]
        archive = ClassArchive(self.build, program)
        with open(err, "wb") as err_file:
            proc = subprocess.Popen(self.build.argv("sluice.interop.Main", *args, home=home,
                                                    jvm=CLIENT_JVM_OPTIONS + archive.options()),
                                    stdin=subprocess.DEVNULL, stdout=err_file, stderr=subprocess.STDOUT,
                                    env=_env(home), cwd=home)
        client = JavaProcess(name, proc, out, err, home, archive)
        self.started.append(client)
        return client

    def run(self, program: str, timeout: float = 90, **options: Any) -> list[dict[str, Any]]:
        """Start a program and wait for it to end; its records."""
        return self.start(program, **options).wait(timeout)

    def close(self) -> None:
        for c in self.started:
            c.kill()


def _env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
            **({"JAVA_HOME": os.environ["JAVA_HOME"]} if "JAVA_HOME" in os.environ else {})}


class AdminError(Exception):
    """A ``DefaultMQAdminExt`` call failed: the exception's class, response code (-1: none) and message."""

    def __init__(self, error: str, code: int, message: str, detail: str) -> None:
        super().__init__(f"{error} (code {code}): {message}")
        self.error = error
        self.code = code
        self.message = message
        self.detail = detail


class JavaAdmin:
    """``DefaultMQAdminExt`` in a child process: ``call("topicRoute", topic="t")`` → the result as JSON."""

    def __init__(self, build: JavaBuild, namesrv: str, home: Path,
                 credentials: tuple[str, str] | None = None) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self._err = open(home / "stderr.txt", "wb")
        self._lock = threading.Lock()
        signed = ("--access-key", credentials[0], "--secret-key", credentials[1]) if credentials else ()
        self.archive = ClassArchive(build, "admin")
        self.proc = subprocess.Popen(build.argv("sluice.interop.Main", "admin", "--namesrv", namesrv, *signed,
                                                home=home, jvm=CLIENT_JVM_OPTIONS + self.archive.options()),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     env=_env(home), cwd=home)
        first = self._read(120)
        if first.get("event") != "started":
            raise AssertionError(f"the Java admin did not start: {first}")

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        result: list[bytes] = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if not result or not result[0]:
            self.close()
            err = (self.home / "stderr.txt").read_text(errors="replace")[-3000:]
            raise AssertionError(f"the Java admin gave no answer within {timeout} s\n{err}")
        return json.loads(result[0])

    def call(self, op: str, timeout: float = 60, **args: Any) -> Any:
        with self._lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
            self.proc.stdin.flush()
            answer = self._read(timeout)
        if not answer["ok"]:
            raise AdminError(answer["error"], answer["code"], answer["message"], answer["detail"])
        return answer.get("result")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        self.archive.finished(self.proc.returncode in (0, 1))
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()
