"""Every seed and every input the fuzzers ever found a bug with still decodes correctly (``fuzz/``).

The same property checks ``fuzz/run.py`` runs under atheris, here as plain Python: a fixed decoder stays
fixed without the fuzzer installed or run.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from fuzz.targets import CORPUS_DIR, CRASHES_DIR, TARGETS, load, saved_inputs

CASES = [(name, path) for name in TARGETS for path in saved_inputs(name)]


@pytest.mark.parametrize(("target", "path"), CASES, ids=[f"{t}/{p.parent.name}/{p.name}" for t, p in CASES])
def test_saved_input_keeps_its_property(target: str, path: Path, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.CRITICAL)  # recovery warns about every damaged log it is given
    started = time.monotonic()
    load(target)(path.read_bytes())
    took = time.monotonic() - started
    assert took < 4 * TARGETS[target].timeout, f"took {took:.1f} s: a hang the fuzzer saved (its limit is " \
                                               f"{TARGETS[target].timeout} s, on a busier machine here)"


def test_every_saved_input_belongs_to_a_target():
    """An input under a directory no target reads would never be replayed."""
    dirs = {p.name for base in (CORPUS_DIR, CRASHES_DIR) if base.is_dir() for p in base.iterdir() if p.is_dir()}
    assert dirs <= set(TARGETS), f"no target for fuzz/corpus or fuzz/crashes directories {sorted(dirs - set(TARGETS))}"


@pytest.mark.parametrize("target", list(TARGETS))
def test_every_target_has_seeds(target: str):
    assert any((CORPUS_DIR / target).iterdir()), f"fuzz/corpus/{target}/ is empty: run python fuzz/seeds.py"
