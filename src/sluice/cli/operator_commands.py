"""The operator's verbs named after mqadmin's: a broker's runtime status, settings and replication
(``sluice cluster broker-status|broker-config|broker-config-set|ha-status``), a topic's permission
(``sluice topic update-perm``), a group's config, connections, deletion and offsets
(``sluice group create|update|connections|delete|reset-offset|skip|clone``) and a producer group's connections
(``sluice producer connections``)."""

from __future__ import annotations

import argparse
from typing import Any

from sluice.cli.command import command
from sluice.cli.output import out, parse_time, print_json, print_table
from sluice.client.admin import LONG_MAX, Admin, AdminError, parse_perm
from sluice.common.errors import ClientError
from sluice.remoting.errors import RemotingError


def _key_values(args: argparse.Namespace, table: dict[str, str], heading: str) -> int:
    if args.json:
        print_json(table)
    else:
        print_table([heading, "VALUE"], [[k, v] for k, v in sorted(table.items())])
    return 0


@command
async def broker_status(admin: Admin, args: argparse.Namespace) -> int:
    return _key_values(args, await admin.broker_runtime_info(args.broker), "KEY")


@command
async def broker_config(admin: Admin, args: argparse.Namespace) -> int:
    return _key_values(args, await admin.broker_config(args.broker), "SETTING")


@command
async def broker_config_set(admin: Admin, args: argparse.Namespace) -> int:
    await admin.update_broker_config(args.broker, args.key, args.value)
    out(f"{args.key} = {args.value} on {args.broker} (kept for its next start)")
    return 0


@command
async def epochs(admin: Admin, args: argparse.Namespace) -> int:
    if args.broker:
        brokers = [args.broker]
    else:  # every member of every group
        info = await admin.cluster_info()
        brokers = [addr for data in info.broker_addr_table.values() for _, addr in sorted(data.broker_addrs.items())]
    found: dict[str, dict[str, Any]] = {}
    for b in brokers:  # (one broker that does not answer is a row saying so, not the end of the listing)
        try:
            found[b] = await admin.broker_epochs(b)
        except (AdminError, ClientError, RemotingError) as exc:
            if not args.broker:
                found[b] = {"error": str(exc)}
                continue
            raise
    if args.json:
        print_json(found)
        return 0
    rows: list[list[Any]] = []
    for addr, cache in found.items():
        if "error" in cache:
            rows.append(["?", "?", addr, "-", "-", "-", f"(no answer: {cache['error']})"])
        for e in cache.get("epochList") or []:
            end = e.get("endOffset")
            rows.append([cache.get("brokerName", "?"), cache.get("brokerId", "?"), addr, e.get("epoch"),
                         e.get("startOffset"), "(open)" if end == LONG_MAX else end, cache.get("maxOffset")])
    print_table(["BROKER", "ID", "ADDRESS", "EPOCH", "START", "END", "LOG END"], rows, right=(3, 4, 5, 6))
    return 0


@command
async def ha_status(admin: Admin, args: argparse.Namespace) -> int:
    brokers = [args.broker] if args.broker else list(await admin.brokers())
    status = {b: await admin.ha_status(b) for b in brokers}
    if args.json:
        print_json(status)
        return 0
    rows = []
    for name, s in status.items():
        slaves = (s.get("haConnectionInfo") or [])
        if s.get("master", True) and not slaves:
            rows.append([name, "master", "-", "-", "-", "-"])
        for c in slaves:
            rows.append([name, "master", c.get("addr", "?"), c.get("slaveAckOffset", "?"), c.get("diff", "?"),
                         "yes" if c.get("inSync") else "no"])
        client = s.get("haClientRuntimeInfo") or {}
        if not s.get("master", True):
            rows.append([name, "slave", client.get("masterAddr", "?"), client.get("maxOffset", "?"), "-", "-"])
    print_table(["BROKER", "ROLE", "PEER", "ACK OFFSET", "BEHIND B", "IN SYNC"], rows, right=(3, 4))
    return 0


