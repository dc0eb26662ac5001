"""RECALL_MESSAGE (RocketMQ 5.x): a producer takes back a timer message before it is due, with the recall handle its
send was answered with. The broker stores a recall in the timer wheel's slot of that message; the slot's delivery
then leaves the message out (``TimerMessageService``). Answers, codes and remarks as RocketMQ's
RecallMessageProcessor."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sluice.broker.processors.send_message_processor import ipv4_addr, put_as_send
from sluice.common.decimal_text import parse_long
from sluice.common.properties import PROPERTY_MSG_REGION
from sluice.common.recall_handle import RecallHandle, RecallHandleError
from sluice.common.structs import perm_writeable
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.headers import RecallMessageRequestHeader

if TYPE_CHECKING:
    from sluice.broker.broker_stats import BrokerStats
    from sluice.broker.timer_message_service import TimerMessageService
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

UNAVAILABLE = "recall failed, broker service not available"


class RecallMessageProcessor:
    def __init__(self, config: BrokerConfig, broker_addr: str, store: MessageStore, stats: BrokerStats,
                 topic_config_manager: TopicConfigManager, timer_service: TimerMessageService | None,
                 is_master: bool) -> None:
        self.config = config
        self.broker_addr = broker_addr
        self.store = store
        self.stats = stats
        self.topic_config_manager = topic_config_manager
        self.timer_service = timer_service  # (a master's)
        self.is_master = is_master

    async def recall_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = RecallMessageRequestHeader.decode(req.ext_fields)
        region = {PROPERTY_MSG_REGION: self.config.region_id}
        refusal = self._check(req, h)
        if refusal is not None:
            code, remark = refusal
            return req.response(code, remark, region)
        handle = RecallHandle.decode(h.recall_handle)  # (checked)
        assert self.timer_service is not None
        if not self.timer_service.enabled:  # (RocketMQ's store refuses the record: WHEEL_TIMER_NOT_ENABLE)
            return req.response(ResponseCode.SYSTEM_ERROR, "recall failed, execute error", region)
        marker = self.timer_service.recall_message(handle.topic, handle.message_id, int(handle.timestamp),
                                                   h.producer_group or "", ipv4_addr(conn.remote_addr),
                                                   self.broker_addr)
        result = await put_as_send(self.store, self.stats, marker)
        if not result.stored:
            return req.response(ResponseCode.SYSTEM_ERROR, "recall failed, execute error", region)
        return req.response(ResponseCode.SUCCESS, None, {**region, "msgId": handle.message_id})

    def _check(self, req: RemotingCommand, h: RecallMessageRequestHeader) -> tuple[int, str] | None:
        c = self.config
        if not c.recall_message_enable:
            return ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden"
        if not self.is_master or self.timer_service is None:
            return ResponseCode.SLAVE_NOT_AVAILABLE, UNAVAILABLE
        if (not perm_writeable(c.broker_permission) or self.store.write_failure) \
                and not c.allow_recall_when_broker_not_writeable:
            return ResponseCode.SERVICE_NOT_AVAILABLE, UNAVAILABLE
        if self.topic_config_manager.get(h.topic) is None:
            return ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{h.topic}] not exist"
        try:
            handle = RecallHandle.decode(h.recall_handle)
        except RecallHandleError as exc:
            return ResponseCode.ILLEGAL_OPERATION, str(exc)
        if handle.topic != h.topic:
            return ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match"
        if handle.broker_name != c.broker_name:
            return ResponseCode.ILLEGAL_OPERATION, UNAVAILABLE
        left = parse_long(handle.timestamp, -1) - int(time.time() * 1000)
        # (a due time is rounded up to the precision: the latest handle is that much past the longest delay)
        if left <= 0 or left > c.store.timer_max_delay_sec * 1000 + c.store.timer_precision_ms:
            return ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid"
        return None
