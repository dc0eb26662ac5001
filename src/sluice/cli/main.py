"""``sluice``: one command for running and operating Sluice. Errors are one readable line (``--debug``
adds the traceback)."""

from __future__ import annotations

import argparse
import sys
import traceback

from sluice import __version__
from sluice.cli.admin_commands import ADMIN_COMMANDS, add_admin_commands
from sluice.cli.command import namesrv_of
from sluice.cli.dashboard_command import add_dashboard_command
from sluice.cli.pipeline import add_pipeline_commands
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


def _cmd_bench_filter(args: argparse.Namespace) -> int:
    from sluice.bench.filter_bench import CASES, FilterBenchOptions, run

    cases = tuple(args.case) if args.case else tuple(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"sluice: unknown bench case {unknown[0]!r} (choose from {', '.join(CASES)})")
    run(FilterBenchOptions(count=args.count, size=args.size, directory=args.dir, cases=cases))
    return 0


def _cmd_bench_client(args: argparse.Namespace) -> int:
    from sluice.bench.client_bench import BenchOptions, run_bench

    if args.count is not None and args.duration is not None:
        raise SystemExit("sluice: give --count or --duration, not both")
    opts = BenchOptions(namesrv=args.namesrv, topic=args.topic, group=args.group, size=args.size, count=args.count,
                        duration=args.duration, concurrency=args.concurrency, batch=args.batch, mode=args.mode,
                        rate=args.rate, listen=args.listen, json=args.json)
    if opts.count is None and opts.duration is None:
        opts.duration = 10.0
    run_bench(args.bench_command, opts, embedded=args.embedded, flush=args.flush, acl=args.acl)
    return 0


def _cmd_bench_targets(args: argparse.Namespace) -> int:
    from sluice.bench.targets import run_targets

    if args.runs < 1 or args.scale <= 0:
        raise SystemExit("sluice: --runs must be >= 1 and --scale > 0")
    run_targets(args.runs, args.scale, args.case)
    return 0


def _cmd_bench_spark(args: argparse.Namespace) -> int:
    try:
        from sluice.bench.spark_bench import SparkBenchOptions, run_spark_bench
    except ImportError as exc:
        raise SystemExit(f"sluice: the Spark benchmarks need pyspark: pip install 'sluice-mq[spark]' ({exc})") from None
    if args.broker_max_pull and not args.embedded:
        raise SystemExit("sluice: --broker-max-pull configures the --embedded broker only")
    opts = SparkBenchOptions(namesrv=args.namesrv, topic=args.topic, count=args.count, size=args.size,
                             queues=args.queues, runs=args.runs, json=args.json, warmup=args.warmup)
    run_spark_bench(args.bench_command, opts, embedded=args.embedded, broker_max_pull=args.broker_max_pull)
    return 0


