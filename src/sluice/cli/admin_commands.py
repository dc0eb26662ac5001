"""``sluice topic|group|msg ...``: operator commands over ``sluice.client.admin.Admin``.

Output is aligned plain text, or JSON with ``--json``; errors reach ``sluice.cli.main`` as exceptions and
are printed there as one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from sluice.cli.command import NAMESRV_ENV, command
from sluice.cli.output import (
    Progress,
    body_preview,
    fmt_time,
    message_json,
    message_lines,
    out,
    parse_time,
    print_json,
    print_table,
    write_body,
)
from sluice.client.admin import DEFAULT_NAMESRV, LONG_MAX, Admin, AdminError, parse_perm
from sluice.common.attributes import TOPIC_MESSAGE_TYPES
from sluice.common.namespace import namespace_of, unwrap
from sluice.common.structs import perm_to_string

ADMIN_COMMANDS = ("topic", "group", "msg", "cluster", "user", "acl", "dlq", "producer", "lite")


@command
async def topic_create(admin: Admin, args: argparse.Namespace) -> int:
    brokers = await admin.create_topic(args.name, queues=args.queues, perm=args.perm, order=args.order,
                                       cluster=args.cluster, message_type=args.message_type,
                                       attributes=args.attributes)
    where = ", ".join(f"{n} ({a})" for n, a in brokers.items())
    out(f"topic {args.name!r} created on {where}: {args.queues} queues, perm {perm_to_string(parse_perm(args.perm))}"
        f"{', ordered' if args.order else ''}{f', message type {args.message_type}' if args.message_type else ''}")
    return 0


@command
async def topic_list(admin: Admin, args: argparse.Namespace) -> int:
    topics = await admin.list_topics(args.cluster)
    if args.namespace is not None:
        topics = [t for t in topics if namespace_of(t) == args.namespace]
    if args.json:
        print_json(topics)
    elif args.namespace is not None or args.by_namespace:
        # (a namespace's topic "orders" is "ns%orders" on the broker: shown as the clients name it)
        print_table(["TOPIC", "NAMESPACE"], [[unwrap(t), namespace_of(t) or "-"] for t in topics])
    else:
        for t in topics:
            out(t)
    return 0


@command
async def topic_route(admin: Admin, args: argparse.Namespace) -> int:
    route = await admin.topic_route(args.name)
    if args.json:
        print_json({"topic": args.name, **route.to_json()})
        return 0
    queues = {q.broker_name: q for q in route.queue_datas}
    rows = []
    for b in sorted(route.broker_datas, key=lambda b: b.broker_name):
        q = queues.get(b.broker_name)
        addrs: list[tuple[int | None, str | None]] = [*sorted(b.broker_addrs.items())] or [(None, None)]
        for bid, addr in addrs:
            rows.append([b.broker_name, b.cluster or "-", bid, addr,
                         q.read_queue_nums if q else None, q.write_queue_nums if q else None,
                         perm_to_string(q.perm) if q else None])
    print_table(["BROKER", "CLUSTER", "ID", "ADDRESS", "READ QUEUES", "WRITE QUEUES", "PERM"], rows, right=(2, 4, 5))
    if route.order_topic_conf:
        out(f"order config: {route.order_topic_conf}")
    return 0


@command
async def topic_status(admin: Admin, args: argparse.Namespace) -> int:
    queues = await admin.topic_status(args.name)
    total = sum(q.messages for q in queues)
    if args.json:
        print_json({"topic": args.name, "totalMessages": total, "queues": [q.to_json() for q in queues]})
        return 0
    print_table(["BROKER", "QUEUE", "MIN OFFSET", "MAX OFFSET", "MESSAGES", "LAST UPDATE"],
                [[q.broker_name, q.queue_id, q.min_offset, q.max_offset, q.messages,
                  fmt_time(q.last_update_timestamp)] for q in queues], right=(1, 2, 3, 4))
    out(f"total: {len(queues)} queues, {total} messages")
    return 0


@command
async def topic_delete(admin: Admin, args: argparse.Namespace) -> int:
    brokers = await admin.delete_topic(args.name, cluster=args.cluster)
    where = ", ".join(brokers) or "no broker"
    out(f"topic {args.name!r} deleted from {where} and the name server")
    return 0


# == cluster ======================================================================================
@command
async def cluster_status(admin: Admin, args: argparse.Namespace) -> int:
    info = await admin.cluster_info()
    rows: list[dict[str, Any]] = []
    for cluster, names in sorted(info.cluster_addr_table.items()):
        for name in sorted(names):
            b = info.broker_addr_table.get(name)
            for bid, addr in sorted(b.broker_addrs.items()) if b is not None else []:
                try:
                    rt = await admin.broker_runtime_info(addr)
                    error = ""
                except AdminError as exc:
                    rt, error = {}, str(exc)
                rows.append({"cluster": cluster, "broker": name, "id": bid, "address": addr,
                             "role": rt.get("brokerRole", "?"), "fenced": rt.get("fenced", ""),
                             "backPressure": rt.get("backPressure", "?"),
                             "sendQueue": int(rt.get("sendThreadPoolQueueSize", 0) or 0),
                             "writeRunningMs": int(rt.get("pageCacheLockTimeMills", 0) or 0),
                             "heldBytes": int(rt.get("heldBytes", 0) or 0),
                             "loopLagMaxMs": float(rt.get("eventLoopLagMaxMs", 0) or 0), "error": error})
    if args.json:
        print_json(rows)
        return 0
    print_table(["CLUSTER", "BROKER", "ID", "ADDRESS", "ROLE", "BACK-PRESSURE", "SEND QUEUE", "WRITE RUNNING MS",
                 "NOT YET SERVED B", "LOOP LAG MS"],
                [[r["cluster"], r["broker"], r["id"], r["address"],
                  r["role"] + (" (fenced)" if r["fenced"] else ""), r["error"] and "no answer" or r["backPressure"],
                  r["sendQueue"], r["writeRunningMs"], r["heldBytes"], f"{r['loopLagMaxMs']:.1f}"] for r in rows],
                right=(2, 6, 7, 8, 9))
    return 0


# == group ========================================================================================
_CONSUME_TYPES = {"CONSUME_ACTIVELY": "pull", "CONSUME_PASSIVELY": "push"}


@command
async def group_list(admin: Admin, args: argparse.Namespace) -> int:
    groups = await admin.list_groups()
    if args.json:
        print_json([g.to_json() for g in groups])
        return 0
    print_table(["GROUP", "NAMESPACE", "ONLINE", "TYPE", "MODEL", "TOPICS", "BROKERS"],
                [[unwrap(g.name), namespace_of(g.name) or "-", len(g.clients),
                  _CONSUME_TYPES.get(g.consume_type, g.consume_type or "-"), g.message_model.lower() or "-",
                  ",".join(unwrap(t, namespace_of(g.name)) for t in g.topics) or "-", ",".join(g.brokers)]
                 for g in groups],
                right=(2,))
    return 0


@command
async def group_progress(admin: Admin, args: argparse.Namespace) -> int:
    progress = await admin.group_progress(args.group, args.topic)
    if args.json:
        print_json(progress.to_json())
        return 0
    print_table(["TOPIC", "BROKER", "QUEUE", "BROKER OFFSET", "CONSUMER OFFSET", "LAG", "LAST CONSUMED"],
                [[q.topic, q.broker_name, q.queue_id, q.broker_offset,
                  q.consumer_offset if q.consumer_offset >= 0 else "-", q.lag, fmt_time(q.last_timestamp)]
                 for q in progress.queues], right=(2, 3, 4, 5))
    out(f"total lag: {progress.total_lag} ({len(progress.queues)} queues)")
    return 0


# == msg ==========================================================================================
def _properties(items: Sequence[str] | None) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise AdminError(f"--prop {item!r} is not name=value")
        props[name] = value
    return props


@command
async def msg_send(admin: Admin, args: argparse.Namespace) -> int:
    from sluice.client.message import Message

    if args.count < 1:
        raise AdminError("--count must be at least 1")
    body = sys.stdin.buffer.read() if args.body == "-" else os.fsencode(args.body)
    keys = " ".join(args.keys) if args.keys else None
    message = Message(args.topic, body, tags=args.tags, keys=keys, properties=_properties(args.prop))
    await admin.api.get_topic_route(args.topic)  # the name server answers (plain error if not); no route is fine
    progress = Progress(args.count, "sent") if args.count > 1 else None
    header_done = False
    sent = 0
    try:
        async with contextlib.aclosing(admin.send(message, args.count)) as results:
            async for r in results:
                sent += 1
                if args.json:
                    print(json.dumps({"msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "topic": r.queue.topic,
                                      "brokerName": r.queue.broker_name, "queueId": r.queue.queue_id,
                                      "queueOffset": r.queue_offset, "status": r.status.value}))
                elif not args.quiet:
                    if not header_done:
                        print(f"{'MSG ID':<32}  {'OFFSET MSG ID':<32}  {'BROKER':<12}  QUEUE  {'OFFSET':>8}  STATUS")
                        header_done = True
                    print(f"{r.msg_id:<32}  {r.offset_msg_id:<32}  {r.queue.broker_name:<12}  "
                          f"{r.queue.queue_id:>5}  {r.queue_offset:>8}  {r.status.value}")
                if progress is not None:
                    progress.update(sent)
    finally:
        if progress is not None:
            progress.close()
    if progress is not None:
        elapsed = time.monotonic() - progress.start
        print(f"sent {sent} messages to {args.topic!r} in {elapsed:.2f} s ({sent / max(elapsed, 1e-9):,.0f} msg/s)",
              file=sys.stderr)
    return 0


@command
async def msg_get_by_id(admin: Admin, args: argparse.Namespace) -> int:
    msgs = await admin.get_message(args.id, args.topic)
    if args.body_only:
        write_body(msgs[0].body)
        return 0
    if args.json:
        print_json([message_json(m) for m in msgs])
        return 0
    for i, m in enumerate(msgs):
        if i:
            out()
        for line in message_lines(m):
            out(line)
    return 0


@command
async def msg_get_by_key(admin: Admin, args: argparse.Namespace) -> int:
    begin = parse_time(args.begin) if args.begin else 0
    end = parse_time(args.end) if args.end else LONG_MAX
    msgs = await admin.messages_by_key(args.topic, args.key, max_num=args.max, begin_ms=begin, end_ms=end)
    if args.json:
        print_json([message_json(m) for m in msgs])
        return 0
    if not msgs:
        raise AdminError(f"no message with key {args.key!r} in topic {args.topic!r}")
    print_table(["MSG ID", "OFFSET MSG ID", "STORE HOST", "QUEUE", "OFFSET", "STORED", "TAGS", "BODY"],
                [[m.msg_id, m.offset_msg_id, m.store_host, m.queue_id, m.queue_offset, fmt_time(m.store_timestamp),
                  m.tags, body_preview(m.body)] for m in msgs], right=(3, 4))
    return 0


# == parser =======================================================================================
def add_admin_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``sluice topic``, ``sluice cluster``, ``sluice group``, ``sluice msg``, ``sluice user`` and ``sluice acl``
    with their verbs."""
    from sluice.cli.auth_commands import add_auth_commands

    ns = argparse.ArgumentParser(add_help=False)
    ns.add_argument("--namesrv", metavar="ADDR",
                    help=f"name server host:port[;host:port] (default ${NAMESRV_ENV} or {DEFAULT_NAMESRV})")
    js = argparse.ArgumentParser(add_help=False)
    js.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def verb(group: argparse._SubParsersAction[argparse.ArgumentParser], name: str,
             handler: Callable[[argparse.Namespace], int], help_: str,
             json_flag: bool = False) -> argparse.ArgumentParser:
        p = group.add_parser(name, help=help_, description=help_, parents=[ns, js] if json_flag else [ns])
        p.set_defaults(func=handler)
        return p

    topic = sub.add_parser("topic", help="create, inspect and delete topics").add_subparsers(
        dest="topic_command", required=True, metavar="VERB")
    from sluice.cli import operator_commands as ops

    for name, help_ in (("create", "create (or update) a topic on every broker of the cluster"),
                        ("update", "update (or create) a topic on every broker of the cluster (mqadmin updateTopic)")):
        p = verb(topic, name, topic_create, help_)
        p.add_argument("name", metavar="NAME")
        p.add_argument("--queues", type=int, default=8, help="read and write queues per broker (default 8)")
        p.add_argument("--perm", default="RW", help="RW, R, W or a number such as 6 (default RW)")
        p.add_argument("--order", action="store_true", help="an ordered topic (also sets its order config)")
        p.add_argument("--cluster", help="only on this cluster's brokers (default: every broker)")
        p.add_argument("--message-type", choices=[t for t in TOPIC_MESSAGE_TYPES if t not in ("UNSPECIFIED", "LITE")],
                       help="the topic's message.type attribute: PRIORITY makes a priority topic (RIP-80); what "
                            "gRPC clients may send to it")
        p.add_argument("--attributes", metavar="+K=V,-K", help="add, change (+key=value) or remove (-key) topic "
                       "attributes, as mqadmin's -a (message.type, lite.topic.expiration)")
    p = verb(topic, "update-perm", ops.topic_update_perm, "change a topic's permission on its brokers, its queues "
             "as they are (mqadmin updateTopicPerm)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--perm", required=True, help="RW, R, W or a number such as 6")
    p = verb(topic, "list", topic_list, "list the topics the name server knows (a namespace's beside their "
             "namespace)", json_flag=True)
    p.add_argument("--cluster", help="only topics on this cluster's brokers")
    p.add_argument("--namespace", metavar="NS", help="only this namespace's topics (ns%%name on the broker), "
                   "listed by the names their clients use")
    p.add_argument("--by-namespace", action="store_true", help="a table: each topic by the name its clients use, "
                   "beside its namespace")
    p = verb(topic, "route", topic_route, "show a topic's brokers, addresses, queues and permissions", True)
    p.add_argument("name", metavar="NAME")
    p = verb(topic, "status", topic_status, "show per-queue min / max offsets and last update times", True)
    p.add_argument("name", metavar="NAME")
    p = verb(topic, "delete", topic_delete, "delete a topic from its brokers and the name server")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--cluster", help="only from this cluster's brokers")

    cluster = sub.add_parser("cluster", help="inspect the brokers of the clusters").add_subparsers(
        dest="cluster_command", required=True, metavar="VERB")
    for name in ("status", "list"):  # (list: mqadmin's clusterList)
        verb(cluster, name, cluster_status, "every broker: role, back-pressure, queued writes, data not yet "
             "served (not yet durable), event-loop lag", json_flag=True)

    p = verb(cluster, "broker-status", ops.broker_status, "a broker's runtime info (mqadmin brokerStatus)", True)
    p.add_argument("broker", metavar="BROKER", help="its name or host:port")
    p = verb(cluster, "broker-config", ops.broker_config, "a broker's settings (mqadmin getBrokerConfig)", True)
    p.add_argument("broker", metavar="BROKER", help="its name or host:port")
    p = verb(cluster, "broker-config-set", ops.broker_config_set, "change one of the settings a broker allows "
             "to change while it runs, kept for its next start (mqadmin updateBrokerConfig)")
    p.add_argument("broker", metavar="BROKER", help="its name or host:port")
    p.add_argument("key", metavar="KEY", help="RocketMQ's name, e.g. fileReservedTime")
    p.add_argument("value", metavar="VALUE")
    p = verb(cluster, "ha-status", ops.ha_status, "replication: each master's slaves, how far behind, in sync "
             "(mqadmin haStatus)", True)
    p.add_argument("broker", metavar="BROKER", nargs="?", help="only this broker (default: every master)")
    p = verb(cluster, "epochs", ops.epochs, "the master terms each broker's log holds: epoch, start and end offset "
             "(mqadmin getBrokerEpoch)", True)
    p.add_argument("broker", metavar="BROKER", nargs="?", help="only this broker (default: every broker)")

    group = sub.add_parser("group", help="inspect consumer groups").add_subparsers(
        dest="group_command", required=True, metavar="VERB")
    verb(group, "list", group_list, "list consumer groups and their online clients", json_flag=True)
    p = verb(group, "progress", group_progress, "per queue: broker offset, committed offset and lag", True)
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--topic", help="only this topic")
    p = verb(group, "connections", ops.group_connections, "the group's consumers online and its subscriptions "
             "(mqadmin consumerConnection)", True)
    p.add_argument("group", metavar="GROUP")
    p = verb(group, "delete", ops.group_delete, "delete a group and its committed offsets from every broker "
             "(mqadmin deleteSubGroup)")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--cluster", help="only on this cluster's brokers")
    p.add_argument("--keep-offsets", action="store_true", help="keep the group's committed offsets")
    p.add_argument("--delete-dead-letters", action="store_true", help="delete its dead-letter topic too (kept "
                   "otherwise)")
    p = verb(group, "create", ops.group_create, "create (or update) a consumer group on every broker (mqadmin "
             "updateSubGroup)", True)
    ops.add_group_config_flags(p)
    p = verb(group, "update", ops.group_update, "change settings of an existing group, keeping the others "
             "(mqadmin updateSubGroup)", True)
    ops.add_group_config_flags(p)
    p = verb(group, "skip", ops.group_skip, "move a group's offsets on a topic to the end: what waits is skipped "
             "(mqadmin skipAccumulatedMessage)", True)
    p.add_argument("group", metavar="GROUP")
    p.add_argument("topic", metavar="TOPIC")
    p = verb(group, "clone", ops.group_clone, "give a group another group's committed offsets on a topic "
             "(mqadmin cloneGroupOffset)", True)
    p.add_argument("source", metavar="SOURCE")
    p.add_argument("target", metavar="TARGET")
    p.add_argument("topic", metavar="TOPIC")
    p = verb(group, "reset-offset", ops.group_reset_offset, "move a group's offsets on a topic to the earliest, "
             "the latest, or a time (mqadmin resetOffsetByTime)", True)
    p.add_argument("group", metavar="GROUP")
    p.add_argument("topic", metavar="TOPIC")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", metavar="WHEN", help="earliest, latest, or a time (ms since the epoch or a local "
                       "date / time such as 2026-11-28T12:00)")
    where.add_argument("--offset", type=int, metavar="N", help="this offset of one queue (--queue, --broker; "
                       "mqadmin resetOffsetByQueueId)")
    p.add_argument("--queue", type=int, metavar="Q", help="the queue --offset is of")
    p.add_argument("--broker", metavar="NAME", help="the queue's broker (needed when the topic is on several)")

    producer = sub.add_parser("producer", help="inspect producer groups").add_subparsers(
        dest="producer_command", required=True, metavar="VERB")
    p = verb(producer, "connections", ops.producer_connections, "the group's producers connected to each broker "
             "(mqadmin producerConnection)", True)
    p.add_argument("group", metavar="GROUP")

    msg = sub.add_parser("msg", help="send and look up messages").add_subparsers(
        dest="msg_command", required=True, metavar="VERB")
    p = verb(msg, "send", msg_send, "send a message (or --count copies of it)")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("body", metavar="BODY", help="message body as text; '-' reads it from stdin")
    p.add_argument("--tags", help="the message tag")
    p.add_argument("--keys", action="append", help="message key(s), space separated (repeatable)")
    p.add_argument("--prop", action="append", metavar="NAME=VALUE", help="a user property (repeatable)")
    p.add_argument("--count", type=int, default=1, help="send this many copies (default 1)")
    p.add_argument("--quiet", "-q", action="store_true", help="no line per message, only the summary")
    p.add_argument("--json", action="store_true", help="one JSON object per message")
    p = verb(msg, "get-by-id", msg_get_by_id, "show a message by its offset msg id, or by its msg id with --topic",
             json_flag=True)
    p.add_argument("id", metavar="ID")
    p.add_argument("--topic", help="the topic (needed for a client msg id, i.e. UNIQ_KEY)")
    p.add_argument("--body-only", action="store_true", help="print only the body, byte for byte")
    p = verb(msg, "get-by-key", msg_get_by_key, "list a topic's messages with a key", json_flag=True)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("key", metavar="KEY")
    p.add_argument("--max", type=int, default=64, help="at most this many messages (default 64)")
    p.add_argument("--begin", help="stored at or after (ms since the epoch, or e.g. 2024-05-01T12:00)")
    p.add_argument("--end", help="stored at or before (ms since the epoch, or a date / time)")
    from sluice.cli.read_commands import add_read_commands
    from sluice.cli.trace_commands import add_trace_command

    add_read_commands(msg, verb)
    add_trace_command(msg, verb)
    add_auth_commands(sub, verb)
    from sluice.cli.dlq_commands import add_dlq_commands

    add_dlq_commands(sub, verb)
    from sluice.cli.lite_commands import add_lite_commands

    add_lite_commands(sub, verb)
