"""The operator's verbs named after mqadmin's: a broker's runtime status, settings and replication
(``sluice cluster broker-status|broker-config|broker-config-set|ha-status``), a group's connections, deletion and
offsets (``sluice group connections|delete|reset-offset``) and a producer group's connections
(``sluice producer connections``)."""

from __future__ import annotations

import argparse
from typing import Any

from sluice.cli.admin_commands import command, out, parse_time, print_json, print_table
from sluice.client.admin import Admin


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
    brokers = await admin.delete_group(args.group, args.cluster, clean_offset=not args.keep_offsets)
    out(f"deleted group {args.group} on {', '.join(brokers) or 'no broker'}"
        + ("" if args.keep_offsets else " with its committed offsets"))
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
    to = args.to.strip().lower()
    timestamp = 0 if to == "earliest" else -1 if to == "latest" else max(0, parse_time(args.to))
    table = await admin.reset_offset(args.group, args.topic, timestamp)
    if args.json:
        print_json(table)
        return 0
    print_table(["QUEUE", "OFFSET"], [[k, v] for k, v in table.items()], right=(1,))
    out(f"group {args.group} on {args.topic} reset to {args.to} ({len(table)} queues); consumers online move at "
        "their next pull")
    return 0


def _connections_table(conns: list[dict[str, Any]]) -> None:
    print_table(["CLIENT ID", "ADDRESS", "LANGUAGE", "VERSION", "BROKER"],
                [[c.get("clientId", "?"), c.get("clientAddr", "?"), c.get("language", "?"), c.get("version", "?"),
                  c["broker"]] for c in conns])
