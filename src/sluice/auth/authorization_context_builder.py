"""What a request asks to do, on what (RocketMQ's ``DefaultAuthorizationContextBuilder``): a remoting request's code,
ext fields and body → the (resource, actions) pairs authorization checks, first failure wins.

The codes RocketMQ maps (its switch, and the ``@RocketMQAction`` / ``@RocketMQResource`` annotations of its request
headers) map the same here. Beyond RocketMQ, which lets a code it does not map through unchecked, every other code
is checked too (docs/security.md): the client codes it leaves out by their topic and group (LITE_PULL_MESSAGE,
BATCH_ACK_MESSAGE, QUERY_ASSIGNMENT, CHECK_CLIENT_CONFIG, SEND_REPLY_MESSAGE, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP),
the rest as Get or Update on the cluster; so is any request whose fields name nothing where its kind names a topic
or group (RocketMQ lets those through unchecked). As in RocketMQ, a heartbeat of producers only needs no rule; an
END_TRANSACTION without its topic, which RocketMQ lets through, is refused by its handler when authorization is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from sluice.auth.model import (
    RETRY_GROUP_TOPIC_PREFIX,
    Action,
    AuthorizationError,
    Resource,
    ResourcePattern,
    ResourceType,
)
from sluice.common import fastjson
from sluice.common.namespace import namespace_of, unwrap
from sluice.common.naming import reply_topic
from sluice.remoting.codes import RequestCode as C
from sluice.remoting.headers.send import V2_KEYS, V2_LONG_NAMES

G, S, P, U, CR, D, L = Action.GET, Action.SUB, Action.PUB, Action.UPDATE, Action.CREATE, Action.DELETE, Action.LIST
T, GR, CL = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


class AuthorizationContext(NamedTuple):
    resource: Resource
    actions: tuple[Action, ...]


def _is_retry(name: str | None) -> bool:
    return name is not None and name.startswith(RETRY_GROUP_TOPIC_PREFIX)


# code → (falls back to the cluster, actions, ((ext field, resource type, splitter), ...)): the annotated headers.
_ANNOTATED: dict[int, tuple[bool, tuple[Action, ...], tuple[tuple[str, ResourceType, str], ...]]] = {
    17: (False, (CR,), (("topic", T, ""),)),  # UPDATE_AND_CREATE_TOPIC
    18: (False, (CR,), ()),  # UPDATE_AND_CREATE_TOPIC_LIST
    21: (False, (G,), ()),  # GET_ALL_TOPIC_CONFIG
    29: (False, (G,), (("topic", T, ""),)),  # SEARCH_OFFSET_BY_TIMESTAMP
    30: (False, (G,), (("topic", T, ""),)),  # GET_MAX_OFFSET
    31: (False, (G,), (("topic", T, ""),)),  # GET_MIN_OFFSET
    32: (False, (G,), (("topic", T, ""),)),  # GET_EARLIEST_MSG_STORETIME
    33: (False, (G,), (("topic", T, ""),)),  # VIEW_MESSAGE_BY_ID
    39: (False, (P,), (("topic", T, ""),)),  # CHECK_TRANSACTION_STATE
    40: (False, (S,), (("consumerGroup", GR, ""),)),  # NOTIFY_CONSUMER_IDS_CHANGED
    100: (True, (U,), ()), 101: (True, (G,), ()), 102: (True, (U,), ()),  # KV config
    103: (True, (U,), (("clusterName", CL, ""),)), 104: (True, (U,), (("clusterName", CL, ""),)),
    201: (False, (G,), ()),  # GET_ALL_SUBSCRIPTIONGROUP_CONFIG
    202: (False, (G,), (("topic", T, ""),)),  # GET_TOPIC_STATS_INFO
    203: (False, (G,), (("consumerGroup", GR, ""),)),  # GET_CONSUMER_CONNECTION_LIST
    204: (True, (G,), ()),  # GET_PRODUCER_CONNECTION_LIST
    205: (True, (U,), ()),  # WIPE_WRITE_PERM_OF_BROKER
    207: (False, (D,), (("groupName", GR, ""),)),  # DELETE_SUBSCRIPTIONGROUP
    208: (False, (G,), (("consumerGroup", GR, ""), ("topic", T, ""), ("topicList", T, ";"))),  # GET_CONSUME_STATS
    215: (False, (D,), (("topic", T, ""),)),  # DELETE_TOPIC_IN_BROKER
    216: (True, (U,), (("clusterName", CL, ""),)),
    217: (True, (U,), ()), 219: (True, (G,), ()),
    222: (False, (U,), (("group", GR, ""), ("topic", T, ""))),  # INVOKE_BROKER_TO_RESET_OFFSET
    223: (False, (G,), (("topic", T, ""), ("group", GR, ""))),  # INVOKE_BROKER_TO_GET_CONSUMER_STATUS
    224: (False, (L,), ()),  # GET_TOPICS_BY_CLUSTER
    300: (False, (G,), (("topic", T, ""),)),  # QUERY_TOPIC_CONSUME_BY_WHO
    303: (False, (G,), (("topic", T, ""), ("group", GR, ""))),  # QUERY_CONSUME_TIME_SPAN
    307: (False, (G,), (("consumerGroup", GR, ""),)),  # GET_CONSUMER_RUNNING_INFO
    308: (False, (G,), (("filterGroups", GR, ","), ("compareGroup", GR, ""), ("topic", T, ""))),
    309: (False, (S,), (("consumerGroup", GR, ""), ("topic", T, ""))),  # CONSUME_MESSAGE_DIRECTLY
    314: (False, (U,), (("destGroup", GR, ""), ("topic", T, ""))),  # CLONE_GROUP_OFFSET
    315: (True, (G,), ()), 317: (True, (G,), ()),
    320: (False, (P,), (("b", T, ""),)),
    321: (False, (G,), (("topic", T, ""), ("consumerGroup", GR, ""))),  # QUERY_CONSUME_QUEUE
    322: (True, (G,), (("clusterName", CL, ""),)),
    323: (False, (U,), (("topic", T, ""),)),  # RESUME_CHECK_HALF_MESSAGE
    326: (False, (S,), (("producerGroup", GR, ""), ("topic", T, ""))),
    327: (True, (U,), ()), 328: (True, (G,), ()),
    343: (False, (G,), (("group", GR, ""),)),  # QUERY_TOPICS_BY_CONSUMER
    345: (False, (G,), (("group", GR, ""), ("topic", T, ""))),  # QUERY_SUBSCRIPTION_BY_CONSUMER
    351: (False, (G,), (("topic", T, ""),)),  # GET_TOPIC_CONFIG
    352: (False, (G,), (("group", GR, ""),)),  # GET_SUBSCRIPTIONGROUP_CONFIG
    353: (False, (U,), (("group", GR, ""), ("topic", T, ""))),
    354: (False, (G,), (("topic", T, ""),)), 355: (True, (G,), ()),
    901: (False, (G,), (("clusterName", CL, ""),)),
    902: (True, (U,), ()), 903: (True, (U,), (("brokerClusterName", CL, ""),)),
    904: (True, (U,), (("clusterName", CL, ""),)), 905: (True, (U,), ()), 906: (True, (U,), ()),
    908: (True, (U,), ()),
    3001: (True, (U,), ()), 3002: (True, (U,), ()), 3003: (True, (U,), ()), 3004: (True, (G,), ()),
    3005: (True, (G,), ()), 3006: (True, (U,), ()), 3007: (True, (U,), ()), 3008: (True, (U,), ()),
    3009: (True, (G,), ()), 3010: (True, (G,), ()),
    200050: (False, (S,), (("consumerGroup", GR, ""), ("topic", T, ""))),  # POP_MESSAGE
    200051: (False, (S,), (("consumerGroup", GR, ""), ("topic", T, ""))),  # ACK_MESSAGE
    200052: (False, (S,), (("topic", T, ""), ("consumerGroup", GR, ""))),  # PEEK_MESSAGE
    200053: (False, (S,), (("consumerGroup", GR, ""), ("topic", T, ""))),  # CHANGE_MESSAGE_INVISIBLETIME
    200054: (False, (S,), (("consumerGroup", GR, ""), ("topic", T, ""))),  # NOTIFICATION
    200055: (False, (G,), (("consumerGroup", GR, ""), ("topic", T, ""))),  # POLLING_INFO
    # (beyond RocketMQ, which leaves them unchecked: a lite pop and a lite ack read as a pop and an ack do)
    200070: (False, (S,), (("consumerGroup", GR, ""), ("topic", T, ""))),  # POP_LITE_MESSAGE
    200072: (False, (S,), (("consumerGroup", GR, ""), ("topic", T, ""))),  # ACK_LITE_MESSAGE
    # The lite admin requests by the topic and group they name (GET_BROKER_LITE_INFO: Get on the cluster)
    200075: (False, (G,), (("topic", T, ""),)),  # GET_PARENT_TOPIC_INFO
    200076: (False, (G,), (("parentTopic", T, ""),)),  # GET_LITE_TOPIC_INFO
    200077: (False, (G,), (("parentTopic", T, ""), ("group", GR, ""))),  # GET_LITE_CLIENT_INFO
    200078: (False, (G,), (("group", GR, ""),)),  # GET_LITE_GROUP_INFO
    200079: (False, (U,), (("group", GR, ""),)),  # TRIGGER_LITE_DISPATCH
}

# Beyond RocketMQ: codes it leaves unchecked that change something (Update on the cluster); every other one it
# leaves unchecked is a Get on the cluster.
_CLUSTER_UPDATES = frozenset({
    25, 27, 209, 210, 211, 212, 213, 220, 225, 306, 316, 318, 329, 401, 513, 1009, 2001, 2002, 2004, 200056,
})


# What needs no rule when it names nothing: a producer's heartbeat or unregistration, and END_TRANSACTION (its
# handler refuses one without a topic when authorization is on).
_NOTHING_NAMED_IS_FINE = frozenset({C.HEART_BEAT, C.UNREGISTER_CLIENT, C.END_TRANSACTION})


def _split(value: str, splitter: str) -> list[str]:
    if not splitter:
        return [value]
    out: list[str] = []
    cur: list[str] = []
    for ch in value:
        if ch in splitter:
            if cur:
                out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def _body(body: bytes | memoryview | None) -> Any:
    return fastjson.loads(bytes(body or b"") or b"null")


def _str(value: object) -> str | None:
    """A body's name as the handlers read it (``str()`` of what is there); None for nothing or blank."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text if text.strip() else None


