"""Dead letters: the messages a consumer group gave up on, in ``%DLQ%<group>``: listed, and re-sent at a chosen rate
with a cursor that survives an interruption (``sluice dlq``).

A message is re-sent, by default, to the group's retry topic ``%RETRY%<group>`` with its original topic named in
``RETRY_TOPIC``, as the broker itself sends a retry: the group's push consumers get it again as a message of its
original topic, and no other group sees it. ``to_topic`` sends it to any topic instead (the original topic: every
group subscribed there gets it again).

Progress is kept in a state directory: ``<group>.cursor.json`` (per DLQ queue, the next offset to look at) and
``<group>.resent.jsonl`` (a line per message re-sent: its DLQ id, the new id, where it went, when). The record line
is written before the cursor moves, and a resumed run skips what the record holds past the cursor: each message is
re-sent once, also when a run is interrupted (Ctrl-C ends it after the send under way).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.client.admin import Admin, AdminError
from sluice.client.message import RESERVED_PROPERTY_KEYS, Message, SendResult
from sluice.common.compression import MAX_INFLATED_BODY_SIZE, inflate
from sluice.common.errors import InvalidNameError, MessageFormatError
from sluice.common.extra_info import pop_retry_topic
from sluice.common.files import write_json_atomic
from sluice.common.message import MessageExt
from sluice.common.message_codec import decode_records
from sluice.common.naming import dlq_topic, retry_topic, validate_group
from sluice.common.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
)
from sluice.common.structs import MessageQueue
from sluice.common.sysflag import COMPRESSED_FLAG

# Where re-sends keep their cursor and record unless told otherwise (``sluice dlq resend`` and the dashboard alike:
# a message re-sent by one is not re-sent by the other, nor after a restart).
DEFAULT_STATE_DIR = os.path.join(os.path.expanduser("~"), ".sluice", "dlq")
PULL_BATCH = 32
CURSOR_SAVE_SECONDS = 1.0  # the cursor is written this often, and at the end (the record is what sends once)
# Kept from a dead letter's properties when it is re-sent: what its producer set (user properties; keys and tags
# travel as such). Everything the system set on its way (retry topic, delays, timers, ids, offsets) stays behind.
_SYSTEM_PREFIXES = ("__", "TIMER_", "POP_", "1ST_POP")
_BROKER_STAMPED = RESERVED_PROPERTY_KEYS | {"TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS"}
# Set on a re-sent message: the dead letter it copies (RocketMQ 5's name for it).
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"


@dataclass(slots=True)
class DeadLetter:
    """One message in a group's dead-letter queue, and where it lies there."""

    broker_name: str
    queue_id: int
    queue_offset: int
    message: MessageExt

    @property
    def position(self) -> str:
        return f"{self.broker_name}/{self.queue_id}/{self.queue_offset}"

    @property
    def original_topic(self) -> str | None:
        return self.message.properties.get(PROPERTY_RETRY_TOPIC)

    def to_json(self) -> dict[str, Any]:
        m = self.message
        return {"msgId": m.msg_id, "originalTopic": self.original_topic, "failures": m.reconsume_times,
                "bornTimestamp": m.born_timestamp, "deadTimestamp": m.store_timestamp, "tags": m.tags,
                "keys": m.keys, "position": self.position}


@dataclass(slots=True)
class DeadLetterSummary:
    """A group's dead letters of one original topic."""

    topic: str
    messages: int = 0
    max_failures: int = 0
    first_ms: int = 0  # when the first of them was stored in the DLQ
    last_ms: int = 0

    def add(self, d: DeadLetter) -> None:
        m = d.message
        self.messages += 1
        self.max_failures = max(self.max_failures, m.reconsume_times)
        self.first_ms = m.store_timestamp if not self.first_ms else min(self.first_ms, m.store_timestamp)
        self.last_ms = max(self.last_ms, m.store_timestamp)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "messages": self.messages, "maxFailures": self.max_failures,
                "firstTimestamp": self.first_ms, "lastTimestamp": self.last_ms}


