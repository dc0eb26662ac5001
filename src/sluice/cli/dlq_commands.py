"""``sluice dlq list|resend``: a consumer group's dead letters, listed, and re-sent at a chosen rate from a cursor
that survives an interruption (sluice.client.dead_letters)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from typing import Any

from sluice.cli.command import command
from sluice.cli.output import Progress, body_preview, fmt_time, out, parse_time, print_json, print_table
from sluice.client.admin import Admin, uncompressed
from sluice.client.dead_letters import DEFAULT_STATE_DIR, DeadLetterResend, dead_letters, summarize


@command
async def dlq_list(admin: Admin, args: argparse.Namespace) -> int:
    if args.messages:
        letters = [d async for d in dead_letters(admin, args.group)]
        if args.json:
            print_json([d.to_json() for d in letters])
            return 0
        print_table(["MSG ID", "ORIGINAL TOPIC", "FAILURES", "DEAD SINCE", "POSITION", "BODY"],
                    [[d.message.msg_id, d.original_topic or "-", d.message.reconsume_times,
                      fmt_time(d.message.store_timestamp), d.position, body_preview(uncompressed(d.message).body)]
                     for d in letters], right=(2,))
        out(f"{len(letters)} dead letter(s) of group {args.group}")
        return 0
    summary = await summarize(admin, args.group)
    if args.json:
        print_json([s.to_json() for s in summary])
        return 0
    print_table(["ORIGINAL TOPIC", "MESSAGES", "MOST FAILURES", "FIRST DEAD", "LAST DEAD"],
                [[s.topic, s.messages, s.max_failures, fmt_time(s.first_ms), fmt_time(s.last_ms)] for s in summary],
                right=(1, 2))
    out(f"{sum(s.messages for s in summary)} dead letter(s) of group {args.group}")
    return 0


@command
async def dlq_resend(admin: Admin, args: argparse.Namespace) -> int:
    resend = DeadLetterResend(admin, args.group, args.state, msg_ids=set(args.msg_id) if args.msg_id else None,
                              since_ms=parse_time(args.since) if args.since else None, to_topic=args.to_topic,
                              rate=args.rate, restart=args.restart)
    try:
        return await _resend(resend, args)
    finally:
        resend.close()


async def _resend(resend: DeadLetterResend, args: argparse.Namespace) -> int:
    if resend.resuming:
        print(f"resuming from {resend.cursor_path}", file=sys.stderr)
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, resend.stop)
        loop.add_signal_handler(signal.SIGTERM, resend.stop)
    except NotImplementedError:  # (Windows) Ctrl-C stops the run after the send under way there too
        signal.signal(signal.SIGINT, lambda *_: loop.call_soon_threadsafe(resend.stop))
    bar: Progress | None = None
    update: Callable[[Any], None] | None = None
    if not args.json:
        bar = Progress(await resend.count(), "looked at")

        def update(state: Any) -> None:
            assert bar is not None
            bar.update(state.looked)
    try:
        state = await resend.run(update)
    finally:
        if bar is not None:
            bar.close()
        with contextlib.suppress(NotImplementedError):
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
    where = args.to_topic or "its retry topic"
    if args.json:
        print_json({"group": args.group, "looked": state.looked, "resent": state.resent, "skipped": state.skipped,
                    "failed": state.failed, "to": args.to_topic, "interrupted": resend.interrupted,
                    "record": resend.record_path, "cursor": resend.cursor_path})
    else:
        out(f"re-sent {state.resent} dead letter(s) of group {args.group} to {where}"
            + (f" ({state.skipped} re-sent before, skipped)" if state.skipped else "")
            + (f"; {state.failed} could not be sent as they are (see the record)" if state.failed else "")
            + f"; record: {resend.record_path}")
    if resend.interrupted:
        print("interrupted: run the same command again to go on from where it stopped", file=sys.stderr)
        return 130
    return 0


def add_dlq_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                     verb: Callable[..., argparse.ArgumentParser]) -> None:
    dlq = sub.add_parser("dlq", help="a consumer group's dead letters: list and re-send them").add_subparsers(
        dest="dlq_command", required=True, metavar="VERB")
    p = verb(dlq, "list", dlq_list, "a group's dead letters by original topic (--messages: each one)",
             json_flag=True)
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--messages", action="store_true", help="list every dead letter")
    p = verb(dlq, "resend", dlq_resend, "re-send a group's dead letters (by default to its retry topic, so that "
             "only the group gets them again); resumable", json_flag=True)
    p.add_argument("group", metavar="GROUP")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--msg-id", action="append", metavar="ID", help="this dead letter (its msg id or offset msg "
                       "id; repeatable)")
    which.add_argument("--since", metavar="TIME", help="those that died at or after TIME (ms since the epoch or "
                       "a local date / time)")
    which.add_argument("--all", action="store_true", help="all of them")
    p.add_argument("--rate", type=float, metavar="N", help="at most N messages a second (default: as fast as the "
                   "broker takes them)")
    p.add_argument("--to-topic", metavar="TOPIC", help="send them to TOPIC instead (their original topic, say: "
                   "every group subscribed there gets them)")
    p.add_argument("--state", default=DEFAULT_STATE_DIR, metavar="DIR", help="where the cursor and the record of "
                   f"what was re-sent are kept (default {DEFAULT_STATE_DIR})")
    p.add_argument("--restart", action="store_true", help="forget the cursor and the record: begin again")
