"""Message trace records (RocketMQ's ``TraceDataEncoder``): what a client with trace on writes to the trace topic.

A trace message's body holds records separated by ``\\x02``, each a ``\\x01``-separated line that starts with its
type: ``Pub`` (a send and its result), ``SubBefore`` / ``SubAfter`` (a consumer's listener call, joined by a request
id), ``EndTransaction`` (a commit or rollback, from the local transaction or a check) and ``Recall``. Its keys are
the message ids it is about and their keys, so that the trace of a message is found by querying the trace topic's
index for the message id (``mqadmin queryMsgTraceById``, ``sluice msg trace``). The fields, their order and Java's
``null`` for a missing tag or key are the Java client's, so that traces written by either client read the same.

Sans-IO: the dispatcher that sends them is ``sluice.client.aio.trace_dispatcher``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from sluice.client.message import Message, SendResult, SendStatus
from sluice.client.message_id import create_uniq_id
from sluice.common.message import MessageExt
from sluice.common.namespace import unwrap
from sluice.common.properties import KEY_SEPARATOR, PROPERTY_MSG_REGION, PROPERTY_TRACE_SWITCH

CONTENT_SEPARATOR = "\x01"
FIELD_SEPARATOR = "\x02"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
DEFAULT_REGION = "DefaultRegion"  # (MixAll.DEFAULT_TRACE_REGION_ID: a message stored without MSG_REGION)
TRACE_GROUP_PREFIX = "_INNER_TRACE_PRODUCER"
MAX_TRACE_MESSAGE_SIZE = 128_000  # (the Java client's trace producer: a body of at most ~128 KB)
MAX_TRACE_KEYS_SIZE = 16_384  # bytes of keys a trace message carries (a stored message's properties: < 32 KiB)
_NULL = "null"  # what Java's StringBuilder writes for a missing tag or key


class TraceType(enum.Enum):
    PUB = "Pub"
    RECALL = "Recall"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"


class TraceMessageType(enum.IntEnum):
    """RocketMQ's ``MessageType`` as a Pub record numbers it (its ordinal)."""

    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3
    ORDER = 4


class ConsumeReturnType(enum.IntEnum):
    """How a listener call ended (RocketMQ's ``ConsumeReturnType``; its ordinal is a SubAfter's context code)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@dataclass
class TraceBean:
    """One message a record is about. ``None`` tags or keys are written as Java writes a null: ``null``."""

    topic: str = ""
    msg_id: str = ""
    offset_msg_id: str = ""
    tags: str | None = None
    keys: str | None = None
    store_host: str = ""
    body_length: int = 0
    retry_times: int = 0
    msg_type: TraceMessageType = TraceMessageType.NORMAL
    transaction_id: str | None = None
    transaction_state: str = ""  # COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW (Java's LocalTransactionState)
    from_transaction_check: bool = False


@dataclass
class TraceContext:
    """One record: a send, a listener call's start or end, a transaction's end. A SubBefore / SubAfter context
    may hold several beans (a listener call on several messages): it is written as one line per bean."""

    trace_type: TraceType
    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    region_id: str = DEFAULT_REGION
    group: str = ""
    cost_time: int = 0
    success: bool = True
    request_id: str = ""
    context_code: int = 0
    beans: list[TraceBean] = field(default_factory=list)


def _text(value: str | None) -> str:
    return _NULL if value is None else value


def _bool(value: bool) -> str:
    return "true" if value else "false"


def encode_context(ctx: TraceContext) -> str:
    """The record text of ``ctx``, each line ending with the field separator (as the Java client writes it)."""
    c = CONTENT_SEPARATOR
    t = ctx.trace_type
    if not ctx.beans:
        return ""
    if t is TraceType.PUB:
        b = ctx.beans[0]
        parts = [t.value, str(ctx.timestamp), ctx.region_id, ctx.group, b.topic, b.msg_id, _text(b.tags),
                 _text(b.keys), b.store_host, str(b.body_length), str(ctx.cost_time), str(int(b.msg_type)),
                 b.offset_msg_id, _bool(ctx.success)]
        return c.join(parts) + FIELD_SEPARATOR
    if t is TraceType.SUB_BEFORE:
        return "".join(c.join([t.value, str(ctx.timestamp), ctx.region_id, ctx.group, ctx.request_id, b.msg_id,
                               str(b.retry_times), _text(b.keys)]) + FIELD_SEPARATOR for b in ctx.beans)
    if t is TraceType.SUB_AFTER:
        return "".join(c.join([t.value, ctx.request_id, b.msg_id, str(ctx.cost_time), _bool(ctx.success),
                               _text(b.keys), str(ctx.context_code), str(ctx.timestamp), ctx.group])
                       + FIELD_SEPARATOR for b in ctx.beans)
    if t is TraceType.END_TRANSACTION:
        b = ctx.beans[0]
        parts = [t.value, str(ctx.timestamp), ctx.region_id, ctx.group, b.topic, b.msg_id, _text(b.tags),
                 _text(b.keys), b.store_host, str(int(b.msg_type)), _text(b.transaction_id), b.transaction_state,
                 _bool(b.from_transaction_check)]
        return c.join(parts) + FIELD_SEPARATOR
    b = ctx.beans[0]  # Recall
    return c.join([t.value, str(ctx.timestamp), ctx.region_id, ctx.group, b.topic, b.msg_id,
                   _bool(ctx.success)]) + FIELD_SEPARATOR


def trace_keys(ctx: TraceContext) -> set[str]:
    """The index keys of ``ctx``'s record: each message id and each of its keys."""
    out: set[str] = set()
    for b in ctx.beans:
        out.add(b.msg_id)
        if b.keys and b.keys != _NULL:
            out.update(k for k in b.keys.split(KEY_SEPARATOR) if k)
    out.discard("")
    return out


