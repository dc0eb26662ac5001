"""``sluice lite broker|topic|group|client|dispatch``: what the brokers hold of their lite topics (RocketMQ 5.5's
lite admin requests, mqadmin's getBrokerLiteInfo ... triggerLiteDispatch), over ``sluice.client.admin.Admin``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from sluice.cli.command import command
from sluice.cli.output import fmt_time, out, print_json, print_table
from sluice.client.admin import Admin


def _when(ms: Any) -> str:
    return fmt_time(int(ms)) if isinstance(ms, int) and ms > 0 else "-"


@command
async def lite_broker(admin: Admin, args: argparse.Namespace) -> int:
    info = await admin.broker_lite_info(args.broker)
    if args.json:
        print_json(info)
        return 0
    print_table(["LIGHT QUEUES", "MAX", "LITE SUBSCRIPTIONS", "EVENTS WAITING", "ORDER STATES", "OFFSETS"],
                [[info.get("currentLmqNum"), info.get("maxLmqNum"), info.get("liteSubscriptionCount"),
                  info.get("eventMapSize"), info.get("orderInfoCount"), info.get("offsetTableSize")]],
                right=(0, 1, 2, 3, 4, 5))
    groups = info.get("groupMeta") or {}
    rows = [[parent, ttl if ttl > 0 else "never", ", ".join(groups.get(parent) or []) or "-"]
            for parent, ttl in sorted((info.get("topicMeta") or {}).items())]
    if rows:
        out("")
        print_table(["LITE PARENT TOPIC", "EXPIRATION (MIN)", "BOUND GROUPS"], rows)
    return 0


@command
async def lite_topic(admin: Admin, args: argparse.Namespace) -> int:
    per_broker = await admin.lite_topic_info(args.parent, args.lite_topic)
    if args.json:
        print_json(per_broker)
        return 0
    print_table(["BROKER", "MIN OFFSET", "MAX OFFSET", "LAST STORED", "HOME", "READERS"],
                [[b, (i.get("topicOffset") or {}).get("minOffset", 0), (i.get("topicOffset") or {}).get("maxOffset", 0),
                  _when((i.get("topicOffset") or {}).get("lastUpdateTimestamp")),
                  "yes" if i.get("shardingToBroker") else "no",
                  ", ".join(f"{s['clientId']} ({s['group']})" for s in i.get("subscriber") or []) or "-"]
                 for b, i in per_broker.items()], right=(1, 2))
    return 0


@command
async def lite_group(admin: Admin, args: argparse.Namespace) -> int:
    per_broker = await admin.lite_group_info(args.parent, args.group, args.lite_topic or "", args.top)
    if args.json:
        print_json(per_broker)
        return 0
    if args.lite_topic:
        rows = []
        for b, i in per_broker.items():
            w = i.get("liteTopicOffsetWrapper") or {}
            rows.append([b, w.get("brokerOffset", "-"), w.get("consumerOffset", "-"), i.get("totalLagCount", 0),
                         _when(i.get("earliestUnconsumedTimestamp"))])
        print_table(["BROKER", "BROKER OFFSET", "CONSUMED TO", "LAG", "OLDEST NOT CONSUMED"], rows, right=(1, 2, 3))
        return 0
    print_table(["BROKER", "LAG", "OLDEST NOT CONSUMED"],
                [[b, i.get("totalLagCount", 0), _when(i.get("earliestUnconsumedTimestamp"))]
                 for b, i in per_broker.items()], right=(1,))
    top = sorted(((e.get("lagCount", 0), e.get("liteTopic"), b, e.get("earliestUnconsumedTimestamp"))
                  for b, i in per_broker.items() for e in i.get("lagCountTopK") or []), reverse=True)[:args.top]
    if top:
        out("")
        print_table(["LITE TOPIC", "BROKER", "LAG", "OLDEST NOT CONSUMED"],
                    [[lite, b, lag, _when(t)] for lag, lite, b, t in top], right=(2,))
    return 0


@command
async def lite_client(admin: Admin, args: argparse.Namespace) -> int:
    per_broker = await admin.lite_client_info(args.parent, args.group, args.client_id, args.max)
    if args.json:
        print_json(per_broker)
        return 0
    print_table(["BROKER", "LITE TOPICS", "LAST POP", "READS"],
                [[b, i.get("liteTopicCount") if (i.get("liteTopicCount") or 0) >= 0 else "none",
                  _when(i.get("lastAccessTime")), ", ".join(i.get("liteTopicSet") or []) or "-"]
                 for b, i in per_broker.items()], right=(1,))
    return 0


@command
async def lite_dispatch(admin: Admin, args: argparse.Namespace) -> int:
    brokers = await admin.trigger_lite_dispatch(args.parent, args.group, args.client or "")
    out(f"lite topics of group {args.group} offered again to {args.client or 'its readers'} on "
        f"{', '.join(brokers) or 'no broker'}")
    return 0


def add_lite_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                      verb: Callable[..., argparse.ArgumentParser]) -> None:
    lite = sub.add_parser("lite", help="what the brokers hold of their lite topics (RocketMQ 5.5)").add_subparsers(
        dest="lite_command", required=True, metavar="VERB")
    p = verb(lite, "broker", lite_broker, "a broker's light queues, lite subscriptions and lite parent topics "
             "(mqadmin getBrokerLiteInfo)", json_flag=True)
    p.add_argument("broker", metavar="BROKER", help="its name or host:port")
    p = verb(lite, "topic", lite_topic, "a lite topic on each broker of its parent: offsets, last store time, "
             "readers (mqadmin getLiteTopicInfo)", json_flag=True)
    p.add_argument("parent", metavar="PARENT")
    p.add_argument("lite_topic", metavar="LITE_TOPIC")
    p = verb(lite, "group", lite_group, "a group's lag in its lite topics, the most lagging first (mqadmin "
             "getLiteGroupInfo)", json_flag=True)
    p.add_argument("parent", metavar="PARENT")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--lite-topic", metavar="NAME", help="only this lite topic")
    p.add_argument("--top", type=int, default=20, metavar="N", help="the N lite topics lagging most (default 20)")
    p = verb(lite, "client", lite_client, "the lite topics one client of a group reads (mqadmin getLiteClientInfo)",
             json_flag=True)
    p.add_argument("parent", metavar="PARENT")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("client_id", metavar="CLIENT_ID")
    p.add_argument("--max", type=int, default=1000, metavar="N", help="list at most N of them (default 1000)")
    p = verb(lite, "dispatch", lite_dispatch, "offer a group's readers again every lite topic with messages they "
             "have not had (mqadmin triggerLiteDispatch)")
    p.add_argument("parent", metavar="PARENT")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--client", metavar="CLIENT_ID", help="only this reader")


__all__ = ["add_lite_commands"]
