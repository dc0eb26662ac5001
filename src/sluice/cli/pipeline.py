"""``sluice pipeline demo``: run the example Spark pipeline (``examples/revenue_pipeline.py``) against a
running cluster (``sluice dev``). Needs the ``sluice-mq[spark]`` extra and a source checkout (examples/)."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import sluice

EXAMPLES = {"demo": "revenue_pipeline.py"}


def find_example(filename: str) -> Path:
    """``examples/<filename>`` of the current directory or of the checkout this package runs from."""
    checkout = Path(sluice.__file__).resolve().parents[2]
    candidates = [Path.cwd() / "examples" / filename, checkout / "examples" / filename]
    for path in candidates:
        if path.is_file():
            return path
    where = ", ".join(str(c.parent) for c in candidates)
    raise FileNotFoundError(f"cannot find examples/{filename} (looked in {where}); run from a Sluice source checkout")


def load_example(filename: str) -> ModuleType:
    path = find_example(filename)
    spec = importlib.util.spec_from_file_location(f"sluice_example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cmd_pipeline(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise SystemExit("sluice: the pipeline needs pyspark: pip install 'sluice-mq[spark]'") from None
    return int(load_example(EXAMPLES[args.pipeline_command]).main(list(args.args)))


def add_pipeline_commands(sub: Any) -> None:
    pipeline = sub.add_parser("pipeline", help="example Spark pipelines over Sluice")
    names = pipeline.add_subparsers(dest="pipeline_command", required=True)
    # No options of its own ("+" is never used): every argument, --help included, goes to the demo.
    demo = names.add_parser("demo", add_help=False, prefix_chars="+",
                            help="order events → Spark → revenue per region per minute (parquet and topic "
                                 "'revenue'); --help for its options")
    demo.add_argument("args", nargs=argparse.REMAINDER, help="options of the demo (see --help)")
    demo.set_defaults(func=cmd_pipeline)
