"""The custom request headers, one class each under RocketMQ's name and field names, shared by the client, the
gRPC proxy and the broker: ``decode`` reads a request's ext fields (``BadRequestError`` names a field missing or
malformed: the broker answers SYSTEM_ERROR with it), ``encode`` writes them.

``decode_request_header`` reads the header of any request whose code has one here, and every header says the
topic and the group it is about (``resource_topic``, ``resource_group``): what authorization checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sluice.remoting.codes import RequestCode
from sluice.remoting.headers._base import RequestHeader, field_bool, field_int, field_str
from sluice.remoting.headers.admin import (
    ConsumeMessageDirectlyResultRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
)
from sluice.remoting.headers.consumer import (
    GetConsumerListByGroupRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from sluice.remoting.headers.lite import (
    GetLiteClientInfoRequestHeader,
    GetLiteGroupInfoRequestHeader,
    GetLiteTopicInfoRequestHeader,
    GetParentTopicInfoRequestHeader,
    TriggerLiteDispatchRequestHeader,
)
from sluice.remoting.headers.pop import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    NotificationRequestHeader,
    NotifyUnsubscribeLiteRequestHeader,
    PeekMessageRequestHeader,
    PollingInfoRequestHeader,
    PopLiteMessageRequestHeader,
    PopMessageRequestHeader,
)
from sluice.remoting.headers.queue import (
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from sluice.remoting.headers.send import (
    CheckTransactionStateRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    RecallMessageRequestHeader,
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
)


def _decode_batch(ext: Mapping[str, str]) -> SendMessageRequestHeader:
    """SEND_BATCH_MESSAGE's header: a V2 header whose body is a batch, whatever its ``m`` says."""
    header = SendMessageRequestHeader.decode_v2(ext)
    header.batch = True
    return header


# Request code → the decoder of its header.
DECODERS: dict[int, Callable[[Mapping[str, str]], RequestHeader]] = {
    RequestCode.SEND_MESSAGE: SendMessageRequestHeader.decode,
    RequestCode.SEND_MESSAGE_V2: SendMessageRequestHeader.decode_v2,
    RequestCode.SEND_BATCH_MESSAGE: _decode_batch,
    RequestCode.SEND_REPLY_MESSAGE: SendMessageRequestHeader.decode,
    RequestCode.SEND_REPLY_MESSAGE_V2: SendMessageRequestHeader.decode_v2,
    RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT: ReplyMessageRequestHeader.decode,
    RequestCode.RECALL_MESSAGE: RecallMessageRequestHeader.decode,
    RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader.decode,
    RequestCode.END_TRANSACTION: EndTransactionRequestHeader.decode,
    RequestCode.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader.decode,
    RequestCode.PULL_MESSAGE: PullMessageRequestHeader.decode,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader.decode,
    RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader.decode,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader.decode,
    RequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader.decode,
    RequestCode.GET_MAX_OFFSET: GetMaxOffsetRequestHeader.decode,
    RequestCode.GET_MIN_OFFSET: GetMinOffsetRequestHeader.decode,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader.decode,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader.decode,
    RequestCode.QUERY_MESSAGE: QueryMessageRequestHeader.decode,
    RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader.decode,
    RequestCode.POP_MESSAGE: PopMessageRequestHeader.decode,
    RequestCode.ACK_MESSAGE: AckMessageRequestHeader.decode,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: ChangeInvisibleTimeRequestHeader.decode,
    RequestCode.PEEK_MESSAGE: PeekMessageRequestHeader.decode,
    RequestCode.NOTIFICATION: NotificationRequestHeader.decode,
    RequestCode.POLLING_INFO: PollingInfoRequestHeader.decode,
    RequestCode.POP_LITE_MESSAGE: PopLiteMessageRequestHeader.decode,
    RequestCode.NOTIFY_UNSUBSCRIBE_LITE: NotifyUnsubscribeLiteRequestHeader.decode,
    RequestCode.GET_PARENT_TOPIC_INFO: GetParentTopicInfoRequestHeader.decode,
    RequestCode.GET_LITE_TOPIC_INFO: GetLiteTopicInfoRequestHeader.decode,
    RequestCode.GET_LITE_CLIENT_INFO: GetLiteClientInfoRequestHeader.decode,
    RequestCode.GET_LITE_GROUP_INFO: GetLiteGroupInfoRequestHeader.decode,
    RequestCode.TRIGGER_LITE_DISPATCH: TriggerLiteDispatchRequestHeader.decode,
    RequestCode.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader.decode,
    RequestCode.DELETE_TOPIC_IN_BROKER: DeleteTopicRequestHeader.decode,
    RequestCode.GET_TOPIC_CONFIG: GetTopicConfigRequestHeader.decode,
    RequestCode.GET_TOPIC_STATS_INFO: GetTopicStatsInfoRequestHeader.decode,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: QueryTopicConsumeByWhoRequestHeader.decode,
    RequestCode.GET_CONSUME_STATS: GetConsumeStatsRequestHeader.decode,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: GetConsumerConnectionListRequestHeader.decode,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader.decode,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: DeleteSubscriptionGroupRequestHeader.decode,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: GetProducerConnectionListRequestHeader.decode,
    RequestCode.GET_BROKER_CONSUME_STATS: GetConsumeStatsInBrokerHeader.decode,
    RequestCode.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoRequestHeader.decode,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: ConsumeMessageDirectlyResultRequestHeader.decode,
}


def decode_request_header(code: int, ext: Mapping[str, str]) -> RequestHeader | None:
    """The header of a request with ``code`` (None when its code has no class here); raises ``BadRequestError``."""
    decode = DECODERS.get(code)
    return None if decode is None else decode(ext)


__all__ = [
    "DECODERS", "AckMessageRequestHeader", "ConsumeMessageDirectlyResultRequestHeader",
    "ChangeInvisibleTimeRequestHeader", "CheckTransactionStateRequestHeader", "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader", "DeleteSubscriptionGroupRequestHeader", "DeleteTopicRequestHeader",
    "GetConsumeStatsInBrokerHeader", "GetConsumerRunningInfoRequestHeader", "GetProducerConnectionListRequestHeader",
    "EndTransactionRequestHeader", "GetConsumeStatsRequestHeader", "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader", "GetEarliestMsgStoretimeRequestHeader", "GetLiteClientInfoRequestHeader",
    "GetLiteGroupInfoRequestHeader", "GetLiteTopicInfoRequestHeader", "GetMaxOffsetRequestHeader",
    "GetParentTopicInfoRequestHeader", "TriggerLiteDispatchRequestHeader",
    "GetMinOffsetRequestHeader", "GetTopicConfigRequestHeader", "GetTopicStatsInfoRequestHeader",
    "NotificationRequestHeader", "NotifyUnsubscribeLiteRequestHeader", "PeekMessageRequestHeader",
    "PopLiteMessageRequestHeader", "PollingInfoRequestHeader", "PopMessageRequestHeader",
    "PullMessageRequestHeader", "QueryConsumerOffsetRequestHeader", "QueryMessageRequestHeader",
    "QueryTopicConsumeByWhoRequestHeader", "RecallMessageRequestHeader", "ReplyMessageRequestHeader", "RequestHeader",
    "ResetOffsetRequestHeader", "SearchOffsetRequestHeader", "SendMessageRequestHeader",
    "UnregisterClientRequestHeader", "UpdateConsumerOffsetRequestHeader", "ViewMessageRequestHeader",
    "decode_request_header", "field_bool", "field_int", "field_str",
]