class _Contexts:
    def __init__(self) -> None:
        self.items: list[AuthorizationContext] = []

    def topic(self, name: str | None, *actions: Action) -> None:
        if name:
            self.items.append(AuthorizationContext(Resource.of_topic(name), actions))

    def group(self, name: str | None, *actions: Action) -> None:
        if name:
            self.items.append(AuthorizationContext(Resource.of_group(name), actions))

    def topic_unless_retry(self, name: str | None, *actions: Action) -> None:
        """A topic; a retry topic stands for its group (RocketMQ skips it: the group named beside it is checked,
        which need not be the retry topic's own)."""
        if name and _is_retry(name):
            self.group(name, *actions)
        elif name:
            self.topic(name, *actions)

    def deduplicated(self) -> list[AuthorizationContext]:
        return list(dict.fromkeys(self.items))


# The hot requests' checks depend on two fields only: kept per (code, field, field) (bounded), built once.
_HOT_FIELDS: dict[int, tuple[str, str]] = {
               C.SEND_MESSAGE_V2: ("b", "a"), C.SEND_BATCH_MESSAGE: ("b", "a"), C.SEND_MESSAGE: ("topic", "group"),
               C.PULL_MESSAGE: ("topic", "consumerGroup"), C.LITE_PULL_MESSAGE: ("topic", "consumerGroup"),
               C.POP_MESSAGE: ("topic", "consumerGroup"), C.ACK_MESSAGE: ("topic", "consumerGroup"),
               C.CHANGE_MESSAGE_INVISIBLETIME: ("topic", "consumerGroup"),
               C.UPDATE_CONSUMER_OFFSET: ("topic", "consumerGroup"),
               C.QUERY_CONSUMER_OFFSET: ("topic", "consumerGroup"), C.GET_MAX_OFFSET: ("topic", "")}
