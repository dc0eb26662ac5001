"""C++ push consumer: subscribes, writes every delivery, ends when ``--expect`` distinct bodies came (plus
``--linger`` seconds), when ``--stop-file`` appears, or at ``--timeout``.

``--fail-first`` makes the callback raise on a message's first delivery (reconsume_times 0), so the client sends
it back to the broker; the redelivery succeeds.
"""

from __future__ import annotations

import sys
import threading
import time

from _common import Journal, parser, received, text, wait
from rocketmq.client import MessageModel, PushConsumer


class Failed(Exception):
    pass


def main() -> int:
    p = parser(__doc__, consumer=True)
    p.add_argument("--model", choices=("clustering", "broadcasting"), default="clustering")
    p.add_argument("--orderly", action="store_true")
    p.add_argument("--fail-first", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="consume threads (0: the client's default)")
    a = p.parse_args()
    deadline = time.monotonic() + a.timeout
    props = [x for x in a.props.split(",") if x]
    out = Journal(a.out)
    lock = threading.Lock()
    bodies: set[str] = set()

    def on_message(msg: object) -> None:
        rec = received(msg, props)
        if a.fail_first and msg.reconsume_times == 0:
            out.write(event="failed", **rec)
            raise Failed(rec["body"])
        out.write(event="received", **rec)
        with lock:
            bodies.add(text(msg.body))

    model = MessageModel.BROADCASTING if a.model == "broadcasting" else MessageModel.CLUSTERING
    consumer = PushConsumer(a.group, orderly=a.orderly, message_model=model)
    consumer.set_namesrv_addr(a.namesrv)
    if a.threads:
        consumer.set_thread_count(a.threads)
    consumer.subscribe(a.topic, on_message, a.expression)
    consumer.start()
    out.write(event="started")

    def enough() -> bool:
        with lock:
            return a.expect > 0 and len(bodies) >= a.expect

    reason = wait(deadline, a.stop_file, enough)
    if reason == "complete" and a.linger:
        wait(min(deadline, time.monotonic() + a.linger), a.stop_file)
    consumer.shutdown()
    out.write(event="end", reason=reason)
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
