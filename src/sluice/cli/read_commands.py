"""``sluice msg get-by-offset`` and ``sluice msg consume``: a topic's messages read without a consumer group's offsets
(mqadmin queryMsgByOffset, consumeMessage / printMsg; sluice.client.topic_reader)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from sluice.cli.command import command
from sluice.cli.output import body_preview, fmt_time, message_json, message_lines, out, parse_time, print_json
from sluice.client.admin import Admin, AdminError
from sluice.client.topic_reader import message_at, read_messages


@command
async def msg_get_by_offset(admin: Admin, args: argparse.Namespace) -> int:
    m = await message_at(admin, args.topic, args.broker, args.queue, args.offset)
    if args.json:
        print_json(message_json(m))
        return 0
    for line in message_lines(m):
        out(line)
    return 0


# Rows are printed as they come (``--follow``), so the columns have fixed widths, not the table's fitted ones.
_ROW = "{:<21}  {:>5}  {:>10}  {:<23}  {:<32}  {:<12}  {:<20}  {}"


@command
async def msg_consume(admin: Admin, args: argparse.Namespace) -> int:
    if args.offset is not None and args.since is not None:
        raise AdminError("give --offset or --from, not both")
    since = (args.since or "earliest").strip()
    start: str | int = since.lower() if since.lower() in ("earliest", "latest") else parse_time(since)
    n = 0
    async for m in read_messages(admin, args.topic, start=start, offset=args.offset, broker=args.broker,
                                 queue=args.queue, count=args.count, follow=args.follow):
        if args.json:  # (one object a line, as they come)
            print(json.dumps(message_json(m), ensure_ascii=False), flush=True)
        else:
            if n == 0:
                out(_ROW.format("STORE HOST", "QUEUE", "OFFSET", "STORED", "MSG ID", "TAGS", "KEYS", "BODY"))
            out(_ROW.format(m.store_host, m.queue_id, m.queue_offset, fmt_time(m.store_timestamp), m.msg_id,
                            m.tags or "-", " ".join(m.keys) or "-", body_preview(m.body)))
            sys.stdout.flush()
        n += 1
    if not args.json:
        print(f"{n} message(s) of {args.topic}", file=sys.stderr)
    return 0


def add_read_commands(msg: argparse._SubParsersAction[argparse.ArgumentParser],
                      verb: Callable[..., argparse.ArgumentParser]) -> None:
    p = verb(msg, "get-by-offset", msg_get_by_offset, "show the message at a queue offset (mqadmin "
             "queryMsgByOffset)", json_flag=True)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--broker", required=True, help="the broker's name")
    p.add_argument("--queue", type=int, required=True, help="the queue id")
    p.add_argument("--offset", type=int, required=True, help="the queue offset")
    p = verb(msg, "consume", msg_consume, "print a topic's messages from a point on, committing nothing (mqadmin "
             "consumeMessage)", json_flag=True)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--from", dest="since", metavar="WHEN", help="earliest (default), latest, or a store time (ms "
                   "since the epoch or a local date / time)")
    p.add_argument("--offset", type=int, help="start at this queue offset instead (of each queue read)")
    p.add_argument("--broker", help="only this broker's queues")
    p.add_argument("--queue", type=int, help="only this queue id")
    p.add_argument("--count", type=int, help="stop after this many messages")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new messages until interrupted")
