"""Requests shaped the way the RocketMQ C++ 1.2.x client (PyPI ``rocketmq==0.4.4``) sends them are served like
their Java-shaped twins. Each test pins a quirk that ``tests/interop`` found with the real client (docs/interop.md).
"""

from __future__ import annotations

import time
import zlib

from sluice.common.batch_codec import BatchItem, encode_batch
from sluice.common.message_codec import decode_records
from sluice.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode


def invoke(cluster, request: RemotingCommand) -> RemotingCommand:
    async def go() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(cluster.brokers[0].broker_addr, request, 5000)
        finally:
            await client.close()

    return cluster.loop.run(go())


def stored(cluster, topic: str, queue_id: int = 0) -> list:
    r = cluster.brokers[0].store.get_messages("shapes", topic, queue_id, 0, 64)
    return decode_records(b"".join(bytes(b) for b in r.buffers))


def test_batch_whose_whole_body_the_cpp_producer_compressed_is_stored_as_its_messages(cluster):
    """C++ deflates a batch body of 4 KiB or more as one and sets sysFlag 1 next to ``batch`` = "1"."""
    cluster.create_topic("cpp-batch", 1)
    items = [BatchItem(b"small", {"TAGS": "a", "KEYS": "k1"}), BatchItem(b"y" * 6000, {"TAGS": "b"}),
             BatchItem(b"last", {"p": "v"}, flag=3)]
    body = zlib.compress(encode_batch(items), 5)
    ext = {"producerGroup": "cpp-producers", "topic": "cpp-batch", "defaultTopic": "TBW102",
           "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "1", "bornTimestamp": str(int(time.time() * 1000)),
           "flag": "0", "properties": "WAIT\x01true\x02", "reconsumeTimes": "0", "unitMode": "0", "batch": "1"}
    resp = invoke(cluster, RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields["queueOffset"] == "0" and len(resp.ext_fields["msgId"].split(",")) == 3

    msgs = stored(cluster, "cpp-batch")
    assert [m.body for m in msgs] == [b"small", b"y" * 6000, b"last"]
    assert [m.sys_flag & 1 for m in msgs] == [0, 0, 0]  # stored inflated: the records were never compressed
    assert [m.tags for m in msgs] == ["a", "b", None] and msgs[2].flag == 3 and msgs[2].properties["p"] == "v"
    assert [m.queue_offset for m in msgs] == [0, 1, 2]


def test_compressed_batch_that_does_not_inflate_is_message_illegal(cluster):
    cluster.create_topic("cpp-batch-bad", 1)
    ext = {"producerGroup": "cpp-producers", "topic": "cpp-batch-bad", "queueId": "0", "sysFlag": "1",
           "bornTimestamp": "0", "flag": "0", "properties": "", "batch": "1"}
    resp = invoke(cluster, RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, b"x\x5enot zlib at all"))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "inflate" in resp.remark
    assert stored(cluster, "cpp-batch-bad") == []
