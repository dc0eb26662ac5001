"""C++ producer: sends ``--count`` messages with one send mode and writes each message and its result.

Message i has body ``<mode>-<i>-…`` (every ``--big-every``-th one 6000 bytes, which the client compresses),
tag ``TagA``/``TagB``/``TagC`` in turn, keys ``<mode>-key-<i> <mode>-alt-<i>`` and the user properties
``seq``, ``mode``, ``note`` and ``shard``. ``orderly`` sends with ``send_orderly(msg, i % keys)``; ``async`` waits
for each callback before the next send.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from _common import Journal, parser
from rocketmq.client import Message, Producer

TAGS = ("TagA", "TagB", "TagC")
T = TypeVar("T")


def build(topic: str, mode: str, i: int, big_every: int, keys: int) -> tuple[Message, dict]:
    body = f"{mode}-{i}-grüße"
    if big_every and i % big_every == big_every - 1:
        body = (body + "-") + "x" * (6000 - len(body) - 1)
    props = {"seq": str(i), "mode": mode, "note": "ünïcödé ok", "shard": str(i % keys)}
    record = {"body": body, "tags": TAGS[i % len(TAGS)], "keys": f"{mode}-key-{i} {mode}-alt-{i}", "properties": props}
    msg = Message(topic)
    msg.set_body(body.encode("utf-8"))
    msg.set_tags(record["tags"])
    msg.set_keys(record["keys"])
    for k, v in props.items():
        msg.set_property(k, v)
    return msg, record


def no_transport_retried(send: Callable[[], T]) -> T:
    """``send()``, again when the client failed it without reaching a broker: the C++ client 0.4.4 fails a send at
    once ("No route info", after "GetTransport ... timed_mutex timeout" in its log) when another of its threads is
    opening the same broker connection, as right after its start on a busy machine. Nothing was sent then."""
    for attempt in range(5):
        try:
            return send()
        except Exception as exc:
            if "No route info" not in str(exc) or attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--mode", choices=("sync", "async", "oneway", "orderly", "batch"), required=True)
    p.add_argument("--count", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--keys", type=int, default=4, help="sharding keys of orderly sends")
    p.add_argument("--big-every", type=int, default=10, help="every n-th body is 6000 bytes (0: none)")
    a = p.parse_args()
    out = Journal(a.out)
    producer = Producer(a.group, timeout=10_000)
    producer.set_namesrv_addr(a.namesrv)
    if a.access_key:
        producer.set_session_credentials(a.access_key, a.secret_key, "")
    producer.start()
    try:
        pending: list[tuple[Message, dict]] = []
        answered = threading.Semaphore(0)
        for i in range(a.count):
            msg, record = build(a.topic, a.mode, i, a.big_every, a.keys)
            if a.mode == "batch":
                pending.append((msg, record))
                if len(pending) == a.batch_size or i == a.count - 1:
                    batch = [m for m, _ in pending]
                    r = no_transport_retried(lambda b=batch: producer.send_batch(b))
                    for _, rec in pending:
                        out.write(event="sent", status=r.status.name, msg_id=r.msg_id, offset=r.offset, **rec)
                    pending = []
                continue
            if a.mode == "async":  # one send in flight at a time: the callbacks report in sending order
                def ok(r: object, record: dict = record) -> None:
                    out.write(event="sent", status=r.status.name, msg_id=r.msg_id, offset=r.offset, **record)
                    answered.release()

                def failed(exc: Exception, record: dict = record) -> None:
                    out.write(event="send-failed", error=str(exc), **record)
                    answered.release()

                producer.send_async(msg, ok, failed)
                if not answered.acquire(timeout=30):
                    out.write(event="send-unanswered", **record)
                continue
            if a.mode == "sync":
                try:
                    r = no_transport_retried(lambda m=msg: producer.send_sync(m))
                except Exception as exc:  # (the broker's refusal, e.g. ACL's NO_PERMISSION)
                    out.write(event="send-failed", error=str(exc), **record)
                    continue
            elif a.mode == "orderly":
                shard = i % a.keys
                r = no_transport_retried(lambda m=msg, k=shard: producer.send_orderly(m, k))
            else:
                producer.send_oneway(msg)
                out.write(event="sent", status="ONEWAY", msg_id="", offset=-1, **record)
                continue
            out.write(event="sent", status=r.status.name, msg_id=r.msg_id, offset=r.offset, **record)
    finally:
        producer.shutdown()
    out.write(event="end", reason="complete")
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
