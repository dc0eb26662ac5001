"""Run the fuzz targets with atheris (libFuzzer, coverage-guided), one after the other or ``--jobs`` at a time.

    python fuzz/run.py                      # every target, 1,000,000 inputs each (``make fuzz``)
    python fuzz/run.py --seconds 5          # every target for 5 s
    python fuzz/run.py --seconds 3 --jobs 2 # two targets at a time (``make fuzz-ci``)
    python fuzz/run.py --runs 50000 frames batch

Each target runs in its own process, starting from its committed seeds (``fuzz/corpus/<target>/``), the
crashes found before (``fuzz/crashes/<target>/``, which must not crash again) and a working corpus that
grows between runs (``$SLUICE_FUZZ_WORK``, default ``~/.cache/sluice-fuzz``). An input that raises, hangs
or exhausts memory is copied into ``fuzz/crashes/<target>/`` and the run exits non-zero; commit the file
with the fix: ``tests/unit/test_fuzz_regressions.py`` replays it in the normal suite.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz.targets import CORPUS_DIR, CRASHES_DIR, DICTS, DICTS_DIR, TARGETS, Target, load  # imports no Sluice module

DEFAULT_RUNS = 1_000_000
RSS_LIMIT_MB = 2048
_FINDINGS = ("crash-", "timeout-", "oom-", "leak-")
_STAT = re.compile(rb"^stat::(\w+):\s*(\d+)", re.M)


def work_dir(target: str) -> Path:
    base = os.environ.get("SLUICE_FUZZ_WORK") or os.path.join(os.path.expanduser("~"), ".cache", "sluice-fuzz")
    path = Path(base) / target
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_target(target: Target, runs: int | None, seconds: int | None) -> bool:
    """Fuzz one target for ``runs`` inputs or ``seconds``, in processes of at most ``target.chunk`` inputs; True
    when it finished its budget without a finding."""
    if seconds is not None:
        return run_chunk(target, [f"-max_total_time={seconds}"])
    assert runs is not None
    if runs <= 0 or not target.chunk:  # (libFuzzer's own meaning for -runs=-1: no limit)
        return run_chunk(target, [f"-runs={runs}"])
    step = target.chunk
    for done in range(0, runs, step):
        if not run_chunk(target, [f"-runs={min(step, runs - done)}"]):
            return False
    return True


def run_chunk(target: Target, budget: list[str]) -> bool:
    """Fuzz one target in a child process; True when it finished its budget without a finding."""
    crashes = CRASHES_DIR / target.name
    corpora = [work_dir(target.name), CORPUS_DIR / target.name]
    if crashes.is_dir() and any(crashes.iterdir()):
        corpora.append(crashes)
    with tempfile.TemporaryDirectory(prefix=f"sluice-fuzz-{target.name}-") as artifacts:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", target.name, *map(str, corpora),
               *budget, f"-max_len={target.max_len}", f"-timeout={target.timeout}", f"-rss_limit_mb={RSS_LIMIT_MB}",
               f"-artifact_prefix={artifacts}/", "-print_final_stats=1", "-print_pcs=0"]
        if target.name in DICTS:
            cmd.append(f"-dict={DICTS_DIR / DICTS[target.name]}")
        log_path = Path(artifacts) / "fuzz.log"
        start = time.monotonic()
        with open(log_path, "wb") as log_file:
            code = subprocess.call(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        elapsed = time.monotonic() - start
        output = log_path.read_bytes()
        stats = {k.decode(): int(v) for k, v in _STAT.findall(output)}
        found = sorted(p for p in Path(artifacts).iterdir() if p.name.startswith(_FINDINGS))
        runs = stats.get("number_of_executed_units", 0)
        print(f"{target.name:14} {runs:>10,} inputs  {stats.get('average_exec_per_sec', 0):>6,} exec/s  "
              f"{elapsed:7.1f} s  corpus {len(list(corpora[0].iterdir())):>5}  "
              f"{'OK' if code == 0 and not found else f'FAILED (exit {code})'}", flush=True)
        if code == 0 and not found:
            return True
        tail = output.decode(errors="replace").splitlines()[-60:]
        print("\n".join(f"    {line}" for line in tail), file=sys.stderr)
        crashes.mkdir(parents=True, exist_ok=True)
        for p in found:
            shutil.copy(p, crashes / p.name)
            print(f"    finding saved as {crashes / p.name}", file=sys.stderr)
        return False


def worker(name: str, libfuzzer_args: list[str]) -> None:
    """This process is one libFuzzer run over target ``name``; Sluice's modules are instrumented as imported."""
    import atheris

    logging.disable(logging.CRITICAL)  # recovery warns about every damaged log it is given
    atheris.enabled_hooks.add("str")
    with atheris.instrument_imports(include=["sluice"]):
        check = load(name)
    atheris.Setup([sys.argv[0], *libfuzzer_args], check)
    atheris.Fuzz()


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", choices=[[], *TARGETS], metavar="target",
                        help=f"targets to run (default: all of {', '.join(TARGETS)})")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="inputs per target (default 1,000,000)")
    budget.add_argument("--seconds", type=int, help="time per target instead of a number of inputs")
    parser.add_argument("--jobs", type=int, default=1, help="targets fuzzed at once (default 1; each takes a core)")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least 1")
    names = args.targets or list(TARGETS)

    def ok(name: str) -> bool:
        return run_target(TARGETS[name], None if args.seconds else args.runs, args.seconds or None)

    with ThreadPoolExecutor(args.jobs) as pool:  # (each target runs in a process of its own)
        failed = [name for name, passed in zip(names, pool.map(ok, names), strict=True) if not passed]
    if failed:
        print(f"fuzzing found problems in: {', '.join(failed)} (inputs saved under {CRASHES_DIR})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
