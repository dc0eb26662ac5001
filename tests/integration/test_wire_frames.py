"""The frames our client sends, and the servers' answers, checked against the spec (remoting.md §1–§4).

A recording TCP proxy sits between the Sluice client and both servers: the client is given the proxy as its
name server, and the broker announces 127.0.0.2:<its port>, where a second proxy listens and forwards to the
broker on 127.0.0.1. The broker registers with the name server through the proxy as well, so its
REGISTER_BROKER / UNREGISTER_BROKER are checked too. Each frame is cut from the byte stream by its length word
and its header parsed as raw JSON, so the JSON types on the wire (string or number) are checked, not what our
decoder makes of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any

import pytest

from sluice import ConsumeOrderlyStatus, ConsumeStatus, Message, Producer, PullConsumer, PushConsumer
from sluice.common.hashing import java_string_hash
from sluice.common.message_codec import decode_records
from sluice.remoting import FrameDecoder, RemotingClient, RemotingCommand, RequestCode, ResponseCode
from tests.integration.helpers import wait_until

C = RequestCode

# == what the spec says ===============================================================================
HEADER_KEYS = {"code", "extFields", "flag", "language", "opaque", "remark", "version", "serializeTypeCurrentRPC"}
V2_REQUIRED = set("abcdefghijkm")
V2_OPTIONAL = set("ln")
# request code → (required ext fields, optional ext fields) of our client's requests (§3, Java header classes)
REQUEST_FIELDS: dict[int, tuple[set[str], set[str]]] = {
    C.SEND_MESSAGE_V2: (V2_REQUIRED, V2_OPTIONAL),
    C.SEND_BATCH_MESSAGE: (V2_REQUIRED, V2_OPTIONAL),
    C.PULL_MESSAGE: ({"consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
                      "suspendTimeoutMillis", "subscription", "subVersion"}, {"expressionType"}),
    C.QUERY_CONSUMER_OFFSET: ({"consumerGroup", "topic", "queueId"}, set()),
    C.UPDATE_CONSUMER_OFFSET: ({"consumerGroup", "topic", "queueId", "commitOffset"}, set()),
    C.GET_MAX_OFFSET: ({"topic", "queueId"}, set()),
    C.GET_MIN_OFFSET: ({"topic", "queueId"}, set()),
    C.GET_CONSUMER_LIST_BY_GROUP: ({"consumerGroup"}, set()),
    C.HEART_BEAT: (set(), set()),
    C.UNREGISTER_CLIENT: ({"clientID", "producerGroup", "consumerGroup"}, set()),
    C.CONSUMER_SEND_MSG_BACK: ({"group", "offset", "delayLevel"},
                               {"originMsgId", "originTopic", "unitMode", "maxReconsumeTimes"}),
    C.LOCK_BATCH_MQ: (set(), set()),
    C.UNLOCK_BATCH_MQ: (set(), set()),
    C.GET_ROUTEINFO_BY_TOPIC: ({"topic"}, {"acceptStandardJsonOnly"}),
    # the broker is a client of the name server too (§3.1)
    C.REGISTER_BROKER: ({"brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId"},
                        {"compressed", "bodyCrc32"}),
    C.UNREGISTER_BROKER: ({"brokerName", "brokerAddr", "clusterName", "brokerId"}, set()),
}
# ext fields Java parses as int / long, or as a boolean (Boolean.parseBoolean: only "true" is true)
INT_FIELDS = {"d", "e", "f", "g", "h", "j", "l", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
              "suspendTimeoutMillis", "subVersion", "offset", "delayLevel", "maxReconsumeTimes", "brokerId",
              "bodyCrc32"}
BOOL_FIELDS = {"k", "m", "unitMode", "acceptStandardJsonOnly", "compressed"}
# request code → ext fields every (stored / pulled / found) response must carry, all as strings (§1.2, §3)
RESPONSE_FIELDS: dict[int, set[str]] = {
    C.SEND_MESSAGE_V2: {"msgId", "queueId", "queueOffset"},
    C.SEND_BATCH_MESSAGE: {"msgId", "queueId", "queueOffset"},
    C.PULL_MESSAGE: {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"},
    C.QUERY_CONSUMER_OFFSET: {"offset"},
    C.GET_MAX_OFFSET: {"offset"},
    C.GET_MIN_OFFSET: {"offset"},
}
PULL_ANSWERS = {ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                ResponseCode.PULL_OFFSET_MOVED}
CONSUME_TYPES = {"CONSUME_ACTIVELY", "CONSUME_PASSIVELY"}
MESSAGE_MODELS = {"BROADCASTING", "CLUSTERING"}
CONSUME_FROM = {"CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP"}


# == the recording proxy ==============================================================================
@dataclass
class Frame:
    conn: int
    to_server: bool  # client → server
    server: str  # "namesrv" or "broker"
    stype: int
    header: dict[str, Any]
    body: bytes

    @property
    def is_response(self) -> bool:
        return bool(self.header.get("flag", 0) & 1)


class Splitter:
    """Cuts frames out of one direction of a TCP stream; FrameDecoder reads the same bytes as a cross-check."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.decoder = FrameDecoder()

    def feed(self, data: bytes) -> list[tuple[int, dict[str, Any], bytes]]:
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            (length,) = struct.unpack_from(">I", self.buf, 0)
            if len(self.buf) < 4 + length:
                break
            frame = bytes(self.buf[4:4 + length])
            del self.buf[:4 + length]
            (word,) = struct.unpack_from(">I", frame, 0)
            h = word & 0xFFFFFF
            out.append((word >> 24, json.loads(frame[4:4 + h]), frame[4 + h:]))
        decoded = self.decoder.feed(data)
        assert [(c.code, c.opaque) for c in decoded] == [(hd["code"], hd["opaque"]) for _, hd, _ in out]
        return out


