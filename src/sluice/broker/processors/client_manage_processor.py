"""HEART_BEAT, UNREGISTER_CLIENT and CHECK_CLIENT_CONFIG."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sluice.auth.signature import ACCESS_KEY
from sluice.broker.client_channel_info import ClientChannelInfo
from sluice.broker.expression_message_filter import property_filter_disabled
from sluice.common import fastjson
from sluice.common.errors import InvalidSubscriptionError
from sluice.common.naming import retry_topic
from sluice.common.structs import ConsumeType, HeartbeatData
from sluice.common.sysflag import PERM_READ, PERM_WRITE
from sluice.filter import compile_expression, is_tag_type
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import BadRequestError
from sluice.remoting.headers import UnregisterClientRequestHeader

if TYPE_CHECKING:
    from sluice.broker.consumer_filter_manager import ConsumerFilterManager
    from sluice.broker.consumer_manager import ConsumerManager
    from sluice.broker.producer_manager import ProducerManager
    from sluice.broker.rebalance_lock_manager import RebalanceLockManager
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager
    from sluice.broker.topic_config_manager import EnsureSystemTopic
    from sluice.common.config import BrokerConfig

log = logging.getLogger(__name__)


def parse_json_body(req: RemotingCommand, what: str) -> dict:
    """A request's JSON object body as RocketMQ's clients write it (fastjson: bare number keys; nesting bounded)."""
    try:
        data = fastjson.loads(bytes(req.body or b"") or b"null")
    except ValueError as exc:
        raise BadRequestError(f"{what} body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadRequestError(f"{what} body is not a JSON object")
    return data


class ClientManageProcessor:
    def __init__(self, config: BrokerConfig, consumer_manager: ConsumerManager, producer_manager: ProducerManager,
                 consumer_filter_manager: ConsumerFilterManager, lock_manager: RebalanceLockManager,
                 subscription_group_manager: SubscriptionGroupManager,
                 ensure_system_topic: EnsureSystemTopic) -> None:
        self.config = config
        self.consumer_manager = consumer_manager
        self.producer_manager = producer_manager
        self.consumer_filter_manager = consumer_filter_manager
        self.lock_manager = lock_manager
        self.subscription_group_manager = subscription_group_manager
        self.ensure_system_topic = ensure_system_topic

    def heart_beat(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        data = parse_json_body(req, "heartbeat")
        try:
            hb = HeartbeatData.from_json(data)
        except KeyError as exc:
            raise BadRequestError(f"heartbeat body is malformed: a {exc} field is missing") from exc
        except (TypeError, ValueError) as exc:
            raise BadRequestError(f"heartbeat body is malformed: {exc}") from exc
        for cd in hb.consumers:
            group = self.subscription_group_manager.find(cd.group_name)
            if group is not None and group.retry_queue_nums > 0:
                self.ensure_system_topic(retry_topic(cd.group_name), group.retry_queue_nums, PERM_READ | PERM_WRITE)
            self.consumer_manager.register_consumer(
                cd.group_name, ClientChannelInfo(hb.client_id, conn, req.language, req.version),
                cd.consume_type, cd.message_model, cd.consume_from_where, cd.subscriptions)
            if self.config.enable_property_filter and (cd.subscriptions
                                                    or cd.consume_type is not ConsumeType.CONSUME_ACTIVELY):
                self.consumer_filter_manager.register(cd.group_name, cd.subscriptions)
        user = req.ext_fields.get(ACCESS_KEY)  # (checked by authentication when it is on)
        for group_name in hb.producer_groups:
            self.producer_manager.register_producer(group_name, ClientChannelInfo(
                hb.client_id, conn, req.language, req.version, user=user))
        return req.response(ResponseCode.SUCCESS)

    def _registered_here(self, group: str, client_id: str, conn: Connection) -> bool:
        g = self.consumer_manager.get(group)
        ch = g.channels.get(client_id) if g is not None else None
        return ch is None or ch.conn is conn

    def unregister_client(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.decode(req.ext_fields)
        client_id, producer_group, consumer_group = h.client_id, h.producer_group, h.consumer_group
        if producer_group:
            self.producer_manager.unregister_producer(producer_group, client_id, conn)
        if consumer_group:
            if not self._registered_here(consumer_group, client_id, conn):
                return req.response(ResponseCode.SUCCESS)  # someone else's: nothing of theirs is touched
            self.consumer_manager.unregister_consumer(consumer_group, client_id, conn)
            # A client that unregisters has stopped consuming, so its orderly-queue locks go too. Java brokers keep
            # them until they expire (60 s), and the C++ 1.2.x client's shutdown leaves the first queue of each
            # broker locked (its unlockAll skips it): a restarted orderly consumer would wait a minute for it.
            released = self.lock_manager.unlock_all(consumer_group, client_id)
            if released:
                log.info("released %d queue locks of %s in group %s as it unregistered", len(released), client_id,
                         consumer_group)
        return req.response(ResponseCode.SUCCESS)

    def check_client_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """A consumer starting with a filter that is not a tag expression asks whether this broker can apply it."""
        data = parse_json_body(req, "client config")
        sub = data.get("subscriptionData")
        if not isinstance(sub, dict):
            return req.response(ResponseCode.SUCCESS)
        etype = sub.get("expressionType")
        if is_tag_type(etype):
            return req.response(ResponseCode.SUCCESS)
        etype = str(etype)
        if not self.config.enable_property_filter:
            return req.response(ResponseCode.SYSTEM_ERROR, property_filter_disabled(etype))
        try:
            compile_expression(etype, str(sub.get("subString") or ""))
        except InvalidSubscriptionError as exc:
            return req.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return req.response(ResponseCode.SUCCESS)
