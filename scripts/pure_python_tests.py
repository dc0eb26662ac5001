"""Which unit tests run a pure-Python twin of a compiled codec: the ones ``make test`` runs again with
``SLUICE_NO_EXTENSIONS=1`` (the fallback where no C compiler built ``sluice._speedups``).

    .venv/bin/python scripts/pure_python_tests.py      # rewrites tests/unit/pure_python_fallback.txt

runs ``tests/unit`` once with the extensions off and a tracer on, and writes the id of every test that called a
pure-Python twin (or took the pure-Python branch of a function that has no twin of its own), plus
``tests/unit/test_speedups.py`` whole (its checks of the switch itself). Run it again after adding a test of the
codecs, or a codec to ``sluice._speedups`` (then add its twin to ``_targets`` below).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "tests" / "unit" / "pure_python_fallback.txt"
ALWAYS = ["tests/unit/test_speedups.py"]

_current: list[str | None] = [None]
_hits: set[str] = set()
_calls: dict[CodeType, str] = {}
_lines: dict[CodeType, int] = {}


def _targets() -> None:
    """What runs only where the compiled codecs are off: each twin, and the fallback line of a function without one."""
    from sluice.client import message_id
    from sluice.common import batch_codec, message_codec
    from sluice.store import batch_encoder, index_file, mapped_file

    for fn in (message_codec.py_decode_records, message_codec.py_check_record, batch_codec.py_encode_batch_record,
               batch_codec.py_scan_batch_columns, message_id.MessageIdGenerator._py_create,
               mapped_file.py_store_spans, batch_encoder.bulk_stored_records,
               batch_encoder.BatchBody.bulk_property_spans, batch_encoder.BatchBody.bulk_props_have_nul,
               index_file.IndexFile.bulk_put, batch_encoder.bulk_prefixed_hashes):
        _calls[fn.__code__] = fn.__qualname__
    for fn, text in ((message_id.MessageIdGenerator.create_many, "now_ms = time.time_ns()"),):
        lines, start = inspect.getsourcelines(fn)
        found = [start + i for i, line in enumerate(lines) if text in line]
        if len(found) != 1:
            raise RuntimeError(f"the fallback line {text!r} of {fn.__qualname__} is gone: update this script")
        _lines[fn.__code__] = found[0]


def _trace(frame: FrameType, event: str, arg: Any) -> Any:
    code = frame.f_code
    if code in _calls:
        if _current[0] is not None:
            _hits.add(_current[0])
        return None
    lineno = _lines.get(code)
    if lineno is None:
        return None

    def local(f: FrameType, ev: str, a: Any) -> Any:
        if ev == "line" and f.f_lineno == lineno and _current[0] is not None:
            _hits.add(_current[0])
        return local

    return local


# == pytest plugin (-p pure_python_tests) ==================================================================
def pytest_configure(config: Any) -> None:
    _targets()
    sys.settrace(_trace)
    threading.settrace(_trace)


def pytest_runtest_setup(item: Any) -> None:
    _current[0] = item.nodeid
    sys.settrace(_trace)


def pytest_unconfigure(config: Any) -> None:
    sys.settrace(None)
    out = os.environ.get("PURE_PYTHON_TESTS_OUT")
    if out:
        Path(out).write_text(json.dumps(sorted(_hits)))


def main() -> int:
    out = ROOT / ".pure_python_tests.json"
    env = {**os.environ, "SLUICE_NO_EXTENSIONS": "1", "PURE_PYTHON_TESTS_OUT": str(out),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "scripts"), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pure_python_tests",
                        "tests/unit"], cwd=ROOT, env=env)
    if r.returncode != 0:
        print("the unit tests failed: the list is left as it was", file=sys.stderr)
        return 1
    hits = json.loads(out.read_text())
    out.unlink()
    ids = ALWAYS + sorted(h for h in hits if not any(h.startswith(f"{a}::") for a in ALWAYS))
    LIST.write_text("\n".join(ids) + "\n")
    print(f"{LIST.relative_to(ROOT)}: {len(ids)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