class RecordingProxy:
    def __init__(self, name: str, target: tuple[str, int], frames: list[Frame], lock: threading.Lock) -> None:
        self.name = name
        self.target = target
        self.frames = frames
        self.lock = lock
        self.server: asyncio.Server | None = None
        self.conns = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self, host: str, port: int) -> str:
        self.server = await asyncio.start_server(self._serve, host, port)
        h, p = self.server.sockets[0].getsockname()[:2]
        return f"{h}:{p}"

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.conns += 1
        conn = self.conns
        sreader, swriter = await asyncio.open_connection(*self.target)
        self.writers += [cwriter, swriter]
        await asyncio.gather(self._pump(creader, swriter, conn, True), self._pump(sreader, cwriter, conn, False),
                             return_exceptions=True)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: int,
                    to_server: bool) -> None:
        splitter = Splitter()
        try:
            while data := await reader.read(65536):
                for stype, header, body in splitter.feed(data):
                    with self.lock:
                        self.frames.append(Frame(conn, to_server, self.name, stype, header, body))
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for w in self.writers:
                w.close()
            await self.server.wait_closed()


# == checks ===========================================================================================
def is_int_string(v: Any) -> bool:
    return isinstance(v, str) and v.lstrip("-").isdigit()


def check_header_types(f: Frame) -> None:
    h = f.header
    assert f.stype == 0, "JSON headers only"
    assert set(h) <= HEADER_KEYS, set(h) - HEADER_KEYS
    for k in ("code", "flag", "opaque", "version"):
        assert type(h[k]) is int, (k, h)
    assert isinstance(h["language"], str)
    assert isinstance(h.get("extFields"), dict), h  # always present (C++ clients crash without it)
    for k, v in h["extFields"].items():
        assert isinstance(k, str) and isinstance(v, str), (k, v, h)
    if "remark" in h:
        assert h["remark"] is None or isinstance(h["remark"], str)


def check_request(f: Frame) -> None:
    h = f.header
    check_header_types(f)
    assert h["language"] == "PYTHON"
    assert h["flag"] in (0, 2), h  # request, maybe oneway; never the response bit
    required, optional = REQUEST_FIELDS[h["code"]]
    ext = h["extFields"]
    assert required <= set(ext), (C(h["code"]).name, required - set(ext))
    assert set(ext) <= required | optional, (C(h["code"]).name, set(ext) - required - optional)
    for k, v in ext.items():
        if k in INT_FIELDS:
            assert is_int_string(v), (C(h["code"]).name, k, v)
        if k in BOOL_FIELDS:
            assert v in ("true", "false"), (C(h["code"]).name, k, v)
    code = h["code"]
    if code in (C.SEND_MESSAGE_V2, C.SEND_BATCH_MESSAGE):
        assert ext["c"] == "TBW102" and ext["m"] == ("true" if code == C.SEND_BATCH_MESSAGE else "false")
        assert f.body
    if code == C.HEART_BEAT:
        check_heartbeat(json.loads(f.body))
    if code == C.REGISTER_BROKER:
        check_register_broker(ext, f.body)
    if code in (C.LOCK_BATCH_MQ, C.UNLOCK_BATCH_MQ):
        body = json.loads(f.body)
        assert set(body) == {"consumerGroup", "clientId", "mqSet"}, body
        assert isinstance(body["consumerGroup"], str) and isinstance(body["clientId"], str)
        check_mq_set(body["mqSet"])