@command
async def group_connections(admin: Admin, args: argparse.Namespace) -> int:
    conns = await admin.group_connections(args.group)
    if args.json:
        print_json(conns)
        return 0
    _connections_table(conns["connections"])
    subs = ", ".join(f"{t} ({s.get('subString', '*')})" for t, s in sorted(conns["subscriptions"].items()))
    out(f"{len(conns['connections'])} connection(s); {conns.get('consumeType', '-')}, "
        f"{conns.get('messageModel', '-')}; subscriptions: {subs or '-'}")
    return 0


@command
async def group_delete(admin: Admin, args: argparse.Namespace) -> int:
    dlq = f"%DLQ%{args.group}"
    letters = sum(q.messages for q in await admin.topic_status(dlq)) \
        if await admin.api.get_topic_route(dlq) is not None else 0
    brokers = await admin.delete_group(args.group, args.cluster, clean_offset=not args.keep_offsets,
                                       dlq_topic=args.delete_dead_letters)
    out(f"deleted group {args.group} on {', '.join(brokers) or 'no broker'}"
        + ("" if args.keep_offsets else " with its committed offsets") + " and its retry topic")
    if letters and not args.delete_dead_letters:
        out(f"kept {dlq} ({letters} dead letter(s)): sluice dlq resend, or delete them with --delete-dead-letters")
    elif args.delete_dead_letters and letters:
        out(f"deleted {dlq} with its {letters} dead letter(s)")
    return 0


@command
async def producer_connections(admin: Admin, args: argparse.Namespace) -> int:
    conns = await admin.producer_connections(args.group)
    if args.json:
        print_json(conns)
        return 0
    _connections_table(conns)
    out(f"{len(conns)} connection(s) of producer group {args.group}")
    return 0


@command
async def group_reset_offset(admin: Admin, args: argparse.Namespace) -> int:
    if args.offset is not None:
        if args.queue is None:
            raise AdminError("--offset needs the queue it is an offset of (--queue, and --broker when the topic is "
                             "on several brokers)")
        table = await admin.reset_queue_offset(args.group, args.topic, args.queue, args.offset, args.broker)
        if args.json:
            print_json(table)
            return 0
        out(f"group {args.group} on {args.topic} queue {args.queue} reset to offset {args.offset}; consumers online "
            "move at their next pull")
        return 0
    to = args.to.strip().lower()
    timestamp = 0 if to == "earliest" else -1 if to == "latest" else max(0, parse_time(args.to))
    table = await admin.reset_offset(args.group, args.topic, timestamp)
    return _offsets(args, table, f"group {args.group} on {args.topic} reset to {args.to} ({len(table)} queues); "
                                 "consumers online move at their next pull")


def _offsets(args: argparse.Namespace, table: dict[str, int], summary: str) -> int:
    """Queue → offset, as JSON or as a table and a line that says what was done."""
    if args.json:
        print_json(table)
        return 0
    print_table(["QUEUE", "OFFSET"], [[k, v] for k, v in table.items()], right=(1,))
    out(summary)
    return 0


@command
async def topic_update_perm(admin: Admin, args: argparse.Namespace) -> int:
    brokers = await admin.update_topic_perm(args.name, args.perm)
    out(f"topic {args.name}: permission {parse_perm(args.perm)} on {', '.join(sorted(brokers))}")
    return 0


def _group_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The group settings named on the command line, under RocketMQ's names."""
    changes: dict[str, Any] = {}
    for flag, name in (("retry_max_times", "retryMaxTimes"), ("retry_queue_nums", "retryQueueNums"),
                       ("consume_enable", "consumeEnable"), ("broadcast", "consumeBroadcastEnable"),
                       ("from_min", "consumeFromMinEnable"), ("orderly", "consumeMessageOrderly"),
                       ("broker_id", "brokerId"), ("slow_broker_id", "whichBrokerWhenConsumeSlowly")):
        value = getattr(args, flag, None)
        if value is not None:
            changes[name] = value
    return changes


