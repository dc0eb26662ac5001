"""A lite parent topic's section of its topic page (RocketMQ 5.5's lite topics): on each broker how many lite topics
it holds, their expiration and the groups bound to it; each bound group's lag over its lite topics with the ones
most behind; and one lite topic looked up by name (its offsets, readers and home broker), over the lite admin
requests ``sluice lite`` sends."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from sluice.client.admin import Admin
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.common.structs import TopicConfig, TopicRouteData
from sluice.remoting.errors import RemotingError

MAX_GROUPS = 20  # bound groups shown (each costs a request per broker)
ANSWER_SECONDS = 5
TOP = 10  # lite topics most behind, per group


@dataclass(slots=True)
class LiteGroup:
    name: str
    lag: int = 0
    oldest: int = 0  # store time of the oldest message not consumed (ms, 0: none)
    behind: list[tuple[str, int]] = field(default_factory=list)  # (lite topic, lag), most behind first
    error: str = ""


@dataclass(slots=True)
class LiteView:
    brokers: list[tuple[str, int, int, list[str]]]  # (broker, lite topics, expiration in minutes, bound groups)
    groups: list[LiteGroup]
    more_groups: int = 0  # bound groups not shown
    asked: str = ""  # the lite topic looked up
    one: list[dict[str, Any]] = field(default_factory=list)  # its rows, one per broker
    error: str = ""  # why the lookup found nothing


async def is_lite_parent(admin: Admin, topic: str, route: TopicRouteData) -> bool:
    """Whether ``topic`` is a lite parent, as its first master's config says (False when it does not answer
    within 5 s: the rest of the page is shown without the section)."""
    addr = next((b.master_addr for b in sorted(route.broker_datas, key=lambda b: b.broker_name) if b.master_addr),
                None)
    if addr is None:
        return False
    try:
        raw = await asyncio.wait_for(admin.api.get_topic_config(addr, topic), 5)
        return raw is not None and TopicConfig.from_json(raw).message_type.upper() == "LITE"
    except (ClientError, RemotingError, TimeoutError, OSError, KeyError, ValueError, TypeError):
        return False


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {ANSWER_SECONDS} s"
    return (exc.remark or str(exc)) if isinstance(exc, BrokerResponseError) else (str(exc) or type(exc).__name__)


async def lite_view(admin: Admin, parent: str, asked: str = "") -> LiteView | None:
    """The section for the lite parent ``parent``; None when the visitor may not read it or its brokers do not
    answer within 5 s (the rest of the topic's page is still shown)."""
    try:
        per_broker = await asyncio.wait_for(admin.parent_topic_info(parent), ANSWER_SECONDS)
    except (ClientError, RemotingError, TimeoutError, OSError):
        return None
    brokers = [(b, int(i.get("liteTopicCount") or 0), int(i.get("ttl") or 0), sorted(i.get("groups") or []))
               for b, i in per_broker.items()]
    bound = sorted({g for *_, groups in brokers for g in groups})
    view = LiteView(brokers, [LiteGroup(g) for g in bound[:MAX_GROUPS]], max(len(bound) - MAX_GROUPS, 0),
                    asked.strip())

    async def fill(g: LiteGroup) -> None:
        try:
            answers = await asyncio.wait_for(admin.lite_group_info(parent, g.name, top_k=TOP), ANSWER_SECONDS)
        except (ClientError, RemotingError, TimeoutError, OSError) as exc:
            g.error = _reason(exc)
            return
        behind: dict[str, int] = {}
        for info in answers.values():
            g.lag += int(info.get("totalLagCount") or 0)
            oldest = int(info.get("earliestUnconsumedTimestamp") or -1)
            if oldest > 0:
                g.oldest = oldest if g.oldest == 0 else min(g.oldest, oldest)
            for e in info.get("lagCountTopK") or []:
                name = str(e.get("liteTopic"))
                behind[name] = behind.get(name, 0) + int(e.get("lagCount") or 0)
        g.behind = sorted(behind.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]

    await asyncio.gather(*(fill(g) for g in view.groups))
    if view.asked:
        try:
            found = await asyncio.wait_for(admin.lite_topic_info(parent, view.asked), ANSWER_SECONDS)
        except (ClientError, RemotingError, TimeoutError, OSError) as exc:
            view.error = f"Lite topic {view.asked}: {_reason(exc)}"
        else:
            for b, info in found.items():
                offsets = info.get("topicOffset") or {}
                view.one.append({"broker": b, "min": int(offsets.get("minOffset") or 0),
                                 "max": int(offsets.get("maxOffset") or 0),
                                 "last": int(offsets.get("lastUpdateTimestamp") or 0),
                                 "home": bool(info.get("shardingToBroker")),
                                 "readers": [f"{s.get('clientId')} ({s.get('group')})"
                                             for s in info.get("subscriber") or []]})
    return view
