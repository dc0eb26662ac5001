"""Request headers (sluice.remoting.headers): each encodes to ext fields under RocketMQ's names and decodes back
equal; a required field missing or malformed is a BadRequestError that names it; every header says its topic and
group the same way."""

from __future__ import annotations

import pytest

from sluice.remoting.codes import RequestCode
from sluice.remoting.errors import BadRequestError
from sluice.remoting.headers import (
    DECODERS,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    CheckTransactionStateRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    EndTransactionRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetLiteClientInfoRequestHeader,
    GetLiteGroupInfoRequestHeader,
    GetLiteTopicInfoRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetParentTopicInfoRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
    NotificationRequestHeader,
    NotifyUnsubscribeLiteRequestHeader,
    PeekMessageRequestHeader,
    PollingInfoRequestHeader,
    PopLiteMessageRequestHeader,
    PopMessageRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    RecallMessageRequestHeader,
    ReplyMessageRequestHeader,
    RequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    TriggerLiteDispatchRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    decode_request_header,
)

SEND = SendMessageRequestHeader("PG", "T", "TBW102", 4, 3, 1, 1_700_000_000_000, 7, "k\x01v\x02", 2, False, 16,
                                True, "broker-a")

# One header of each kind, with its request's code; None where the code is not a request anyone sends whole.
EXAMPLES: list[tuple[int | None, RequestHeader]] = [
    (RequestCode.SEND_MESSAGE, SEND),
    (RequestCode.SEND_REPLY_MESSAGE, SEND),
    (RequestCode.RECALL_MESSAGE, RecallMessageRequestHeader("PG", "T", "djEgVCBiIDEgaWQ=", "broker-a")),
    (RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, ReplyMessageRequestHeader(
        "PG", "C_REPLY_TOPIC", "TBW102", 4, 0, 1, 1_700_000_000_000, 7, "k\x01v", 2, False, "10.0.0.1:5000",
        "10.0.0.2:10911", 1_700_000_000_123)),
    (RequestCode.CONSUMER_SEND_MSG_BACK, ConsumerSendMsgBackRequestHeader(123, "CG", 3, "id", "T", False, 15)),
    (RequestCode.END_TRANSACTION, EndTransactionRequestHeader("PG", 5, 678, 8, True, "id", "tx", "T", "broker-a")),
    (RequestCode.CHECK_TRANSACTION_STATE, CheckTransactionStateRequestHeader("T", 5, 678, "id", "tx", "off", "b")),
    (RequestCode.PULL_MESSAGE, PullMessageRequestHeader("CG", "T", 1, 100, 32, 6, 99, 15_000, "a || b", 7, "SQL92")),
    (RequestCode.QUERY_CONSUMER_OFFSET, QueryConsumerOffsetRequestHeader("CG", "T", 2, False)),
    (RequestCode.UPDATE_CONSUMER_OFFSET, UpdateConsumerOffsetRequestHeader("CG", "T", 2, 42)),
    (RequestCode.GET_CONSUMER_LIST_BY_GROUP, GetConsumerListByGroupRequestHeader("CG")),
    (RequestCode.UNREGISTER_CLIENT, UnregisterClientRequestHeader("client@1", "PG", "CG")),
    (RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader("T", 1)),
    (RequestCode.GET_MIN_OFFSET, GetMinOffsetRequestHeader("T", 1)),
    (RequestCode.GET_EARLIEST_MSG_STORETIME, GetEarliestMsgStoretimeRequestHeader("T", 1)),
    (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SearchOffsetRequestHeader("T", 1, 1_700_000_000_000)),
    (RequestCode.QUERY_MESSAGE, QueryMessageRequestHeader("T", "key", 16, 1, 2, True)),
    (RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(4096, "T")),
    (RequestCode.POP_MESSAGE, PopMessageRequestHeader("CG", "T", -1, 16, 30_000, 5_000, 1, 0, "TAG", "a", True,
                                                      "attempt", "broker-a")),
    (RequestCode.ACK_MESSAGE, AckMessageRequestHeader("CG", "T", 1, 10, "0 1 2", "broker-a")),
    (RequestCode.ACK_MESSAGE, AckMessageRequestHeader("CG", "T", 0, 10, "0 1 2", "broker-a", "chat-1")),
    (RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
     ChangeInvisibleTimeRequestHeader("CG", "T", 0, 10, "0 1 2", 0, "broker-a", "chat-1")),
    (RequestCode.POP_LITE_MESSAGE, PopLiteMessageRequestHeader("client-1", "CG", "T", 8, 60_000, 20_000, 1,
                                                               "attempt")),
    (RequestCode.NOTIFY_UNSUBSCRIBE_LITE, NotifyUnsubscribeLiteRequestHeader("chat-1", "CG", "client-1")),
    (RequestCode.GET_PARENT_TOPIC_INFO, GetParentTopicInfoRequestHeader("T")),
    (RequestCode.GET_LITE_TOPIC_INFO, GetLiteTopicInfoRequestHeader("T", "chat-1")),
    (RequestCode.GET_LITE_CLIENT_INFO, GetLiteClientInfoRequestHeader("T", "CG", "client-1", 50)),
    (RequestCode.GET_LITE_GROUP_INFO, GetLiteGroupInfoRequestHeader("CG", "chat-1", 5)),
    (RequestCode.TRIGGER_LITE_DISPATCH, TriggerLiteDispatchRequestHeader("CG", "client-1")),
    (RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ChangeInvisibleTimeRequestHeader("CG", "T", 1, 10, "0 1 2", 60_000,
                                                                                "broker-a")),
    (RequestCode.PEEK_MESSAGE, PeekMessageRequestHeader("CG", "T", 0, 8)),
    (RequestCode.NOTIFICATION, NotificationRequestHeader("CG", "T", 0, 1_000)),
    (RequestCode.POLLING_INFO, PollingInfoRequestHeader("CG", "T", 0)),
    (RequestCode.UPDATE_AND_CREATE_TOPIC, CreateTopicRequestHeader("T", "TBW102", 8, 4, 6, "MULTI_TAG", 1, True)),
    (RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader("T")),
    (RequestCode.GET_TOPIC_CONFIG, GetTopicConfigRequestHeader("T")),
    (RequestCode.GET_TOPIC_STATS_INFO, GetTopicStatsInfoRequestHeader("T")),
    (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, QueryTopicConsumeByWhoRequestHeader("T")),
    (RequestCode.GET_CONSUME_STATS, GetConsumeStatsRequestHeader("CG", "T")),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, GetConsumerConnectionListRequestHeader("CG")),
    (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ResetOffsetRequestHeader("T", "CG", 1, -1, 42)),
    (RequestCode.DELETE_SUBSCRIPTIONGROUP, DeleteSubscriptionGroupRequestHeader("CG", True)),
    (RequestCode.GET_PRODUCER_CONNECTION_LIST, GetProducerConnectionListRequestHeader("PG")),
    (RequestCode.GET_BROKER_CONSUME_STATS, GetConsumeStatsInBrokerHeader(True)),
    (RequestCode.GET_CONSUMER_RUNNING_INFO, GetConsumerRunningInfoRequestHeader("CG", "client-1", True)),
    (RequestCode.CONSUME_MESSAGE_DIRECTLY,
     ConsumeMessageDirectlyResultRequestHeader("CG", "client-1", "0A" * 16, "broker-a", "T")),
]