_HOT_CACHE: dict[tuple[int, str | None, str | None, str], list[AuthorizationContext]] = {}
_HOT_CACHE_SIZE = 4096


def _v2_topic(ext: Mapping[str, str]) -> str | None:
    """A V2 send's topic as its handler decodes it: ``b``, unless the header mixes long names in, when they are
    mapped as the handler maps them (a ``topic`` field then wins)."""
    if ext.keys() & V2_LONG_NAMES:
        return {V2_KEYS.get(k, k): v for k, v in ext.items()}.get("topic")
    return ext.get("b")


def build_remoting_contexts(code: int, ext: Mapping[str, str], body: bytes | memoryview | None,
                            cluster_name: str) -> list[AuthorizationContext]:
    """The checks a request needs; ``AuthorizationError("parse authorization context error.")`` when its fields or
    body cannot be read."""
    if not ext:
        ext = {}
    hot = _HOT_FIELDS.get(code)
    if hot is not None and not (hot[0] == "b" and ext.keys() & V2_LONG_NAMES):
        key = (code, ext.get(hot[0]), ext.get(hot[1]), cluster_name)
        found = _HOT_CACHE.get(key)
        if found is None:
            found = _build(code, ext, body, cluster_name)
            if len(_HOT_CACHE) >= _HOT_CACHE_SIZE:
                _HOT_CACHE.clear()
            _HOT_CACHE[key] = found
        return found
    try:
        contexts = _build(code, ext, body, cluster_name)
    except AuthorizationError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        raise AuthorizationError("parse authorization context error.") from None
    return contexts


