"""ACL 2.0 on the gRPC front (RocketMQ's proxy ``AuthenticationPipeline`` / ``AuthorizationPipeline`` for gRPC):
every RPC's ``authorization`` header checked against the users, then what it asks for against the rules; a refusal
is the RPC's own response with status UNAUTHORIZED (40100) and RocketMQ's message.

What each RPC asks for, as RocketMQ's ``DefaultAuthorizationContextBuilder`` maps it (send: Pub on the topic; receive,
ack, forward to DLQ, assignment: Sub on the group and the topic; a consumer's heartbeat and settings: Sub on its
group and topics; a producer's settings: Pub on its topics). Beyond RocketMQ: every message of a send is checked
(RocketMQ checks the first only), the user is the one authenticated (never a client's ``x-mq-authorization-ak``),
and a request whose ``x-mq-date-time`` is further than ``max_clock_skew`` from what any client's clock can write now is
refused (RocketMQ never checks its age; its clients write local time marked Z, so the window is a day wide).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sluice.auth.authorization_context_builder import AuthorizationContext
from sluice.auth.evaluator import Authenticator, Authorizer
from sluice.auth.model import Action, AuthenticationError, AuthorizationError, Resource
from sluice.auth.remoting_auth_pipeline import source_ip
from sluice.auth.signature import (
    AUTHORIZATION,
    DATE_TIME,
    MalformedAuthorization,
    grpc_date_time_age,
    parse_grpc_authorization,
)

log = logging.getLogger(__name__)

PACKAGE = "apache.rocketmq.v2"
CONSUMER_TYPES = frozenset({2, 3, 4, 5, 6})  # PUSH_, SIMPLE_, PULL_, LITE_PUSH_, LITE_SIMPLE_CONSUMER
DEFAULT_MAX_CLOCK_SKEW = 15 * 60.0


def _topic(ctxs: list[AuthorizationContext], name: str, *actions: Action) -> None:
    if not name:
        raise AuthorizationError("topic is null.")
    ctxs.append(AuthorizationContext(Resource.of_topic(name), actions))


def _group(ctxs: list[AuthorizationContext], name: str, *actions: Action) -> None:
    if not name:
        raise AuthorizationError("group is null.")
    ctxs.append(AuthorizationContext(Resource.of_group(name), actions))


def grpc_contexts(rpc: str, req: Any) -> list[AuthorizationContext]:
    ctxs: list[AuthorizationContext] = []
    p, s = Action.PUB, Action.SUB
    if rpc == "SendMessage":
        if not req.messages:
            raise AuthorizationError("message is null.")
        for name in dict.fromkeys(m.topic.name for m in req.messages):
            _topic(ctxs, name, p)
    elif rpc in ("EndTransaction", "RecallMessage"):
        _topic(ctxs, req.topic.name, p)
    elif rpc == "Heartbeat":
        if req.client_type in CONSUMER_TYPES:
            _group(ctxs, req.group.name, s)
    elif rpc == "ReceiveMessage":
        if not req.HasField("message_queue"):
            raise AuthorizationError("messageQueue is null.")
        _group(ctxs, req.group.name, s)
        _topic(ctxs, req.message_queue.topic.name, s)
    elif rpc in ("AckMessage", "ForwardMessageToDeadLetterQueue", "QueryAssignment"):
        _group(ctxs, req.group.name, s)
        _topic(ctxs, req.topic.name, s)
    elif rpc == "SyncLiteSubscription":  # (beyond RocketMQ, which checks nothing of a removal naming no lite topic)
        _group(ctxs, req.group.name, s)
        _topic(ctxs, req.topic.name, s)
    elif rpc == "NotifyClientTermination":
        if req.group.name:
            _group(ctxs, req.group.name, s)
    elif rpc == "ChangeInvisibleDuration":
        _group(ctxs, req.group.name, s)
        _topic(ctxs, req.topic.name, s)  # (beyond RocketMQ, which checks the group only)
    elif rpc == "QueryRoute":
        _topic(ctxs, req.topic.name, p, s)
    elif rpc == "Telemetry":
        if req.HasField("settings"):
            settings = req.settings
            if settings.HasField("publishing"):
                for t in settings.publishing.topics:
                    _topic(ctxs, t.name, p)
            elif settings.HasField("subscription"):
                _group(ctxs, settings.subscription.group.name, s)
                for entry in settings.subscription.subscriptions:
                    _topic(ctxs, entry.topic.name, s)
            else:
                raise AuthorizationError("settings command doesn't have publishing or subscription.")
    return ctxs


def _peer_address(peer: str) -> str:
    """grpc's ``ipv4:10.0.0.5:51234`` / ``ipv6:[::1]:51234`` → ``10.0.0.5`` / ``::1``."""
    kind, _, rest = peer.partition(":")
    return source_ip(rest if kind in ("ipv4", "ipv6") else peer)


class GrpcAuth:
    def __init__(self, authenticator: Authenticator | None, authorizer: Authorizer | None,
                 max_clock_skew: float = DEFAULT_MAX_CLOCK_SKEW) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.max_clock_skew = max_clock_skew

    def refusal(self, rpc: str, req: Any, metadata: Mapping[str, str], peer: str, fresh: bool = True) -> str | None:
        """None when ``req`` may be served; else the message of the UNAUTHORIZED status. ``fresh``: check the
        signature's age (a stream's commands after its first carry the metadata it was opened with)."""
        rpc_code = f"{PACKAGE}.{type(req).__name__}"
        username: str | None = None
        try:
            cred = parse_grpc_authorization(metadata.get(AUTHORIZATION), metadata.get(DATE_TIME))
            username = cred.username
            if self.authenticator is not None:
                if fresh and cred.username and self.max_clock_skew > 0:
                    age = grpc_date_time_age(metadata.get(DATE_TIME, ""))
                    if age is None or age > self.max_clock_skew:
                        raise AuthenticationError(f"the request's {DATE_TIME} is further than "
                                                  f"{self.max_clock_skew:.0f} s from any time zone's now.")
                self.authenticator.authenticate(cred.username, cred.signature, cred.content, rpc_code)
            if self.authorizer is not None:
                self.authorizer.authorize(username, grpc_contexts(rpc, req), _peer_address(peer), rpc_code)
        except MalformedAuthorization as exc:
            return str(exc)
        except (AuthenticationError, AuthorizationError) as exc:
            return str(exc)
        except Exception:  # a request no check foresaw: refused, never served
            log.warning("refusing a %s from %s: it could not be checked", rpc, peer, exc_info=True)
            return "Authentication failed. Please verify the credentials and try again."
        return None
