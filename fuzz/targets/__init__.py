"""The fuzz targets: one module per decoder family, each with ``check(data: bytes) -> None``.

``check`` returns when the decoder accepted the input correctly or refused it with its documented error;
it raises ``PropertyViolation`` for a wrong answer, and whatever undocumented exception the decoder let out
(IndexError, struct.error, RecursionError...) propagates: both are findings. Modules are imported on demand
(``load``), so that the fuzz runner can instrument Sluice's modules as they are first imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ._common import PropertyViolation

FUZZ_DIR = Path(__file__).resolve().parent.parent
CORPUS_DIR = FUZZ_DIR / "corpus"
DICTS_DIR = FUZZ_DIR / "dicts"
CRASHES_DIR = FUZZ_DIR / "crashes"


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    max_len: int  # longest input libFuzzer builds
    timeout: int  # seconds one input may take before it counts as a hang
    # Inputs per libFuzzer process (a longer budget runs in several, the corpus carried over): recovery starts a
    # store's threads per input, and each thread leaves ~2 KiB in the fuzzer process that Python never sees.
    chunk: int = 0


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("frames", 8192, 5),
    Target("records", 8192, 5),
    Target("batch", 8192, 5),
    Target("register_body", 8192, 5),
    Target("fastjson", 8192, 5),
    Target("properties", 2048, 5),
    Target("recovery", 3 * 4096, 20, chunk=200_000),
    Target("bodies", 8192, 5),
    Target("filter", 9000, 5),
)}

# libFuzzer dictionaries (fuzz/dicts/): tokens each target's format is made of.
DICTS: dict[str, str] = {"frames": "frames.dict", "records": "records.dict", "register_body": "register_body.dict",
                         "fastjson": "json.dict", "bodies": "bodies.dict", "filter": "filter.dict"}


def load(name: str) -> Callable[[bytes], None]:
    """The ``check`` function of target ``name`` (imports its module)."""
    if name not in TARGETS:
        raise KeyError(f"no fuzz target {name!r}; targets: {', '.join(TARGETS)}")
    return importlib.import_module(f"{__name__}.{name}").check


def saved_inputs(name: str) -> list[Path]:
    """The seed corpus and the crashes found so far of target ``name``: what the regression tests replay."""
    return sorted(p for d in (CORPUS_DIR / name, CRASHES_DIR / name) if d.is_dir()
                  for p in d.iterdir() if p.is_file() and not p.name.startswith("."))


__all__ = ["CORPUS_DIR", "CRASHES_DIR", "DICTS", "DICTS_DIR", "TARGETS", "PropertyViolation", "Target", "load",
           "saved_inputs"]