def _add_spark_bench(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    helps = {"spark-read": "streaming read of a topic into Spark's noop sink (AvailableNow): rows/s",
             "spark-write": "write a DataFrame to a topic with the sluice Spark sink: rows/s"}
    for name, text in helps.items():
        b = bench.add_parser(name, help=text)
        b.add_argument("--namesrv", default="127.0.0.1:9876", help="name server address")
        b.add_argument("--topic", default="SparkBench" if name == "spark-read" else "SparkBenchWrite")
        b.add_argument("--count", type=int, default=1_000_000, help="rows (messages) per run")
        b.add_argument("--size", type=int, default=128, help="message body bytes")
        b.add_argument("--queues", type=int, default=4, help="queues of the topic (created if missing)")
        b.add_argument("--runs", type=int, default=3, help="measured runs (the median is reported)")
        b.add_argument("--warmup", type=int, default=1,
                       help="spark-read: full-size reads before the measured runs (0: a 5%% read)")
        b.add_argument("--json", action="store_true", help="one JSON line of results")
        b.add_argument("--embedded", action="store_true", help="start a name server and broker in a child process")
        b.add_argument("--broker-max-pull", type=int, default=None,
                       help="with --embedded: the broker's max_transfer_count_on_message_in_memory (default 32)")
        b.set_defaults(func=_cmd_bench_spark)


def _add_client_bench(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    helps = {"produce": "send messages as fast as the broker takes them: TPS, MB/s, send RT percentiles",
             "consume": "consume a topic with a clustering PushConsumer: TPS and delivery latency",
             "pop": "pop a topic with a SimpleConsumer (--batch per receive, max 32), acking each message: TPS",
             "e2e": "produce at a fixed rate while consuming: end-to-end latency percentiles"}
    for name, text in helps.items():
        b = bench.add_parser(name, help=text)
        b.add_argument("--namesrv", default="127.0.0.1:9876", help="name server address")
        b.add_argument("--topic", default="BenchmarkTest")
        b.add_argument("--group", default="benchmark_consumer", help="consumer group (consume, pop, e2e)")
        b.add_argument("--size", type=int, default=128, help="message body bytes")
        b.add_argument("--count", type=int, help="stop after this many messages")
        b.add_argument("--duration", type=float, help="stop after this many seconds (default 10)")
        b.add_argument("--concurrency", type=int, default=64,
                       help="concurrent senders (produce), receivers (pop, at most 16)")
        b.add_argument("--batch", type=int, default=1, help="messages per send (produce), per receive (pop)")
        b.add_argument("--mode", default="sync", choices=("sync", "async", "oneway"), help="send mode (produce)")
        b.add_argument("--rate", type=float, default=5000, help="messages per second (e2e)")
        b.add_argument("--listen", action="store_true",
                       help="pop with SimpleConsumer.listen, --concurrency messages in flight (pop)")
        b.add_argument("--json", action="store_true", help="one JSON line of results")
        b.add_argument("--embedded", action="store_true", help="start a name server and broker in a child process")
        b.add_argument("--flush", default="async", choices=("sync", "async"),
                       help="the --embedded broker's flush mode (default async)")
        b.add_argument("--acl", action="store_true", help="the --embedded broker with ACL 2.0 on, the clients "
                                                          "signing as a user with rules (docs/security.md)")
        b.set_defaults(func=_cmd_bench_client)
    t = bench.add_parser("targets", help="the five performance-target cases, each on a fresh embedded broker: "
                                         "medians against the targets")
    t.add_argument("--runs", type=int, default=3, help="runs of each case (the median is reported)")
    t.add_argument("--scale", type=float, default=1.0, help="scale durations and the backlog (tests use 0.01)")
    t.add_argument("--case", type=int, action="append", help="run only case N (1-5, repeatable)")
    t.set_defaults(func=_cmd_bench_targets)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluice", description="Sluice: a RocketMQ-compatible message queue.")
    p.add_argument("--version", action="version", version=f"sluice {__version__}")
    p.add_argument("--debug", action="store_true", help="on an error, print its traceback too")
    sub = p.add_subparsers(dest="command", required=True)
    add_server_commands(sub)
    add_dashboard_command(sub)
    add_admin_commands(sub)
    add_pipeline_commands(sub)
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
    fb = bench.add_parser("filter", help="filtered pulls in the store: messages scanned per second with 10 %% "
                                         "selective TAG and SQL92 filters (one JSON line per case)")
    fb.add_argument("--case", action="append", help="run only this case (repeatable)")
    fb.add_argument("--count", type=int, default=200_000, help="messages in the queue read")
    fb.add_argument("--size", type=int, default=128, help="body size in bytes")
    fb.add_argument("--dir", help="where to put the temporary store (default: the system temp dir)")
    fb.set_defaults(func=_cmd_bench_filter)
    _add_client_bench(bench)
    _add_spark_bench(bench)
    return p


def command_of(args: argparse.Namespace) -> str:
    """The command that ran, e.g. ``topic list``."""
    verb = getattr(args, f"{args.command}_command", None)
    return f"{args.command} {verb}" if verb else args.command


def error_text(exc: BaseException, args: argparse.Namespace) -> str:
    """``exc`` as the text after ``sluice: ``. An exception without a message (a bare ``TimeoutError``)
    would print as nothing: it is described by its type, the command and the name server instead."""
    text = str(exc).strip()
    if text:
        return text
    what = "timed out" if isinstance(exc, TimeoutError) else f"failed with {type(exc).__name__}"
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause).strip():
        what += f" ({str(cause).strip()})"
    namesrv = namesrv_of(args) if args.command in ADMIN_COMMANDS else getattr(args, "namesrv", None)
    return f"{command_of(args)} {what}" + (f" talking to name server {namesrv}" if namesrv else "")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("sluice: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except Exception as exc:  # one readable line; the traceback only when asked for
        if args.debug:
            traceback.print_exc()
        print(f"sluice: {error_text(exc, args)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
