"""The name server: brokers register their topics here; clients ask it for topic routes."""

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

__all__ = [
    "NAMESPACE_ORDER_TOPIC_CONFIG",
    "BrokerLiveInfo",
    "DefaultRequestProcessor",
    "KVConfigManager",
    "NamesrvController",
    "RegisterBrokerBody",
    "RegisterBrokerResult",
    "RouteInfoManager",
    "TopicConfigSerializeWrapper",
    "decode_register_broker_body",
    "encode_register_broker_body",
]
