"""``sluice msg trace MSG_ID``: a message's way — its send, its transaction's end, each consumer group's listener
calls — as clients with trace on recorded it (``mqadmin queryMsgTraceById``; sluice.client.trace)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

from sluice.cli.command import command
from sluice.cli.output import fmt_time, out, parse_time, print_json, print_table
from sluice.client.admin import LONG_MAX, Admin, AdminError
from sluice.client.trace import TRACE_TOPIC, TraceStep
from sluice.common.config_text import camel_case


def _detail(s: TraceStep) -> str:
    if s.kind == "pub":
        parts = [f"topic {s.topic}", f"stored at {s.store_host}" if s.store_host else "",
                 f"offset id {s.offset_msg_id}" if s.offset_msg_id else "", s.msg_type.lower()]
        if s.tags:
            parts.append(f"tags {s.tags}")
        if s.keys:
            parts.append(f"keys {s.keys}")
        return ", ".join(p for p in parts if p)
    if s.kind == "end_transaction":
        return "answer to a check" if s.from_transaction_check else "after the local transaction"
    if s.kind == "sub":
        parts = [f"retry {s.retry_times}" if s.retry_times is not None else "", s.return_type]
        return ", ".join(p for p in parts if p)
    return f"topic {s.topic}"


@command
async def msg_trace(admin: Admin, args: argparse.Namespace) -> int:
    begin = parse_time(args.begin) if args.begin else 0
    end = parse_time(args.end) if args.end else LONG_MAX
    if await admin.api.get_topic_route(args.trace_topic) is None:
        raise AdminError(f"no trace topic {args.trace_topic!r}: no client with trace on has written to it yet "
                         "(enable_trace=True; Java: enableMsgTrace)")
    steps = await admin.message_trace(args.id, args.trace_topic, max_num=args.max, begin_ms=begin, end_ms=end)
    if args.json:
        print_json([{camel_case(k): v for k, v in dataclasses.asdict(s).items()} for s in steps])
        return 0
    if not steps:
        raise AdminError(f"no trace of message {args.id} in {args.trace_topic} (was it sent or consumed by a client "
                         "with trace on?)")
    kind = {"pub": "Pub", "end_transaction": "EndTransaction", "sub": "Sub", "recall": "Recall"}
    print_table(["TYPE", "GROUP", "CLIENT HOST", "TIME", "COST", "STATUS", "DETAIL"],
                [[kind[s.kind], s.group, s.client_host, fmt_time(s.timestamp),
                  "-" if s.cost_ms is None else f"{s.cost_ms} ms", s.status, _detail(s)] for s in steps])
    groups = sorted({s.group for s in steps if s.kind == "sub"})
    out(f"message {args.id}: {'sent' if any(s.kind == 'pub' for s in steps) else 'no send recorded'}; "
        f"consumed by {len(groups)} group(s){': ' + ', '.join(groups) if groups else ''}")
    return 0


def add_trace_command(msg: argparse._SubParsersAction[argparse.ArgumentParser],
                      verb: Callable[..., argparse.ArgumentParser]) -> None:
    p = verb(msg, "trace", msg_trace, "a message's trace: its send and each group's consumption, as clients with "
             "trace on recorded them (mqadmin queryMsgTraceById)", json_flag=True)
    p.add_argument("id", metavar="MSG_ID", help="the message id the producer got (UNIQ_KEY)")
    p.add_argument("--trace-topic", default=TRACE_TOPIC, help=f"the trace topic (default {TRACE_TOPIC})")
    p.add_argument("--max", type=int, default=64, help="read at most this many trace messages (default 64)")
    p.add_argument("--begin", help="traces stored at or after (ms since the epoch, or e.g. 2024-05-01T12:00)")
    p.add_argument("--end", help="traces stored at or before (ms since the epoch, or a date / time)")