async def _queues(admin: Admin, group: str) -> list[tuple[str, str, MessageQueue]]:
    """(broker name, address, queue) of every queue of the group's DLQ topic."""
    topic = dlq_topic(group)
    route = await admin.api.get_topic_route(topic)
    if route is None:
        raise AdminError(f"consumer group {group!r} has no dead letters (no topic {topic})")
    out: list[tuple[str, str, MessageQueue]] = []
    for qd in route.queue_datas:
        addr = next((b.select_addr() for b in route.broker_datas if b.broker_name == qd.broker_name), None)
        if addr:
            out.extend((qd.broker_name, addr, MessageQueue(topic, qd.broker_name, q))
                       for q in range(qd.read_queue_nums))
    return out


async def dead_letter_count(admin: Admin, group: str) -> int:
    """How many dead letters the group has (each DLQ queue's max offset less its min: nothing is read)."""
    total = 0
    for _, addr, mq in await _queues(admin, group):
        total += max(await admin.api.get_max_offset(addr, mq) - await admin.api.get_min_offset(addr, mq), 0)
    return total


async def dead_letters(admin: Admin, group: str,
                       start: Callable[[str, int, int], int] | None = None) -> AsyncIterator[DeadLetter]:
    """Every message of the group's DLQ, queue by queue in offset order; ``start(broker, queue, min offset)``
    says where to begin a queue (default: its oldest message)."""
    for broker, addr, mq in await _queues(admin, group):
        low = await admin.api.get_min_offset(addr, mq)
        high = await admin.api.get_max_offset(addr, mq)
        offset = max(low, start(broker, mq.queue_id, low)) if start is not None else low
        if offset > high:  # (the DLQ was made again: its offsets started over)
            offset = low
        while offset < high:
            pulled = await admin.api.pull_message(addr, group, mq, offset, min(PULL_BATCH, high - offset))
            msgs = decode_records(pulled.body) if pulled.body else []
            if not msgs:
                if pulled.next_begin_offset <= offset:
                    break
                offset = pulled.next_begin_offset  # (removed by retention meanwhile: skip ahead)
                continue
            for m in msgs:
                if m.queue_offset >= high:
                    break
                yield DeadLetter(broker, mq.queue_id, m.queue_offset, m)
            offset = msgs[-1].queue_offset + 1


async def summarize(admin: Admin, group: str) -> list[DeadLetterSummary]:
    by_topic: dict[str, DeadLetterSummary] = {}
    async for d in dead_letters(admin, group):
        topic = d.original_topic or "?"
        by_topic.setdefault(topic, DeadLetterSummary(topic)).add(d)
    return [by_topic[t] for t in sorted(by_topic)]


