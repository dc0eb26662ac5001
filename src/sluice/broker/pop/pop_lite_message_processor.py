"""POP_LITE_MESSAGE (RocketMQ 5.5's PopLiteMessageProcessor): a lite push consumer pops the lite topics its
client was told of (the event dispatcher's events), each in order, as a FIFO pop of its light queue: a lite topic
whose messages are in flight hands out nothing more until they are acknowledged or come back.

One answer may hold several lite topics' messages, so it carries no start offsets: the client builds each
message's receipt from the light-queue offset the message carries (INNER_MULTI_QUEUE_OFFSET), the answer's pop
time and ``orderCountInfo`` (how many times each was handed out before, ``;``-separated).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TYPE_CHECKING

from sluice.broker.pop.pop_long_polling_service import PollingFull, PopLongPollingService
from sluice.broker.pop.pop_message_processor import PopMessageProcessor, _settle, check_invisible_time
from sluice.broker.pop.pop_revive_service import now_ms
from sluice.common.extra_info import ORDER_REVIVE_QUEUE
from sluice.common.lite import belongs_to
from sluice.common.structs import perm_readable
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import BadRequestError
from sluice.remoting.headers import PopLiteMessageRequestHeader, PopMessageRequestHeader
from sluice.remoting.headers.pop import INIT_MODE_MAX

if TYPE_CHECKING:
    from sluice.broker.lite.lite_event_dispatcher import LiteEventDispatcher
    from sluice.broker.pop.pop_revive_service import PopReviveService
    from sluice.broker.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig

log = logging.getLogger(__name__)

MAX_POP_LITE_NUM = 32


class PopLiteMessageProcessor:
    def __init__(self, config: BrokerConfig, topic_config_manager: TopicConfigManager,
                 subscription_group_manager: SubscriptionGroupManager, pop: PopMessageProcessor,
                 pop_revive: PopReviveService, events: LiteEventDispatcher, polling: PopLongPollingService) -> None:
        self.config = config
        self.topic_config_manager = topic_config_manager
        self.subscription_group_manager = subscription_group_manager
        self.pop = pop
        self.pop_revive = pop_revive
        self.events = events
        self.polling = polling  # held pops, by client id

    async def pop_lite_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = PopLiteMessageRequestHeader.decode(req.ext_fields)
        refused = self._refusal(req, h)
        if refused is not None:
            return refused
        group = self.subscription_group_manager.find(h.consumer_group)
        assert group is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, h.poll_time) / 1000
        while True:
            resp = await self._pop(req, h, group)
            if resp is not None:
                return resp
            left = deadline - loop.time()
            if left <= 0:
                return req.response(ResponseCode.POLLING_TIMEOUT, "POLLING_TIMEOUT")
            arrived: asyncio.Future[bool] = loop.create_future()
            try:
                held = self.polling.hold((h.client_id,), -1, left, partial(_settle, arrived))
            except PollingFull as exc:
                return req.response(ResponseCode.POLLING_FULL, str(exc))
            try:
                await arrived
            finally:
                held.drop()

    def _refusal(self, req: RemotingCommand, h: PopLiteMessageRequestHeader) -> RemotingCommand | None:
        """RocketMQ's preCheck, in its order and words."""
        if not perm_readable(self.config.broker_permission):
            return req.response(ResponseCode.NO_PERMISSION, f"the broker[{self.config.broker_name}] pop message is "
                                                            f"forbidden")
        if h.max_msg_num > MAX_POP_LITE_NUM or h.max_msg_num <= 0:
            return req.response(ResponseCode.INVALID_PARAMETER,
                                f"the broker[{self.config.broker_name}] pop message's num is greater than 32")
        try:
            check_invisible_time(h.invisible_time)
        except BadRequestError as exc:
            return req.response(ResponseCode.INVALID_PARAMETER, str(exc))
        tc = self.topic_config_manager.get(h.topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic [{h.topic}] not exist, apply first please!")
        if not perm_readable(tc.perm):
            return req.response(ResponseCode.NO_PERMISSION, f"the topic [{h.topic}] peeking message is forbidden")
        if tc.message_type != "LITE":
            return req.response(ResponseCode.INVALID_PARAMETER, f"the topic [{h.topic}] message type not match")
        group = self.subscription_group_manager.find(h.consumer_group)
        if group is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{h.consumer_group}] not exist")
        if not group.consume_enable:
            return req.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}")
        if group.lite_bind_topic != h.topic:
            return req.response(ResponseCode.INVALID_PARAMETER,
                                f"subscription bind topic not match, {h.consumer_group}")
        return None

    async def _pop(self, req: RemotingCommand, h: PopLiteMessageRequestHeader,
                   group: SubscriptionGroupConfig) -> RemotingCommand | None:
        """One look at the client's events: the answer, or None when none of them had a message to hand out."""
        sub = self.events.registry.clients.get(h.client_id)
        if sub is None or sub.group != h.consumer_group or sub.topic != h.topic:
            return None  # (a client's events are its own group's, of its own topic)
        lmqs = self.events.take(h.client_id)
        if not lmqs:
            return None
        loop = asyncio.get_running_loop()
        pop_time = self.pop_revive.next_pop_time()
        budget = h.max_msg_num
        parts: list[bytes | memoryview] = []
        counts: list[str] = []
        for i, lmq in enumerate(lmqs):
            if budget <= 0:
                self.events.put_back(h.client_id, lmqs[i:])
                break
            if not belongs_to(lmq, h.topic):
                continue
            ph = PopMessageRequestHeader(h.consumer_group, lmq, 0, budget, h.invisible_time, 0, h.born_time,
                                         INIT_MODE_MAX, order=True, attempt_id=h.attempt_id)
            resp, unblocked_at = await self.pop.pop_orderly(req, ph, group, pop_time)
            if resp is None:
                if unblocked_at:  # in flight: offered again when they come back
                    self.events.offer_again_at(lmq, h.consumer_group,
                                               loop.time() + max(0, unblocked_at - now_ms()) / 1000)
                elif self.events.backlog(h.consumer_group, lmq):  # (its offset was moved, or it was busy: later)
                    self.events.put_back(h.client_id, [lmq])
                continue
            got = [entry.rsplit(" ", 1)[1] for entry in resp.ext_fields["orderCountInfo"].split(";")
                   if " qo" in entry]
            # What is handed out comes back if it is not acknowledged: offered again then.
            self.events.offer_again_at(lmq, h.consumer_group, loop.time() + h.invisible_time / 1000)
            counts += got
            parts.extend(resp.body_parts or ())
            budget -= len(got)
        if not parts:
            return None
        resp = req.response(ResponseCode.SUCCESS, "FOUND", {
            "popTime": str(pop_time), "invisibleTime": str(h.invisible_time), "reviveQid": str(ORDER_REVIVE_QUEUE),
            "orderCountInfo": ";".join(counts)})
        resp.body_parts = parts
        return resp


__all__ = ["MAX_POP_LITE_NUM", "PopLiteMessageProcessor"]
