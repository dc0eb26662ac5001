"""C++ producer under a failover: sends ``<prefix>-<i>`` with sync sends, one after another, until ``--stop-file``
appears or ``--timeout`` passes; a send that fails (an exception) is tried again with the same body after
``--pause`` seconds, so every body is sent until one answer says it was stored. Writes one record per answer:
``{"event": "sent", "status": ..., "body": ...}`` or ``{"event": "send-failed", "error": ..., "body": ...}``.
"""

from __future__ import annotations

import os
import time

from _common import Journal, parser
from rocketmq.client import Message, Producer


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--prefix", default="cpp")
    p.add_argument("--stop-file", required=True)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--pause", type=float, default=0.05)
    a = p.parse_args()
    out = Journal(a.out)
    producer = Producer(a.group, timeout=3_000)
    producer.set_namesrv_addr(a.namesrv)
    producer.start()
    deadline = time.monotonic() + a.timeout
    i = 0
    try:
        while not os.path.exists(a.stop_file) and time.monotonic() < deadline:
            body = f"{a.prefix}-{i}"
            msg = Message(a.topic)
            msg.set_body(body.encode())
            msg.set_keys(body)
            try:
                r = producer.send_sync(msg)
            except Exception as exc:  # the wheel raises on a failed send: try the same body again
                out.write(event="send-failed", error=str(exc)[:300], body=body)
                time.sleep(a.pause)
                continue
            out.write(event="sent", status=r.status.name, body=body)
            if r.status.name in ("OK", "SEND_OK"):  # (the wheel names SEND_OK "OK")
                i += 1
            else:
                time.sleep(a.pause)
    finally:
        producer.shutdown()
        out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