def pack(contexts: Iterable[TraceContext], max_size: int = MAX_TRACE_MESSAGE_SIZE,
         max_keys: int = MAX_TRACE_KEYS_SIZE) -> Iterator[tuple[str, set[str], int]]:
    """Trace message bodies of at most ``max_size`` characters (one record alone may be longer) with their keys
    (at most ``max_keys`` bytes of them, spaces included: the properties of a stored message are bounded; a record
    whose keys alone pass it keeps those that fit, its message id first) and how many records each holds."""
    buf: list[str] = []
    keys: set[str] = set()
    size = keys_size = 0
    for ctx in contexts:
        data = encode_context(ctx)
        if not data:
            continue
        mine = sorted(trace_keys(ctx) - keys, key=lambda k: k not in {b.msg_id for b in ctx.beans})
        mine_size = sum(len(k.encode()) + 1 for k in mine)
        if buf and (size + len(data) > max_size or keys_size + mine_size > max_keys):
            yield "".join(buf), keys, len(buf)
            buf, keys, size, keys_size = [], set(), 0, 0
            mine = sorted(trace_keys(ctx), key=lambda k: k not in {b.msg_id for b in ctx.beans})
        for k in mine:
            n = len(k.encode()) + 1
            if keys_size + n <= max_keys:
                keys.add(k)
                keys_size += n
        buf.append(data)
        size += len(data)
    if buf:
        yield "".join(buf), keys, len(buf)


def _none_if_null(value: str) -> str | None:
    return None if value == _NULL else value


def _int(value: str, default: int = 0) -> int:
    try:
        return int(value)
    except ValueError:
        return default


def decode_trace_data(text: str) -> list[TraceContext]:
    """The records of a trace message body; a line that is not a record of a known type, or is cut short, is
    skipped (a trace topic may hold anything a client wrote)."""
    out: list[TraceContext] = []
    for record in text.split(FIELD_SEPARATOR):
        line = record.split(CONTENT_SEPARATOR)
        kind = line[0]
        try:
            if kind == "Pub" and len(line) >= 13:
                msg_type = _int(line[11])
                bean = TraceBean(topic=line[4], msg_id=line[5], tags=_none_if_null(line[6]),
                                 keys=_none_if_null(line[7]), store_host=line[8], body_length=_int(line[9]),
                                 msg_type=TraceMessageType(msg_type) if 0 <= msg_type <= 4 else
                                 TraceMessageType.NORMAL)
                success = line[12] if len(line) == 13 else line[13]
                if len(line) >= 14:
                    bean.offset_msg_id = line[12]
                out.append(TraceContext(TraceType.PUB, _int(line[1]), line[2], line[3], _int(line[10]),
                                        success == "true", beans=[bean]))
            elif kind == "SubBefore" and len(line) >= 8:
                bean = TraceBean(msg_id=line[5], retry_times=_int(line[6]), keys=_none_if_null(line[7]))
                out.append(TraceContext(TraceType.SUB_BEFORE, _int(line[1]), line[2], line[3],
                                        request_id=line[4], beans=[bean]))
            elif kind == "SubAfter" and len(line) >= 6:
                bean = TraceBean(msg_id=line[2], keys=_none_if_null(line[5]))
                ctx = TraceContext(TraceType.SUB_AFTER, 0, "", "", _int(line[3]), line[4] == "true",
                                   request_id=line[1], beans=[bean])
                if len(line) >= 7:
                    ctx.context_code = _int(line[6])
                if len(line) >= 9:
                    ctx.timestamp, ctx.group = _int(line[7]), line[8]
                out.append(ctx)
            elif kind == "EndTransaction" and len(line) >= 13:
                msg_type = _int(line[9], 2)
                bean = TraceBean(topic=line[4], msg_id=line[5], tags=_none_if_null(line[6]),
                                 keys=_none_if_null(line[7]), store_host=line[8],
                                 msg_type=TraceMessageType(msg_type) if 0 <= msg_type <= 4 else
                                 TraceMessageType.TRANS_COMMIT,
                                 transaction_id=_none_if_null(line[10]), transaction_state=line[11],
                                 from_transaction_check=line[12] == "true")
                out.append(TraceContext(TraceType.END_TRANSACTION, _int(line[1]), line[2], line[3], beans=[bean]))
            elif kind == "Recall" and len(line) >= 7:
                out.append(TraceContext(TraceType.RECALL, _int(line[1]), line[2], line[3], success=line[6] == "true",
                                        beans=[TraceBean(topic=line[4], msg_id=line[5])]))
        except (IndexError, ValueError):
            continue
    return out


