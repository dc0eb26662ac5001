"""END_TRANSACTION: a producer commits or rolls back a half message (RocketMQ's EndTransactionProcessor)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sluice.broker.processors.send_message_processor import PUT_STATUS_CODES
from sluice.common.properties import PROPERTY_REAL_TOPIC
from sluice.common.structs import perm_writeable
from sluice.common.sysflag import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.headers import EndTransactionRequestHeader

if TYPE_CHECKING:
    from sluice.broker.broker_stats import BrokerStats
    from sluice.broker.transactional_message_service import TransactionalMessageService
    from sluice.common.config import BrokerConfig
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)


class EndTransactionProcessor:
    def __init__(self, config: BrokerConfig, store: MessageStore,
                 transaction_service: TransactionalMessageService, stats: BrokerStats) -> None:
        self.config = config
        self.store = store
        self.transaction_service = transaction_service
        self.stats = stats

    async def end_transaction(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
        """Java producers send it one-way; whoever asks for an answer gets SUCCESS or a code with a remark. An
        unknown or already decided half message changes nothing."""
        h = EndTransactionRequestHeader.decode(req.ext_fields)
        group, queue_offset, commit_log_offset = h.producer_group, h.tran_state_table_offset, h.commit_log_offset
        outcome, from_check = h.commit_or_rollback, h.from_transaction_check
        who = f"producer {conn.remote_addr} of group {group}"
        if outcome == TRANSACTION_NOT_TYPE:
            # "unknown": nothing to do; the check-back asks again later
            log.info("%s left transaction %s undecided%s", who, h.transaction_id or "",
                     " when checked" if from_check else "")
            return req.response(ResponseCode.SUCCESS, "the transaction stays undecided")
        if outcome not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return req.response(ResponseCode.INVALID_PARAMETER,
                                f"commitOrRollback must be {TRANSACTION_COMMIT_TYPE} (commit), "
                                f"{TRANSACTION_ROLLBACK_TYPE} (rollback) or {TRANSACTION_NOT_TYPE} (unknown), "
                                f"not {outcome}")
        if not perm_writeable(self.config.broker_permission) or self.store.write_failure:
            return req.response(ResponseCode.NO_PERMISSION, f"the broker[{self.config.broker_name}] is read-only: the "
                                                            f"transaction stays undecided")
        if h.topic is None and self.config.authorization_enabled:
            # Beyond RocketMQ, which lets one without a topic through unchecked: authorization needs the topic
            # (Sluice's and the Java clients name it).
            return req.response(ResponseCode.NO_PERMISSION,
                                "END_TRANSACTION must name its topic when authorization is on")
        half, refusal = self.transaction_service.check_end(group, queue_offset, commit_log_offset, h.topic)
        if half is None:
            log.warning("END_TRANSACTION of %s for half message %d refused: %s", who, queue_offset, refusal.remark)
            return req.response(refusal.code, refusal.remark)
        commit = outcome == TRANSACTION_COMMIT_TYPE
        r = await self.transaction_service.end(half, commit)
        if not r.ok:
            return req.response(PUT_STATUS_CODES.get(r.status, ResponseCode.SYSTEM_ERROR), r.remark or r.status.name)
        self.stats.record_end_transaction(half.properties.get(PROPERTY_REAL_TOPIC, half.topic), commit,
                                          half.born_timestamp)
        return req.response(ResponseCode.SUCCESS)
