"""What a client observes, reduced to what must be the same on Sluice and on Apache RocketMQ.

Only what differs from run to run or from broker to broker by nature is taken out: message ids and host
addresses (made of each broker's address and the client's clock), timestamps, commit-log positions (the
RocketMQ node serves the whole session, so its log holds other tests' messages), and the per-pull properties the Java
client adds on its side. Everything else — bodies, tags, keys, user and system properties (the ``CLUSTER``,
``MSG_REGION`` and ``TRACE_ON`` both brokers stamp on a stored message among them), queues, offsets, flags, CRCs,
reconsume counts, response codes — is compared as it is.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sluice import MessageExt
from tests.reference.conftest import System

# Client-side (the Java client adds them to each pulled message) or unique per run.
PER_RUN = frozenset({"UNIQ_KEY", "CONSUME_START_TIME", "MAX_OFFSET", "MIN_OFFSET", "ORIGIN_MESSAGE_ID",
                     "__transactionId__"})
R = TypeVar("R")


def both(systems: dict[str, System], scenario: Callable[[System], R]) -> dict[str, R]:
    """Run ``scenario`` against both systems at once; name → what it observed."""
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(scenario, s) for name, s in systems.items()}
        return {name: f.result() for name, f in futures.items()}


def assert_same(observed: dict[str, Any]) -> Any:
    """The two observations are equal; returns one of them (for further checks that hold on both)."""
    ours, theirs = observed["sluice"], observed["rocketmq"]
    if ours != theirs:
        diff = difflib.unified_diff(_pretty(theirs), _pretty(ours), "Apache RocketMQ", "Sluice", lineterm="", n=3)
        raise AssertionError("Sluice and Apache RocketMQ differ:\n" + "\n".join(list(diff)[:200]))
    return ours


def _pretty(value: Any) -> list[str]:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=repr).splitlines()


def props(properties: dict[str, str], keep_ids: bool = False) -> dict[str, str]:
    drop = frozenset() if keep_ids else PER_RUN
    return {k: v for k, v in sorted(properties.items()) if k not in drop}


def java_message(rec: dict[str, Any]) -> dict[str, Any]:
    """A message a Java client reported (``Journal.message``)."""
    return {"topic": rec["topic"], "tags": rec["tags"], "keys": rec["keys"], "body": rec["body"],
            "queue_id": rec["queue_id"], "queue_offset": rec["queue_offset"], "reconsume_times": rec["reconsume_times"],
            "sys_flag": rec["sys_flag"], "body_crc": rec["body_crc"], "properties": props(rec["properties"])}


def sluice_message(m: MessageExt) -> dict[str, Any]:
    """A message Sluice's client handed over, in the same shape."""
    return {"topic": m.topic, "tags": m.tags or "", "keys": " ".join(m.keys), "body": m.body.decode("utf-8", "replace"),
            "queue_id": m.queue_id, "queue_offset": m.queue_offset, "reconsume_times": m.reconsume_times,
            "sys_flag": m.sys_flag, "body_crc": m.body_crc, "properties": props(dict(m.properties))}


def by_position(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(msgs, key=lambda m: (m["topic"], m["queue_id"], m["queue_offset"], m["body"]))