def now_ms() -> int:
    return int(time.time() * 1000)


def _keys_text(keys: list[str] | str | None) -> str | None:
    if not keys:
        return None
    return keys if isinstance(keys, str) else KEY_SEPARATOR.join(keys)


def pub_context(group: str, msg: Message, result: SendResult, started_ms: int, store_host: str,
                half: bool = False) -> TraceContext | None:
    """The Pub record of a send answered by ``result`` (None when the broker's trace switch is off)."""
    if not result.trace_on:
        return None
    if half:
        msg_type = TraceMessageType.TRANS_HALF
    elif msg.delay_level or msg.deliver_at is not None or msg.delay is not None:
        msg_type = TraceMessageType.DELAY
    else:
        msg_type = TraceMessageType.NORMAL
    bean = TraceBean(topic=unwrap(msg.topic), msg_id=result.msg_id, offset_msg_id=result.offset_msg_id, tags=msg.tags,
                     keys=_keys_text(msg.keys), store_host=store_host, body_length=len(msg.body), msg_type=msg_type)
    return TraceContext(TraceType.PUB, started_ms, result.region_id, unwrap(group), max(0, now_ms() - started_ms),
                        result.status is SendStatus.SEND_OK, beans=[bean])


def sub_before_context(group: str, msgs: Sequence[MessageExt]) -> TraceContext | None:
    """The SubBefore record of a listener call on ``msgs`` (None when every message has its trace switch off)."""
    beans: list[TraceBean] = []
    region = DEFAULT_REGION
    for m in msgs:
        if m.get_property(PROPERTY_TRACE_SWITCH) == "false":
            continue
        region = m.get_property(PROPERTY_MSG_REGION) or region
        beans.append(TraceBean(topic=unwrap(m.topic), msg_id=m.msg_id, tags=m.tags, keys=_keys_text(m.keys),
                               body_length=m.store_size, retry_times=m.reconsume_times))
    if not beans:
        return None
    return TraceContext(TraceType.SUB_BEFORE, now_ms(), region, unwrap(group), request_id=create_uniq_id(),
                        beans=beans)


def sub_after_context(before: TraceContext, count: int, success: bool, how: ConsumeReturnType) -> TraceContext:
    """The SubAfter record that closes ``before``: the call's time shared out over its ``count`` messages."""
    cost = max(0, now_ms() - before.timestamp) // max(1, count)
    return TraceContext(TraceType.SUB_AFTER, now_ms(), before.region_id, before.group, cost, success,
                        before.request_id, int(how), before.beans)


def end_transaction_context(group: str, topic: str, msg_id: str, tags: str | None, keys: list[str] | str | None,
                            store_host: str, transaction_id: str | None, state: str, from_check: bool,
                            region_id: str | None = None) -> TraceContext:
    """The EndTransaction record of a commit, rollback or undecided answer (``state``: Java's name for it)."""
    bean = TraceBean(topic=unwrap(topic), msg_id=msg_id, tags=tags, keys=_keys_text(keys), store_host=store_host,
                     msg_type=TraceMessageType.TRANS_COMMIT, transaction_id=transaction_id, transaction_state=state,
                     from_transaction_check=from_check)
    return TraceContext(TraceType.END_TRANSACTION, now_ms(), region_id or DEFAULT_REGION, unwrap(group),
                        beans=[bean])


