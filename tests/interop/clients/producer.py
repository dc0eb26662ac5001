"""C++ producer: sends ``--count`` messages with one send mode and writes each message and its result.

Message i has body ``<mode>-<i>-…`` (every ``--big-every``-th one 6000 bytes, which the client compresses),
tag ``TagA``/``TagB``/``TagC`` in turn, keys ``<mode>-key-<i> <mode>-alt-<i>`` and the user properties
``seq``, ``mode``, ``note`` and ``shard``. ``orderly`` sends with ``send_orderly(msg, i % keys)``; ``async`` waits
for each callback before the next send.
"""

from __future__ import annotations

import sys
import threading

from _common import Journal, parser
from rocketmq.client import Message, Producer

TAGS = ("TagA", "TagB", "TagC")


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
                    r = producer.send_batch([m for m, _ in pending])
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
                    r = producer.send_sync(msg)
                except Exception as exc:  # (the broker's refusal, e.g. ACL's NO_PERMISSION)
                    out.write(event="send-failed", error=str(exc), **record)
                    continue
            elif a.mode == "orderly":
                r = producer.send_orderly(msg, i % a.keys)
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
