"""ACK_MESSAGE and BATCH_ACK_MESSAGE: a popped message is done (NSQ's FIN): merged into its checkpoint while that
is only in memory (PopBufferMergeService), else written to the revive log before SUCCESS; and
CHANGE_MESSAGE_INVISIBLETIME (NSQ's TOUCH, or REQ with a delay): a new checkpoint for the message from now, and an
ack of its old one, in one put.

A receipt the broker holds no open checkpoint for — its message already acknowledged, or put back once its
invisible time passed, or a receipt this broker never made — is answered NO_MESSAGE with a remark saying so:
never an ack of another message.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from sluice.broker.pop.pop_message_processor import check_invisible_time, put_all
from sluice.broker.pop.pop_revive_service import AckRecord, CheckPoint, now_ms
from sluice.common.errors import InvalidNameError
from sluice.common.extra_info import ORDER_REVIVE_QUEUE, Receipt, ReceiptError, real_topic, retry_flag
from sluice.common.lite import to_lmq_name, validate_lite_topic
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.errors import BadRequestError
from sluice.remoting.headers import AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader
from sluice.store.results import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from sluice.broker.consumer_order_info_manager import ConsumerOrderInfoManager
    from sluice.broker.pop.pop_buffer_merge_service import PopBufferMergeService
    from sluice.broker.pop.pop_long_polling_service import PopLongPollingService
    from sluice.broker.pop.pop_revive_service import PopReviveService
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

# A batch ack's bounds: entries, and the bit set of one (a checkpoint spans at most 32 messages, but its offsets
# may lie far apart when a filter skipped messages between them).
MAX_BATCH_ACK_ENTRIES = 1024
MAX_BIT_SET_BASE64 = 4096


class AckRefused(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class AckMessageProcessor:
    def __init__(self, config: BrokerConfig, store: MessageStore, topic_config_manager: TopicConfigManager,
                 pop_revive: PopReviveService, pop_polling: PopLongPollingService,
                 order_info: ConsumerOrderInfoManager, pop_buffer: PopBufferMergeService) -> None:
        self.config = config
        self.store = store
        self.topic_config_manager = topic_config_manager
        self.pop_revive = pop_revive
        self.pop_polling = pop_polling
        self.order_info = order_info
        self.pop_buffer = pop_buffer
        # Lite topics: the parent topic a group is bound to (None: no lite group), and what runs after a lite
        # topic's message is acknowledged or comes back (the event dispatcher offers the lite topic again).
        self.lite_bind_topic: Callable[[str], str | None] = lambda group: None
        self.on_lite_settled: Callable[[str, str], None] = lambda lmq, group: None
        self.on_lite_invisible: Callable[[str, str, int], None] = lambda lmq, group, until_ms: None

    def _lite_receipt(self, group: str, parent: str, lite_topic: str, queue_id: int, offset: int, extra_info: str,
                      upper_inclusive: bool = True) -> tuple[str, Receipt]:
        """A lite topic's light queue and the receipt a lite request names (RocketMQ's ackLite checks)."""
        if self.lite_bind_topic(group) != parent:
            raise AckRefused(ResponseCode.INVALID_PARAMETER, f"subscription bind topic not match, {group}")
        try:
            validate_lite_topic(lite_topic)
        except InvalidNameError as exc:
            raise AckRefused(ResponseCode.INVALID_PARAMETER, f"lite topic: {exc}") from None
        lmq = to_lmq_name(parent, lite_topic)
        high = self.store.get_max_offset_in_queue(lmq, 0)
        if queue_id != 0 or offset < 0 or offset > high or (offset == high and not upper_inclusive):
            raise AckRefused(ResponseCode.NO_MESSAGE, f"lite topic {lite_topic} of {parent}: offset {offset} of "
                                                      f"queue {queue_id} is not within [0, {high}]")
        try:
            receipt = Receipt.parse(extra_info)
        except ReceiptError as exc:
            raise AckRefused(ResponseCode.INVALID_PARAMETER, f"invalid receipt handle (extraInfo): {exc}") from None
        if not receipt.orderly or receipt.queue_offset != offset or receipt.broker_name != self.config.broker_name:
            raise AckRefused(ResponseCode.INVALID_PARAMETER, f"the receipt handle is not of lite topic {lite_topic} "
                                                             f"offset {offset} on broker {self.config.broker_name}")
        return lmq, receipt

    def _receipt(self, topic: str, queue_id: int, offset: int, extra_info: str,
                 upper_inclusive: bool = True) -> Receipt:
        """The receipt a request names, checked against the request; ``AckRefused`` says what is wrong."""
        tc = self.topic_config_manager.get(topic)
        if tc is None:
            raise AckRefused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            raise AckRefused(ResponseCode.MESSAGE_ILLEGAL, f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                                           f"topicConfig.readQueueNums:[{tc.read_queue_nums}]")
        low = self.store.get_min_offset_in_queue(topic, queue_id)
        high = self.store.get_max_offset_in_queue(topic, queue_id)
        if offset < low or offset > high or (offset == high and not upper_inclusive):
            raise AckRefused(ResponseCode.NO_MESSAGE, f"offset {offset} is not within [{low}, {high}] of {topic} "
                                                      f"queue {queue_id}")
        try:
            receipt = Receipt.parse(extra_info)
        except ReceiptError as exc:
            raise AckRefused(ResponseCode.INVALID_PARAMETER, f"invalid receipt handle (extraInfo): {exc}") from None
        if receipt.broker_name != self.config.broker_name:
            raise AckRefused(ResponseCode.INVALID_PARAMETER,
                             f"the receipt handle is of broker {receipt.broker_name!r}, this is "
                             f"{self.config.broker_name!r}")
        if receipt.queue_id != queue_id or receipt.queue_offset != offset or receipt.retry != retry_flag(topic):
            raise AckRefused(ResponseCode.INVALID_PARAMETER,
                             f"the receipt handle is of {receipt.retry}/{receipt.queue_id}/{receipt.queue_offset}, "
                             f"not of topic {topic} queue {queue_id} offset {offset}")
        return receipt

    def _open_checkpoint(self, group: str, topic: str, queue_id: int, offset: int, receipt: Receipt) -> CheckPoint:
        """The open checkpoint of a receipt; ``AckRefused`` when there is none to settle."""
        ck = self.pop_revive.find(topic, group, queue_id, receipt.ck_offset, receipt.pop_time,
                                         receipt.broker_name)
        i = -1 if ck is None else ck.index_of(offset)
        if ck is None or i < 0 or (ck.acked | ck.changing) >> i & 1:
            raise _expired(group, topic, queue_id, offset)
        if receipt.revive_qid != ck.revive_qid:
            raise AckRefused(ResponseCode.INVALID_PARAMETER,
                             f"the receipt handle names revive queue {receipt.revive_qid}, its checkpoint is in "
                             f"{ck.revive_qid}")
        return ck

    def _ack_orderly(self, group: str, topic: str, queue_id: int, pop_time: int, offset: int) -> None:
        """Settle a message of an orderly pop: the group's offset moves to the first one not acknowledged, and a
        pop waiting on the queue looks again."""
        ok, new_offset = self.order_info.ack((topic, group, queue_id), pop_time, offset)
        if not ok:
            raise _expired(group, topic, queue_id, offset)
        if new_offset is not None:
            offsets = self.store.consumer_offsets
            if offsets.query_offset(group, topic, queue_id) < new_offset:
                offsets.commit_offset(group, topic, queue_id, new_offset)
        self.pop_polling.notify_message_arriving(topic, queue_id, -1)

    async def ack_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = AckMessageRequestHeader.decode(req.ext_fields)
        group, topic, queue_id, offset = h.consumer_group, h.topic, h.queue_id, h.offset
        if h.lite_topic:
            try:
                lmq, receipt = self._lite_receipt(group, topic, h.lite_topic, queue_id, offset, h.extra_info)
                self._ack_orderly(group, lmq, 0, receipt.pop_time, offset)
            except AckRefused as exc:
                return req.response(exc.code, exc.remark)
            self.on_lite_settled(lmq, group)
            return req.response(ResponseCode.SUCCESS)
        try:
            receipt = self._receipt(topic, queue_id, offset, h.extra_info)
            if receipt.orderly:
                self._ack_orderly(group, topic, queue_id, receipt.pop_time, offset)
                return req.response(ResponseCode.SUCCESS)
            ck = self._open_checkpoint(group, topic, queue_id, offset, receipt)
        except AckRefused as exc:
            return req.response(exc.code, exc.remark)
        return await self._ack(req, [(ck, 1 << ck.index_of(offset))])

    async def _ack(self, req: RemotingCommand, acks: list[tuple[CheckPoint, int]]) -> RemotingCommand:
        """Mark each checkpoint's messages of the bits of its mask (by index) acked, then write one ack record per
        checkpoint that is in the revive log, to its own revive queue (undone if that fails). Acks of a checkpoint
        still only in memory are merged into it there, and written with it if it ever is."""
        # A checkpoint being written is acked once it is (in the log, or back in memory): an ack in memory of one
        # whose record then lands would be lost, an ack record of one that then fails would be undone.
        await self.pop_buffer.until_written([ck for ck, _ in acks])
        done: list[tuple[CheckPoint, int]] = []  # logged checkpoints and the bits newly acked
        acked = refused = False
        for ck, mask in acks:
            if not self.pop_revive.is_open(ck):  # (put back while the ack waited)
                refused = True
                continue
            if mask & ck.changing:  # (a change of their invisible time is being written)
                refused = True
                mask &= ~ck.changing
            new = mask & ~ck.acked & ((1 << len(ck.diffs)) - 1)
            if new:
                acked = True
                if ck.logged:
                    done.append((ck, new))
                else:
                    self.pop_revive.ack_mask(ck, new)
        if refused and not acked:
            return req.response(ResponseCode.NO_MESSAGE, "receipt handles expired or being changed: their messages "
                                                         "were put back, or their invisible time is being changed")
        if not done:
            return req.response(ResponseCode.SUCCESS)
        records = [self.pop_revive.ack_record(AckRecord(ck.topic, ck.group, ck.queue_id, ck.start_offset, ck.pop_time,
                                                     ck.broker_name, tuple(ck.start_offset + ck.diffs[i]
                                                                           for i in _indices(new))), ck.revive_qid)
                   for ck, new in done]
        for ck, new in done:  # (in memory now: an ack arriving meanwhile finds them acked)
            self.pop_revive.ack_mask(ck, new)
        answered = False

        def written(_i: int, r: PutMessageResult) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            for ck, _ in done:
                self.pop_revive.count_put(ck.group, ck.topic, "ACK", r.status, ck.revive_qid)
            if not r.stored:
                for ck, new in done:
                    for i in _indices(new):
                        self.pop_revive.unack(ck, ck.start_offset + ck.diffs[i])

        try:
            (r,) = await put_all(self.store, [records], written)
        except Exception:  # (raised before the put was submitted: nothing will answer it)
            written(0, PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, "not written"))
            raise
        if not r.stored:
            return req.response(ResponseCode.SYSTEM_ERROR, f"cannot write the ack: {r.status.name} {r.remark}")
        return req.response(ResponseCode.SUCCESS)

    async def batch_ack_message(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """A JSON body ``{"brokerName", "acks": [{c, t, r, so, q, rq, pt, it, b}]}``: per checkpoint, the offsets
        ``so + i`` for each bit i of ``b`` (a base64 java.util.BitSet)."""
        try:
            body = orjson.loads(req.body) if req.body else {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequestError(f"the batch ack body is not valid JSON: {exc}") from None
        items = body.get("acks", []) if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise BadRequestError("the batch ack body is not a JSON object with an acks list")
        if len(items) > MAX_BATCH_ACK_ENTRIES:
            raise BadRequestError(f"a batch ack of {len(items)} entries: at most {MAX_BATCH_ACK_ENTRIES}")
        if not items:
            return req.response(ResponseCode.NO_MESSAGE, "no ack in the batch")
        acks: list[tuple[CheckPoint, int]] = []
        orderly = 0
        for item in items:
            if not isinstance(item, dict):
                raise BadRequestError(f"batch ack entry {str(item)[:40]!r} is not a JSON object")
            try:
                group, topic, retry, start, queue_id, revive_qid, pop_time, bits = _batch_ack_fields(item)
            except (KeyError, TypeError, ValueError, binascii.Error) as exc:
                raise BadRequestError(f"malformed batch ack entry: {exc}") from None
            real = real_topic(retry, topic, group)
            if revive_qid == ORDER_REVIVE_QUEUE:
                for offset in _set_bits(bits, start):
                    try:
                        self._ack_orderly(group, real, queue_id, pop_time, offset)
                        orderly += 1
                    except AckRefused:
                        pass
                continue
            ck = self.pop_revive.find(real, group, queue_id, start, pop_time, self.config.broker_name)
            mask = 0 if ck is None else _mask(ck.diffs, bits) & ~ck.changing
            if ck is not None and mask:  # only its own offsets are looked up in the bit set: never all of them
                acks.append((ck, mask))
        if not acks:
            if orderly:
                return req.response(ResponseCode.SUCCESS)
            return req.response(ResponseCode.NO_MESSAGE, "receipt handles expired or unknown: nothing acknowledged")
        return await self._ack(req, acks)

    async def change_message_invisibletime(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = ChangeInvisibleTimeRequestHeader.decode(req.ext_fields)
        group, topic, queue_id, offset, invisible = h.consumer_group, h.topic, h.queue_id, h.offset, h.invisible_time
        check_invisible_time(invisible)
        try:
            if h.lite_topic:
                topic, receipt = self._lite_receipt(group, topic, h.lite_topic, queue_id, offset, h.extra_info,
                                                    upper_inclusive=False)
            else:
                receipt = self._receipt(topic, queue_id, offset, h.extra_info, upper_inclusive=False)
            if receipt.orderly:
                now = now_ms()
                key = (topic, group, queue_id)
                # (suspend applies to a lite topic's pop, as RocketMQ's; a FIFO queue's change ignores it)
                info = self.order_info.suspend(key, receipt.pop_time, offset, now + invisible) \
                    if h.suspend and h.lite_topic else \
                    self.order_info.change_invisible(key, receipt.pop_time, offset, now + invisible)
                if info is None:
                    raise _expired(group, topic, queue_id, offset)
                if h.lite_topic:  # offered again when it comes back
                    self.on_lite_invisible(topic, group, now + invisible)
                return req.response(ResponseCode.SUCCESS, None, {
                    "popTime": str(info.pop_time), "invisibleTime": str(now + invisible - info.pop_time),
                    "reviveQid": str(ORDER_REVIVE_QUEUE)})
            old = self._open_checkpoint(group, topic, queue_id, offset, receipt)
        except AckRefused as exc:
            return req.response(exc.code, exc.remark)
        await self.pop_buffer.until_written([old])
        i = old.index_of(offset)
        if not self.pop_revive.is_open(old) or (old.acked | old.changing) >> i & 1:  # (settled or put back meanwhile)
            expired = _expired(group, topic, queue_id, offset)
            return req.response(expired.code, expired.remark)
        now = self.pop_revive.next_pop_time()
        # The new checkpoint is written at once (its message lies inside ``old``'s pop, past which the group's
        # offset may move); marked as made by a change, a restart does not move the offset by it. ``old``'s ack:
        # a record when ``old`` is in the log, else merged in memory once the new one is written.
        new = CheckPoint(topic, group, queue_id, offset, now, invisible, self.config.broker_name, [0], old.revive_qid,
                         suspend=h.suspend, changed=True)
        logged = old.logged
        records = [self.pop_revive.checkpoint_record(new)]
        if logged:
            records.append(self.pop_revive.ack_record(AckRecord(old.topic, group, queue_id, old.start_offset,
                                                                old.pop_time, old.broker_name, (offset,)),
                                                      old.revive_qid))
        self.pop_revive.open(new)
        if logged:
            self.pop_revive.ack(old, offset)
        # While this put is under way ``old`` is neither written nor put back (either would miss the ack), and its
        # message takes no other ack or change.
        old.busy += 1
        old.changing |= 1 << i
        answered = False

        def written(_i: int, r: PutMessageResult) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            old.busy -= 1
            old.changing &= ~(1 << i)
            if logged:
                self.pop_revive.count_put(group, topic, "ACK", r.status, old.revive_qid)
            self.pop_revive.written(new, r)
            if not r.stored:
                self.pop_revive.forget(new)
                if logged:
                    self.pop_revive.unack(old, offset)
            elif not logged:
                self.pop_revive.ack(old, offset)

        try:
            (r,) = await put_all(self.store, [records], written)
        except Exception:  # (raised before the put was submitted: nothing will answer it)
            written(0, PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, "not written"))
            raise
        if not r.stored:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"cannot write the new checkpoint: {r.status.name} {r.remark}")
        return req.response(ResponseCode.SUCCESS, None, {"popTime": str(now), "invisibleTime": str(invisible),
                                                          "reviveQid": str(old.revive_qid)})


def _expired(group: str, topic: str, queue_id: int, offset: int) -> AckRefused:
    return AckRefused(ResponseCode.NO_MESSAGE,
                      f"receipt handle expired or unknown: {topic} queue {queue_id} offset {offset} of group {group} "
                      f"was acknowledged already, or put back for redelivery once its invisible time passed")


def _batch_ack_fields(item: dict[str, Any]) -> tuple[str, str, str, int, int, int, int, bytes]:
    def get(short: str, long: str) -> Any:
        v = item.get(short, item.get(long))
        if v is None:
            raise KeyError(short)
        return v

    text = str(get("b", "bitSet"))
    if len(text) > MAX_BIT_SET_BASE64:
        raise ValueError(f"a bit set of {len(text)} base64 characters: at most {MAX_BIT_SET_BASE64}")
    raw = base64.b64decode(text, validate=True)
    retry = str(get("r", "retry"))
    if retry not in ("0", "1", "2"):
        raise ValueError(f"retry {retry!r} is not 0, 1 or 2")
    return (str(get("c", "consumerGroup")), str(get("t", "topic")), retry, int(get("so", "startOffset")),
            int(get("q", "queueId")), int(get("rq", "reviveQueueId")), int(get("pt", "popTime")), raw)


def _bit(bits: bytes, i: int) -> bool:
    """Bit ``i`` of a java.util.BitSet's toByteArray (little-endian)."""
    return 0 <= i < len(bits) * 8 and bool(bits[i >> 3] >> (i & 7) & 1)


def _mask(diffs: list[int], bits: bytes) -> int:
    """The indices in a checkpoint of ``diffs`` whose bits ``bits`` sets, as a mask."""
    n = len(diffs)
    if n and diffs[-1] == n - 1:  # its offsets follow each other (no filter skipped any): the same bits
        return int.from_bytes(bits, "little") & ((1 << n) - 1)
    return sum(1 << i for i, d in enumerate(diffs) if _bit(bits, d))


def _indices(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _set_bits(bits: bytes, start: int) -> list[int]:
    return [start + i for i in range(len(bits) * 8) if bits[i >> 3] >> (i & 7) & 1]


__all__ = ["AckMessageProcessor"]
