"""``sluice user …`` and ``sluice acl …``: ACL 2.0's users and rules on every master of a cluster (RocketMQ's
``mqadmin createUser`` … ``listAcl``). Passwords are read from stdin or a prompt, never from the command line (where
``ps`` shows them), and shown only with ``--show-password``."""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from typing import Any

from sluice.cli.command import command
from sluice.cli.output import out, print_json, table
from sluice.client.admin import Admin, AdminError
from sluice.client.auth_admin import policy_entry

Verb = Callable[..., argparse.ArgumentParser]


def _password(args: argparse.Namespace, required: bool) -> str | None:
    if args.password_stdin:
        value = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty() and required:
        value = getpass.getpass(f"password for {args.name}: ")
    else:
        return None
    if required and not value:
        raise AdminError("the password is empty")
    return value or None


def _shown(user: dict[str, Any], show: bool) -> dict[str, Any]:
    return user if show else {**user, "password": "***"}


@command
async def user_create(admin: Admin, args: argparse.Namespace) -> int:
    password = _password(args, required=True)
    if password is None:
        raise AdminError("give the password on stdin with --password-stdin (or run in a terminal to be asked)")
    await admin.create_user(args.name, password, "Super" if args.super else "Normal", args.cluster)
    out(f"user {args.name} created")
    return 0


@command
async def user_update(admin: Admin, args: argparse.Namespace) -> int:
    password = _password(args, required=False)
    if password is None and args.type is None and args.status is None:
        raise AdminError("nothing to change: give --password-stdin, --type or --status")
    await admin.update_user(args.name, password=password, user_type=args.type, user_status=args.status,
                            cluster=args.cluster)
    out(f"user {args.name} updated")
    return 0


@command
async def user_delete(admin: Admin, args: argparse.Namespace) -> int:
    await admin.delete_user(args.name, args.cluster)
    out(f"user {args.name} deleted (with its ACL)")
    return 0


@command
async def user_get(admin: Admin, args: argparse.Namespace) -> int:
    user = await admin.get_user(args.name, args.broker)
    if user is None:
        raise AdminError(f"no user {args.name!r}")
    user = _shown(user, args.show_password)
    if args.json:
        print_json(user)
    else:
        for line in table(["USER", "TYPE", "STATUS", "PASSWORD"],
                          [[user["username"], user.get("userType"), user.get("userStatus"), user.get("password")]]):
            out(line)
    return 0


@command
async def user_list(admin: Admin, args: argparse.Namespace) -> int:
    users = [_shown(u, args.show_password) for u in await admin.list_users(args.filter, args.broker)]
    if args.json:
        print_json(users)
    else:
        for line in table(["USER", "TYPE", "STATUS", "PASSWORD"],
                          [[u["username"], u.get("userType"), u.get("userStatus"), u.get("password")]
                           for u in users]):
            out(line)
    return 0


def _entries(args: argparse.Namespace) -> list[dict[str, Any]]:
    if not args.resource:
        raise AdminError("give at least one --resource (e.g. Topic:orders, Topic:orders*, Group:g, Cluster:c, *)")
    return [policy_entry(r, args.actions, args.decision, args.source_ip or ()) for r in args.resource]


@command
async def acl_create(admin: Admin, args: argparse.Namespace) -> int:
    await admin.create_acl(args.subject, _entries(args), args.policy_type, args.cluster)
    out(f"ACL of {args.subject}: {len(args.resource)} rule(s) written")
    return 0


@command
async def acl_update(admin: Admin, args: argparse.Namespace) -> int:
    await admin.update_acl(args.subject, _entries(args), args.policy_type, args.cluster)
    out(f"ACL of {args.subject}: {len(args.resource)} rule(s) written")
    return 0


@command
async def acl_delete(admin: Admin, args: argparse.Namespace) -> int:
    await admin.delete_acl(args.subject, args.resource, args.policy_type, args.cluster)
    out(f"ACL of {args.subject}: " + (f"rule for {args.resource} deleted" if args.resource else "deleted"))
    return 0


def _acl_rows(acls: list[dict[str, Any]]) -> list[list[Any]]:
    return [[a["subject"], p.get("policyType"), e.get("resource"), ",".join(e.get("actions") or []),
             e.get("decision"), ",".join(e.get("sourceIps") or []) or "*"]
            for a in acls for p in a.get("policies") or [] for e in p.get("entries") or []]