async def _group_write(admin: Admin, args: argparse.Namespace, must_exist: bool) -> int:
    brokers = await admin.update_group(args.group, args.cluster, must_exist=must_exist,
                                       attributes=getattr(args, "attributes", None), **_group_changes(args))
    config = await admin.group_config(args.group, args.cluster) or {}
    if args.json:
        print_json(config)
        return 0
    print_table(["SETTING", "VALUE"], [[k, v] for k, v in sorted(config.items()) if k != "groupName"])
    out(f"group {args.group} {'updated' if must_exist else 'created or updated'} on {', '.join(sorted(brokers))}")
    return 0


@command
async def group_create(admin: Admin, args: argparse.Namespace) -> int:
    return await _group_write(admin, args, must_exist=False)


@command
async def group_update(admin: Admin, args: argparse.Namespace) -> int:
    return await _group_write(admin, args, must_exist=True)


@command
async def group_skip(admin: Admin, args: argparse.Namespace) -> int:
    table = await admin.reset_offset(args.group, args.topic, -1)
    if args.json:
        print_json(table)
        return 0
    out(f"group {args.group} skipped what waited on {args.topic}: {len(table)} queue(s) now at their end; consumers "
        "online move at their next pull")
    return 0


@command
async def group_clone(admin: Admin, args: argparse.Namespace) -> int:
    table = await admin.clone_offsets(args.source, args.target, args.topic)
    return _offsets(args, table, f"group {args.target} now has {args.source}'s offsets on {args.topic} "
                                 f"({len(table)} queues); it reads from there when its consumers next start (those "
                                 "online keep their own until then)")


def add_group_config_flags(p: argparse.ArgumentParser) -> None:
    """Options of ``group create`` / ``group update`` (RocketMQ's SubscriptionGroupConfig)."""
    def on_off(text: str) -> bool:
        v = text.strip().lower()
        if v in ("true", "on", "yes", "1"):
            return True
        if v in ("false", "off", "no", "0"):
            return False
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")

    p.add_argument("group", metavar="GROUP")
    p.add_argument("--cluster", help="only on this cluster's brokers")
    p.add_argument("--retry-max-times", type=int, metavar="N", help="deliveries before the dead-letter queue "
                   "(default 16)")
    p.add_argument("--retry-queue-nums", type=int, metavar="N", help="queues of its retry topic (default 1)")
    p.add_argument("--consume-enable", type=on_off, metavar="BOOL", help="false: its consumers get nothing")
    p.add_argument("--broadcast", type=on_off, metavar="BOOL", help="may it consume in broadcasting mode")
    p.add_argument("--from-min", type=on_off, metavar="BOOL", help="may a new group start from the first message")
    p.add_argument("--orderly", type=on_off, metavar="BOOL", help="FIFO for RocketMQ 5 (gRPC) consumers")
    p.add_argument("--broker-id", type=int, metavar="ID", help="the broker id its pulls go to")
    p.add_argument("--slow-broker-id", type=int, metavar="ID", help="the broker id pulls go to when it falls behind")
    p.add_argument("--attributes", metavar="+K=V,-K", help="add, change (+key=value) or remove (-key) attributes, "
                   "as mqadmin's -a: +priority.factor=0..100 (the share of its pops of a priority topic that take "
                   "the highest priority first; 100 by default)")


def _connections_table(conns: list[dict[str, Any]]) -> None:
    print_table(["CLIENT ID", "ADDRESS", "LANGUAGE", "VERSION", "BROKER"],
                [[c.get("clientId", "?"), c.get("clientAddr", "?"), c.get("language", "?"), c.get("version", "?"),
                  c["broker"]] for c in conns])
