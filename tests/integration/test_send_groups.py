"""Single sends that arrive in one read are stored together (one append, one flush wait) and each still gets
its own answer: its queue offset, its offset message id, its own error, its own durability."""

from __future__ import annotations

import errno
import os
import socket
import threading
import time

import pytest

from sluice.common.batch_codec import BatchItem, encode_batch
from sluice.common.message import decode_message_id
from sluice.common.message_codec import decode_records
from sluice.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from sluice.remoting.codec import encode_command_bytes
from sluice.store import mapped_file as mapped_file_module
from tests.integration.helpers import wait_until


def send_v2(topic: str, queue_id: int, properties: str = "WAIT\x01true") -> dict[str, str]:
    return {"a": "group-producers", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0", "i": properties, "j": "0", "k": "false", "m": "false"}


def exchange(addr: str, requests: list[RemotingCommand], timeout: float = 30.0) -> dict[int, RemotingCommand]:
    """Write every request in one ``sendall`` (so the broker reads them together) and read all the answers,
    by opaque."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(b"".join(encode_command_bytes(r) for r in requests))
        decoder = FrameDecoder()
        answers: dict[int, RemotingCommand] = {}
        deadline = time.monotonic() + timeout
        while len(answers) < len(requests) and time.monotonic() < deadline:
            data = sock.recv(1 << 16)
            if not data:
                break
            for resp in decoder.feed(data):
                answers[resp.opaque] = resp
    return answers


def stored(broker, topic: str, queue_id: int) -> list[bytes]:
    """Every body a consumer reads from the queue, in order."""
    out: list[bytes] = []
    offset = 0
    while True:
        got = broker.store.get_messages("check", topic, queue_id, offset, 1000)
        try:
            bodies = [m.body for m in decode_records(b"".join(bytes(b) for b in got.buffers))]
        finally:
            got.release()
        if not bodies:
            return out
        out += bodies
        offset = got.next_begin_offset


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_sends_read_together_are_stored_in_order_each_with_its_own_offsets(empty_cluster, flush):
    broker = empty_cluster.start_broker("broker-a", store_flush_disk_type=flush)
    empty_cluster.create_topic("grouped-a", 2)
    empty_cluster.create_topic("grouped-b", 1)
    plan = [("grouped-a", i % 2) if i % 3 else ("grouped-b", 0) for i in range(90)]  # > one group's 32 messages
    reqs = [RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_v2(t, q), b"body-%d" % i)
            for i, (t, q) in enumerate(plan)]
    answers = exchange(broker.broker_addr, reqs)
    assert len(answers) == len(reqs)
    next_offset: dict[tuple[str, int], int] = {}
    for i, (req, (topic, qid)) in enumerate(zip(reqs, plan, strict=True)):
        resp = answers[req.opaque]
        assert resp.code == ResponseCode.SUCCESS, (i, resp.remark)
        want = next_offset.get((topic, qid), 0)
        next_offset[(topic, qid)] = want + 1
        assert (int(resp.ext_fields["queueId"]), int(resp.ext_fields["queueOffset"])) == (qid, want)
        offset = decode_message_id(resp.ext_fields["msgId"])[1]
        assert broker.store.look_message_by_offset(offset).body == b"body-%d" % i  # its own id, not a neighbour's
        if flush == "SYNC_FLUSH":
            assert broker.store.commit_log.flushed_where >= offset + broker.store.commit_log.record_size_at(offset)
    for (topic, qid) in next_offset:
        assert stored(broker, topic, qid) == [b"body-%d" % i for i, p in enumerate(plan) if p == (topic, qid)]


def test_a_send_the_log_refuses_does_not_fail_the_sends_read_with_it(empty_cluster):
    broker = empty_cluster.start_broker("broker-a")
    empty_cluster.create_topic("grouped-poison", 1)
    # A NUL in the properties is refused by the commit log's append itself: the group's append fails as a whole,
    # and every send is then put on its own.
    props = ["WAIT\x01true"] * 12
    props[5] = "WAIT\x01true\x02bad\x01a\0b"
    reqs = [RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_v2("grouped-poison", 0, p), b"m-%d" % i)
            for i, p in enumerate(props)]
    answers = exchange(broker.broker_addr, reqs)
    codes = [answers[r.opaque].code for r in reqs]
    assert codes == [ResponseCode.SUCCESS] * 5 + [ResponseCode.MESSAGE_ILLEGAL] + [ResponseCode.SUCCESS] * 6
    assert "NUL" in answers[reqs[5].opaque].remark
    assert [int(answers[r.opaque].ext_fields["queueOffset"]) for i, r in enumerate(reqs) if i != 5] == list(range(11))
    assert stored(broker, "grouped-poison", 0) == [b"m-%d" % i for i in range(12) if i != 5]


def test_a_wait_false_send_read_with_waiting_ones_is_answered_before_the_disk_is_done(
        empty_cluster, monkeypatch: pytest.MonkeyPatch):
    broker = empty_cluster.start_broker("broker-a", store_flush_disk_type="SYNC_FLUSH", store_sync_flush_timeout=300)
    empty_cluster.create_topic("grouped-eager", 1)
    hang = threading.Event()
    monkeypatch.setattr(mapped_file_module.os, "fdatasync", lambda fd: hang.wait(10))
    reqs = [RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                    send_v2("grouped-eager", 0, "WAIT\x01false" if i == 2 else "WAIT\x01true"),
                                    os.urandom(16)) for i in range(5)]
    try:
        answers = exchange(broker.broker_addr, reqs)
    finally:
        hang.set()
    codes = [answers[r.opaque].code for r in reqs]
    late = ResponseCode.FLUSH_DISK_TIMEOUT
    assert codes == [late, late, ResponseCode.SUCCESS, late, late]
    assert [int(answers[r.opaque].ext_fields["queueOffset"]) for r in reqs] == list(range(5))


def test_a_send_with_a_header_value_beyond_its_java_type_is_refused_alone(empty_cluster):
    broker = empty_cluster.start_broker("broker-a")
    empty_cluster.create_topic("grouped-flag", 1)
    reqs = []
    for i in range(6):
        h = send_v2("grouped-flag", 0)
        if i == 3:
            h["h"] = str(2**31)  # flag: a Java int
        reqs.append(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, h, b"m-%d" % i))
    answers = exchange(broker.broker_addr, reqs)
    assert [answers[r.opaque].code for r in reqs] == [ResponseCode.SUCCESS] * 3 + [ResponseCode.SYSTEM_ERROR] + \
        [ResponseCode.SUCCESS] * 2
    assert "'h' (flag)" in answers[reqs[3].opaque].remark
    assert stored(broker, "grouped-flag", 0) == [b"m-%d" % i for i in range(6) if i != 3]


def test_a_group_whose_append_fails_after_writing_is_answered_and_never_stored_twice(empty_cluster, monkeypatch):
    broker = empty_cluster.start_broker("broker-a")
    empty_cluster.create_topic("dup-a", 1)
    empty_cluster.create_topic("dup-b", 1)
    store = broker.store
    real = store.dispatcher._dispatch_requests
    failed: list[object] = []

    def dispatch_failing_once(reqs):  # a ConsumeQueue file that cannot be opened (EMFILE)
        if any(r.topic == "dup-b" for r in reqs) and not failed:
            failed.append(reqs)
            raise OSError(errno.EMFILE, "Too many open files")
        return real(reqs)

    monkeypatch.setattr(store.dispatcher, "_dispatch_requests", dispatch_failing_once)
    reqs = [RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_v2(t, 0), b"m-%d" % i)
            for i, t in enumerate(["dup-a", "dup-b", "dup-a"])]
    answers = exchange(broker.broker_addr, reqs)
    assert len(answers) == 3 and failed
    ok = [i for i, r in enumerate(reqs) if answers[r.opaque].code == ResponseCode.SUCCESS]
    # (stored whatever the entries' fate: the write of the queue entries is tried again, and then they are served)
    wait_until(lambda: {b"m-%d" % i for i in ok if i != 1} <= set(stored(broker, "dup-a", 0)), 30,
               "every send told SUCCESS to be readable")
    a = stored(broker, "dup-a", 0)
    assert len(a) == len(set(a))  # nothing twice


def test_a_wait_false_send_is_answered_at_once_but_served_only_once_flushed(empty_cluster, monkeypatch):
    broker = empty_cluster.start_broker("broker-a", store_flush_disk_type="SYNC_FLUSH", store_sync_flush_timeout=1500)
    empty_cluster.create_topic("grouped-notice", 2)
    seen: dict[tuple[str, int], float] = {}
    broker.store.arrival_listeners.append(lambda t, q, off: seen.setdefault((t, q), time.monotonic()))
    hang = threading.Event()
    monkeypatch.setattr(mapped_file_module.os, "fdatasync", lambda fd: hang.wait(10))
    reqs = [RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_v2("grouped-notice", 0, "WAIT\x01true"), b"w"),
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_v2("grouped-notice", 1, "WAIT\x01false"), b"n")]
    t0 = time.monotonic()
    try:
        answers = exchange(broker.broker_addr, reqs)
        assert [answers[r.opaque].code for r in reqs] == [ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.SUCCESS]
        assert seen == {}  # nothing is served while the disk has not made it durable
        released = time.monotonic()
    finally:
        hang.set()
    deadline = time.monotonic() + 30
    while len(seen) < 2:
        assert time.monotonic() < deadline, f"arrivals after the flush: {seen}"
        time.sleep(0.01)
    assert min(seen.values()) >= released > t0 + 1.0


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_singles_and_batches_read_together_keep_their_arrival_order(empty_cluster, flush):
    broker = empty_cluster.start_broker("broker-a", store_flush_disk_type=flush)
    empty_cluster.create_topic("mixed-order", 1)
    reqs, want = [], []
    for kind in ["single"] * 40 + ["batch"] + ["single"] * 3 + ["batch", "single", "single"]:
        if kind == "single":
            want.append(b"m-%d" % len(want))
            reqs.append(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_v2("mixed-order", 0), want[-1]))
        else:
            items = [BatchItem(b"m-%d" % (len(want) + k)) for k in range(3)]
            want += [it.body for it in items]
            reqs.append(RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, {**send_v2("mixed-order", 0),
                                                                                 "m": "true"}, encode_batch(items)))
    answers = exchange(broker.broker_addr, reqs)
    assert all(answers[r.opaque].code == ResponseCode.SUCCESS for r in reqs)
    assert stored(broker, "mixed-order", 0) == want


def test_a_topic_deleted_after_sends_read_with_it_does_not_overtake_them(empty_cluster):
    broker = empty_cluster.start_broker("broker-a")
    empty_cluster.create_topic("grouped-deleted", 1)
    reqs = [RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_v2("grouped-deleted", 0), b"m-%d" % i)
            for i in range(3)]
    reqs.append(RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "grouped-deleted"}))
    answers = exchange(broker.broker_addr, reqs)
    assert [answers[r.opaque].code for r in reqs] == [ResponseCode.SUCCESS] * 4
    assert [int(answers[r.opaque].ext_fields["queueOffset"]) for r in reqs[:3]] == [0, 1, 2]
    assert broker.topic_config_manager.get("grouped-deleted") is None
    assert stored(broker, "grouped-deleted", 0) == []  # deleted with the topic: stored before it, not after
