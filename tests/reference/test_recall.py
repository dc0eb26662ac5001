"""Differential: recall with Sluice's producer against Sluice and against Apache RocketMQ — the handle a timer
message's send returns, the recall, the refusals (a handle of another topic, a time passed, an unreadable one), and
what is delivered after."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from sluice import Message, Producer, PullConsumer
from sluice.common.errors import BrokerResponseError, ClientError
from sluice.common.recall_handle import RecallHandle
from tests.integration.helpers import wait_until
from tests.reference.conftest import System
from tests.reference.observe import assert_same, both


def _refused(fn: Any) -> Any:
    try:
        fn()
    except ClientError as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, BrokerResponseError):
            cause = cause.__cause__
        return [cause.code, cause.remark] if isinstance(cause, BrokerResponseError) else str(exc)
    return "allowed"


def test_recall_of_a_timer_message_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic, other = s.topic("recall"), s.topic("recall-other")
        s.create_topic(topic, 1)
        s.create_topic(other, 1)
        with Producer(s.topic("pg"), namesrv=s.namesrv) as p:
            gone = p.send(Message(topic, b"recall me", delay=timedelta(seconds=4)))
            p.send(Message(topic, b"keep me", delay=timedelta(seconds=4)))
            assert gone.recall_handle is not None
            h = RecallHandle.decode(gone.recall_handle)
            past = RecallHandle(topic, h.broker_name, str(int(time.time() * 1000) - 1000), h.message_id).encode()
            observed: dict[str, Any] = {
                "handle": [h.topic, h.broker_name, h.message_id == gone.msg_id,
                           0 < int(h.timestamp) - time.time() * 1000 < 6000],
                "other topic": _refused(lambda: p.recall_message(other, gone.recall_handle or "")),
                "time passed": _refused(lambda: p.recall_message(topic, past)),
                "recalled": p.recall_message(topic, gone.recall_handle) == gone.msg_id,
                "plain": p.send(Message(topic, b"plain")).recall_handle,
            }
        got: list[bytes] = []
        with PullConsumer(s.topic("reader"), namesrv=s.namesrv, consume_from="first") as reader:
            reader.subscribe(topic)
            wait_until(lambda: got.extend(m.body for m in reader.poll(0.2)) or b"keep me" in got, 60, "keep me")
            for _ in range(5):
                got.extend(m.body for m in reader.poll(0.2))
        observed["delivered"] = sorted(b.decode() for b in got)
        return observed

    observed = assert_same(both(systems, scenario))
    assert observed["delivered"] == ["keep me", "plain"] and observed["recalled"]