@pytest.mark.parametrize(("code", "header"), EXAMPLES, ids=lambda v: type(v).__name__ if v is not None else "")
def test_a_header_decodes_to_what_was_encoded(code: int, header: RequestHeader) -> None:
    ext = header.encode()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in ext.items())
    assert type(header).decode(ext) == header
    assert decode_request_header(code, ext) == header


def test_every_request_code_with_a_header_has_an_example() -> None:
    assert set(DECODERS) - {RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                            RequestCode.SEND_REPLY_MESSAGE_V2} == {c for c, _ in EXAMPLES}


def test_the_v2_send_header_uses_one_letter_names() -> None:
    ext = SEND.encode_v2()
    assert ext == {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "1", "g": "1700000000000", "h": "7",
                   "i": "k\x01v\x02", "j": "2", "k": "false", "l": "16", "m": "true", "n": "broker-a"}
    assert SendMessageRequestHeader.decode_v2(ext) == SEND
    assert decode_request_header(RequestCode.SEND_MESSAGE_V2, ext) == SEND
    assert SEND.encode()["producerGroup"] == "PG" and SEND.encode()["maxReconsumeTimes"] == "16"


def test_optional_fields_left_out_are_not_sent() -> None:
    h = SendMessageRequestHeader("PG", "T", "TBW102", 4, 0, 0, 1, 0, "")
    assert "l" not in h.encode_v2() and "n" not in h.encode_v2()
    assert SendMessageRequestHeader.decode_v2(h.encode_v2()) == h
    assert "setZeroIfNotFound" not in QueryConsumerOffsetRequestHeader("CG", "T", 0).encode()
    assert "subscription" not in PullMessageRequestHeader("CG", "T", 0, 0).encode()


