"""C++ pull consumer: pulls every queue of the topic over and over (``PullConsumer.pull``) and writes each message;
ends when ``--expect`` distinct bodies came, when ``--stop-file`` appears, or at ``--timeout``."""

from __future__ import annotations

import sys
import time

from _common import Journal, parser, received, text, wait
from rocketmq.client import PullConsumer


def main() -> int:
    a = parser(__doc__, consumer=True).parse_args()
    deadline = time.monotonic() + a.timeout
    props = [x for x in a.props.split(",") if x]
    out = Journal(a.out)
    consumer = PullConsumer(a.group)
    consumer.set_namesrv_addr(a.namesrv)
    consumer.start()
    out.write(event="started")
    bodies: set[str] = set()
    while True:
        for msg in consumer.pull(a.topic, a.expression):
            out.write(event="received", **received(msg, props))
            bodies.add(text(msg.body))
        reason = wait(time.monotonic(), a.stop_file, lambda: a.expect > 0 and len(bodies) >= a.expect)
        if reason != "timeout" or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    consumer.shutdown()
    out.write(event="end", reason=reason)
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