@dataclass
class TraceRecord:
    """One record about a message, as ``sluice msg trace`` shows it: the record and the trace message's born
    host (the client that wrote it)."""

    context: TraceContext
    client_host: str

    @property
    def bean(self) -> TraceBean:
        return self.context.beans[0]


def records_for(msg_id: str, body: bytes, born_host: str) -> list[TraceRecord]:
    """The records of one trace message that are about ``msg_id`` (Java's ``TraceView.decodeFromTraceTransData``)."""
    text = body.decode("utf-8", errors="replace")
    return [TraceRecord(ctx, born_host) for ctx in decode_trace_data(text)
            if ctx.beans and ctx.beans[0].msg_id == msg_id]


@dataclass
class TraceStep:
    """One step of a message's way, as an operator reads it: its send (``pub``), its transaction's end
    (``end_transaction``), a consumer group's listener call on it (``sub``: a SubBefore joined with its SubAfter)
    or its recall. ``status``: ``success`` / ``failed``; a ``sub`` without its end yet is ``consuming``."""

    kind: str
    group: str
    client_host: str
    timestamp: int
    cost_ms: int | None
    status: str
    topic: str = ""
    tags: str | None = None
    keys: str | None = None
    store_host: str = ""
    offset_msg_id: str = ""
    msg_type: str = ""
    retry_times: int | None = None
    return_type: str = ""
    transaction_state: str = ""
    from_transaction_check: bool = False


def _status(ok: bool) -> str:
    return "success" if ok else "failed"


def trace_steps(records: Iterable[TraceRecord]) -> list[TraceStep]:
    """A message's records as steps in time order (a record written twice, e.g. by a retried trace send, once)."""
    steps: list[TraceStep] = []
    afters: dict[str, TraceRecord] = {}
    befores: dict[str, TraceRecord] = {}
    seen: set[str] = set()
    for r in records:
        c, b = r.context, r.bean
        if c.trace_type is TraceType.SUB_AFTER:
            afters.setdefault(c.request_id, r)
            continue
        if c.trace_type is TraceType.SUB_BEFORE:
            befores.setdefault(c.request_id, r)
            continue
        text = encode_context(c)
        if text in seen:
            continue
        seen.add(text)
        if c.trace_type is TraceType.PUB:
            steps.append(TraceStep("pub", c.group, r.client_host, c.timestamp, c.cost_time, _status(c.success),
                                   b.topic, b.tags, b.keys, b.store_host, b.offset_msg_id, b.msg_type.name))
        elif c.trace_type is TraceType.END_TRANSACTION:
            steps.append(TraceStep("end_transaction", c.group, r.client_host, c.timestamp, None, b.transaction_state,
                                   b.topic, b.tags, b.keys, b.store_host, msg_type=b.msg_type.name,
                                   transaction_state=b.transaction_state,
                                   from_transaction_check=b.from_transaction_check))
        else:
            steps.append(TraceStep("recall", c.group, r.client_host, c.timestamp, None, _status(c.success), b.topic))
    for request_id in list(befores) + [k for k in afters if k not in befores]:
        before, after = befores.get(request_id), afters.get(request_id)
        first = before or after
        assert first is not None
        ac = after.context if after is not None else None
        how = ConsumeReturnType(ac.context_code).name if ac is not None and 0 <= ac.context_code <= 4 else ""
        steps.append(TraceStep(
            "sub", first.context.group or (ac.group if ac else ""), first.client_host,
            before.context.timestamp if before is not None else first.context.timestamp,
            ac.cost_time if ac is not None else None, _status(ac.success) if ac is not None else "consuming",
            keys=first.bean.keys, retry_times=before.bean.retry_times if before is not None else None,
            return_type=how))
    steps.sort(key=lambda st: (st.timestamp, st.kind != "pub"))
    return steps


__all__ = ["CONTENT_SEPARATOR", "ConsumeReturnType", "DEFAULT_REGION", "FIELD_SEPARATOR", "MAX_TRACE_MESSAGE_SIZE",
           "TRACE_GROUP_PREFIX", "TRACE_TOPIC", "TraceBean", "TraceContext", "TraceMessageType", "TraceRecord",
           "TraceStep", "TraceType", "decode_trace_data", "encode_context", "end_transaction_context", "now_ms", "pack",
           "pub_context", "records_for", "sub_after_context", "sub_before_context", "trace_keys", "trace_steps"]
