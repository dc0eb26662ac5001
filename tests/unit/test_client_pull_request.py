"""The PULL_MESSAGE request a consumer builds: per-pull fields change, the rest comes from a per-queue cache
that follows the subscription."""

from __future__ import annotations

from sluice.client.aio import PushConsumer
from sluice.common.structs import MessageQueue


def test_pull_requests_carry_their_own_offsets_and_the_current_subscription():
    c = PushConsumer("g", namesrv="127.0.0.1:9876")
    c.subscribe("T", "a || b")
    mq = MessageQueue("T", "broker-a", 3)
    first, sub, _ = c._pull_command(mq, 10, 32, True, -1)
    second, _, _ = c._pull_command(mq, 42, 32, True, 7)
    assert first.ext_fields["queueOffset"] == "10" and first.ext_fields["commitOffset"] == "-1"
    assert second.ext_fields["queueOffset"] == "42" and second.ext_fields["commitOffset"] == "7"
    assert int(second.ext_fields["sysFlag"]) & 0x1 and not int(first.ext_fields["sysFlag"]) & 0x1
    assert first.ext_fields["queueId"] == "3" and first.ext_fields["subscription"] == sub.sub_string
    assert first.ext_fields is not second.ext_fields and first.opaque != second.opaque

    c.subscribe("T", "c")  # a new subscription: the next request says so
    third, sub3, _ = c._pull_command(mq, 43, 32, True, -1)
    assert third.ext_fields["subscription"] == sub3.sub_string == "c"
    assert third.ext_fields["subVersion"] == str(sub3.sub_version)
    other, _, _ = c._pull_command(MessageQueue("T", "broker-a", 1), 0, 16, False, -1)
    assert other.ext_fields["queueId"] == "1" and other.ext_fields["maxMsgNums"] == "16"
    assert not int(other.ext_fields["sysFlag"]) & 0x2  # not suspended
