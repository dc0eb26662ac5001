"""GET_CONSUMER_LIST_BY_GROUP, QUERY_CONSUMER_OFFSET and UPDATE_CONSUMER_OFFSET."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

if TYPE_CHECKING:
    from sluice.broker.consumer_manager import ConsumerManager
    from sluice.store.message_store import MessageStore


class ConsumerManageProcessor:
    def __init__(self, store: MessageStore, consumer_manager: ConsumerManager,
                 swapped_out: Callable[[str, int, int], bool]) -> None:
        self.store = store
        self.consumer_manager = consumer_manager
        self.swapped_out = swapped_out

    def get_consumer_list_by_group(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        group = GetConsumerListByGroupRequestHeader.decode(req.ext_fields).consumer_group
        ids = self.consumer_manager.consumer_ids(group)
        if not ids:
            return req.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return req.response(ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": ids}).encode())

    def update_consumer_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        offsets = self.store.consumer_offsets
        h = UpdateConsumerOffsetRequestHeader.decode(req.ext_fields)
        group, topic, qid = h.consumer_group, h.topic, h.queue_id
        if offsets.has_offset_reset(group, topic, qid):  # the consumer has not been told of the reset yet
            return req.response(ResponseCode.SUCCESS, "Offset has been previously reset")
        offsets.commit_offset(group, topic, qid, h.commit_offset)
        return req.response(ResponseCode.SUCCESS)

    def query_consumer_offset(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """The committed offset; for a group that never committed, 0 while the queue's first message (offset 0)
        is still there and in memory, as RocketMQ answers; else QUERY_NOT_FOUND (an empty queue too), and the
        client's own consume-from setting decides.

        RocketMQ 5's ``setZeroIfNotFound=false`` turns the 0 rule off.
        """
        store = self.store
        h = QueryConsumerOffsetRequestHeader.decode(req.ext_fields)
        group, topic, qid = h.consumer_group, h.topic, h.queue_id
        offset = store.consumer_offsets.query_offset(group, topic, qid)
        if offset >= 0:
            return req.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})
        if h.set_zero_if_not_found is not False and store.get_min_offset_in_queue(topic, qid) <= 0 \
                and store.get_max_offset_in_queue(topic, qid) > 0 and not self.swapped_out(topic, qid, 0):
            return req.response(ResponseCode.SUCCESS, None, {"offset": "0"})
        return req.response(ResponseCode.QUERY_NOT_FOUND,
                            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
