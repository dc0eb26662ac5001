"""Bad input at the broker fails that connection or that request only; clients refuse bad names early.

Raw frames go over plain sockets; raw requests over a ``RemotingClient`` on the servers' loop, so the test
can see that the connection that carried a bad request is still the one serving the next good one.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
import zlib

import pytest

from sluice import BrokerResponseError, ClientError, Message, Producer, PullConsumer, PushConsumer
from sluice.common.errors import InvalidNameError, InvalidSubscriptionError, MessageFormatError
from sluice.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from sluice.remoting.codec import encode_command_bytes

C = RequestCode
R = ResponseCode


# == helpers ==========================================================================================
class Raw:
    """Requests over one RemotingClient living on the servers' loop."""

    def __init__(self, cluster, addr: str) -> None:
        self.cluster = cluster
        self.addr = addr
        self.client = RemotingClient()

    def __call__(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
        return self.cluster.loop.run(self.client.invoke(self.addr, RemotingCommand.request(code, ext or {}, body),
                                                        5000))

    def connection(self):
        return self.cluster.loop.run(self.client.connection(self.addr))

    def close(self) -> None:
        self.cluster.loop.run(self.client.close())


@pytest.fixture
def raw(cluster):
    r = Raw(cluster, cluster.brokers[0].broker_addr)
    try:
        yield r
    finally:
        r.close()


def send_v2(topic: str, body: bytes = b"hello", queue_id: str = "0", **changes: str) -> dict[str, str]:
    ext = {"a": "bad-input-producers", "b": topic, "c": "TBW102", "d": "4", "e": queue_id, "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
    ext.update(changes)
    return {k: v for k, v in ext.items() if v is not None}


def pull_ext(topic: str, **changes: str | None) -> dict[str, str]:
    ext = {"consumerGroup": "bad-input-group", "topic": topic, "queueId": "0", "queueOffset": "0",
           "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "-1", "suspendTimeoutMillis": "1000",
           "subscription": "*", "subVersion": "0"}
    ext.update(changes)
    return {k: v for k, v in ext.items() if v is not None}


def create_topic(raw: Raw, topic: str, queues: int = 2, perm: int = 6) -> None:
    resp = raw(C.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": str(queues),
                                           "writeQueueNums": str(queues), "perm": str(perm)})
    assert resp.code == R.SUCCESS, resp.remark


def closed_by_peer(sock: socket.socket, timeout: float = 30.0) -> bool:
    """True when the peer closes (EOF or reset) within ``timeout`` s without having answered anything (a broker
    that closes does so at once: the generous timeout only spares busy machines false failures)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def frame(header: bytes, body: bytes = b"", stype: int = 0, header_len: int | None = None) -> bytes:
    h = len(header) if header_len is None else header_len
    return struct.pack(">II", 4 + len(header) + len(body), (stype << 24) | h) + header + body


# == bad frames =======================================================================================
BAD_FRAMES = {
    "header_not_json": frame(b"{not json at all"),
    "header_not_an_object": frame(b"[1, 2, 3]"),
    "code_not_a_number": frame(b'{"code":"ten","flag":0,"opaque":1,"language":"JAVA","version":1}'),
    "header_longer_than_frame": frame(b'{"code":10}', header_len=4000),
    "unknown_serialize_type": frame(b'{"code":10}', stype=7),
    "length_shorter_than_header_word": struct.pack(">I", 2) + b"\0\0",
    "binary_header_truncated": frame(b"\x00\x0a\x00", stype=1),
}


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_malformed_frame_closes_that_connection_only(cluster, raw, name):
    good = raw.connection()
    with Producer("bad-input-producers", namesrv=cluster.namesrv_addr) as producer:
        producer.send(Message("bad-frames", b"before"))
        host, port = cluster.brokers[0].broker_addr.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(BAD_FRAMES[name])
            assert closed_by_peer(sock), "the broker kept a connection that sent a malformed frame"
        # Everyone else is served as before: the producer's connection and another client's.
        assert producer.send(Message("bad-frames", b"after")).status.name == "SEND_OK"
    assert raw(C.GET_MAX_OFFSET, {"topic": "bad-frames", "queueId": "0"}).code == R.SUCCESS
    assert raw.connection() is good


def test_requests_ahead_of_a_malformed_frame_are_answered_before_the_connection_closes(cluster):
    host, port = cluster.brokers[0].broker_addr.split(":")
    good = [encode_command_bytes(RemotingCommand(C.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": str(q)},
                                                 opaque=100 + q)) for q in range(3)]
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"".join(good) + BAD_FRAMES["header_not_json"])  # one write: read by the broker at once
        received = b""
        while not closed_by_peer_after(sock, received):
            received += sock.recv(65536)
    answers = []
    while received:
        (length,) = struct.unpack_from(">I", received)
        h = struct.unpack_from(">I", received, 4)[0] & 0xFFFFFF
        answers.append(json.loads(received[8:8 + h]))
        received = received[4 + length:]
    assert [(a["opaque"], a["code"]) for a in answers] == [(100, R.SUCCESS), (101, R.SUCCESS), (102, R.SUCCESS)]


def closed_by_peer_after(sock: socket.socket, received: bytes) -> bool:
    """Peek: True once the peer has closed and everything it sent is in ``received``."""
    sock.settimeout(30)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except ConnectionResetError:
        return True


def test_oversized_frame_is_refused_by_its_length_word_alone(cluster, raw):
    good = raw.connection()
    host, port = cluster.brokers[0].broker_addr.split(":")
    for length in (16 * 1024 * 1024 + 1, 0x7FFFFFF0):
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            # Only the length word and a few bytes: the broker must not wait for (or buffer) the rest.
            sock.sendall(struct.pack(">II", length, 20) + b'{"code":10,"flag":0}')
            assert closed_by_peer(sock)  # one waiting for the rest would never close: we never send it
    assert raw(C.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"}).code == R.SUCCESS
    assert raw.connection() is good


def test_frame_at_the_size_limit_still_gets_an_answer(cluster, raw):
    """Just under 16 MiB is a legal frame: too large a message for the store, answered, not cut off."""
    create_topic(raw, "big-frames", 1)
    body = os.urandom(16 * 1024 * 1024 - 4096)
    resp = raw(C.SEND_MESSAGE_V2, send_v2("big-frames"), body)
    assert resp.code == R.MESSAGE_ILLEGAL and resp.remark
    assert raw(C.SEND_MESSAGE_V2, send_v2("big-frames"), b"small").code == R.SUCCESS


# == refused sends ====================================================================================
def test_unknown_topic_without_auto_create_is_topic_not_exist(empty_cluster):
    broker = empty_cluster.start_broker("broker-strict", auto_create_topic_enable=False)
    raw = Raw(empty_cluster, broker.broker_addr)
    try:
        resp = raw(C.SEND_MESSAGE_V2, send_v2("no-such-topic"))
        assert resp.code == R.TOPIC_NOT_EXIST
        assert resp.remark and "no-such-topic" in resp.remark
        assert "TBW102" not in broker.topic_config_manager.table
        resp = raw(C.PULL_MESSAGE, pull_ext("no-such-topic"))
        assert resp.code == R.TOPIC_NOT_EXIST and "no-such-topic" in resp.remark
    finally:
        raw.close()
    with Producer("bad-input-producers", namesrv=empty_cluster.namesrv_addr) as producer:
        with pytest.raises(ClientError, match="no-such-topic"):
            producer.send(Message("no-such-topic", b"x"), timeout=2)


def test_send_to_read_only_topic_is_no_permission(cluster, raw):
    broker_b = cluster.start_broker("broker-b")  # auto-create on, and no "read-only" topic
    create_topic(raw, "read-only", 2, perm=4)
    resp = raw(C.SEND_MESSAGE_V2, send_v2("read-only"))
    assert resp.code == R.NO_PERMISSION and "read-only" in resp.remark
    resp = raw(C.SEND_BATCH_MESSAGE, send_v2("read-only", m="true"))
    assert resp.code == R.NO_PERMISSION
    assert raw(C.PULL_MESSAGE, pull_ext("read-only")).code == R.PULL_NOT_FOUND  # reading is allowed
    deadline = time.monotonic() + 60
    while "read-only" not in cluster.namesrv.route_info.topic_queue_table:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with Producer("bad-input-producers", namesrv=cluster.namesrv_addr) as producer:
        with pytest.raises(ClientError, match="read-only.*writable"):
            producer.send(Message("read-only", b"x"), timeout=2)
    assert cluster.brokers[0].store.get_max_offset_in_queue("read-only", 0) == 0
    # The producer did not fall back to TBW102: that would have created the topic, writable, on broker-b.
    assert broker_b.topic_config_manager.get("read-only") is None


def test_too_large_message_is_message_illegal(empty_cluster):
    broker = empty_cluster.start_broker("broker-small", store_max_message_size=1024)
    raw = Raw(empty_cluster, broker.broker_addr)
    try:
        create_topic(raw, "sized", 1)
        resp = raw(C.SEND_MESSAGE_V2, send_v2("sized"), os.urandom(2000))
        assert resp.code == R.MESSAGE_ILLEGAL and resp.remark and "1024" in resp.remark
        assert raw(C.SEND_MESSAGE_V2, send_v2("sized"), os.urandom(1000)).code == R.SUCCESS
    finally:
        raw.close()
    # The producer's own limit is larger: the broker's answer comes back as an error, not retried elsewhere.
    with Producer("bad-input-producers", namesrv=empty_cluster.namesrv_addr) as producer:
        with pytest.raises(BrokerResponseError) as info:
            producer.send(Message("sized", os.urandom(3000)))
        assert info.value.code == R.MESSAGE_ILLEGAL
        with pytest.raises(ClientError):
            producer.send_batch([Message("sized", os.urandom(1500)), Message("sized", b"small")])
        # ... and the producer's own limit stops a message before it is sent.
        with pytest.raises(MessageFormatError, match="limit"):
            producer.send(Message("sized", b"x" * (4 * 1024 * 1024 + 1)))
    assert broker.store.get_max_offset_in_queue("sized", 0) == 1


# == bad requests: RocketMQ's response code (SYSTEM_ERROR for a missing or malformed field), a remark naming the
# field, the connection kept =================================================================================
BAD_REQUESTS = [
    # (name, code, ext, body, expected code, words the remark must contain)
    ("pull_without_queue_id", C.PULL_MESSAGE, pull_ext("bad-req", queueId=None), b"", R.SYSTEM_ERROR, ["queueId"]),
    ("pull_with_text_offset", C.PULL_MESSAGE, pull_ext("bad-req", queueOffset="ten"), b"", R.SYSTEM_ERROR,
     ["queueOffset", "ten"]),
    ("pull_without_group", C.PULL_MESSAGE, pull_ext("bad-req", consumerGroup=None), b"", R.SYSTEM_ERROR,
     ["consumerGroup"]),
    ("pull_negative_queue", C.PULL_MESSAGE, pull_ext("bad-req", queueId="-1"), b"", R.INVALID_PARAMETER,
     ["queueId"]),
    ("pull_with_an_sql92_filter", C.PULL_MESSAGE, pull_ext("bad-req", subscription="a > 1", expressionType="SQL92"),
     b"", R.SYSTEM_ERROR, ["SQL92"]),
    ("pull_with_an_empty_sql92_filter", C.PULL_MESSAGE, pull_ext("bad-req", subscription="", expressionType="SQL92"),
     b"", R.SUBSCRIPTION_PARSE_FAILED, ["subscription"]),
    ("send_without_topic", C.SEND_MESSAGE_V2, send_v2("bad-req", b=None), b"x", R.SYSTEM_ERROR, ["'b' (topic)"]),
    ("send_with_text_queue_id", C.SEND_MESSAGE_V2, send_v2("bad-req", queue_id="first"), b"x", R.SYSTEM_ERROR,
     ["'e' (queueId)", "first"]),
    ("send_with_text_born_time", C.SEND_MESSAGE_V2, send_v2("bad-req", g="now"), b"x", R.SYSTEM_ERROR,
     ["'g' (bornTimestamp)", "now"]),
    ("send_v1_without_queue_id", C.SEND_MESSAGE, {"producerGroup": "p", "topic": "bad-req"}, b"x", R.SYSTEM_ERROR,
     ["queueId"]),
    ("send_to_queue_out_of_range", C.SEND_MESSAGE_V2, send_v2("bad-req", queue_id="99"), b"x", R.INVALID_PARAMETER,
     ["queueId", "99"]),
    ("send_to_illegal_topic_name", C.SEND_MESSAGE_V2, send_v2("bad topic!"), b"x", R.INVALID_PARAMETER,
     ["bad topic!"]),
    ("send_malformed_batch", C.SEND_BATCH_MESSAGE, send_v2("bad-req", m="true"), b"\x00\x00\x00\x05junk",
     R.MESSAGE_ILLEGAL, ["batch"]),
    ("query_offset_without_group", C.QUERY_CONSUMER_OFFSET, {"topic": "bad-req", "queueId": "0"}, b"",
     R.SYSTEM_ERROR, ["consumerGroup"]),
    ("update_offset_with_text_offset", C.UPDATE_CONSUMER_OFFSET,
     {"consumerGroup": "g", "topic": "bad-req", "queueId": "0", "commitOffset": "later"}, b"", R.SYSTEM_ERROR,
     ["commitOffset"]),
    ("max_offset_without_topic", C.GET_MAX_OFFSET, {"queueId": "0"}, b"", R.SYSTEM_ERROR, ["topic"]),
    ("send_back_with_text_offset", C.CONSUMER_SEND_MSG_BACK, {"group": "g", "offset": "x", "delayLevel": "0"}, b"",
     R.SYSTEM_ERROR, ["offset"]),
    ("heartbeat_not_json", C.HEART_BEAT, {}, b"{oops", R.SYSTEM_ERROR, ["heartbeat", "JSON"]),
    ("heartbeat_wrong_shape", C.HEART_BEAT, {}, b'{"clientID":"c","consumerDataSet":[{"consumeType":1}]}',
     R.SYSTEM_ERROR, ["heartbeat", "groupName"]),
    ("heartbeat_array", C.HEART_BEAT, {}, b"[]", R.SYSTEM_ERROR, ["heartbeat"]),
    ("lock_without_client", C.LOCK_BATCH_MQ, {}, b'{"consumerGroup":"g","mqSet":[]}', R.SYSTEM_ERROR, ["clientId"]),
    ("lock_bad_mq_set", C.LOCK_BATCH_MQ, {}, b'{"consumerGroup":"g","clientId":"c","mqSet":[{"topic":"t"}]}',
     R.SYSTEM_ERROR, ["mqSet", "brokerName"]),
    ("unlock_not_json", C.UNLOCK_BATCH_MQ, {}, b"\xff\xfe", R.SYSTEM_ERROR, ["unlock"]),
    ("unregister_without_client_id", C.UNREGISTER_CLIENT, {"producerGroup": "p"}, b"", R.SYSTEM_ERROR,
     ["clientID"]),
    ("consumer_list_without_group", C.GET_CONSUMER_LIST_BY_GROUP, {}, b"", R.SYSTEM_ERROR, ["consumerGroup"]),
    ("unknown_request_code", 9999, {}, b"", R.REQUEST_CODE_NOT_SUPPORTED, ["9999"]),
]


def test_bad_requests_get_an_error_naming_the_field_and_the_broker_keeps_serving(cluster, raw):
    create_topic(raw, "bad-req", 2)
    good = raw.connection()
    problems = []
    for name, code, ext, body, expected, words in BAD_REQUESTS:
        resp = raw(code, ext, body)
        remark = resp.remark or ""
        if resp.code != expected or not all(w in remark for w in words):
            problems.append(f"{name}: got {resp.code} {remark!r}, expected {expected} naming {words}")
        # The same connection serves the next request.
        ok = raw(C.SEND_MESSAGE_V2, send_v2("bad-req"), b"good")
        if ok.code != R.SUCCESS:
            problems.append(f"after {name}: a good send got {ok.code} {ok.remark!r}")
    assert not problems, "\n".join(problems)
    assert raw.connection() is good
    assert sum(cluster.brokers[0].store.get_max_offset_in_queue("bad-req", q) for q in range(2)) == len(BAD_REQUESTS)


def test_numbers_where_strings_are_expected_are_accepted(cluster, raw):
    """The C++ client sends some ext fields as JSON numbers (queueId, for one): not bad input."""
    create_topic(raw, "cpp-style", 1)
    host, port = cluster.brokers[0].broker_addr.split(":")
    header = json.dumps({"code": 10, "language": "CPP", "version": 63, "opaque": 7, "flag": 0, "remark": "",
                         "extFields": {"producerGroup": "p", "topic": "cpp-style", "defaultTopic": "TBW102",
                                       "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0, "flag": 0,
                                       "bornTimestamp": "0", "properties": "", "reconsumeTimes": "0",
                                       "unitMode": "0", "batch": "0"}}).encode() + b"\n"
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(frame(header, b"from c++"))
        length, word = struct.unpack(">II", sock.recv(8, socket.MSG_WAITALL))
        resp = json.loads(sock.recv(word & 0xFFFFFF, socket.MSG_WAITALL))
    assert resp["code"] == R.SUCCESS and resp["opaque"] == 7 and resp["flag"] == 1
    assert all(isinstance(v, str) for v in resp["extFields"].values()) and resp["extFields"]["queueId"] == "0"


# == the client refuses bad names and expressions before anything is sent ==============================
@pytest.mark.parametrize("group", ["", "has space", "slash/group", "dot.group", "x" * 256, "ümlaut"])
def test_invalid_group_name_is_refused_at_construction(group):
    for cls in (Producer, PushConsumer, PullConsumer):
        with pytest.raises(InvalidNameError, match="group name"):
            cls(group, namesrv="127.0.0.1:9")


@pytest.mark.parametrize("expression", ["a ||", "|| a", "a || || b", "a | b", "* || a", "a\tb"])
def test_invalid_tag_expression_is_refused_at_subscribe(expression):
    for cls in (PushConsumer, PullConsumer):
        consumer = cls("bad-input-consumers", namesrv="127.0.0.1:9")
        with pytest.raises(InvalidSubscriptionError, match="expression"):
            consumer.subscribe("some-topic", expression)
        assert "some-topic" not in consumer.aio.subscriptions


@pytest.mark.parametrize("topic", ["", "has space", "t" * 128, "semi;colon"])
def test_invalid_topic_is_refused_at_subscribe(topic):
    consumer = PushConsumer("bad-input-consumers", namesrv="127.0.0.1:9")
    with pytest.raises(InvalidNameError, match="topic"):
        consumer.subscribe(topic, "*")


def test_a_consumer_delivers_a_body_that_inflates_past_its_limit_as_stored(cluster, raw, caplog):
    """A producer marks a zip bomb compressed (sys flag 1): consumers keep it as stored, with a warning, and
    never inflate more than their limit (16 MiB) of it."""
    bomb = zlib.compress(b"\0" * (64 << 20), 9)
    create_topic(raw, "bomb", 1)
    ok = raw(C.SEND_MESSAGE_V2, send_v2("bomb", f="1"), bomb)
    assert ok.code == R.SUCCESS
    assert raw(C.SEND_MESSAGE_V2, send_v2("bomb"), b"after").code == R.SUCCESS
    reader = PullConsumer("bomb-reader", namesrv=cluster.namesrv_addr, consume_from="first")
    reader.subscribe("bomb")
    reader.start()
    got = []
    try:
        deadline = time.monotonic() + 15
        while len(got) < 2 and time.monotonic() < deadline:
            got.extend(reader.poll(0.5))
    finally:
        reader.shutdown()
    assert [m.body for m in got] == [bomb, b"after"]  # the bomb as stored, and the next message as usual
    assert any("inflates to more than" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
