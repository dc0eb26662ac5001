"""LITE_SUBSCRIPTION_CTL (RocketMQ 5.5's LiteSubscriptionCtlProcessor): a gRPC front relays its lite push
consumers' subscription changes, as a JSON body ``{"subscriptionSet": [{"action", "clientId", "group", "topic",
"liteTopicSet", "offsetOption", "version"}]}``. An entry without a client, group or topic is skipped (RocketMQ's
way); a lite topic name that cannot be one is refused, as is an entry of a group that may not consume."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sluice.broker.lite.lite_subscription_registry import LiteQuotaError, LiteSubscriptionRegistry
from sluice.common import fastjson
from sluice.common.errors import InvalidNameError
from sluice.common.lite import OffsetOption, to_lmq_name, validate_lite_topic
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection

if TYPE_CHECKING:
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager

log = logging.getLogger(__name__)

ACTIONS = ("PARTIAL_ADD", "PARTIAL_REMOVE", "COMPLETE_ADD", "COMPLETE_REMOVE")
MAX_ENTRIES = 1024  # entries in one request (a front sends one)
MAX_LITE_TOPICS = 10_000  # lite topics named by one entry (a gRPC front's bound on one sync)
MAX_BODY = 2 << 20  # (10,000 names of 64 bytes, quoted; read on the event loop)


class LiteSubscriptionCtlProcessor:
    def __init__(self, registry: LiteSubscriptionRegistry, groups: SubscriptionGroupManager) -> None:
        self.registry = registry
        self.groups = groups

    def lite_subscription_ctl(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        if not req.body:
            return req.response(ResponseCode.ILLEGAL_OPERATION, "Request body is null.")
        if len(req.body) > MAX_BODY:
            return req.response(ResponseCode.ILLEGAL_OPERATION, f"a request body of at most {MAX_BODY} bytes")
        try:
            data = fastjson.loads(bytes(req.body))
            entries = data.get("subscriptionSet") if isinstance(data, dict) else None
        except ValueError as exc:
            return req.response(ResponseCode.ILLEGAL_OPERATION, f"malformed request body: {exc}")
        if not entries or not isinstance(entries, list):
            return req.response(ResponseCode.ILLEGAL_OPERATION, "LiteSubscriptionCtlRequestBody is empty.")
        if len(entries) > MAX_ENTRIES:
            return req.response(ResponseCode.ILLEGAL_OPERATION, f"at most {MAX_ENTRIES} entries in one request")
        try:
            parsed = [self._parse(e) for e in entries]
        except (ValueError, InvalidNameError) as exc:
            return req.response(ResponseCode.ILLEGAL_OPERATION, str(exc))
        try:
            for entry in parsed:
                if entry is not None:
                    self._apply(conn, *entry)
        except LiteQuotaError as exc:
            return req.response(ResponseCode.LITE_SUBSCRIPTION_QUOTA_EXCEEDED, str(exc))
        except PermissionError as exc:
            return req.response(ResponseCode.ILLEGAL_OPERATION, str(exc))
        return req.response(ResponseCode.SUCCESS)

    @staticmethod
    def _parse(e: Any) -> tuple[str, str, str, str, list[str], OffsetOption | None] | None:
        if not isinstance(e, dict):
            raise ValueError("a subscriptionSet entry must be an object")
        action = e.get("action")
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}, not {str(action)[:40]!r}")
        client_id, group, topic = (e.get(k) for k in ("clientId", "group", "topic"))
        if not (isinstance(client_id, str) and isinstance(group, str) and isinstance(topic, str)
                and client_id.strip() and group.strip() and topic.strip()):
            log.warning("lite subscription entry without a client, group or topic: skipped")
            return None
        lite_topics = e.get("liteTopicSet") or []
        if not isinstance(lite_topics, list) or len(lite_topics) > MAX_LITE_TOPICS:
            raise ValueError(f"liteTopicSet must be a list of at most {MAX_LITE_TOPICS} names")
        for lite in lite_topics:
            if not isinstance(lite, str):
                raise ValueError("liteTopicSet must hold names")
            validate_lite_topic(lite)
        offset = OffsetOption.from_json(e.get("offsetOption"))
        return str(action), client_id, group, topic, [to_lmq_name(topic, t) for t in lite_topics], offset

    def _apply(self, conn: Connection, action: str, client_id: str, group: str, topic: str, lmqs: list[str],
               offset: OffsetOption | None) -> None:
        if action in ("PARTIAL_ADD", "COMPLETE_ADD"):
            cfg = self.groups.find(group)
            if cfg is None or not cfg.consume_enable or cfg.lite_bind_topic != topic:
                raise PermissionError("Consumer group is not allowed to consume." if cfg is None or
                                      not cfg.consume_enable else f"subscription bind topic not match, {group}")
        if action == "PARTIAL_ADD":
            self.registry.add_partial(client_id, group, topic, lmqs, offset, conn)
        elif action == "PARTIAL_REMOVE":
            self.registry.remove_partial(client_id, group, topic, lmqs)
        elif action == "COMPLETE_ADD":
            self.registry.add_complete(client_id, group, topic, lmqs, conn)
        else:
            self.registry.remove_complete(client_id, group)


__all__ = ["LiteSubscriptionCtlProcessor"]
