"""Drives the official RocketMQ 5 Python client (``rocketmq-python-client``, in its own venv) against a gRPC
endpoint; one JSON line per event on stdout. Run by tests/interop/test_python5_client.py, never imported by it.

    rocketmq5_client.py ENDPOINT produce TOPIC COUNT [--group G] [--tag T] [--delay-s S] [--prefix P]
    rocketmq5_client.py ENDPOINT receive TOPIC GROUP COUNT [--invisible S] [--nack-first] [--timeout S]
    rocketmq5_client.py ENDPOINT transact TOPIC   # commit-, rollback- and open-: the checker commits "open"
    rocketmq5_client.py ENDPOINT push TOPIC GROUP COUNT [--fail-suffix 7] [--timeout S]
    rocketmq5_client.py ENDPOINT bench-send TOPIC THREADS SECONDS      (bench/grpc_reference.py's load: 128-byte
    rocketmq5_client.py ENDPOINT bench-receive TOPIC GROUP THREADS COUNT  bodies; start, end and result lines)
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

_out = threading.Lock()  # listeners run on many threads: one whole line each


def emit(**event: object) -> None:
    with _out:
        print(json.dumps(event), flush=True)


def produce(config: ClientConfiguration, a: argparse.Namespace) -> None:
    producer = Producer(config, (a.topic,))
    producer.startup()
    try:
        for i in range(a.count):
            m = Message()
            m.topic = a.topic
            m.body = f"{a.prefix}-{i}".encode()
            m.tag = a.tag
            m.keys = f"key-{i}"
            m.add_property("index", str(i))
            if a.group:
                m.message_group = a.group
            if a.delay_s:
                m.delivery_timestamp = int(time.time()) + a.delay_s
            if a.priorities:
                priorities = [int(p) for p in a.priorities.split(",")]
                m.priority = priorities[i % len(priorities)]
            try:
                r = producer.send(m)
            except Exception as exc:  # (the refusal the test looks at: its code and message)
                emit(event="send-failed", body=m.body.decode(), error=str(exc))
                continue
            emit(event="sent", body=m.body.decode(), message_id=r.message_id, offset=r.offset)
    finally:
        producer.shutdown()


def receive(config: ClientConfiguration, a: argparse.Namespace) -> None:
    consumer = SimpleConsumer(config, a.group, {a.topic: FilterExpression(a.tag_filter)}, await_duration=5)
    consumer.startup()
    got = 0
    nacked: set[str] = set()
    deadline = time.monotonic() + a.timeout
    try:
        while got < a.count and time.monotonic() < deadline:
            for m in consumer.receive(16, a.invisible) or []:
                body = m.body.decode()
                emit(event="received", body=body, message_id=m.message_id, tag=m.tag, keys=list(m.keys or []),
                     topic=m.topic,
                     properties=dict(m.properties or {}), attempt=m.delivery_attempt, group=m.message_group,
                     delivery=m.delivery_timestamp, priority=getattr(m, "priority", None))
                if a.nack_first and body not in nacked:
                    nacked.add(body)
                    consumer.change_invisible_duration(m, 1)
                    emit(event="nacked", body=body)
                    continue
                consumer.ack(m)
                got += 1
                emit(event="acked", body=body)
    finally:
        consumer.shutdown()
    emit(event="done", acked=got)


class Checker(TransactionChecker):
    def __init__(self) -> None:
        self.checked = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        body = message.body.decode()
        emit(event="checked", body=body, message_id=message.message_id)
        self.checked.set()
        return TransactionResolution.COMMIT if body.startswith("open") else TransactionResolution.ROLLBACK


def transact(config: ClientConfiguration, a: argparse.Namespace) -> None:
    checker = Checker()
    producer = Producer(config, (a.topic,), checker)
    producer.startup()
    try:
        for body, decide in (("commit-0", "commit"), ("rollback-0", "rollback"), ("open-0", None)):
            m = Message()
            m.topic = a.topic
            m.body = body.encode()
            t = producer.begin_transaction()
            r = producer.send(m, t)
            emit(event="sent", body=body, message_id=r.message_id, transaction_id=r.transaction_id)
            if decide == "commit":
                t.commit()
            elif decide == "rollback":
                t.rollback()
            emit(event="decided", body=body, how=decide)
        emit(event="waiting-for-check", checked=checker.checked.wait(a.timeout))
        time.sleep(1)  # (the checker's END_TRANSACTION goes out after check() returns)
    finally:
        producer.shutdown()


class Listener(MessageListener):
    def __init__(self, fail_suffix: str, poison: str = "") -> None:
        self.fail_suffix = fail_suffix
        self.poison = poison
        self.failed: set[str] = set()
        self.done: set[str] = set()
        self.lock = threading.Lock()

    def consume(self, message: Message) -> ConsumeResult:
        body = message.body.decode()
        emit(event="received", body=body, attempt=message.delivery_attempt, message_id=message.message_id,
             group=message.message_group)
        if self.poison and body == self.poison:
            return ConsumeResult.FAILURE
        with self.lock:
            if self.fail_suffix and body.endswith(self.fail_suffix) and body not in self.failed:
                self.failed.add(body)
                return ConsumeResult.FAILURE
            self.done.add(body)
        return ConsumeResult.SUCCESS


def push(config: ClientConfiguration, a: argparse.Namespace) -> None:
    listener = Listener(a.fail_suffix, a.poison)
    consumer = PushConsumer(config, a.group, listener, {a.topic: FilterExpression("*")})
    consumer.startup()
    deadline = time.monotonic() + a.timeout
    try:
        while len(listener.done) < a.count and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)  # (the last acks go out after consume() returns)
    finally:
        consumer.shutdown()
    emit(event="done", consumed=len(listener.done))


def _result(messages: int, seconds: float, latencies: list[float], errors: int, **more: object) -> None:
    latencies.sort()
    pick = (lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 3)) \
        if latencies else (lambda q: None)
    emit(event="result", messages=messages, seconds=seconds, msgs_per_s=messages / seconds if seconds > 0 else 0,
         p50_ms=pick(0.5), p99_ms=pick(0.99), errors=errors, **more)


def bench_send(config: ClientConfiguration, a: argparse.Namespace) -> None:
    """THREADS threads of ``Producer.send`` for SECONDS, after 500 unmeasured sends to the same topic."""
    producer = Producer(config, (a.topic,))
    producer.startup()
    lock = threading.Lock()
    latencies: list[float] = []
    counts = {"sent": 0, "errors": 0}

    def sender(until: float, quota: list[int], measured: bool) -> None:
        while time.monotonic() < until:
            with lock:
                if quota[0] <= 0:
                    return
                quota[0] -= 1
            m = Message()
            m.topic = a.topic
            m.body = b"x" * 128
            t = time.perf_counter()
            try:
                producer.send(m)
            except Exception:  # counted: the load goes on
                with lock:
                    counts["errors"] += measured
                continue
            with lock:
                counts["sent"] += 1
                if measured:
                    latencies.append(time.perf_counter() - t)

    def run(threads: int, until: float, quota: list[int], measured: bool) -> None:
        workers = [threading.Thread(target=sender, args=(until, quota, measured)) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    try:
        run(min(a.threads, 4), time.monotonic() + 120, [500], False)
        warmup, counts["sent"] = counts["sent"], 0
        emit(event="start")
        t0 = time.monotonic()
        run(a.threads, t0 + a.seconds, [2**62], True)
        took = time.monotonic() - t0
        emit(event="end")
    finally:
        producer.shutdown()
    _result(counts["sent"], took, latencies, counts["errors"], warmup=warmup)


def bench_receive(config: ClientConfiguration, a: argparse.Namespace) -> None:
    """THREADS threads of ``receive(32)`` and an ``ack`` per message until COUNT are acknowledged, or none came for
    5 s (60 s for the first); timed from the first message to the last."""
    consumer = SimpleConsumer(config, a.group, {a.topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    lock = threading.Lock()
    latencies: list[float] = []
    state = {"acked": 0, "errors": 0, "first": 0.0, "last": 0.0}
    created = time.monotonic()

    def idle() -> bool:
        now = time.monotonic()
        return now - created > 60 if not state["first"] else now - state["last"] > 5

    def receiver() -> None:
        while state["acked"] < a.count and not idle():
            t = time.perf_counter()
            try:
                got = consumer.receive(32, 30) or []
            except Exception:  # counted, then again after a pause
                with lock:
                    state["errors"] += 1
                time.sleep(0.1)
                continue
            if not got:
                continue
            with lock:
                now = time.monotonic()
                if not state["first"]:
                    state["first"] = now
                    emit(event="start")
                state["last"] = now
            for m in got:
                try:
                    consumer.ack(m)
                except Exception:
                    with lock:
                        state["errors"] += 1
                else:
                    with lock:
                        state["acked"] += 1
            with lock:
                latencies.append(time.perf_counter() - t)

    try:
        workers = [threading.Thread(target=receiver) for _ in range(a.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        emit(event="end")
    finally:
        consumer.shutdown()
    _result(int(state["acked"]), state["last"] - state["first"], latencies, int(state["errors"]))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("endpoint")
    p.add_argument("--ak", default="", help="ACL 2.0 credentials (none by default)")
    p.add_argument("--sk", default="")
    p.add_argument("--namespace", default="", help="the client's namespace (none by default)")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("produce")
    pr.add_argument("topic")
    pr.add_argument("count", type=int)
    pr.add_argument("--group", default="")
    pr.add_argument("--tag", default="t")
    pr.add_argument("--delay-s", type=int, default=0)
    pr.add_argument("--prefix", default="m")
    pr.add_argument("--priorities", default="", help="message i gets priority i % n of these (RIP-80)")
    rc = sub.add_parser("receive")
    rc.add_argument("topic")
    rc.add_argument("group")
    rc.add_argument("count", type=int)
    rc.add_argument("--invisible", type=int, default=15)
    rc.add_argument("--nack-first", action="store_true")
    rc.add_argument("--tag-filter", default="*")
    rc.add_argument("--timeout", type=float, default=60)
    tr = sub.add_parser("transact")
    tr.add_argument("topic")
    tr.add_argument("--timeout", type=float, default=60)
    pu = sub.add_parser("push")
    pu.add_argument("topic")
    pu.add_argument("group")
    pu.add_argument("count", type=int)
    pu.add_argument("--fail-suffix", default="")
    pu.add_argument("--poison", default="", help="a body that always fails")
    pu.add_argument("--timeout", type=float, default=60)
    bs = sub.add_parser("bench-send")
    bs.add_argument("topic")
    bs.add_argument("threads", type=int)
    bs.add_argument("seconds", type=float)
    br = sub.add_parser("bench-receive")
    br.add_argument("topic")
    br.add_argument("group")
    br.add_argument("threads", type=int)
    br.add_argument("count", type=int)
    a = p.parse_args()
    config = ClientConfiguration(a.endpoint, Credentials(a.ak, a.sk), request_timeout=5, namespace=a.namespace)
    {"produce": produce, "receive": receive, "transact": transact, "push": push, "bench-send": bench_send,
     "bench-receive": bench_receive}[a.cmd](config, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
