"""The gRPC front carries a RocketMQ 5 client's ``trace_context`` (a W3C traceparent) as the stored message's
TRACE_CONTEXT property and hands it back to gRPC consumers as their ``trace_context``: the property Sluice's own
clients carry theirs in (``enable_otel``)."""

from __future__ import annotations

import pytest

from sluice.common.message import MessageExt
from sluice.proxy.grpc_converter import Refused, stored_properties, to_pb_message
from sluice.proxy.protocol import pb

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _sent(trace_context: str | None) -> object:
    m = pb.Message(body=b"x")
    m.topic.name = "t"
    m.system_properties.message_id = "01ABC"
    if trace_context is not None:
        m.system_properties.trace_context = trace_context
    return m


def test_a_trace_context_is_stored_as_trace_context_and_given_back_as_one() -> None:
    props, _ = stored_properties(_sent(TP))
    assert props["TRACE_CONTEXT"] == TP
    stored = MessageExt(topic="t", body=b"x", queue_id=0, flag=0, queue_offset=0, commit_log_offset=0, sys_flag=0,
                        born_timestamp=0, born_host="127.0.0.1:1", store_timestamp=0, store_host="127.0.0.1:10911",
                        reconsume_times=0, prepared_transaction_offset=0, properties=props, store_size=0, body_crc=0)
    out = to_pb_message(stored, _sent(None).topic, 0)
    assert out.system_properties.trace_context == TP
    assert "TRACE_CONTEXT" not in out.user_properties
    assert "TRACE_CONTEXT" not in stored_properties(_sent(None))[0]


@pytest.mark.parametrize("bad", ["x" * 600, "00-a\x01b"])
def test_a_trace_context_that_is_not_a_short_text_is_refused(bad: str) -> None:
    with pytest.raises(Refused):
        stored_properties(_sent(bad))
