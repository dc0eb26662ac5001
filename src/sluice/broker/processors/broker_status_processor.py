"""What an operator reads and sets of a running broker (RocketMQ's AdminBrokerProcessor, its status half):
GET_BROKER_RUNTIME_INFO (``mqadmin brokerStatus``, ``clusterList``), GET_BROKER_HA_STATUS (``haStatus``),
GET_BROKER_EPOCH_CACHE (``getBrokerEpoch``), GET_BROKER_CONFIG (``getBrokerConfig``), UPDATE_BROKER_CONFIG
(``updateBrokerConfig``) and VIEW_BROKER_STATS_DATA (``statsAll``)."""

from __future__ import annotations

import asyncio
import logging
import math
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sluice.broker.broker_stats import PUT_TIME_NAMES
from sluice.broker.runtime_config import ConfigUpdateError, RuntimeConfig
from sluice.broker.stats_item import STATS_NAMES
from sluice.common import fastjson
from sluice.common.config_text import config_properties_text
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.store.retention import disk_usage_ratio

LONG_MAX = (1 << 63) - 1  # (Java's Long.MAX_VALUE: the end of the open last epoch)

if TYPE_CHECKING:
    from sluice.broker.broker_stats import BrokerStats
    from sluice.broker.pull_request_hold_service import PullRequestHoldService
    from sluice.broker.timer_message_service import TimerMessageService
    from sluice.common.config import BrokerConfig, BrokerRole
    from sluice.common.loop_lag import LoopLagProbe
    from sluice.store.ha.epoch_file import EpochFile
    from sluice.store.ha.ha_client import HAClient
    from sluice.store.ha.ha_service import HAService
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

VERSION_DESC = "V5_5_0"  # the RocketMQ release whose protocol Sluice speaks (what clients compare versions to)
# Queues Sluice does not have (pulls, acks, queries and lite pulls run on the event loop, not in thread pools):
# their size and head wait are 0, their capacity RocketMQ's default.
_NO_QUEUE = {"pull": 100_000, "litePull": 100_000, "ack": 100_000, "query": 20_000}


class BrokerRuntime(Protocol):
    """What the status requests report of the running broker, read at each request (its replication is set up
    after the processors, and whether it is fenced changes)."""

    @property
    def boot_timestamp(self) -> int: ...
    @property
    def role(self) -> BrokerRole: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def hold_service(self) -> PullRequestHoldService: ...
    @property
    def loop_lag(self) -> LoopLagProbe: ...
    @property
    def fenced(self) -> bool: ...
    @property
    def write_guard(self) -> Callable[[], str] | None: ...
    @property
    def ha_service(self) -> HAService | None: ...
    @property
    def ha_client(self) -> HAClient | None: ...
    @property
    def special_service_running(self) -> bool: ...
    @property
    def timer_service(self) -> TimerMessageService | None: ...
    @property
    def epochs(self) -> EpochFile: ...
    @property
    def registered_id(self) -> int: ...


def _tps_text(stats: BrokerStats, *which: int, unfilled: str = "") -> str:
    """RocketMQ's three windows (10 s, 1 min, 10 min) joined by spaces: the rates ``which`` of ``BrokerStats.tps``
    summed, a window not yet filled as ``unfilled`` (RocketMQ leaves it empty, or 0.0 for getTotalTps)."""
    parts = []
    for seconds in (10, 60, 600):
        rates = stats.tps(seconds)
        parts.append(unfilled if rates is None else repr(round(sum(rates[i] for i in which), 6)))
    return " ".join(parts)


def _rate(stats: BrokerStats, which: int) -> str:
    rates = stats.tps(10)
    return "0.0" if rates is None else repr(round(rates[which], 6))


def _disk_ratio(path: str) -> str:
    """The used share of ``path``'s disk, -1 when it does not exist (RocketMQ's getDiskPartitionSpaceUsedPercent)."""
    try:
        return f"{disk_usage_ratio(path):.2f}"
    except OSError:
        return "-1.0"