def check_register_broker(ext: dict[str, str], body: bytes) -> None:
    assert ext["compressed"] == "false" and int(ext["bodyCrc32"]) == zlib.crc32(body) & 0x7FFFFFFF
    data = json.loads(body)
    assert set(data) == {"filterServerList", "topicConfigSerializeWrapper"} and data["filterServerList"] == []
    wrapper = data["topicConfigSerializeWrapper"]
    assert set(wrapper) == {"dataVersion", "topicConfigTable"}
    assert set(wrapper["dataVersion"]) >= {"counter", "timestamp"}
    assert all(type(v) is int for v in wrapper["dataVersion"].values())
    for name, tc in wrapper["topicConfigTable"].items():
        assert set(tc) == {"topicName", "readQueueNums", "writeQueueNums", "perm", "topicFilterType",
                           "topicSysFlag", "order", "attributes"}, tc
        assert tc["topicName"] == name and tc["topicFilterType"] in ("SINGLE_TAG", "MULTI_TAG")
        assert all(type(tc[k]) is int for k in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag"))
        assert type(tc["order"]) is bool


def check_mq_set(mqs: Any) -> None:
    assert isinstance(mqs, list) and mqs
    for mq in mqs:
        assert set(mq) == {"topic", "brokerName", "queueId"}, mq
        assert isinstance(mq["topic"], str) and isinstance(mq["brokerName"], str) and type(mq["queueId"]) is int


def check_heartbeat(hb: dict[str, Any]) -> None:
    assert set(hb) <= {"clientID", "producerDataSet", "consumerDataSet"} and isinstance(hb["clientID"], str)
    for p in hb.get("producerDataSet", []):
        assert set(p) == {"groupName"} and isinstance(p["groupName"], str)
    for c in hb.get("consumerDataSet", []):
        assert {"groupName", "consumeType", "messageModel", "consumeFromWhere", "subscriptionDataSet"} <= set(c)
        assert set(c) <= {"groupName", "consumeType", "messageModel", "consumeFromWhere", "subscriptionDataSet",
                          "unitMode"}
        assert c["consumeType"] in CONSUME_TYPES and c["messageModel"] in MESSAGE_MODELS
        assert c["consumeFromWhere"] in CONSUME_FROM
        for s in c["subscriptionDataSet"]:
            assert {"topic", "subString", "tagsSet", "codeSet", "subVersion"} <= set(s), s
            assert isinstance(s["topic"], str) and isinstance(s["subString"], str)
            assert type(s["subVersion"]) is int
            assert all(isinstance(t, str) for t in s["tagsSet"])
            assert s["codeSet"] == [java_string_hash(t) for t in s["tagsSet"]], s
            assert s.get("expressionType", "TAG") == "TAG"


def check_response(f: Frame, request: Frame) -> None:
    h = f.header
    check_header_types(f)
    assert h["flag"] & 1 and h["opaque"] == request.header["opaque"]
    code, rcode = request.header["code"], h["code"]
    ext = h["extFields"]
    needed = RESPONSE_FIELDS.get(code, set())
    stored = rcode in (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
                       ResponseCode.SLAVE_NOT_AVAILABLE)
    if code == C.PULL_MESSAGE:
        assert rcode in PULL_ANSWERS, (rcode, h.get("remark"))
        assert needed <= set(ext), ext
        assert all(is_int_string(ext[k]) for k in needed), ext
    elif needed and stored:
        assert needed <= set(ext), (C(code).name, ext)
    if code in (C.SEND_MESSAGE_V2, C.SEND_BATCH_MESSAGE) and stored:
        assert all(len(i) == 32 and int(i, 16) >= 0 for i in ext["msgId"].split(",")), ext
        assert is_int_string(ext["queueId"]) and is_int_string(ext["queueOffset"])
    if code == C.GET_ROUTEINFO_BY_TOPIC and rcode == ResponseCode.SUCCESS:
        route = json.loads(f.body)
        assert {"brokerDatas", "queueDatas"} <= set(route)
        for b in route["brokerDatas"]:
            assert {"brokerAddrs", "brokerName", "cluster"} <= set(b)
            assert all(k.isdigit() and isinstance(a, str) for k, a in b["brokerAddrs"].items())
        for q in route["queueDatas"]:
            assert {"brokerName", "perm", "readQueueNums", "writeQueueNums"} <= set(q)
            assert all(type(q[k]) is int for k in ("perm", "readQueueNums", "writeQueueNums"))
    if code == C.GET_CONSUMER_LIST_BY_GROUP and rcode == ResponseCode.SUCCESS:
        ids = json.loads(f.body)["consumerIdList"]
        assert ids and all(isinstance(i, str) for i in ids)
    if code in (C.REGISTER_BROKER, C.UNREGISTER_BROKER):
        assert rcode == ResponseCode.SUCCESS, h.get("remark")
    if code == C.LOCK_BATCH_MQ:
        assert rcode == ResponseCode.SUCCESS
        body = json.loads(f.body)
        assert set(body) == {"lockOKMQSet"}
        check_mq_set(body["lockOKMQSet"])
    if code in (C.QUERY_CONSUMER_OFFSET, C.GET_MAX_OFFSET, C.GET_MIN_OFFSET) and rcode == ResponseCode.SUCCESS:
        assert is_int_string(ext["offset"])


# == the test =========================================================================================
def recorded_frames(frames: list[Frame], lock: threading.Lock) -> list[Frame]:
    with lock:
        return list(frames)


def groups_sent(frames: list[Frame], lock: threading.Lock) -> set[tuple[str | None, int]]:
    """(consumer group, request code) of the requests so far."""
    return {((f.header.get("extFields") or {}).get("consumerGroup"), f.header["code"])
            for f in recorded_frames(frames, lock) if f.to_server and not f.is_response}


def answers_of(recorded: list[Frame]) -> dict[tuple[str, int, int], Frame]:
    return {(f.server, f.conn, f.header["opaque"]): f for f in recorded if not f.to_server and f.is_response}


def unanswered(recorded: list[Frame]) -> list[Frame]:
    """Requests that expect an answer and have none yet (a pull the broker still held when its consumer shut
    down is not waiting for one)."""
    answers = answers_of(recorded)
    out = []
    for f in recorded:
        if not f.to_server or f.is_response or f.header["flag"] & 2:
            continue
        if (f.server, f.conn, f.header["opaque"]) in answers:
            continue
        if f.header["code"] == C.PULL_MESSAGE and int(f.header["extFields"]["sysFlag"]) & 0x2:
            continue
        out.append(f)
    return out


@pytest.fixture
def proxied(empty_cluster):
    """(cluster, name server address for clients, recorded frames): every client byte goes through a proxy."""
    cluster = empty_cluster
    frames: list[Frame] = []
    lock = threading.Lock()
    ns_host, ns_port = cluster.namesrv_addr.rsplit(":", 1)
    ns_proxy = RecordingProxy("namesrv", (ns_host, int(ns_port)), frames, lock)
    ns_addr = cluster.loop.run(ns_proxy.start("127.0.0.1", 0))
    # The broker registers through the proxy too. Short delay levels: a sent-back message (delay level 3 on its
    # first retry) comes back within moments.
    broker = cluster.start_broker("broker-w", broker_ip="127.0.0.2", namesrv_addr=ns_addr,
                                  message_delay_level="100ms 100ms 100ms 1s")
    broker_proxy = RecordingProxy("broker", ("127.0.0.1", broker.port), frames, lock)
    assert cluster.loop.run(broker_proxy.start("127.0.0.2", broker.port)) == broker.broker_addr
    try:
        yield cluster, ns_addr, frames, lock
    finally:
        cluster.loop.run(ns_proxy.stop())
        cluster.loop.run(broker_proxy.stop())


def test_client_frames_and_server_answers_follow_the_spec(proxied):
    cluster, namesrv, frames, lock = proxied
    topic = "wire"
    failed_once: set[bytes] = set()
    concurrent_got: list[bytes] = []
    orderly_got: list[bytes] = []
    done = threading.Condition()

    with Producer("wire-producers", namesrv=namesrv) as producer:
        producer.send(Message(topic, b"one", tags="a", keys=["k-1"], properties={"area": "hz"}))
        producer.send_batch([Message(topic, b"batch-1", tags="b"), Message(topic, b"batch-2", tags="b")])
        producer.send_oneway(Message(topic, b"z" * 5000))  # oneway, and compressed (over 4 KiB)

        concurrent = PushConsumer("wire-concurrent", namesrv=namesrv, consume_from="first",
                                  persist_consumer_offset_interval=200)
        concurrent.subscribe(topic, "*")

        @concurrent.listener
        def handle(msgs):
            with done:
                for m in msgs:
                    if m.body == b"one" and m.body not in failed_once:
                        failed_once.add(m.body)  # one failure: the message is sent back for a retry
                        return ConsumeStatus.RECONSUME_LATER
                concurrent_got.extend(m.body for m in msgs)
                done.notify_all()
            return ConsumeStatus.CONSUME_SUCCESS

        orderly = PushConsumer("wire-orderly", namesrv=namesrv, consume_from="first", orderly=True)
        orderly.subscribe(topic, "a || b")

        @orderly.listener
        def handle_in_order(msgs):
            with done:
                orderly_got.extend(m.body for m in msgs)
                done.notify_all()
            return ConsumeOrderlyStatus.SUCCESS

        puller = PullConsumer("wire-pull", namesrv=namesrv)
        concurrent.start()
        orderly.start()
        puller.start()
        try:
            queues = puller.fetch_queues(topic)
            puller.assign(queues)
            for mq in queues:
                puller.seek_to_begin(mq)
            pulled: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(pulled) < 4 and time.monotonic() < deadline:
                pulled += [m.body for m in puller.poll(0.5)]
            puller.commit()
            assert puller.committed(queues[0]) >= 0
            puller.seek_to_end(queues[0])
            with done:
                assert done.wait_for(lambda: len(concurrent_got) >= 4 and len(orderly_got) >= 3, 60), (
                    concurrent_got, orderly_got)
            assert sorted(pulled) == [b"batch-1", b"batch-2", b"one", b"z" * 5000]
            assert sorted(orderly_got) == [b"batch-1", b"batch-2", b"one"]  # "a || b": the untagged one is not
            assert b"z" * 5000 in concurrent_got  # inflated again on the way in
            wait_until(lambda: ("wire-concurrent", C.UPDATE_CONSUMER_OFFSET) in groups_sent(frames, lock), 60,
                       "the push consumer's periodic offset commit")
        finally:
            puller.shutdown()
            orderly.shutdown()
            concurrent.shutdown()
    cluster.stop_broker(cluster.brokers[0])  # it unregisters from the name server
    # The last answers pass the proxy after the clients stopped waiting for them (async sends' and the like).
    wait_until(lambda: not unanswered(recorded_frames(frames, lock)), 60, "an answer to every request")

    recorded = recorded_frames(frames, lock)
    requests = [f for f in recorded if f.to_server and not f.is_response]
    seen = {f.header["code"] for f in requests}
    wanted = {C.GET_ROUTEINFO_BY_TOPIC, C.SEND_MESSAGE_V2, C.SEND_BATCH_MESSAGE, C.HEART_BEAT, C.PULL_MESSAGE,
              C.QUERY_CONSUMER_OFFSET, C.UPDATE_CONSUMER_OFFSET, C.GET_CONSUMER_LIST_BY_GROUP, C.LOCK_BATCH_MQ,
              C.UNLOCK_BATCH_MQ, C.CONSUMER_SEND_MSG_BACK, C.UNREGISTER_CLIENT, C.GET_MAX_OFFSET, C.GET_MIN_OFFSET,
              C.REGISTER_BROKER, C.UNREGISTER_BROKER}
    assert wanted <= seen, [C(c).name for c in wanted - seen]
    assert seen <= set(REQUEST_FIELDS), [C(c).name for c in seen - set(REQUEST_FIELDS)]
    ns_codes = {C.GET_ROUTEINFO_BY_TOPIC, C.REGISTER_BROKER, C.UNREGISTER_BROKER}
    assert all((f.server == "namesrv") == (f.header["code"] in ns_codes) for f in requests)
    for f in requests:
        check_request(f)

    # Every request that expects an answer got exactly one, on its connection, following the spec.
    assert not unanswered(recorded), [f"{C(f.header['code']).name} (opaque {f.header['opaque']})"
                                      for f in unanswered(recorded)]
    answers = answers_of(recorded)
    for f in requests:
        answer = answers.get((f.server, f.conn, f.header["opaque"]))
        if answer is not None:
            check_response(answer, f)

    # What the broker itself asks of clients: NOTIFY_CONSUMER_IDS_CHANGED, oneway, with the group.
    notes = [f for f in recorded if not f.to_server and not f.is_response]
    assert notes and {f.header["code"] for f in notes} == {C.NOTIFY_CONSUMER_IDS_CHANGED}
    for f in notes:
        check_header_types(f)
        assert f.header["flag"] == 2 and set(f.header["extFields"]) == {"consumerGroup"}

    # Values, not only types: a few fields whose meaning the spec pins down.
    sends = [f for f in requests if f.header["code"] == C.SEND_MESSAGE_V2]
    assert [f.header["flag"] for f in sends] == [0, 2]  # send, then send_oneway
    assert [f.header["extFields"]["f"] for f in sends] == ["0", "1"]  # the big body went compressed
    assert zlib.decompress(sends[1].body) == b"z" * 5000
    sends = [f.header["extFields"] for f in sends]
    assert {s["a"] for s in sends} == {"wire-producers"} and {s["b"] for s in sends} == {topic}
    props = sends[0]["i"].split("\x02")
    assert "TAGS\x01a" in props and "KEYS\x01k-1" in props and "area\x01hz" in props
    assert any(p.startswith("UNIQ_KEY\x01") for p in props)
    back = next(f.header["extFields"] for f in requests if f.header["code"] == C.CONSUMER_SEND_MSG_BACK)
    assert back["group"] == "wire-concurrent" and back["originTopic"] == topic and back["unitMode"] == "false"
    pulls = [f.header["extFields"] for f in requests if f.header["code"] == C.PULL_MESSAGE]
    assert {p["subscription"] for p in pulls if p["consumerGroup"] == "wire-orderly" and p["topic"] == topic} \
        == {"a || b"}
    assert all(int(p["sysFlag"]) & 0x4 for p in pulls)  # the subscription travels with every pull
    unregisters = [f.header["extFields"] for f in requests if f.header["code"] == C.UNREGISTER_CLIENT]
    assert {u["consumerGroup"] for u in unregisters} >= {"wire-concurrent", "wire-orderly", "wire-pull"}
    assert "wire-producers" in {u["producerGroup"] for u in unregisters}


def test_bodies_over_4_kib_travel_compressed_and_reach_consumers_inflated(cluster):
    """The producer zlib-compresses big bodies and flags them (sysFlag 0x1, COMPRESSED_FLAG); the broker stores them
    as they came, and our consumers hand the original bytes to the application."""
    topic = "wire-compressed"
    bodies = [b"compressible " * 1000, os.urandom(3000) * 3, b"small"]
    with Producer("wire-producers", namesrv=cluster.namesrv_addr) as producer:
        queue = producer.send(Message(topic, bodies[0])).queue
        for body in bodies[1:]:
            producer.send(Message(topic, body), queue=queue)

    async def raw_pull() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(cluster.brokers[0].broker_addr, RemotingCommand.request(
                C.PULL_MESSAGE, {"consumerGroup": "wire-raw", "topic": topic, "queueId": str(queue.queue_id),
                                 "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "-1",
                                 "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}), 5000)
        finally:
            await client.close()

    stored = decode_records(cluster.loop.run(raw_pull()).body)
    assert [m.sys_flag & 1 for m in stored] == [1, 1, 0]
    assert [zlib.decompress(m.body) for m in stored[:2]] == bodies[:2] and len(stored[0].body) < 1000

    got: list[bytes] = []
    done = threading.Event()
    consumer = PushConsumer("wire-inflate", namesrv=cluster.namesrv_addr, consume_from="first")
    consumer.subscribe(topic, "*")

    @consumer.listener
    def handle(msgs):
        got.extend(m.body for m in msgs)
        if len(got) >= 3:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.start()
    try:
        assert done.wait(10)
    finally:
        consumer.shutdown()
    puller = PullConsumer("wire-inflate-pull", namesrv=cluster.namesrv_addr, consume_from="first")
    puller.subscribe(topic, "*")
    with puller:
        pulled: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(pulled) < 3 and time.monotonic() < deadline:
            pulled += [m.body for m in puller.poll(0.5)]
    assert sorted(got) == sorted(bodies) and sorted(pulled) == sorted(bodies)