@pytest.mark.parametrize(("decode", "ext", "named"), [
    (SendMessageRequestHeader.decode, {"topic": "T"}, "'queueId'"),
    (SendMessageRequestHeader.decode_v2, {"a": "PG", "e": "1"}, "'b' (topic)"),
    (SendMessageRequestHeader.decode_v2, {"b": "T", "e": "x"}, "'e' (queueId)"),
    (SendMessageRequestHeader.decode_v2, {"b": "T", "e": str(1 << 31)}, "'e' (queueId)"),
    (PullMessageRequestHeader.decode, {"consumerGroup": "CG", "topic": "T", "queueId": "1"}, "'queueOffset'"),
    (PullMessageRequestHeader.decode, {"topic": "T", "queueId": "1", "queueOffset": "0"}, "'consumerGroup'"),
    (EndTransactionRequestHeader.decode, {"producerGroup": "PG", "tranStateTableOffset": "1",
                                          "commitOrRollback": "8"}, "'commitLogOffset'"),
    (CheckTransactionStateRequestHeader.decode, {"tranStateTableOffset": "1"}, "'commitLogOffset'"),
    (PopMessageRequestHeader.decode, {"consumerGroup": "CG", "topic": "T"}, "'invisibleTime'"),
    (AckMessageRequestHeader.decode, {"consumerGroup": "CG", "topic": "T", "queueId": "1", "offset": "2"},
     "'extraInfo'"),
    (ChangeInvisibleTimeRequestHeader.decode, {"consumerGroup": "CG", "topic": "T", "queueId": "1", "offset": "2",
                                               "extraInfo": "x", "invisibleTime": "soon"}, "'invisibleTime'"),
    (UpdateConsumerOffsetRequestHeader.decode, {"consumerGroup": "CG", "topic": "T", "queueId": "1"},
     "'commitOffset'"),
    (ConsumerSendMsgBackRequestHeader.decode, {"offset": "1"}, "'group'"),
    (SearchOffsetRequestHeader.decode, {"topic": "T", "queueId": "1"}, "'timestamp'"),
    (QueryMessageRequestHeader.decode, {"topic": "T"}, "'key'"),
    (ViewMessageRequestHeader.decode, {}, "'offset'"),
    (UnregisterClientRequestHeader.decode, {"producerGroup": "PG"}, "'clientID'"),
    (CreateTopicRequestHeader.decode, {"topic": "T", "readQueueNums": "many"}, "'readQueueNums'"),
    (ResetOffsetRequestHeader.decode, {"topic": "T"}, "'group'"),
    (GetConsumeStatsRequestHeader.decode, {"topic": "T"}, "'consumerGroup'"),
])
def test_a_missing_or_malformed_required_field_is_named(decode, ext: dict[str, str], named: str) -> None:
    with pytest.raises(BadRequestError) as err:
        decode(ext)
    assert named in str(err.value)


def test_a_reset_without_an_offset_reads_minus_one_as_java_s_null() -> None:
    assert ResetOffsetRequestHeader.decode({"topic": "T", "group": "CG", "offset": "null"}).offset == -1


def test_every_header_says_its_topic_and_group_the_same_way() -> None:
    resources = {type(h).__name__: (h.resource_topic, h.resource_group) for _, h in EXAMPLES}
    assert resources["SendMessageRequestHeader"] == ("T", "PG")
    assert resources["PullMessageRequestHeader"] == ("T", "CG")
    assert resources["ConsumerSendMsgBackRequestHeader"] == ("T", "CG")
    assert resources["EndTransactionRequestHeader"] == ("T", "PG")
    assert resources["GetMaxOffsetRequestHeader"] == ("T", None)
    assert resources["GetConsumerListByGroupRequestHeader"] == (None, "CG")
    assert resources["UnregisterClientRequestHeader"] == (None, "CG")
    assert resources["ResetOffsetRequestHeader"] == ("T", "CG")
    assert resources["CreateTopicRequestHeader"] == ("T", None)
    assert EndTransactionRequestHeader("PG", 1, 2, 8).resource_topic is None  # (RocketMQ 4 clients send none)


def test_headers_are_slotted() -> None:
    for _, h in EXAMPLES:
        assert not hasattr(h, "__dict__"), type(h).__name__


def test_a_batch_send_decodes_as_a_batch_whatever_its_flag_says():
    from sluice.remoting.codes import RequestCode
    from sluice.remoting.headers import DECODERS, SendMessageRequestHeader

    ext = {"a": "g", "b": "t", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0", "j": "0",
           "k": "false", "m": "false"}
    assert SendMessageRequestHeader.decode_v2(ext).batch is False
    assert DECODERS[RequestCode.SEND_BATCH_MESSAGE](ext).batch is True
