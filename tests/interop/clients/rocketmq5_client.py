"""Drives the official RocketMQ 5 Python client (``rocketmq-python-client``, in its own venv) against a gRPC
endpoint; one JSON line per event on stdout. Run by tests/interop/test_python5_client.py, never imported by it.

    rocketmq5_client.py ENDPOINT produce TOPIC COUNT [--group G] [--tag T] [--delay-s S] [--prefix P]
    rocketmq5_client.py ENDPOINT receive TOPIC GROUP COUNT [--invisible S] [--nack-first] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def emit(**event: object) -> None:
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
            r = producer.send(m)
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
                     properties=dict(m.properties or {}), attempt=m.delivery_attempt, group=m.message_group,
                     delivery=m.delivery_timestamp)
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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("endpoint")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("produce")
    pr.add_argument("topic")
    pr.add_argument("count", type=int)
    pr.add_argument("--group", default="")
    pr.add_argument("--tag", default="t")
    pr.add_argument("--delay-s", type=int, default=0)
    pr.add_argument("--prefix", default="m")
    rc = sub.add_parser("receive")
    rc.add_argument("topic")
    rc.add_argument("group")
    rc.add_argument("count", type=int)
    rc.add_argument("--invisible", type=int, default=15)
    rc.add_argument("--nack-first", action="store_true")
    rc.add_argument("--tag-filter", default="*")
    rc.add_argument("--timeout", type=float, default=60)
    a = p.parse_args()
    config = ClientConfiguration(a.endpoint, Credentials(), request_timeout=5)
    (produce if a.cmd == "produce" else receive)(config, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