def resend_copy(d: DeadLetter, group: str, to_topic: str | None, pop_retry: str | None = None) -> tuple[Message, str]:
    """The message to send for a dead letter (its body, inflated; tags, keys and user properties) and the system
    properties to add, encoded. ``pop_retry``: the group's POP retry topic of the original topic, when the group
    pops (a POP consumer reads that one, not ``%RETRY%<group>``)."""
    m = d.message
    body = bytes(m.body)
    if m.sys_flag & COMPRESSED_FLAG:  # (sent again, it is compressed again if it is large)
        try:
            body = inflate(body, MAX_INFLATED_BODY_SIZE)
        except MessageFormatError as exc:
            raise AdminError(f"dead letter {m.msg_id} at {d.position}: its compressed body: {exc}") from None
    props = m.properties
    user = {k: v for k, v in props.items()
            if v and k not in _BROKER_STAMPED and not k.startswith(_SYSTEM_PREFIXES)}
    original = d.original_topic
    if to_topic is None and original is None:
        raise AdminError(f"dead letter {m.msg_id} at {d.position} does not say its original topic; give a "
                         "topic to send it to")
    target = to_topic or pop_retry or retry_topic(group)
    msg = Message(target, body, tags=props.get(PROPERTY_TAGS) or None, keys=props.get(PROPERTY_KEYS) or None,
                  properties=user, flag=m.flag)
    system = {PROPERTY_DLQ_ORIGIN_MESSAGE_ID: m.msg_id}
    if to_topic is None:
        assert original is not None
        system[PROPERTY_RETRY_TOPIC] = original  # the consumer sees it as a message of its original topic
    return msg, "".join(f"{PROPERTY_SEPARATOR}{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in system.items())


@dataclass
class ResendProgress:
    total: int  # messages the run looks at (those chosen among them are re-sent)
    looked: int = 0
    resent: int = 0
    skipped: int = 0  # re-sent already (by an interrupted run, or another selection)
    failed: int = 0  # that cannot be sent as they are (recorded with the reason, and passed)
    started: float = field(default_factory=time.monotonic)


def _record_key(d: DeadLetter) -> str:
    """A dead letter's identity in the record: where it lies and its offset msg id (store host and commit-log
    offset), so that a DLQ deleted and made again, whose offsets start over, is not taken for the old one."""
    return f"{d.position}/{d.message.offset_msg_id}"


class DeadLetterResend:
    """Re-sends a group's dead letters: those with the given ids, or stored since a time, or all; at most
    ``rate`` a second; resumable from ``state_dir``."""

    def __init__(self, admin: Admin, group: str, state_dir: str, *, msg_ids: set[str] | None = None,
                 since_ms: int | None = None, to_topic: str | None = None, rate: float | None = None,
                 restart: bool = False) -> None:
        if rate is not None and rate <= 0:
            raise AdminError(f"rate {rate}: must be above 0 messages a second")
        validate_group(group)  # (it names the state files)
        self.admin = admin
        self.group = group
        self.msg_ids = msg_ids
        self.since_ms = since_ms
        self.to_topic = to_topic
        self.rate = rate
        os.makedirs(state_dir, exist_ok=True)
        self.cursor_path = os.path.join(state_dir, f"{group}.cursor.json")
        self.record_path = os.path.join(state_dir, f"{group}.resent.jsonl")
        self._lock = open(os.path.join(state_dir, f"{group}.lock"), "w")  # noqa: SIM115 (held while it lives)
        if not _try_lock(self._lock):
            self._lock.close()
            raise AdminError(f"another resend of group {group!r} is running (state in {state_dir})")
        if restart:
            for path in (self.cursor_path, self.record_path):
                if os.path.exists(path):
                    os.remove(path)
        # The cursor is of one selection: another starts from the queues' oldest (what the record holds is still
        # not sent twice).
        self.selection = {"msgIds": sorted(msg_ids) if msg_ids is not None else None, "since": since_ms,
                          "toTopic": to_topic}
        self.cursor: dict[str, int] = self._load_cursor()
        self.recorded, recorded_ids = self._load_record()
        # ids asked for that are dead letters: seen by this run, or re-sent by an earlier one
        self.found: set[str] = set(msg_ids & recorded_ids) if msg_ids is not None else set()
        self.interrupted = False
        self._stop = asyncio.Event()
        self._saved_at = 0.0
        self._pop_retry: dict[str, str | None] = {}  # original topic → the group's POP retry topic, if it exists

    def close(self) -> None:
        self._lock.close()

    def stop(self) -> None:
        """End the run after the message under way (a signal handler's call): the cursor and record say where."""
        self.interrupted = True
        self._stop.set()

    def _load_cursor(self) -> dict[str, int]:
        for path in (self.cursor_path, self.cursor_path + ".bak"):
            if not os.path.exists(path):
                continue
            try:
                with open(path) as f:
                    data = json.load(f)
                if data.get("selection") != self.selection:
                    return {}
                return {str(k): int(v) for k, v in data["next"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue  # (the record still keeps what was sent from being sent again)
        return {}

    def _load_record(self) -> tuple[set[str], set[str]]:
        """The dead letters re-sent (their keys) and their ids; a last line cut by a crash is cut off the file."""
        keys: set[str] = set()
        ids: set[str] = set()
        if not os.path.exists(self.record_path):
            return keys, ids
        with open(self.record_path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
                data = data[:data.rfind(b"\n") + 1]
        for line in data.splitlines():
            try:
                entry = json.loads(line)
                keys.add(str(entry["key"]))
                ids.update(str(entry[k]) for k in ("dlqMsgId", "dlqOffsetMsgId") if k in entry)
            except (ValueError, KeyError, TypeError):
                continue
        return keys, ids

    @property
    def resuming(self) -> bool:
        return bool(self.cursor)

    def _start(self, broker: str, queue_id: int, low: int) -> int:
        return self.cursor.get(f"{broker}/{queue_id}", low)

    async def count(self) -> int:
        """Messages between the cursor and the queues' ends (what the run will look at)."""
        total = 0
        for broker, addr, mq in await _queues(self.admin, self.group):
            low = await self.admin.api.get_min_offset(addr, mq)
            high = await self.admin.api.get_max_offset(addr, mq)
            begin = self._start(broker, mq.queue_id, low)
            total += max(0, high - (low if begin > high else max(low, begin)))
        return total

    def _chosen(self, d: DeadLetter) -> bool:
        m = d.message
        if self.msg_ids is not None:
            hit = [i for i in (m.msg_id, m.offset_msg_id) if i in self.msg_ids]
            self.found.update(hit)
            return bool(hit)
        return self.since_ms is None or m.store_timestamp >= self.since_ms

    async def _target(self, d: DeadLetter) -> str | None:
        """The group's POP retry topic of the dead letter's original topic, when it exists (the group pops)."""
        original = d.original_topic
        if self.to_topic is not None or original is None:
            return None
        if original not in self._pop_retry:
            topic = pop_retry_topic(original, self.group)
            self._pop_retry[original] = topic if await self.admin.api.get_topic_route(topic) is not None else None
        return self._pop_retry[original]

    async def run(self, progress: Callable[[ResendProgress], None] | None = None) -> ResendProgress:
        from sluice.client.aio.producer import Producer

        state = ResendProgress(await self.count())
        interval = 1 / self.rate if self.rate else 0.0
        next_at = time.monotonic()
        async with Producer(f"CID_SLUICE_DLQ_RESEND_{self.group}"[:255], self.admin.namesrv,
                            credentials=self.admin.credentials, tls=self.admin.tls) as producer:
            with open(self.record_path, "a") as record:
                try:
                    async for d in dead_letters(self.admin, self.group, self._start):
                        if self.interrupted:
                            break
                        state.looked += 1
                        key = _record_key(d)
                        if self._chosen(d):
                            if key in self.recorded:
                                state.skipped += 1
                            else:
                                if interval:
                                    delay = next_at - time.monotonic()
                                    if delay > 0:
                                        with contextlib.suppress(TimeoutError):
                                            await asyncio.wait_for(self._stop.wait(), delay)
                                        if self.interrupted:
                                            break
                                    next_at = max(next_at + interval, time.monotonic())
                                entry: dict[str, Any] = {"key": key, "dlqMsgId": d.message.msg_id,
                                         "dlqOffsetMsgId": d.message.offset_msg_id, "position": d.position}
                                try:
                                    result = await self._send(producer, d)
                                    entry.update(msgId=result.msg_id, topic=result.queue.topic)
                                    state.resent += 1
                                except (AdminError, MessageFormatError, InvalidNameError) as exc:
                                    # (it cannot be sent as it is: said, and passed; a broker's or the network's
                                    # failure ends the run instead, the cursor on this message)
                                    entry["error"] = str(exc)
                                    state.failed += 1
                                entry["at"] = int(time.time() * 1000)
                                record.write(json.dumps(entry) + "\n")
                                record.flush()
                                os.fsync(record.fileno())
                                self.recorded.add(key)
                        self.cursor[f"{d.broker_name}/{d.queue_id}"] = d.queue_offset + 1
                        if time.monotonic() - self._saved_at >= CURSOR_SAVE_SECONDS:
                            self._save_cursor()
                        if progress is not None:
                            progress(state)
                finally:
                    self._save_cursor()
        if self.msg_ids is not None and self.found != self.msg_ids and not self.interrupted:
            missing = ", ".join(sorted(self.msg_ids - self.found))
            raise AdminError(f"no dead letter of group {self.group!r} has the id(s) {missing}")
        return state

    async def _send(self, producer: Any, d: DeadLetter) -> SendResult:
        msg, system = resend_copy(d, self.group, self.to_topic, await self._target(d))
        uniq, request = producer.sender.single_request(msg, None, system.encode())
        resp, mq = await producer.sender.send_with_retries(msg.topic, request, msg, None, None, None, None, None,
                                                           False)
        result: SendResult = producer.sender.result(resp, mq, [uniq])
        return result

    def _save_cursor(self) -> None:
        write_json_atomic(self.cursor_path, {"group": self.group, "selection": self.selection, "next": self.cursor})
        self._saved_at = time.monotonic()


def _try_lock(f: Any) -> bool:
    try:
        import fcntl
    except ImportError:  # (Windows: no lock; one resend at a time is the operator's to keep)
        return True
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True
