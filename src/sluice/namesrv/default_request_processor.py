"""Name server request handlers, one method per request code, named after the code.

Every handler answers; bad input (a missing or malformed field, a body that does not parse) gets SYSTEM_ERROR
with a remark naming the problem. Response ext values are strings; JSON bodies are standard JSON.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice.common import fastjson
from sluice.common.config_text import config_properties_text
from sluice.common.structs import DataVersion
from sluice.namesrv.kv_config_manager import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from sluice.namesrv.register_broker_body import BodyFormatError, decode_register_broker_body
from sluice.namesrv.route_info_manager import RouteInfoManager
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection

if TYPE_CHECKING:
    from sluice.common.config import NamesrvConfig

log = logging.getLogger(__name__)

APPLY_TOPIC_URL = "http://rocketmq.apache.org/docs/faq/"

Handler = Callable[["DefaultRequestProcessor", Connection, RemotingCommand], RemotingCommand]


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class BadRequestError(ValueError):
    """A request this name server cannot act on; its message becomes the SYSTEM_ERROR remark."""


def _json_body(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _answers_bad_input(fn: Handler) -> Handler:
    """Turn a bad-input exception inside a handler into SYSTEM_ERROR with the problem as the remark."""

    @functools.wraps(fn)
    def wrapper(self: DefaultRequestProcessor, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            return fn(self, conn, request)
        except (BadRequestError, BodyFormatError) as exc:
            problem = str(exc)
        except KeyError as exc:  # ext_int's "the request has no 'x' field"
            problem = str(exc.args[0]) if exc.args else "a required field is missing"
        except ValueError as exc:
            problem = str(exc)
        log.info("request code %d from %s rejected: %s", request.code, conn.remote_addr, problem)
        return request.response(ResponseCode.SYSTEM_ERROR, problem)

    return wrapper


def _field(request: RemotingCommand, name: str) -> str:
    """A required, non-empty ext field."""
    value = request.ext_fields.get(name)
    if value is None or value == "":
        raise BadRequestError(f"the request has no {name!r} field")
    return value


class DefaultRequestProcessor:
    """Serves the name server's request codes over ``route_info`` and ``kv_config``.

    ``watch_connection`` is called with the connection of every successful broker registration, so the owner can
    drop the broker when that connection closes. ``clock`` gives monotonic milliseconds (for broker expiry).
    """

    def __init__(self, route_info: RouteInfoManager, kv_config: KVConfigManager,
                 watch_connection: Callable[[Connection], None] | None = None,
                 clock: Callable[[], int] = monotonic_ms, config: NamesrvConfig | None = None) -> None:
        self.route_info = route_info
        self.kv_config = kv_config
        self.config = config
        self.watch_connection = watch_connection
        self.clock = clock

    # == its settings =================================================================================
    def get_namesrv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """The name server's settings as properties text under RocketMQ's names, secrets hidden
        (``mqadmin getNamesrvConfig``)."""
        text = config_properties_text(self.config) if self.config is not None else ""
        return request.response(ResponseCode.SUCCESS, body=text.encode())

    # == key/value config ============================================================================
    @_answers_bad_input
    def put_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace, key = _field(request, "namespace"), _field(request, "key")
        value = request.ext_fields.get("value")
        if value is None:
            raise BadRequestError("the request has no 'value' field")
        self.kv_config.put(namespace, key, value)
        return request.response(ResponseCode.SUCCESS)

    @_answers_bad_input
    def get_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace, key = _field(request, "namespace"), _field(request, "key")
        value = self.kv_config.get(namespace, key)
        if value is None:
            return request.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}")
        return request.response(ResponseCode.SUCCESS, ext_fields={"value": value})

    @_answers_bad_input
    def delete_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self.kv_config.delete(_field(request, "namespace"), _field(request, "key"))
        return request.response(ResponseCode.SUCCESS)

    @_answers_bad_input
    def get_kvlist_by_namespace(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace = _field(request, "namespace")
        body = self.kv_config.kv_list_json(namespace)
        if body is None:
            return request.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        return request.response(ResponseCode.SUCCESS, body=body)

    # == brokers =====================================================================================
    @_answers_bad_input
    def register_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        cluster, broker_addr = _field(request, "clusterName"), _field(request, "brokerAddr")
        broker_name = _field(request, "brokerName")
        broker_id = request.ext_int("brokerId")
        ha_addr = request.ext_fields.get("haServerAddr") or ""
        compressed = request.ext_bool("compressed")
        body_crc = request.ext_int("bodyCrc32", 0)
        timeout_ms = request.ext_int("heartbeatTimeoutMillis", 0) or None
        body = bytes(request.body)
        if body_crc != 0 and (zlib.crc32(body) & 0x7FFFFFFF) != body_crc:
            log.warning("register broker %s from %s: crc32 not match", broker_name, conn.remote_addr)
            return request.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        wrapper = decode_register_broker_body(body, compressed).topic_config_wrapper if body else None
        result = self.route_info.register_broker(cluster, broker_addr, broker_name, broker_id, ha_addr, wrapper,
                                                 self.clock(), conn, timeout_ms)
        if self.watch_connection is not None:
            self.watch_connection(conn)
        ext: dict[str, str] = {}
        if result.master_addr is not None:
            ext["masterAddr"] = result.master_addr
        if result.ha_server_addr is not None:
            ext["haServerAddr"] = result.ha_server_addr
        order_conf = self.kv_config.kv_list_json(NAMESPACE_ORDER_TOPIC_CONFIG) or b""
        # (RocketMQ answers an ignored registration SUCCESS too; the remark says why, for the broker's log)
        remark = (f"registration ignored: another broker holds id {broker_id} of {broker_name} under a newer master "
                  "epoch") if result.rejected else None
        return request.response(ResponseCode.SUCCESS, remark, ext_fields=ext, body=order_conf)

    @_answers_bad_input
    def unregister_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self.route_info.unregister_broker(_field(request, "clusterName"), _field(request, "brokerAddr"),
                                          _field(request, "brokerName"), request.ext_int("brokerId"))
        return request.response(ResponseCode.SUCCESS)

    @_answers_bad_input
    def query_data_version(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker_addr = _field(request, "brokerAddr")
        try:
            parsed = fastjson.loads(request.body) if len(request.body) else {}
        except ValueError as exc:
            raise BadRequestError(f"data version body is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise BadRequestError("data version body must be a JSON object")
        changed = self.route_info.is_broker_topic_config_changed(broker_addr, DataVersion.from_json(parsed))
        self.route_info.update_broker_info_update_timestamp(broker_addr, self.clock())
        ours = self.route_info.query_broker_data_version(broker_addr)
        body = _json_body(ours.to_json()) if ours is not None else b""
        return request.response(ResponseCode.SUCCESS, ext_fields={"changed": "true" if changed else "false"},
                                body=body)

    @_answers_bad_input
    def wipe_write_perm_of_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker_name = _field(request, "brokerName")
        count = self.route_info.wipe_write_perm_of_broker(broker_name)
        log.info("wiped write perm of broker %s on %d topics (asked by %s)", broker_name, count, conn.remote_addr)
        return request.response(ResponseCode.SUCCESS, ext_fields={"wipeTopicCount": str(count)})

    @_answers_bad_input
    def add_write_perm_of_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker_name = _field(request, "brokerName")
        count = self.route_info.add_write_perm_of_broker(broker_name)
        log.info("added write perm of broker %s on %d topics (asked by %s)", broker_name, count, conn.remote_addr)
        return request.response(ResponseCode.SUCCESS, ext_fields={"addTopicCount": str(count)})

    # == routes and topics ===========================================================================
    @_answers_bad_input
    def get_routeinfo_by_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = _field(request, "topic")
        route = self.route_info.pick_topic_route_data(topic)
        if route is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST,
                                    f"No topic route info in name server for the topic: {topic}\n"
                                    f"See {APPLY_TOPIC_URL} for further details.")
        route.order_topic_conf = self.kv_config.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        return request.response(ResponseCode.SUCCESS, body=_json_body(route.to_json()))

    @_answers_bad_input
    def get_broker_cluster_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=_json_body(self.route_info.cluster_info().to_json()))

    @_answers_bad_input
    def get_all_topic_list_from_nameserver(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=_json_body({"topicList": self.route_info.all_topics()}))

    @_answers_bad_input
    def get_topics_by_cluster(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topics = self.route_info.topics_by_cluster(_field(request, "cluster"))
        return request.response(ResponseCode.SUCCESS, body=_json_body({"topicList": topics}))

    @_answers_bad_input
    def get_system_topic_list_from_ns(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topics, addr = self.route_info.system_topics()
        body: dict[str, Any] = {"topicList": topics}
        if addr is not None:
            body["brokerAddr"] = addr
        return request.response(ResponseCode.SUCCESS, body=_json_body(body))

    @_answers_bad_input
    def delete_topic_in_namesrv(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = _field(request, "topic")
        cluster = request.ext_fields.get("clusterName") or None
        self.route_info.delete_topic(topic, cluster)
        log.info("topic %s deleted%s (asked by %s)", topic, f" from cluster {cluster}" if cluster else "",
                 conn.remote_addr)
        return request.response(ResponseCode.SUCCESS)
