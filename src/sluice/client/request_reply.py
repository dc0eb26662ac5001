"""Request-reply (RocketMQ 4.6, RIP-16): what a request carries, how a responder builds its reply, and how the
requester matches the reply the broker pushes to it with the request waiting for it.

A request is an ordinary message with three system properties: ``CORRELATION_ID`` (a new UUID), ``REPLY_TO_CLIENT``
(the requester's client id) and ``TTL`` (its timeout, ms). Its consumer (the responder) answers with
``create_reply_message(request, body)`` and an ordinary ``Producer.send``: the reply goes to the cluster's reply
topic (``<CLUSTER>_REPLY_TOPIC``, from the request's ``CLUSTER`` property, which the broker stamps) as
SEND_REPLY_MESSAGE_V2, and the broker pushes it (PUSH_REPLY_MESSAGE_TO_CLIENT) to the requester's connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

from sluice.client.message import Message
from sluice.common.compression import inflate
from sluice.common.errors import ClientError
from sluice.common.message import MessageExt
from sluice.common.naming import reply_topic
from sluice.common.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_CLUSTER,
    PROPERTY_CORRELATION_ID,
    PROPERTY_MESSAGE_REPLY_TO_CLIENT,
    PROPERTY_MESSAGE_TTL,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_REPLY_MESSAGE_ARRIVE_TIME,
    PROPERTY_SEPARATOR,
    REPLY_MESSAGE_FLAG,
    decode_properties,
)
from sluice.common.sysflag import COMPRESSED_FLAG
from sluice.remoting.headers import ReplyMessageRequestHeader

log = logging.getLogger(__name__)

# Replies waited for at once by one client, at most: a request past it is refused rather than held.
MAX_WAITING_REQUESTS = 100_000


class RequestTimeoutError(ClientError, TimeoutError):
    """A request was sent, but no reply came within its timeout (RocketMQ's RequestTimeoutException)."""


def system_properties(props: dict[str, str]) -> bytes:
    """``props`` as they follow a message's own on the wire: each pair led by the separator."""
    return "".join(f"{PROPERTY_SEPARATOR}{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items()).encode()


@dataclass
class ReplyMessage(Message):
    """A responder's reply to a request, made by ``create_reply_message``; ``Producer.send`` sends it as
    SEND_REPLY_MESSAGE_V2 (never in a batch)."""

    correlation_id: str = ""
    reply_to_client: str = ""
    ttl: str = ""

    def reply_properties(self) -> bytes:
        return system_properties({PROPERTY_MESSAGE_TYPE: REPLY_MESSAGE_FLAG,
                                  PROPERTY_CORRELATION_ID: self.correlation_id,
                                  PROPERTY_MESSAGE_REPLY_TO_CLIENT: self.reply_to_client,
                                  PROPERTY_MESSAGE_TTL: self.ttl})


def create_reply_message(request: MessageExt, body: bytes) -> ReplyMessage:
    """The reply to ``request`` (a message a consumer received) with ``body``, for ``Producer.send``
    (RocketMQ's ``MessageUtil.createReplyMessage``). Raises ``ClientError`` when ``request`` is not a request: it
    has no ``CLUSTER`` (stamped by the broker) or no ``CORRELATION_ID`` / ``REPLY_TO_CLIENT``."""
    props = request.properties
    cluster = props.get(PROPERTY_CLUSTER)
    if not cluster:
        raise ClientError(f"create reply message fail, requestMessage error, property[{PROPERTY_CLUSTER}] is null.")
    correlation_id, reply_to = props.get(PROPERTY_CORRELATION_ID), props.get(PROPERTY_MESSAGE_REPLY_TO_CLIENT)
    if not correlation_id or not reply_to:
        raise ClientError(f"create reply message fail: message {request.msg_id} is not a request (no "
                          f"{PROPERTY_CORRELATION_ID} or {PROPERTY_MESSAGE_REPLY_TO_CLIENT})")
    return ReplyMessage(reply_topic(cluster), body, correlation_id=correlation_id, reply_to_client=reply_to,
                        ttl=props.get(PROPERTY_MESSAGE_TTL, ""))


def request_properties(correlation_id: str, client_id: str, timeout_ms: int) -> bytes:
    """The system properties that make a message a request."""
    return system_properties({PROPERTY_CORRELATION_ID: correlation_id, PROPERTY_MESSAGE_REPLY_TO_CLIENT: client_id,
                              PROPERTY_MESSAGE_TTL: str(timeout_ms)})


def reply_from_push(header: ReplyMessageRequestHeader, body: bytes, max_body: int) -> MessageExt:
    """The reply a broker pushed (PUSH_REPLY_MESSAGE_TO_CLIENT), as the requester gets it: inflated (at most
    ``max_body`` bytes; ``MessageFormatError`` past it), stamped with when it arrived (``ARRIVE_TIME``)."""
    if header.sys_flag & COMPRESSED_FLAG:
        body = inflate(body, max_body, "compressed reply body")
    props = decode_properties(header.properties) if header.properties else {}
    props[PROPERTY_REPLY_MESSAGE_ARRIVE_TIME] = str(int(time.time() * 1000))
    return MessageExt(header.topic, body, header.queue_id, header.flag, 0, 0, header.sys_flag & ~COMPRESSED_FLAG,
                      header.born_timestamp, header.born_host, header.store_timestamp, header.store_host,
                      header.reconsume_times, 0, props, 0, 0)


class ReplyWaiters:
    """The requests of one client waiting for their replies, by correlation id (RocketMQ's RequestFutureHolder)."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[MessageExt]] = {}

    def expect(self) -> tuple[str, asyncio.Future[MessageExt]]:
        """A new correlation id and the future its reply completes."""
        if len(self._waiting) >= MAX_WAITING_REQUESTS:
            raise ClientError(f"{MAX_WAITING_REQUESTS} requests are waiting for replies already")
        correlation_id = str(uuid.uuid4())
        future: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        return correlation_id, future

    def forget(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    def deliver(self, reply: MessageExt) -> bool:
        """Hand ``reply`` to the request it answers; False (logged) when none waits for it (it came too late)."""
        correlation_id = reply.properties.get(PROPERTY_CORRELATION_ID, "")
        future = self._waiting.pop(correlation_id, None)
        if future is None or future.done():
            log.warning("receive reply message, but not matched any request, CorrelationId: %s , reply from host: "
                        "%s", correlation_id, reply.born_host)
            return False
        future.set_result(reply)
        return True

    def __len__(self) -> int:
        return len(self._waiting)


__all__ = ["MAX_WAITING_REQUESTS", "ReplyMessage", "ReplyWaiters", "RequestTimeoutError", "create_reply_message",
           "reply_from_push", "request_properties"]
