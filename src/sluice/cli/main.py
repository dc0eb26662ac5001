"""``sluice``: one command for running and operating Sluice. Errors are one readable line."""

from __future__ import annotations

import argparse
import sys

from sluice import __version__
from sluice.cli.admin_commands import add_admin_commands
from sluice.cli.servers import add_server_commands


def _cmd_bench_store(args: argparse.Namespace) -> int:
    from sluice.bench.store_bench import CASES, BenchOptions, run

    cases = tuple(args.case) if args.case else CASES
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"sluice: unknown bench case {unknown[0]!r} (choose from {', '.join(CASES)})")
    run(BenchOptions(count=args.count, read_count=args.read_count, size=args.size, batch=args.batch,
                     writers=args.writers, directory=args.dir, cases=cases, index=not args.no_index))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluice", description="Sluice: a RocketMQ-compatible message queue.")
    p.add_argument("--version", action="version", version=f"sluice {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    add_server_commands(sub)
    add_admin_commands(sub)
    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_command", required=True)
    st = bench.add_parser("store", help="benchmark the message store on its own (one JSON line per case)")
    st.add_argument("--case", action="append", help="run only this case (repeatable)")
    st.add_argument("--count", type=int, default=200_000, help="messages per append case")
    st.add_argument("--read-count", type=int, default=1_000_000, help="messages in the queue read back")
    st.add_argument("--size", type=int, default=128, help="body size in bytes")
    st.add_argument("--batch", type=int, default=32, help="messages per batch in append_batch_async")
    st.add_argument("--writers", type=int, default=32, help="concurrent writers in append_sync_concurrent")
    st.add_argument("--dir", help="where to put the temporary stores (default: the system temp dir)")
    st.add_argument("--no-index", action="store_true", help="messages without UNIQ_KEY (no index work)")
    st.set_defaults(func=_cmd_bench_store)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("sluice: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except Exception as exc:  # one readable line, not a traceback
        print(f"sluice: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
