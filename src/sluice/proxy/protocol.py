"""The RocketMQ 5 gRPC protocol (``apache.rocketmq.v2``): the messages Sluice's gRPC front exchanges, described
here field by field and built at import into a descriptor pool of their own.

No generated code and no .proto file at build time: each message is a list of (name, number, type, flags). The
names and numbers are the wire protocol's; a field a peer sends that is not listed here is kept as an unknown field
and ignored. The pool is private, so a process may also load the official client's generated modules.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory, timestamp_pb2

PACKAGE = "apache.rocketmq.v2"
SERVICE = f"{PACKAGE}.MessagingService"

ENUMS: dict[str, list[tuple[str, int]]] = {
    "TransactionResolution": [("TRANSACTION_RESOLUTION_UNSPECIFIED", 0), ("COMMIT", 1), ("ROLLBACK", 2)],
    "TransactionSource": [("SOURCE_UNSPECIFIED", 0), ("SOURCE_CLIENT", 1), ("SOURCE_SERVER_CHECK", 2)],
    "Permission": [("PERMISSION_UNSPECIFIED", 0), ("NONE", 1), ("READ", 2), ("WRITE", 3), ("READ_WRITE", 4)],
    "FilterType": [("FILTER_TYPE_UNSPECIFIED", 0), ("TAG", 1), ("SQL", 2)],
    "AddressScheme": [("ADDRESS_SCHEME_UNSPECIFIED", 0), ("IPv4", 1), ("IPv6", 2), ("DOMAIN_NAME", 3)],
    "MessageType": [("MESSAGE_TYPE_UNSPECIFIED", 0), ("NORMAL", 1), ("FIFO", 2), ("DELAY", 3), ("TRANSACTION", 4),
                    ("LITE", 5), ("PRIORITY", 6)],
    "DigestType": [("DIGEST_TYPE_UNSPECIFIED", 0), ("CRC32", 1), ("MD5", 2), ("SHA1", 3)],
    "ClientType": [("CLIENT_TYPE_UNSPECIFIED", 0), ("PRODUCER", 1), ("PUSH_CONSUMER", 2), ("SIMPLE_CONSUMER", 3),
                   ("PULL_CONSUMER", 4), ("LITE_PUSH_CONSUMER", 5), ("LITE_SIMPLE_CONSUMER", 6)],
    "Encoding": [("ENCODING_UNSPECIFIED", 0), ("IDENTITY", 1), ("GZIP", 2)],
    "LiteSubscriptionAction": [("PARTIAL_ADD", 0), ("PARTIAL_REMOVE", 1), ("COMPLETE_ADD", 2),
                               ("COMPLETE_REMOVE", 3)],
    # (OffsetOption.Policy in the .proto: nested there, top-level here; the wire is the same)
    "OffsetOptionPolicy": [("LAST", 0), ("MIN", 1), ("MAX", 2)],
    "Code": [("CODE_UNSPECIFIED", 0), ("OK", 20000), ("MULTIPLE_RESULTS", 30000), ("BAD_REQUEST", 40000),
             ("ILLEGAL_ACCESS_POINT", 40001), ("ILLEGAL_TOPIC", 40002), ("ILLEGAL_CONSUMER_GROUP", 40003),
             ("ILLEGAL_MESSAGE_TAG", 40004), ("ILLEGAL_MESSAGE_KEY", 40005), ("ILLEGAL_MESSAGE_GROUP", 40006),
             ("ILLEGAL_MESSAGE_PROPERTY_KEY", 40007), ("INVALID_TRANSACTION_ID", 40008),
             ("ILLEGAL_MESSAGE_ID", 40009), ("ILLEGAL_FILTER_EXPRESSION", 40010), ("ILLEGAL_INVISIBLE_TIME", 40011),
             ("ILLEGAL_DELIVERY_TIME", 40012), ("INVALID_RECEIPT_HANDLE", 40013),
             ("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", 40014), ("UNRECOGNIZED_CLIENT_TYPE", 40015),
             ("MESSAGE_CORRUPTED", 40016), ("CLIENT_ID_REQUIRED", 40017), ("ILLEGAL_POLLING_TIME", 40018),
             ("ILLEGAL_OFFSET", 40019), ("ILLEGAL_LITE_TOPIC", 40020), ("UNAUTHORIZED", 40100), ("FORBIDDEN", 40300),
             ("NOT_FOUND", 40400),
             ("MESSAGE_NOT_FOUND", 40401), ("TOPIC_NOT_FOUND", 40402), ("CONSUMER_GROUP_NOT_FOUND", 40403),
             ("REQUEST_TIMEOUT", 40800), ("PAYLOAD_TOO_LARGE", 41300), ("MESSAGE_BODY_TOO_LARGE", 41301),
             ("MESSAGE_BODY_EMPTY", 41302), ("PRECONDITION_FAILED", 42800), ("TOO_MANY_REQUESTS", 42900),
             ("LITE_TOPIC_QUOTA_EXCEEDED", 42901), ("LITE_SUBSCRIPTION_QUOTA_EXCEEDED", 42902),
             ("MESSAGE_PROPERTIES_TOO_LARGE", 43101), ("INTERNAL_ERROR", 50000), ("INTERNAL_SERVER_ERROR", 50001),
             ("HA_NOT_AVAILABLE", 50002), ("NOT_IMPLEMENTED", 50100), ("PROXY_TIMEOUT", 50400),
             ("MASTER_PERSISTENCE_TIMEOUT", 50401), ("SLAVE_PERSISTENCE_TIMEOUT", 50402), ("UNSUPPORTED", 50500),
             ("VERSION_UNSUPPORTED", 50501), ("VERIFY_FIFO_MESSAGE_UNSUPPORTED", 50502),
             ("FAILED_TO_CONSUME_MESSAGE", 60000)],
    "Language": [("LANGUAGE_UNSPECIFIED", 0), ("JAVA", 1), ("CPP", 2), ("DOT_NET", 3), ("GOLANG", 4), ("RUST", 5),
                 ("PYTHON", 6), ("PHP", 7), ("NODE_JS", 8), ("RUBY", 9), ("OBJECTIVE_C", 10), ("DART", 11),
                 ("KOTLIN", 12)],
}

# Field: (name, number, type, flags). Types: scalar names, "Duration", "Timestamp", or a message / enum of this
# package. Flags: "repeated", "optional" (proto3 optional), "oneof:<name>", "map" (a string → string map).
Field = tuple[str, int, str, str]

MESSAGES: dict[str, list[Field]] = {
    "FilterExpression": [("type", 1, "FilterType", ""), ("expression", 2, "string", "")],
    "RetryPolicy": [("max_attempts", 1, "int32", ""),
                    ("exponential_backoff", 2, "ExponentialBackoff", "oneof:strategy"),
                    ("customized_backoff", 3, "CustomizedBackoff", "oneof:strategy")],
    "ExponentialBackoff": [("initial", 1, "Duration", ""), ("max", 2, "Duration", ""), ("multiplier", 3, "float", "")],
    "CustomizedBackoff": [("next", 1, "Duration", "repeated")],
    "Resource": [("resource_namespace", 1, "string", ""), ("name", 2, "string", "")],
    "SubscriptionEntry": [("topic", 1, "Resource", ""), ("expression", 2, "FilterExpression", "")],
    "Address": [("host", 1, "string", ""), ("port", 2, "int32", "")],
    "Endpoints": [("scheme", 1, "AddressScheme", ""), ("addresses", 2, "Address", "repeated")],
    "Broker": [("name", 1, "string", ""), ("id", 2, "int32", ""), ("endpoints", 3, "Endpoints", "")],
    "MessageQueue": [("topic", 1, "Resource", ""), ("id", 2, "int32", ""), ("permission", 3, "Permission", ""),
                     ("broker", 4, "Broker", ""), ("accept_message_types", 5, "MessageType", "repeated")],
    "Digest": [("type", 1, "DigestType", ""), ("checksum", 2, "string", "")],
    "SystemProperties": [
        ("tag", 1, "string", "optional"), ("keys", 2, "string", "repeated"), ("message_id", 3, "string", ""),
        ("body_digest", 4, "Digest", ""), ("body_encoding", 5, "Encoding", ""), ("message_type", 6, "MessageType", ""),
        ("born_timestamp", 7, "Timestamp", ""), ("born_host", 8, "string", ""),
        ("store_timestamp", 9, "Timestamp", "optional"), ("store_host", 10, "string", ""),
        ("delivery_timestamp", 11, "Timestamp", "optional"), ("receipt_handle", 12, "string", "optional"),
        ("queue_id", 13, "int32", ""), ("queue_offset", 14, "int64", "optional"),
        ("invisible_duration", 15, "Duration", "optional"), ("delivery_attempt", 16, "int32", "optional"),
        ("message_group", 17, "string", "optional"), ("trace_context", 18, "string", "optional"),
        ("orphaned_transaction_recovery_duration", 19, "Duration", "optional"),
        ("dead_letter_queue", 20, "DeadLetterQueue", "optional"), ("lite_topic", 21, "string", "optional"),
        ("priority", 22, "int32", "optional")],
    "DeadLetterQueue": [("topic", 1, "string", ""), ("message_id", 2, "string", "")],
    "Message": [("topic", 1, "Resource", ""), ("user_properties", 2, "string", "map"),
                ("system_properties", 3, "SystemProperties", ""), ("body", 4, "bytes", "")],
    "Assignment": [("message_queue", 1, "MessageQueue", "")],
    "Status": [("code", 1, "Code", ""), ("message", 2, "string", "")],
    "UA": [("language", 1, "Language", ""), ("version", 2, "string", ""), ("platform", 3, "string", ""),
           ("hostname", 4, "string", "")],
    "Settings": [("client_type", 1, "ClientType", "optional"), ("access_point", 2, "Endpoints", "optional"),
                 ("backoff_policy", 3, "RetryPolicy", "optional"), ("request_timeout", 4, "Duration", "optional"),
                 ("publishing", 5, "Publishing", "oneof:pub_sub"), ("subscription", 6, "Subscription", "oneof:pub_sub"),
                 ("user_agent", 7, "UA", ""), ("metric", 8, "Metric", "")],
    "Publishing": [("topics", 1, "Resource", "repeated"), ("max_body_size", 2, "int32", ""),
                   ("validate_message_type", 3, "bool", "")],
    "Subscription": [("group", 1, "Resource", "optional"), ("subscriptions", 2, "SubscriptionEntry", "repeated"),
                     ("fifo", 3, "bool", "optional"), ("receive_batch_size", 4, "int32", "optional"),
                     ("long_polling_timeout", 5, "Duration", "optional"),
                     ("lite_subscription_quota", 6, "int32", "optional"),
                     ("max_lite_topic_size", 7, "int32", "optional")],
    "Metric": [("on", 1, "bool", ""), ("endpoints", 2, "Endpoints", "optional")],
    "QueryRouteRequest": [("topic", 1, "Resource", ""), ("endpoints", 2, "Endpoints", "")],
    "QueryRouteResponse": [("status", 1, "Status", ""), ("message_queues", 2, "MessageQueue", "repeated")],
    "SendMessageRequest": [("messages", 1, "Message", "repeated")],
    "SendResultEntry": [("status", 1, "Status", ""), ("message_id", 2, "string", ""),
                        ("transaction_id", 3, "string", ""), ("offset", 4, "int64", ""),
                        ("recall_handle", 5, "string", "")],
    "SendMessageResponse": [("status", 1, "Status", ""), ("entries", 2, "SendResultEntry", "repeated")],
    "QueryAssignmentRequest": [("topic", 1, "Resource", ""), ("group", 2, "Resource", ""),
                               ("endpoints", 3, "Endpoints", "")],
    "QueryAssignmentResponse": [("status", 1, "Status", ""), ("assignments", 2, "Assignment", "repeated")],
    "ReceiveMessageRequest": [("group", 1, "Resource", ""), ("message_queue", 2, "MessageQueue", ""),
                              ("filter_expression", 3, "FilterExpression", ""), ("batch_size", 4, "int32", ""),
                              ("invisible_duration", 5, "Duration", "optional"), ("auto_renew", 6, "bool", ""),
                              ("long_polling_timeout", 7, "Duration", "optional"),
                              ("attempt_id", 8, "string", "optional")],
    "ReceiveMessageResponse": [("status", 1, "Status", "oneof:content"), ("message", 2, "Message", "oneof:content"),
                               ("delivery_timestamp", 3, "Timestamp", "oneof:content")],
    "AckMessageEntry": [("message_id", 1, "string", ""), ("receipt_handle", 2, "string", ""),
                        ("lite_topic", 3, "string", "optional")],
    "AckMessageRequest": [("group", 1, "Resource", ""), ("topic", 2, "Resource", ""),
                          ("entries", 3, "AckMessageEntry", "repeated")],
    "AckMessageResultEntry": [("message_id", 1, "string", ""), ("receipt_handle", 2, "string", ""),
                              ("status", 3, "Status", "")],
    "AckMessageResponse": [("status", 1, "Status", ""), ("entries", 2, "AckMessageResultEntry", "repeated")],
    "ForwardMessageToDeadLetterQueueRequest": [
        ("group", 1, "Resource", ""), ("topic", 2, "Resource", ""), ("receipt_handle", 3, "string", ""),
        ("message_id", 4, "string", ""), ("delivery_attempt", 5, "int32", ""),
        ("max_delivery_attempts", 6, "int32", ""), ("lite_topic", 7, "string", "optional")],
    "ForwardMessageToDeadLetterQueueResponse": [("status", 1, "Status", "")],
    "HeartbeatRequest": [("group", 1, "Resource", "optional"), ("client_type", 2, "ClientType", "")],
    "HeartbeatResponse": [("status", 1, "Status", "")],
    "EndTransactionRequest": [("topic", 1, "Resource", ""), ("message_id", 2, "string", ""),
                              ("transaction_id", 3, "string", ""), ("resolution", 4, "TransactionResolution", ""),
                              ("source", 5, "TransactionSource", ""), ("trace_context", 6, "string", "")],
    "EndTransactionResponse": [("status", 1, "Status", "")],
    "PrintThreadStackTraceCommand": [("nonce", 1, "string", "")],
    "ReconnectEndpointsCommand": [("nonce", 1, "string", "")],
    "ThreadStackTrace": [("nonce", 1, "string", ""), ("thread_stack_trace", 2, "string", "optional")],
    "VerifyMessageCommand": [("nonce", 1, "string", ""), ("message", 2, "Message", "")],
    "VerifyMessageResult": [("nonce", 1, "string", "")],
    "RecoverOrphanedTransactionCommand": [("message", 1, "Message", ""), ("transaction_id", 2, "string", "")],
    "TelemetryCommand": [
        ("status", 1, "Status", "optional"), ("settings", 2, "Settings", "oneof:command"),
        ("thread_stack_trace", 3, "ThreadStackTrace", "oneof:command"),
        ("verify_message_result", 4, "VerifyMessageResult", "oneof:command"),
        ("recover_orphaned_transaction_command", 5, "RecoverOrphanedTransactionCommand", "oneof:command"),
        ("print_thread_stack_trace_command", 6, "PrintThreadStackTraceCommand", "oneof:command"),
        ("verify_message_command", 7, "VerifyMessageCommand", "oneof:command"),
        ("reconnect_endpoints_command", 8, "ReconnectEndpointsCommand", "oneof:command"),
        ("notify_unsubscribe_lite_command", 9, "NotifyUnsubscribeLiteCommand", "oneof:command")],
    "NotifyClientTerminationRequest": [("group", 1, "Resource", "optional")],
    "NotifyClientTerminationResponse": [("status", 1, "Status", "")],
    "ChangeInvisibleDurationRequest": [("group", 1, "Resource", ""), ("topic", 2, "Resource", ""),
                                       ("receipt_handle", 3, "string", ""), ("invisible_duration", 4, "Duration", ""),
                                       ("message_id", 5, "string", ""), ("lite_topic", 6, "string", "optional"),
                                       ("suspend", 7, "bool", "optional")],
    "ChangeInvisibleDurationResponse": [("status", 1, "Status", ""), ("receipt_handle", 2, "string", "")],
    "OffsetOption": [("policy", 1, "OffsetOptionPolicy", "oneof:offset_type"),
                     ("offset", 2, "int64", "oneof:offset_type"), ("tail_n", 3, "int64", "oneof:offset_type"),
                     ("timestamp", 4, "int64", "oneof:offset_type")],
    "SyncLiteSubscriptionRequest": [("action", 1, "LiteSubscriptionAction", ""), ("topic", 2, "Resource", ""),
                                    ("group", 3, "Resource", ""), ("lite_topic_set", 4, "string", "repeated"),
                                    ("version", 5, "int64", "optional"),
                                    ("offset_option", 6, "OffsetOption", "optional")],
    "SyncLiteSubscriptionResponse": [("status", 1, "Status", "")],
    "NotifyUnsubscribeLiteCommand": [("lite_topic", 1, "string", "")],
    "RecallMessageRequest": [("topic", 1, "Resource", ""), ("recall_handle", 2, "string", "")],
    "RecallMessageResponse": [("status", 1, "Status", ""), ("message_id", 2, "string", "")],
}

# RPC name → (request, response, client streams, server streams)
RPCS: dict[str, tuple[str, str, bool, bool]] = {
    "QueryRoute": ("QueryRouteRequest", "QueryRouteResponse", False, False),
    "Heartbeat": ("HeartbeatRequest", "HeartbeatResponse", False, False),
    "SendMessage": ("SendMessageRequest", "SendMessageResponse", False, False),
    "QueryAssignment": ("QueryAssignmentRequest", "QueryAssignmentResponse", False, False),
    "ReceiveMessage": ("ReceiveMessageRequest", "ReceiveMessageResponse", False, True),
    "AckMessage": ("AckMessageRequest", "AckMessageResponse", False, False),
    "ForwardMessageToDeadLetterQueue": ("ForwardMessageToDeadLetterQueueRequest",
                                        "ForwardMessageToDeadLetterQueueResponse", False, False),
    "EndTransaction": ("EndTransactionRequest", "EndTransactionResponse", False, False),
    "Telemetry": ("TelemetryCommand", "TelemetryCommand", True, True),
    "NotifyClientTermination": ("NotifyClientTerminationRequest", "NotifyClientTerminationResponse", False, False),
    "ChangeInvisibleDuration": ("ChangeInvisibleDurationRequest", "ChangeInvisibleDurationResponse", False, False),
    "RecallMessage": ("RecallMessageRequest", "RecallMessageResponse", False, False),
    "SyncLiteSubscription": ("SyncLiteSubscriptionRequest", "SyncLiteSubscriptionResponse", False, False),
}

_SCALARS = {"string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
            "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
            "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
            "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
            "float": descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT}
_WELL_KNOWN = {"Duration": ".google.protobuf.Duration", "Timestamp": ".google.protobuf.Timestamp"}


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="sluice/apache_rocketmq_v2.proto", package=PACKAGE, syntax="proto3",
                                           dependency=["google/protobuf/duration.proto",
                                                       "google/protobuf/timestamp.proto"])
    for name, values in ENUMS.items():
        e = f.enum_type.add(name=name)
        for vname, number in values:
            e.value.add(name=vname, number=number)
    for name, fields in MESSAGES.items():
        m = f.message_type.add(name=name)
        oneofs: dict[str, int] = {}
        for *_, flags in fields:  # real oneofs first: the synthetic ones of proto3 optionals must follow them
            if flags.startswith("oneof:") and flags[len("oneof:"):] not in oneofs:
                oneofs[flags[len("oneof:"):]] = len(m.oneof_decl)
                m.oneof_decl.add(name=flags[len("oneof:"):])
        for fname, number, ftype, flags in fields:
            fd = m.field.add(name=fname, number=number, label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
            if flags == "map":  # map<string, string>: a repeated nested entry type
                entry = m.nested_type.add(name="".join(p.title() for p in fname.split("_")) + "Entry")
                entry.options.map_entry = True
                for i, kv in enumerate(("key", "value"), 1):
                    entry.field.add(name=kv, number=i, label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
                                    type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
                fd.label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                fd.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                fd.type_name = f".{PACKAGE}.{name}.{entry.name}"
                continue
            if ftype in _SCALARS:
                fd.type = _SCALARS[ftype]
            elif ftype in _WELL_KNOWN:
                fd.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                fd.type_name = _WELL_KNOWN[ftype]
            elif ftype in ENUMS:
                fd.type = descriptor_pb2.FieldDescriptorProto.TYPE_ENUM
                fd.type_name = f".{PACKAGE}.{ftype}"
            else:
                assert ftype in MESSAGES, ftype
                fd.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                fd.type_name = f".{PACKAGE}.{ftype}"
            if flags == "repeated":
                fd.label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
            elif flags == "optional":  # proto3 optional: a synthetic oneof of its own
                fd.proto3_optional = True
                fd.oneof_index = len(m.oneof_decl)
                m.oneof_decl.add(name=f"_{fname}")
            elif flags.startswith("oneof:"):
                fd.oneof_index = oneofs[flags[len("oneof:"):]]
    service = f.service.add(name="MessagingService")
    for rpc, (req, resp, cs, ss) in RPCS.items():
        service.method.add(name=rpc, input_type=f".{PACKAGE}.{req}", output_type=f".{PACKAGE}.{resp}",
                           client_streaming=cs, server_streaming=ss)
    return f


def _build() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    for well_known in (duration_pb2, timestamp_pb2):
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(well_known.DESCRIPTOR.serialized_pb))
    pool.Add(_file())
    out: dict[str, Any] = {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
                           for name in MESSAGES}
    out["Duration"] = message_factory.GetMessageClass(pool.FindMessageTypeByName("google.protobuf.Duration"))
    out["Timestamp"] = message_factory.GetMessageClass(pool.FindMessageTypeByName("google.protobuf.Timestamp"))
    return out


class _Messages:
    """The message classes by name: ``pb.QueryRouteRequest`` ..."""

    def __init__(self, classes: dict[str, Any]) -> None:
        self.__dict__.update(classes)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"no message {name!r} in the RocketMQ v2 protocol as Sluice describes it")


pb: Any = _Messages(_build())
CODE = {name: number for name, number in ENUMS["Code"]}

__all__ = ["CODE", "ENUMS", "MESSAGES", "PACKAGE", "RPCS", "SERVICE", "pb"]
