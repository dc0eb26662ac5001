"""SEND_REPLY_MESSAGE and SEND_REPLY_MESSAGE_V2 (request-reply, RocketMQ 4.6's RIP-16): a responder's reply is pushed
at once to the client that sent the request (PUSH_REPLY_MESSAGE_TO_CLIENT over that client's connection), and
stored in the cluster's reply topic as well (``store_reply_message_enable``).

The answer is the push's: SUCCESS once the requester took the reply, SYSTEM_ERROR naming why not (the requester is
not connected to this broker, or did not answer), as RocketMQ's ReplyMessageProcessor answers.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from sluice.broker.processors.send_message_processor import (
    ipv4_addr,
    metrics_message_type,
    put_as_send,
    queue_refusal,
    topic_refusal,
)
from sluice.common.message import MessageExtBrokerInner, create_message_ids
from sluice.common.namespace import namespace_of, unwrap
from sluice.common.naming import reply_topic
from sluice.common.properties import (
    PROPERTY_MESSAGE_REPLY_TO_CLIENT,
    PROPERTY_MSG_REGION,
    PROPERTY_PUSH_REPLY_TIME,
    PROPERTY_TRACE_SWITCH,
    decode_properties,
    encode_properties,
)
from sluice.common.structs import perm_writeable
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import RemotingError
from sluice.remoting.headers import ReplyMessageRequestHeader, SendMessageRequestHeader

if TYPE_CHECKING:
    from sluice.broker.broker_stats import BrokerStats
    from sluice.broker.producer_manager import ProducerManager
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

PUSH_REPLY_TIMEOUT = 10.0  # s the requester has to take a reply (RocketMQ's Broker2Client.callClient: 10 s)
MAX_TOLD = 1024  # requesters remembered as already logged


class ReplyMessageProcessor:
    def __init__(self, config: BrokerConfig, broker_addr: str, store: MessageStore, stats: BrokerStats,
                 topic_config_manager: TopicConfigManager, producer_manager: ProducerManager) -> None:
        self.config = config
        self.broker_addr = broker_addr
        self.store = store
        self.stats = stats
        self.topic_config_manager = topic_config_manager
        self.producer_manager = producer_manager
        self._told: OrderedDict[str, None] = OrderedDict()  # requesters whose missed reply was logged (bounded)

    # == handlers ====================================================================================
    async def send_reply_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return await self._reply(conn, req, SendMessageRequestHeader.decode(req.ext_fields))

    async def send_reply_message_v2(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return await self._reply(conn, req, SendMessageRequestHeader.decode_v2(req.ext_fields))

    # == the reply path ==============================================================================
    async def _reply(self, conn: Connection, req: RemotingCommand, h: SendMessageRequestHeader) -> RemotingCommand:
        cfg = self.config
        stamps = {PROPERTY_MSG_REGION: cfg.region_id, PROPERTY_TRACE_SWITCH: "true" if cfg.trace_on else "false"}
        refusal = self._check(conn, req, h)
        if refusal is not None:
            refusal.ext_fields.update(stamps)
            return refusal
        # A responder in a namespace names its reply topic ``ns%<cluster>_REPLY_TOPIC`` (the Java client wraps every
        # topic it sends to): the reply is pushed under that name and kept in the cluster's reply topic.
        topic = reply_topic(cfg.broker_cluster_name)
        tc = self.topic_config_manager.get(topic)
        assert tc is not None  # (checked)
        # (a namespace's reply topic has no route: the queue its responder picked is one of TBW102's)
        queue_id = h.queue_id if h.queue_id >= 0 and h.topic == topic else random.randrange(max(1, tc.write_queue_nums))
        body = req.body if isinstance(req.body, bytes) else bytes(req.body)
        props = decode_properties(h.properties) if h.properties else {}
        props.update(stamps)  # (RocketMQ's buildMsgContext stamps the reply as a sent message: the region, trace)

        pushed, remark = await self._push(conn, h, props, body)
        if pushed:
            response = req.response(ResponseCode.SUCCESS, None, {"msgId": "0", "queueId": str(queue_id),
                                                                 "queueOffset": "0", **stamps})
        else:
            response = req.response(ResponseCode.SYSTEM_ERROR, remark, dict(stamps))

        if cfg.store_reply_message_enable:
            inner = MessageExtBrokerInner(topic, body, queue_id, h.flag, props, h.sys_flag, h.born_timestamp,
                                          ipv4_addr(conn.remote_addr), self.broker_addr, h.reconsume_times)
            result = await put_as_send(self.store, self.stats, inner)
            if result.stored:
                self.stats.record_topic_put(topic, result.msg_num, result.wrote_bytes, metrics_message_type(props))
                response.ext_fields["msgId"] = create_message_ids(self.broker_addr, result.phys_offsets)
                response.ext_fields["queueOffset"] = str(result.queue_offset)
            else:
                log.warning("a reply to %s was not stored in %s: %s %s", props.get(PROPERTY_MESSAGE_REPLY_TO_CLIENT),
                            topic, result.status.name, result.remark or "")
        return response

    def _check(self, conn: Connection, req: RemotingCommand, h: SendMessageRequestHeader) -> RemotingCommand | None:
        """RocketMQ's msgCheck: the broker and the topic take writes, the queue exists; and (beyond RocketMQ,
        which stores a reply wherever it is sent, as a send bypassing the send path's checks) the topic is this
        cluster's reply topic, the one every responder's ``createReplyMessage`` names."""
        if not perm_writeable(self.config.broker_permission) or self.store.write_failure:
            why = f": {self.store.write_failure}" if self.store.write_failure else ""
            return req.response(ResponseCode.NO_PERMISSION, f"the broker[{self.broker_addr}] sending message is "
                                                            f"forbidden{why}")
        refusal = topic_refusal(req, h.topic)
        if refusal is not None:
            return refusal
        expected = reply_topic(self.config.broker_cluster_name)
        if h.topic != expected and not (namespace_of(h.topic) and unwrap(h.topic) == expected):
            return req.response(ResponseCode.MESSAGE_ILLEGAL, f"a reply goes to the reply topic {expected}, not "
                                                              f"{h.topic}")
        tc = self.topic_config_manager.get(expected)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{expected}] not exist, apply first please!")
        if not perm_writeable(tc.perm):
            return req.response(ResponseCode.NO_PERMISSION, f"the topic[{expected}] sending message is forbidden")
        refusal = queue_refusal(conn, req, tc, h.queue_id) if h.topic == expected else None
        if refusal is not None:
            return refusal
        max_size = self.config.store.max_message_size
        if len(req.body) > max_size:
            return req.response(ResponseCode.MESSAGE_ILLEGAL,
                                f"the message body size {len(req.body)} is larger than max_message_size {max_size}")
        return None

    async def _push(self, conn: Connection, h: SendMessageRequestHeader, props: dict[str, str],
                    body: bytes) -> tuple[bool, str]:
        """Hand the reply to its requester's connection; whether it took it, and why not."""
        requester = props.get(PROPERTY_MESSAGE_REPLY_TO_CLIENT)
        if requester is None:
            log.warning("%s is null, can not reply message", PROPERTY_MESSAGE_REPLY_TO_CLIENT)
            return False, f"reply message properties[{PROPERTY_MESSAGE_REPLY_TO_CLIENT}] is null"
        channel = self.producer_manager.find_channel(requester)
        if channel is None:
            remark = f"push reply message fail, channel of <{requester}> not found."
            self._undelivered(requester, remark)
            return False, remark
        pushed_props = dict(props)
        pushed_props[PROPERTY_PUSH_REPLY_TIME] = str(int(time.time() * 1000))
        header = ReplyMessageRequestHeader(
            h.producer_group, h.topic, h.default_topic, h.default_topic_queue_nums, h.queue_id, h.sys_flag,
            h.born_timestamp, h.flag, encode_properties(pushed_props).decode(), h.reconsume_times, h.unit_mode,
            conn.remote_addr, self.broker_addr, int(time.time() * 1000))
        try:
            async with asyncio.timeout(PUSH_REPLY_TIMEOUT):  # (a requester not reading holds no task past it)
                answer = await channel.conn.invoke(
                    RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, header.encode(), body),
                    PUSH_REPLY_TIMEOUT)
        except (RemotingError, TimeoutError, OSError) as exc:
            self._undelivered(requester, f"push reply message to <{requester}> fail: {exc}")
            return False, f"push reply message to {requester}fail."
        if answer.code != ResponseCode.SUCCESS:
            self._undelivered(requester, f"push reply message to <{requester}> return fail, response remark: "
                                         f"{answer.remark}")
            return False, f"push reply message to {requester}fail."
        return True, ""

    def _undelivered(self, requester: str, why: str) -> None:
        """A reply its requester did not get: counted (``replyUndeliveredTotal``), logged once per requester
        (a requester gone may have many replies on their way)."""
        self.stats.replies_undelivered += 1
        if requester in self._told:
            return
        if len(self._told) >= MAX_TOLD:
            self._told.popitem(last=False)
        self._told[requester] = None
        log.warning("%s (further replies to it not logged)", why)
