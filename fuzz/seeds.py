"""Write the seed corpus of every fuzz target (``fuzz/corpus/<target>/``): valid inputs made by Sluice's own
encoders, a few KiB at most, from which the fuzzer mutates its way into the decoders.

``python fuzz/seeds.py`` rewrites them; the files are committed, so this runs only when a format changes.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz.targets import CORPUS_DIR
from sluice.common import fastjson
from sluice.common.batch_codec import BatchItem, encode_batch
from sluice.common.message import MessageExtBrokerInner
from sluice.common.message_codec import encode_record
from sluice.common.properties import encode_properties
from sluice.common.structs import (
    BrokerData,
    ClusterInfo,
    ConsumerData,
    DataVersion,
    HeartbeatData,
    MessageQueue,
    QueueData,
    SubscriptionData,
    TopicConfig,
    TopicFilterType,
    TopicRouteData,
)
from sluice.common.sysflag import COMPRESSED_FLAG, TRANSACTION_PREPARED_TYPE
from sluice.namesrv.register_broker_body import TopicConfigSerializeWrapper, encode_register_broker_body
from sluice.remoting.codec import encode_command_bytes, encode_header
from sluice.remoting.codes import RequestCode, SerializeType
from sluice.remoting.command import RemotingCommand
from sluice.store import MessageStore

_PROPS = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "7F0000010001B4AA", "WAIT": "true"}


def frames() -> dict[str, bytes]:
    v2 = {"a": "pg", "b": "TopicA", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1700000000000", "h": "0",
          "i": "TAGS\x01TagA\x02KEYS\x01k1", "j": "0", "k": "false", "l": "16", "m": "false", "n": "broker-a"}
    v1 = {"producerGroup": "pg", "topic": "TopicA", "queueId": "0", "sysFlag": "0", "bornTimestamp": "1",
          "flag": "0", "properties": "TAGS\x01x", "reconsumeTimes": "0", "batch": "true", "maxReconsumeTimes": "3"}
    pull = {"consumerGroup": "cg", "topic": "TopicA", "queueId": "0", "queueOffset": "5", "maxMsgNums": "32",
            "sysFlag": "2", "commitOffset": "-1", "suspendTimeoutMillis": "15000", "subscription": "TagA || TagB",
            "subVersion": "1", "expressionType": "TAG"}
    send_v2 = RemotingCommand(RequestCode.SEND_MESSAGE_V2, v2, b"hello", 7)
    send_v1 = RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, v1, b"", 8, serialize_type=SerializeType.ROCKETMQ)
    pull_bin = RemotingCommand(RequestCode.PULL_MESSAGE, pull, b"", 9, serialize_type=SerializeType.ROCKETMQ)
    resp = RemotingCommand(0, {"msgId": "ABC", "queueOffset": "3"}, b"", 7, 1, "ok", "JAVA")
    # The C++ client's JSON: numbers for some extFields values.
    cpp = b'{"code":11,"extFields":{"queueId":3,"topic":"TopicA","batch":false},"flag":0,"language":"CPP",' \
          b'"opaque":1,"version":409}'
    cpp_frame = (8 + len(cpp)).to_bytes(4, "big") + len(cpp).to_bytes(4, "big") + cpp + b"body"
    return {
        "send-v2-json": b"\x00" + encode_command_bytes(send_v2),
        "send-batch-rocketmq": b"\x03" + encode_command_bytes(send_v1),
        "pull-rocketmq": b"\x05" + encode_command_bytes(pull_bin),
        "response-and-request": b"\x07" + encode_command_bytes(resp) + encode_command_bytes(send_v2),
        "cpp-json-numbers": b"\x02" + cpp_frame,
        # A header alone (first byte's top bit), framed by the target: JSON, then ROCKETMQ.
        "header-json-send-v2": b"\x80" + encode_header(send_v2),
        "header-json-cpp": b"\x80" + cpp,
        "header-rocketmq-pull": b"\x81" + encode_header(pull_bin),
    }


def _record(body: bytes, props: dict[str, str], **kw: object) -> bytes:
    return encode_record(topic=b"TopicA", body=body, properties=encode_properties(props), born_host="10.0.0.1:5000",
                         **kw)  # type: ignore[arg-type]


def records() -> dict[str, bytes]:
    return {
        "one-record": _record(b"hello", _PROPS, queue_id=1, queue_offset=3, physical_offset=128),
        "two-records": _record(b"a", {"TAGS": "x"}) + _record(b"bb" * 20, {}, queue_offset=1, physical_offset=112),
        "compressed-body": _record(zlib.compress(b"z" * 300), {"KEYS": "k"}, sys_flag=COMPRESSED_FLAG),
        "zlib-stream": zlib.compress(b"message body " * 20),
    }


def batch() -> dict[str, bytes]:
    items = [BatchItem(b"first", {"TAGS": "a", "KEYS": "k1 k2"}), BatchItem(b"second", {"UNIQ_KEY": "U1"}, 3),
             BatchItem(b"", {}), BatchItem(b"x" * 40, {"TAGS": "b", "DELAY": "0", "KEYS": "k3"})]
    body = encode_batch(items)
    uniform = encode_batch([BatchItem(f"{i:04d}".encode(), {"TAGS": "t", "UNIQ_KEY": f"{i:06d}"}) for i in range(6)])
    return {"mixed": b"\x00" + body, "uniform": b"\x00" + uniform, "compressed": b"\x01" + zlib.compress(body)}


def register_body() -> dict[str, bytes]:
    table = {"TopicA": TopicConfig("TopicA", 4, 4, 6), "TopicB": TopicConfig("TopicB", 8, 8, 2,
                                                                            TopicFilterType.MULTI_TAG, 1, True)}
    wrapper = TopicConfigSerializeWrapper(DataVersion(1700000000000, 3), table)
    compressed = encode_register_broker_body(wrapper, ["10.0.0.1:1"], compressed=True)
    return {
        "plain": b"\x00" + encode_register_broker_body(wrapper, ["10.0.0.1:1"]),
        "compressed": b"\x01" + compressed,
        "compressed-parts": b"\x02" + zlib.decompress(compressed),
    }


def fastjson_bodies() -> dict[str, bytes]:
    key = fastjson.ObjectKey({"brokerName": "b", "queueId": 0, "topic": "t"})
    return {
        "number-keys": b'{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"cluster":"c"}',
        "object-keys": fastjson.dumps({"offsetTable": {key: {"brokerOffset": 5, "consumerOffset": 3}}}),
        "standard": b'{"a":[1,2.5,-3e2,true,null,"s\\u00e9"],"b":{}}',
    }


def bodies() -> dict[str, bytes]:
    sub = SubscriptionData("TopicA", "a || b", ["a", "b"], [97, 98], 1700000000000)
    heartbeat = HeartbeatData("10.0.0.1@1", ["pg"], [ConsumerData("cg", subscriptions=[sub])])
    route = TopicRouteData([QueueData("broker-a", 4, 4, 6)], [BrokerData("c", "broker-a", {0: "10.0.0.1:10911"})])
    cluster = ClusterInfo({"broker-a": BrokerData("c", "broker-a", {0: "10.0.0.1:10911"})}, {"c": {"broker-a"}})
    mq = MessageQueue("TopicA", "broker-a", 1).to_json()
    return {  # the first byte picks the body (fuzz.targets.bodies._BODIES)
        "heartbeat": b"\x00" + fastjson.dumps(heartbeat.to_json()),
        "lock": b"\x01" + fastjson.dumps({"consumerGroup": "cg", "clientId": "c1", "mqSet": [mq]}),
        "data-version": b"\x02" + fastjson.dumps(DataVersion(1700000000000, 7).to_json()),
        "route": b"\x03" + fastjson.dumps(route.to_json()),
        "cluster-info": b"\x04" + fastjson.dumps(cluster.to_json()),
        "route-number-keys": b'\x03{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"b",'
                             b'"cluster":"c"}],"queueDatas":[]}',
    }


def filter_expressions() -> dict[str, bytes]:
    props = b"a\x0142\x02region\x01hz\x02TAGS\x01paid\x02price\x013.5"
    return {
        "comparisons": b"a > 10 AND region = 'hz' OR price BETWEEN 1 AND 5\x00" + props,
        "in-null-not": b"NOT (region IN ('hz', 'sh')) AND b IS NULL AND a IS NOT NULL\x00" + props,
        "strings": b"region STARTSWITH 'h' AND TAGS CONTAINS 'ai' OR region ENDSWITH 'z'\x00" + props,
        "key-value": b"kv:region=hz,TAGS=paid\x00" + props,
        "chain": b" OR ".join(b"a = %d" % i for i in range(50)) + b"\x00" + props,
    }


def properties() -> dict[str, bytes]:
    return {
        "java": encode_properties(_PROPS),
        "cpp-trailing-separator": encode_properties({"TAGS": "a", "KEYS": "k"}) + b"\x02",
    }


def recovery() -> dict[str, bytes]:
    """Commit logs a store wrote (segments of 4096 bytes, the last without its zero tail), left unclosed."""
    from fuzz.targets.recovery import SEGMENT, store_config

    logging.disable(logging.WARNING)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, count in (("one-segment", 6), ("two-segments", 40)):
            root = os.path.join(tmp, name)
            with MessageStore(store_config(root)) as store:
                for i in range(count):
                    props = {"TAGS": f"t{i % 3}", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"} if i % 2 else {}
                    sys_flag = TRANSACTION_PREPARED_TYPE if i == 4 else 0
                    store.put_message(MessageExtBrokerInner(f"Topic{i % 2}", b"m" * (i * 3), i % 3, 0, props,
                                                            sys_flag))
                files = store.commit_log.queue.files
                data = b"".join(bytes(f.buf[:SEGMENT]) for f in files)
            out[name] = data.rstrip(b"\0")
            shutil.rmtree(root)
    return out




SEEDS: dict[str, Callable[[], dict[str, bytes]]] = {
    "frames": frames, "records": records, "batch": batch, "register_body": register_body,
    "fastjson": fastjson_bodies, "bodies": bodies, "properties": properties, "recovery": recovery,
    "filter": filter_expressions,
}


def main() -> None:
    for target, make in SEEDS.items():
        directory = CORPUS_DIR / target
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("seed-*"):
            old.unlink()
        for name, data in make().items():
            (directory / f"seed-{name}").write_bytes(data)
            print(f"{target}/seed-{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
