"""The name server: brokers register their topics here; clients ask it for topic routes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:  # the names below are imported on first use (sluice._lazy)
    from sluice.namesrv.default_request_processor import DefaultRequestProcessor
    from sluice.namesrv.kv_config_manager import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
    from sluice.namesrv.namesrv_controller import NamesrvController
    from sluice.namesrv.register_broker_body import (
        RegisterBrokerBody,
        TopicConfigSerializeWrapper,
        decode_register_broker_body,
        encode_register_broker_body,
    )
    from sluice.namesrv.route_info_manager import BrokerLiveInfo, RegisterBrokerResult, RouteInfoManager

_EXPORTS = {
    "BrokerLiveInfo": "sluice.namesrv.route_info_manager",
    "DefaultRequestProcessor": "sluice.namesrv.default_request_processor",
    "KVConfigManager": "sluice.namesrv.kv_config_manager",
    "NAMESPACE_ORDER_TOPIC_CONFIG": "sluice.namesrv.kv_config_manager",
    "NamesrvController": "sluice.namesrv.namesrv_controller",
    "RegisterBrokerBody": "sluice.namesrv.register_broker_body",
    "RegisterBrokerResult": "sluice.namesrv.route_info_manager",
    "RouteInfoManager": "sluice.namesrv.route_info_manager",
    "TopicConfigSerializeWrapper": "sluice.namesrv.register_broker_body",
    "decode_register_broker_body": "sluice.namesrv.register_broker_body",
    "encode_register_broker_body": "sluice.namesrv.register_broker_body",
}
__all__ = [
    "BrokerLiveInfo", "DefaultRequestProcessor", "KVConfigManager", "NAMESPACE_ORDER_TOPIC_CONFIG",
    "NamesrvController", "RegisterBrokerBody", "RegisterBrokerResult", "RouteInfoManager",
    "TopicConfigSerializeWrapper", "decode_register_broker_body", "encode_register_broker_body",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