def _build(code: int, ext: Mapping[str, str], body: bytes | memoryview | None,
           cluster_name: str) -> list[AuthorizationContext]:
    c = _Contexts()
    f = ext.get
    if code == C.GET_ROUTEINFO_BY_TOPIC:
        topic = f("topic")
        if _is_retry(topic):
            c.group(topic, S, G)
        else:
            c.topic(topic, P, S, G)
    elif code == C.SEND_MESSAGE:
        topic = f("topic")
        if _is_retry(topic):
            c.group(topic, S)  # (RocketMQ: the "group" field if any, which the sender chooses)
        else:
            c.topic(topic, P)
    elif code in (C.SEND_MESSAGE_V2, C.SEND_BATCH_MESSAGE):
        topic = _v2_topic(ext)
        if _is_retry(topic):
            c.group(topic, S)  # (RocketMQ: the producer group "a" if any, which the sender chooses)
        else:
            c.topic(topic, P)
    elif code in (C.SEND_REPLY_MESSAGE, C.SEND_REPLY_MESSAGE_V2):  # (beyond RocketMQ: its header as a send's)
        topic = _v2_topic(ext) if code == C.SEND_REPLY_MESSAGE_V2 else f("topic")
        if _is_retry(topic):
            c.group(topic, S)
        else:
            c.topic(topic, P)
            if topic and namespace_of(topic) and unwrap(topic) == reply_topic(cluster_name):
                c.topic(reply_topic(cluster_name), P)  # (a namespace's reply is kept in the cluster's reply topic)
    elif code == 370:  # RECALL_MESSAGE
        c.topic(f("topic"), P)
    elif code == C.END_TRANSACTION:
        c.topic(_str(f("topic")), P)
    elif code == C.CONSUMER_SEND_MSG_BACK:
        c.group(f("group"), S)
        c.topic_unless_retry(_str(f("originTopic")), S)  # (beyond RocketMQ: the message's topic too)
    elif code in (C.PULL_MESSAGE, C.LITE_PULL_MESSAGE):
        c.topic_unless_retry(f("topic"), S)
        c.group(f("consumerGroup"), S)
    elif code == C.QUERY_MESSAGE:
        c.topic(f("topic"), S, G)
    elif code == C.HEART_BEAT:
        data = _body(body)
        for consumer in (data.get("consumerDataSet") or []) if isinstance(data, dict) else []:
            c.group(_str(consumer.get("groupName")), S)
            for sub in consumer.get("subscriptionDataSet") or []:
                c.topic_unless_retry(_str(sub.get("topic")), S)
    elif code == C.UNREGISTER_CLIENT:
        c.group(_str(f("consumerGroup")), S)
    elif code == C.GET_CONSUMER_LIST_BY_GROUP:
        c.group(f("consumerGroup"), S, G)
    elif code == C.QUERY_CONSUMER_OFFSET:
        c.topic_unless_retry(f("topic"), S, G)
        c.group(f("consumerGroup"), S, G)
    elif code == C.UPDATE_CONSUMER_OFFSET:
        c.topic_unless_retry(f("topic"), S, U)
        c.group(f("consumerGroup"), S, U)
    elif code in (C.LOCK_BATCH_MQ, C.UNLOCK_BATCH_MQ):
        data = _body(body)
        c.group(_str(data.get("consumerGroup")), S)
        for mq in data.get("mqSet") or []:
            c.topic_unless_retry(_str(mq.get("topic")), S)
    elif code == C.QUERY_ASSIGNMENT:  # (beyond RocketMQ)
        data = _body(body)
        c.topic_unless_retry(_str(data.get("topic")), S)
        c.group(_str(data.get("consumerGroup")), S)
    elif code == C.LITE_SUBSCRIPTION_CTL:  # (beyond RocketMQ, which leaves it unchecked)
        data = _body(body)
        for entry in (data.get("subscriptionSet") or []) if isinstance(data, dict) else []:
            c.topic(_str(entry.get("topic")), S)
            c.group(_str(entry.get("group")), S)
    elif code == C.CHECK_CLIENT_CONFIG:  # (beyond RocketMQ)
        data = _body(body)
        c.group(_str(data.get("group")), S)
    elif code == C.BATCH_ACK_MESSAGE:  # (beyond RocketMQ)
        data = _body(body)
        seen = set()
        for ack in data.get("acks") or []:
            group = ack.get("c") if ack.get("c") is not None else ack.get("consumerGroup")
            topic = ack.get("t") if ack.get("t") is not None else ack.get("topic")
            pair = (_str(group), _str(topic))
            if pair[0] is None or pair[1] is None:
                raise ValueError("a batch ack entry names no group or topic")
            if pair not in seen:
                seen.add(pair)
                c.group(pair[0], S)
                c.topic_unless_retry(pair[1], S)
    elif code == C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP:  # (beyond RocketMQ)
        data = _body(body)
        c.group(_str(data.get("groupName")), CR)
    elif code in _ANNOTATED:
        cluster, actions, fields = _ANNOTATED[code]
        for name, rtype, splitter in fields:
            value = f(name)
            if value is None:
                continue
            for v in _split(value, splitter):
                if rtype is T and _is_retry(v):
                    c.group(v, *actions)
                elif rtype is T:
                    c.topic(v, *actions)
                elif rtype is GR:
                    c.items.append(AuthorizationContext(Resource(GR, v, ResourcePattern.LITERAL), actions))
                else:
                    c.items.append(AuthorizationContext(Resource.of_cluster(v), actions))
        if not c.items:
            c.items.append(AuthorizationContext(Resource.of_cluster(cluster_name), actions))
    else:
        action = U if code in _CLUSTER_UPDATES else G
        c.items.append(AuthorizationContext(Resource.of_cluster(cluster_name), (action,)))
    if not c.items and code not in _NOTHING_NAMED_IS_FINE:
        # Beyond RocketMQ: a request that names no topic or group where its kind names one is checked on the
        # cluster, never let through (what its handler would act on is then anyone's guess).
        action = U if code in _CLUSTER_UPDATES else G
        c.items.append(AuthorizationContext(Resource.of_cluster(cluster_name), (action,)))
    return c.deduplicated()
