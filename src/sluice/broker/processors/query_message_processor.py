"""QUERY_MESSAGE (by key, via the index) and VIEW_MESSAGE_BY_ID (by commit-log offset)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.headers import QueryMessageRequestHeader, ViewMessageRequestHeader

if TYPE_CHECKING:
    from sluice.store.message_store import MessageStore


class QueryMessageProcessor:
    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def query_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        store = self.store
        h = QueryMessageRequestHeader.decode(req.ext_fields)
        max_num = 32 if h.unique_key_query else h.max_num
        result = store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp or None)
        if not result.buffers:
            return req.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct")
        ext = {"indexLastUpdateTimestamp": str(store.index_service.last_update_timestamp()),
               "indexLastUpdatePhyoffset": str(store.index_service.last_update_phy_offset())}
        resp = req.response(ResponseCode.SUCCESS, None, ext)
        resp.body_parts = result.buffers
        return resp

    def view_message_by_id(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.decode(req.ext_fields)
        offset = h.offset
        view = self.store.select_one_message_by_offset(offset, visible_only=True)
        if view is not None and h.topic is not None:
            # The topic named is the one authorization allowed: a message of another is not shown (as not found).
            msg = self.store.look_message_by_offset(offset, visible_only=True)
            if msg is None or msg.topic != h.topic:
                view = None
        if view is None:
            return req.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        resp = req.response(ResponseCode.SUCCESS)
        resp.body_parts = [view]
        return resp
