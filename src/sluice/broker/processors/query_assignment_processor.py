"""QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE: server-side rebalance (RocketMQ's QueryAssignmentProcessor).

A consumer that leaves the rebalance to the broker (the Java DefaultMQPushConsumer with ``clientRebalance``
off) asks which queues of a topic are its own and whether it pulls or pops them. In POP mode every consumer of
the group gets every broker of the topic with queue id -1 (pop them all: the broker hands each message to one
consumer); in PULL mode the queues are shared out evenly (AVG), as a client-side rebalance would. The mode of a
(topic, group) is what SET_MESSAGE_REQUEST_MODE last said (kept in ``config/messageRequestMode.json``), else the
broker's ``default_message_request_mode``; retry topics are always pulled.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

from sluice.broker.processors.client_manage_processor import parse_json_body
from sluice.common.config_manager import ConfigManager
from sluice.common.errors import StoreConfigError
from sluice.common.naming import RETRY_GROUP_TOPIC_PREFIX
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import BadRequestError, RemotingError

if TYPE_CHECKING:
    from sluice.broker.broker_outer_api import BrokerOuterAPI
    from sluice.broker.consumer_manager import ConsumerManager
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig

log = logging.getLogger(__name__)

MODES = ("PULL", "POP")


class MessageRequestModeManager(ConfigManager):
    """The request mode set per (topic, group), persisted."""

    def __init__(self, config_dir: str) -> None:
        self.table: dict[str, dict[str, dict[str, Any]]] = {}  # topic → group → {mode, popShareQueueNum}
        super().__init__(os.path.join(config_dir, "messageRequestMode.json"))

    def decode(self, data: dict[str, Any]) -> None:
        table = data.get("messageRequestModeMap")
        if not isinstance(table, dict) or not all(
                isinstance(g, dict) and all(isinstance(v, dict) and v.get("mode") in MODES for v in g.values())
                for g in table.values()):
            raise StoreConfigError(f"store config file {self.path}: messageRequestModeMap must map topic → group → "
                                   f"{{\"mode\": one of {', '.join(MODES)}}}")
        self.table = table

    def encode(self) -> dict[str, Any]:
        return {"messageRequestModeMap": {t: dict(g) for t, g in self.table.items()}}

    def set(self, topic: str, group: str, mode: str, pop_share_queue_num: int) -> None:
        with self._lock:
            self.table.setdefault(topic, {})[group] = {"consumerGroup": group, "topic": topic, "mode": mode,
                                                       "popShareQueueNum": pop_share_queue_num}
        self.persist()

    def mode(self, topic: str, group: str) -> str | None:
        entry = self.table.get(topic, {}).get(group)
        return None if entry is None else str(entry["mode"])


def _field(body: dict[str, Any], name: str) -> str:
    v = body.get(name)
    if not isinstance(v, str) or not v:
        raise BadRequestError(f"the request body has no {name!r}")
    return v


class QueryAssignmentProcessor:
    def __init__(self, config: BrokerConfig, outer_api: BrokerOuterAPI, request_modes: MessageRequestModeManager,
                 topic_config_manager: TopicConfigManager, subscription_group_manager: SubscriptionGroupManager,
                 consumer_manager: ConsumerManager) -> None:
        self.config = config
        self.outer_api = outer_api
        self.request_modes = request_modes
        self.topic_config_manager = topic_config_manager
        self.subscription_group_manager = subscription_group_manager
        self.consumer_manager = consumer_manager

    def set_message_request_mode(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        body = parse_json_body(req, "SET_MESSAGE_REQUEST_MODE")
        topic, group = _field(body, "topic"), _field(body, "consumerGroup")
        mode = body.get("mode", "PULL")
        if mode not in MODES:
            return req.response(ResponseCode.INVALID_PARAMETER, f"mode {mode!r} is not one of {', '.join(MODES)}")
        share = body.get("popShareQueueNum", 0)
        if not isinstance(share, int) or isinstance(share, bool):
            return req.response(ResponseCode.INVALID_PARAMETER, "popShareQueueNum must be an integer")
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return req.response(ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
        if self.topic_config_manager.get(topic) is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        if self.subscription_group_manager.find(group) is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] not exist")
        self.request_modes.set(topic, group, mode, share)
        log.info("message request mode of %s / %s set to %s", topic, group, mode)
        return req.response(ResponseCode.SUCCESS)

    async def query_assignment(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        body = parse_json_body(req, "QUERY_ASSIGNMENT")
        topic, group, client_id = _field(body, "topic"), _field(body, "consumerGroup"), _field(body, "clientId")
        model = body.get("messageModel", "CLUSTERING")
        mode = "PULL" if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else (
            self.request_modes.mode(topic, group) or self.config.default_message_request_mode)
        brokers = await self._brokers_of(topic)
        if not brokers:
            return req.response(ResponseCode.SUCCESS, None, body=b"{}")
        if mode == "POP":
            queues = [(name, -1) for name in sorted(brokers)]
        else:
            every = [(name, q) for name in sorted(brokers) for q in range(brokers[name])]
            if model == "BROADCASTING":
                queues = every
            else:
                cids = sorted({*self.consumer_manager.consumer_ids(group), client_id})
                queues = _allocate_average(every, cids, client_id)
        out = {"messageQueueAssignments": [{"messageQueue": {"brokerName": name, "queueId": q, "topic": topic},
                                            "mode": mode} for name, q in queues]}
        return req.response(ResponseCode.SUCCESS, None, body=json.dumps(out, separators=(",", ":")).encode())

    async def _brokers_of(self, topic: str) -> dict[str, int]:
        """Broker name → read queue count of ``topic``, from the name server's route (this broker's own table
        when no name server answers)."""
        for addr in self.config.namesrv_addrs:
            try:
                route = await self.outer_api.get_topic_route(addr, topic)
            except (RemotingError, ValueError) as exc:  # the next name server, then this broker's own view
                log.debug("route of %s from %s: %s", topic, addr, exc)
                continue
            if route is not None:
                return {q["brokerName"]: int(q["readQueueNums"]) for q in route.get("queueDatas") or []
                        if int(q.get("perm", 6)) & 4}
        tc = self.topic_config_manager.get(topic)
        return {} if tc is None else {self.config.broker_name: tc.read_queue_nums}


def _allocate_average(queues: list[tuple[str, int]], cids: list[str], cid: str) -> list[tuple[str, int]]:
    """RocketMQ's AllocateMessageQueueAveragely."""
    if cid not in cids or not queues:
        return []
    index, n, m = cids.index(cid), len(cids), len(queues)
    mod = m % n
    size = (m // n + 1 if index < mod else m // n) if m > n else 1
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [queues[(start + i) % m] for i in range(min(size, m - start))] if start < m else []


__all__ = ["MODES", "MessageRequestModeManager", "QueryAssignmentProcessor"]