def human_bytes(n: int) -> str:
    """Java's ``MixAll.humanReadableByteCount(n, false)``: ``512 B``, ``1.5 KiB``, ``20.0 GiB``."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024 ** exp:.1f} {'KMGTPE'[exp - 1]}iB"


def _uptime(ms: int) -> str:
    s = ms // 1000
    return f"[ {s // 86400} days, {s // 3600 % 24} hours, {s // 60 % 60} minutes, {s % 60} seconds ]"


class BrokerStatusProcessor:
    def __init__(self, config: BrokerConfig, broker_addr: str, store: MessageStore, runtime: BrokerRuntime,
                 runtime_config: RuntimeConfig, trigger_register: Callable[[], None]) -> None:
        self.config = config
        self.broker_addr = broker_addr
        self.store = store
        self.runtime = runtime
        self.runtime_config = runtime_config
        self.trigger_register = trigger_register
        self._updating = asyncio.Lock()

    def get_broker_runtime_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """RocketMQ's runtime keys (those ``clusterList`` and ``brokerStatus`` read) with Sluice's values, then
        Sluice's own: the event loop's lag, back-pressure, replication."""
        store, rt, st = self.store, self.runtime, self.runtime.stats
        now_ms = int(time.time() * 1000)
        put_tps = st.tps(10)
        table = {"brokerVersionDesc": VERSION_DESC, "brokerActive": "true" if rt.special_service_running else "false",
                 "msgPutTotalTodayNow": str(st.put_msgs), "msgGetTotalTodayNow": str(st.get_msgs),
                 "msgPutTotalTodayMorning": str(st.today_morning[0]),
                 "msgGetTotalTodayMorning": str(st.today_morning[1]),
                 "msgPutTotalYesterdayMorning": str(st.yesterday_morning[0]),
                 "msgGetTotalYesterdayMorning": str(st.yesterday_morning[1]),
                 "putTps": _tps_text(st, 0), "getTransferredTps": _tps_text(st, 1),
                 "getFoundTps": _tps_text(st, 2), "getMissTps": _tps_text(st, 3),
                 "getTotalTps": _tps_text(st, 2, 3, unfilled="0.0"),
                 "putMessageTimesTotal": str(max(st.put_msgs + st.put_failures, 1)),  # (RocketMQ's: at least 1)
                 "putMessageFailedTimes": str(st.put_failures),
                 "putMessageSizeTotal": str(st.put_bytes),
                 "putMessageAverageSize": repr(st.put_bytes / max(st.put_msgs + st.put_failures, 1)),
                 "putMessageEntireTimeMax": str(int(st.put_max_ms)),
                 "getMessageEntireTimeMax": str(int(st.get_max_ms)),
                 "putMessageDistributeTime": "".join(f"{name}:{n} " for name, n in zip(
                     PUT_TIME_NAMES, st.last_put_times, strict=True)),
                 "replyUndeliveredTotal": str(st.replies_undelivered),
                 "putLatency99": f"{st.put_latency_ms(0.99):.2f}", "putLatency999": f"{st.put_latency_ms(0.999):.2f}",
                 "dispatchMaxBuffer": "0",
                 "remainHowManyDataToFlush": human_bytes(max(0, store.get_max_phy_offset()
                                                            - store.commit_log.flushed_where)),
                 "remainTransientStoreBufferNumbs": str(2**31 - 1),  # (no transient store pool: Java's MAX_VALUE)
                 "consumeQueueDiskRatio": _disk_ratio(store.config.store_path_consume_queue),
                 "commitLogMinOffset": str(store.get_min_phy_offset()),
                 "commitLogMaxOffset": str(store.get_max_phy_offset()),
                 "commitLogDiskRatio": f"{store.commit_log_disk_ratio:.2f}",
                 f"commitLogDiskRatio_{store.config.store_path_commit_log}": f"{store.commit_log_disk_ratio:.2f}",
                 "dispatchBehindBytes": str(store.get_max_phy_offset() - store.dispatched_offset),
                 # (read by the retention thread, not here: the oldest record may be a cold page)
                 "earliestMessageTimeStamp": str(store.commit_log.earliest_store_time()),
                 "startAcceptSendRequestTimeStamp": "0",
                 "bootTimestamp": str(rt.boot_timestamp), "runtime": _uptime(now_ms - rt.boot_timestamp),
                 "EndTransactionQueueSize": "0", "EndTransactionThreadPoolQueueCapacity": "100000",
                 "flushDiskType": store.config.flush_disk_type.value, "heldPulls": str(rt.hold_service.count),
                 "eventLoopLagMaxMs": f"{rt.loop_lag.max_lag * 1000:.1f}",
                 "eventLoopBusyMaxMs": f"{rt.loop_lag.max_busy * 1000:.1f}",
                 "gcPauseMaxMs": f"{rt.loop_lag.max_gc_pause * 1000:.1f}", "brokerRole": rt.role.value,
                 # (Sluice's: a broker made read-only or write-only by its permission, for the dashboard's alert)
                 "brokerPermission": str(self.config.broker_permission)}
        if put_tps is None:
            table["putTps"] = table["putTps"].strip() or "0.0  "
        try:
            disk = shutil.disk_usage(store.config.store_path_root_dir)
            table["commitLogDirCapacity"] = f"Total : {human_bytes(disk.total)}, Free : {human_bytes(disk.free)}."
        except OSError:  # (RocketMQ leaves it out when the directory is not there)
            pass
        timer = rt.timer_service
        if timer is not None and timer.enabled:
            waiting, _oldest, due, behind_ms, _ = timer.behind(now_ms, [])
            table.update({"timerReadBehind": str(behind_ms), "timerOffsetBehind": str(waiting),
                          "timerCongestNum": str(due), "timerEnqueueTps": _rate(st, 4),
                          "timerDequeueTps": _rate(st, 5)})
        else:
            table.update({"timerReadBehind": "0", "timerOffsetBehind": "0", "timerCongestNum": "0",
                          "timerEnqueueTps": "0.0", "timerDequeueTps": "0.0"})
        for pool, capacity in _NO_QUEUE.items():
            table[f"{pool}ThreadPoolQueueSize"] = "0"
            table[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = "0"
            table[f"{pool}ThreadPoolQueueCapacity"] = str(capacity)
        table.update(store.back_pressure_info())  # the send queue: the store thread's
        if rt.fenced:
            table["fenced"] = rt.write_guard() if rt.write_guard is not None else "true"
        if rt.ha_service is not None:  # replication lag of each connected slave, in bytes ("id:lag,...")
            table["haSlaveLagBytes"] = ",".join(f"{i}:{lag}" for i, lag in sorted(rt.ha_service.lag().items()))
            table["haInSyncSlaves"] = ",".join(str(s.broker_id) for s in rt.ha_service.in_sync_slaves())
        if rt.ha_client is not None:
            table["haMasterAddress"] = rt.ha_client.connected_to
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps({"table": table}))

    def get_broker_ha_status(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """RocketMQ's HARuntimeInfo: a master's slaves (address, acknowledged offset, how far behind, in sync),
        a slave's master."""
        rt, end = self.runtime, self.store.get_max_phy_offset()
        ha, client = rt.ha_service, rt.ha_client
        connections = []
        in_sync = 0
        if ha is not None:
            synced = {s.broker_id for s in ha.in_sync_slaves()}
            in_sync = len(synced)
            for s in sorted(ha.slaves.values(), key=lambda s: s.broker_id):
                if s.connected:
                    connections.append({"addr": s.address, "slaveAckOffset": s.ack_offset, "diff": end - s.ack_offset,
                                        "inSync": s.broker_id in synced, "transferredByteInSecond": 0,
                                        "transferFromWhere": s.ack_offset})
        client_info: dict[str, object] = {"lastReadTimestamp": 0, "lastWriteTimestamp": 0, "masterFlushOffset": 0,
                                          "maxOffset": 0, "transferredByteInSecond": 0}
        if client is not None:
            client_info.update({"masterAddr": client.connected_to, "maxOffset": end,
                                "masterFlushOffset": client.master_max_offset,
                                "isActivated": bool(client.connected_to)})
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps({
            "haClientRuntimeInfo": client_info, "haConnectionInfo": connections, "inSyncSlaveNums": in_sync,
            "master": rt.role.is_master, "masterCommitLogMaxOffset": end}))

    def get_broker_epoch_cache(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """RocketMQ's EpochEntryCache (``mqadmin getBrokerEpoch``): the master terms this broker's log holds, each
        from where it began to where the next began (the last, still open, to Long.MAX_VALUE as RocketMQ's), and
        the log's end. RocketMQ answers in controller mode only; a Sluice broker keeps its epochs in every mode."""
        c, end = self.config, self.store.get_max_phy_offset()
        entries = list(self.runtime.epochs.entries)
        ends = [e.start_offset for e in entries[1:]] + ([LONG_MAX] if entries else [])
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps({
            "brokerId": self.runtime.registered_id, "brokerName": c.broker_name, "clusterName": c.broker_cluster_name,
            "epochList": [{"endOffset": stop, "epoch": e.epoch, "startOffset": e.start_offset}
                          for e, stop in zip(entries, ends, strict=True)],
            "maxOffset": end}))

    def view_broker_stats_data(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """One counter's last minute, hour and day (``statsName``: TOPIC_PUT_NUMS with a topic, GROUP_GET_NUMS with
        ``topic@group``, ...): what ``mqadmin statsAll`` adds up; RocketMQ's remark when there is none."""
        name, key = req.ext_fields.get("statsName", ""), req.ext_fields.get("statsKey", "")
        data = self.runtime.stats.items.view(name, key) if name in STATS_NAMES else None
        if data is None:
            return req.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        return req.response(ResponseCode.SUCCESS, body=fastjson.dumps(data))

    def get_broker_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """The broker's settings as properties text under RocketMQ's names, secrets hidden; ``version`` as
        RocketMQ's DataVersion."""
        body = config_properties_text(self.config).encode()
        resp = req.response(ResponseCode.SUCCESS, body=body)
        resp.ext_fields["version"] = fastjson.dumps(
            {"counter": 0, "stateVersion": 0, "timestamp": self.runtime.boot_timestamp}).decode()
        return resp

    async def update_broker_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """Settings changed now and kept (``RuntimeConfig``): all those asked or none, each refused naming it."""
        async with self._updating:  # one at a time: each persists the whole set
            try:
                changes = self.runtime_config.validate(bytes(req.body or b""))
            except ConfigUpdateError as exc:
                return req.response(ResponseCode.INVALID_PARAMETER, f"updateBrokerConfig refused: {exc}")
            try:
                saved = await asyncio.to_thread(self.runtime_config.persist, changes)
            except OSError as exc:
                return req.response(ResponseCode.SYSTEM_ERROR, f"the settings could not be saved, none changed: {exc}")
            self.runtime_config.commit(changes, saved)
        log.info("settings changed by %s: %s", conn.remote_addr,
                 ", ".join(f"{name}={value}" for (_, name), value in changes.items()))
        if any(name == "broker_permission" for _, name in changes):
            self.trigger_register()  # the name servers learn the new permission (RocketMQ re-registers too)
        return req.response(ResponseCode.SUCCESS)