@command
async def acl_get(admin: Admin, args: argparse.Namespace) -> int:
    acl = await admin.get_acl(args.subject, args.broker)
    if acl is None:
        raise AdminError(f"{args.subject} has no ACL")
    if args.json:
        print_json(acl)
    else:
        for line in table(["SUBJECT", "POLICY", "RESOURCE", "ACTIONS", "DECISION", "SOURCE IPS"], _acl_rows([acl])):
            out(line)
    return 0


@command
async def acl_list(admin: Admin, args: argparse.Namespace) -> int:
    acls = await admin.list_acls(args.subject_filter, args.resource_filter, args.broker)
    if args.json:
        print_json(acls)
    else:
        for line in table(["SUBJECT", "POLICY", "RESOURCE", "ACTIONS", "DECISION", "SOURCE IPS"], _acl_rows(acls)):
            out(line)
    return 0


def add_auth_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser], verb: Verb) -> None:
    user = sub.add_parser("user", help="ACL 2.0 users (brokers with authentication on)").add_subparsers(
        dest="user_command", required=True, metavar="VERB")
    p = verb(user, "create", user_create, "create a user on every master")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin's first line")
    p.add_argument("--super", action="store_true", help="a super user (allowed everything; only a super user "
                                                         "can make one)")
    p.add_argument("--cluster", help="only on this cluster's masters")
    p = verb(user, "update", user_update, "change a user's password, type or status")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--password-stdin", action="store_true", help="a new password, from stdin's first line")
    p.add_argument("--type", choices=["Super", "Normal"])
    p.add_argument("--status", choices=["enable", "disable"])
    p.add_argument("--cluster", help="only on this cluster's masters")
    p = verb(user, "delete", user_delete, "delete a user and its ACL")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--cluster", help="only on this cluster's masters")
    for name, fn, help_ in (("get", user_get, "show a user"), ("list", user_list, "list users")):
        p = verb(user, name, fn, help_, json_flag=True)
        if name == "get":
            p.add_argument("name", metavar="NAME")
        else:
            p.add_argument("--filter", help="only users whose name contains this")
        p.add_argument("--show-password", action="store_true", help="print the password (hidden by default)")
        p.add_argument("--broker", metavar="ADDR", help="ask this broker (default: the first master)")

    acl = sub.add_parser("acl", help="ACL 2.0 rules (brokers with authorization on)").add_subparsers(
        dest="acl_command", required=True, metavar="VERB")
    for name, fn, help_ in (("create", acl_create, "add rules to a subject's ACL on every master"),
                            ("update", acl_update, "add or replace rules of a subject's ACL on every master")):
        p = verb(acl, name, fn, help_)
        p.add_argument("subject", metavar="SUBJECT", help="User:NAME")
        p.add_argument("--resource", action="append", metavar="RES",
                       help="Topic:NAME, Topic:PREFIX*, Topic:*, Group:..., Cluster:NAME or * (repeatable)")
        p.add_argument("--actions", default="All", help="Pub, Sub, Create, Update, Delete, Get, List or All, "
                                                        "comma separated (default All)")
        p.add_argument("--decision", default="Allow", choices=["Allow", "Deny"])
        p.add_argument("--source-ip", action="append", metavar="IP", help="only from this address or CIDR "
                                                                          "(repeatable)")
        p.add_argument("--policy-type", default="Custom", choices=["Custom", "Default"])
        p.add_argument("--cluster", help="only on this cluster's masters")
    p = verb(acl, "delete", acl_delete, "delete one rule (--resource) or a subject's whole ACL")
    p.add_argument("subject", metavar="SUBJECT")
    p.add_argument("--resource", metavar="RES")
    p.add_argument("--policy-type", choices=["Custom", "Default"])
    p.add_argument("--cluster", help="only on this cluster's masters")
    p = verb(acl, "get", acl_get, "show a subject's rules", json_flag=True)
    p.add_argument("subject", metavar="SUBJECT")
    p.add_argument("--broker", metavar="ADDR", help="ask this broker (default: the first master)")
    p = verb(acl, "list", acl_list, "list every subject's rules", json_flag=True)
    p.add_argument("--subject-filter", help="only subjects containing this")
    p.add_argument("--resource-filter", help="only rules whose resource contains this")
    p.add_argument("--broker", metavar="ADDR", help="ask this broker (default: the first master)")
