"""The name server's route tables (RocketMQ's RouteInfoManager). Pure: no I/O, the caller passes the time.

Tables:
  topic -> {broker name -> QueueData}       what each master broker serves
  broker name -> BrokerData                 cluster, and broker id -> address (0 = master)
  cluster -> {broker name}
  broker address -> BrokerLiveInfo          last registration, data version, connection, HA address

A master's registration carries its whole topic table, which replaces that broker's queue data when its data
version changed (or on its first registration): topics it no longer lists lose its QueueData, and a topic no
broker lists disappears. Slaves only add their address. A broker is dropped when it unregisters, when it has
not registered for ``broker_channel_expired_time`` ms, or when the connection it registered over closes.

Used from one event loop; not thread-safe.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable
from dataclasses import dataclass, field

from sluice.common.structs import (
    MASTER_ID,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicRouteData,
)
from sluice.common.sysflag import PERM_READ, PERM_WRITE
from sluice.namesrv.register_broker_body import TopicConfigSerializeWrapper

log = logging.getLogger(__name__)

DEFAULT_BROKER_CHANNEL_EXPIRED_TIME = 120_000


@dataclass(slots=True)
class BrokerLiveInfo:
    """What the name server knows about one registered broker address."""

    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    last_update_ms: int
    data_version: DataVersion
    conn_key: Hashable | None = None
    ha_server_addr: str = ""
    timeout_ms: int | None = None  # overrides the manager's expiry time for this broker


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """For a slave: its master's address and HA address (None for masters, or when no master is live)."""

    master_addr: str | None = None
    ha_server_addr: str | None = None
    first_registration: bool = False  # this address was not live before
    rejected: bool = False  # another address holds the id under a newer master epoch (state version)


@dataclass(slots=True)
class RouteInfoManager:
    broker_channel_expired_time: int = DEFAULT_BROKER_CHANNEL_EXPIRED_TIME
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)

    # == registration ================================================================================
    def register_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int, ha_addr: str,
                        topic_config_wrapper: TopicConfigSerializeWrapper | None, now_ms: int,
                        conn_key: Hashable | None = None, timeout_ms: int | None = None) -> RegisterBrokerResult:
        """Record a broker's (re-)registration. ``topic_config_wrapper`` None keeps its queue data as it is."""
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        broker_data = self.broker_addr_table.get(broker_name)
        first = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster, broker_name, {})
            self.broker_addr_table[broker_name] = broker_data
        addrs = broker_data.broker_addrs
        # One address holds one id: a slave promoted to master gives up its old id.
        for bid in [bid for bid, a in addrs.items() if a == broker_addr and bid != broker_id]:
            del addrs[bid]
        old_addr = addrs.get(broker_id)
        state_version = topic_config_wrapper.data_version.state_version if topic_config_wrapper is not None else 0
        holder = (self.broker_live_table.get(old_addr)
                  if broker_id == MASTER_ID and old_addr is not None and old_addr != broker_addr else None)
        if holder is not None and holder.data_version.state_version > state_version:
            # Another broker holds this id under a newer master epoch: this one is an older master that has not
            # learnt yet that it was replaced (RocketMQ's stateVersion rule). Its registration is ignored, and it
            # is no longer live, so that no route names it.
            log.warning("registration of %s/%s id %d at %s ignored: %s holds that id with state version %d, newer "
                        "than %d", cluster, broker_name, broker_id, broker_addr, old_addr,
                        holder.data_version.state_version, state_version)
            if self.broker_live_table.pop(broker_addr, None) is not None:
                for name, data in list(self.broker_addr_table.items()):
                    self._remove_addr_from_group(name, data, broker_addr)
            return RegisterBrokerResult(rejected=True)
        addrs[broker_id] = broker_addr
        first = first or old_addr is None

        prev = self.broker_live_table.get(broker_addr)
        if topic_config_wrapper is not None and broker_id == MASTER_ID:
            changed = first or prev is None or prev.data_version != topic_config_wrapper.data_version
            self._apply_topic_table(broker_name, topic_config_wrapper.topic_config_table, replace=changed)

        data_version = topic_config_wrapper.data_version if topic_config_wrapper is not None else DataVersion()
        self.broker_live_table[broker_addr] = BrokerLiveInfo(cluster, broker_name, broker_id, broker_addr, now_ms,
                                                             dataclasses.replace(data_version), conn_key, ha_addr,
                                                             timeout_ms)
        if prev is None:
            log.info("broker registered: %s/%s id %d at %s (HA %s, %d topics)", cluster, broker_name, broker_id,
                     broker_addr, ha_addr or "-",
                     len(topic_config_wrapper.topic_config_table) if topic_config_wrapper else 0)

        if broker_id != MASTER_ID:
            master_addr = addrs.get(MASTER_ID)
            master_live = self.broker_live_table.get(master_addr) if master_addr else None
            if master_live is not None:
                return RegisterBrokerResult(master_addr, master_live.ha_server_addr, prev is None)
        return RegisterBrokerResult(first_registration=prev is None)

    def _apply_topic_table(self, broker_name: str, table: dict[str, TopicConfig], replace: bool) -> None:
        if replace:
            for topic in [t for t, qds in self.topic_queue_table.items() if broker_name in qds and t not in table]:
                self._remove_queue_data(topic, broker_name)
        for topic, tc in table.items():
            qds = self.topic_queue_table.setdefault(topic, {})
            if replace or broker_name not in qds:
                qds[broker_name] = QueueData(broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm,
                                             tc.topic_sys_flag)

    def _remove_queue_data(self, topic: str, broker_name: str) -> None:
        qds = self.topic_queue_table.get(topic)
        if qds is None:
            return
        qds.pop(broker_name, None)
        if not qds:
            del self.topic_queue_table[topic]

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        live = self.broker_live_table.get(broker_addr)
        return live is None or live.data_version != data_version

    def query_broker_data_version(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return None if live is None else dataclasses.replace(live.data_version)

    def update_broker_info_update_timestamp(self, broker_addr: str, now_ms: int) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update_ms = now_ms

    # == removal =====================================================================================
    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> bool:
        """A broker leaving on purpose; False when it was not registered."""
        live = self.broker_live_table.get(broker_addr)
        if live is not None and live.broker_name == broker_name:
            self._remove_broker_addr(broker_addr)
        else:  # not live under this name: at most a leftover address in its group
            broker_data = self.broker_addr_table.get(broker_name)
            if broker_data is None or broker_addr not in broker_data.broker_addrs.values():
                return False
            self._remove_addr_from_group(broker_name, broker_data, broker_addr)
        log.info("broker unregistered: %s/%s id %d at %s", cluster, broker_name, broker_id, broker_addr)
        return True

    def scan_not_active_broker(self, now_ms: int) -> list[BrokerLiveInfo]:
        """Drop every broker silent for longer than its expiry time; returns the dropped ones."""
        expired = [live for live in self.broker_live_table.values()
                   if now_ms - live.last_update_ms > (live.timeout_ms or self.broker_channel_expired_time)]
        for live in expired:
            log.warning("broker dropped: %s/%s id %d at %s, not heard from for %d ms", live.cluster,
                        live.broker_name, live.broker_id, live.broker_addr, now_ms - live.last_update_ms)
            self._remove_broker_addr(live.broker_addr)
        return expired

    def on_connection_closed(self, conn_key: Hashable) -> list[BrokerLiveInfo]:
        """Drop every broker that registered over the connection ``conn_key``; returns them."""
        gone = [live for live in self.broker_live_table.values() if live.conn_key == conn_key]
        for live in gone:
            log.warning("broker dropped: %s/%s id %d at %s, its connection closed", live.cluster, live.broker_name,
                        live.broker_id, live.broker_addr)
            self._remove_broker_addr(live.broker_addr)
        return gone

    def _remove_broker_addr(self, broker_addr: str) -> None:
        """Forget an address everywhere (by address, not id, so no stale id can outlive its live entry)."""
        self.broker_live_table.pop(broker_addr, None)
        for name, broker_data in list(self.broker_addr_table.items()):
            self._remove_addr_from_group(name, broker_data, broker_addr)

    def _remove_addr_from_group(self, broker_name: str, broker_data: BrokerData, broker_addr: str) -> None:
        addrs = broker_data.broker_addrs
        for bid in [bid for bid, a in addrs.items() if a == broker_addr]:
            del addrs[bid]
        if not addrs:
            self._remove_broker_name(broker_name, set(self.cluster_addr_table))

    def _remove_broker_name(self, broker_name: str, clusters: set[str]) -> None:
        self.broker_addr_table.pop(broker_name, None)
        for cluster in clusters:
            names = self.cluster_addr_table.get(cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster]
        for topic in [t for t, qds in self.topic_queue_table.items() if broker_name in qds]:
            self._remove_queue_data(topic, broker_name)

    # == queries =====================================================================================
    def pick_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic`` (copies, sorted by broker name), or None when no broker serves it."""
        qds = self.topic_queue_table.get(topic)
        if not qds:
            return None
        broker_datas = [BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs))
                        for name in sorted(qds) if (b := self.broker_addr_table.get(name)) is not None]
        if not broker_datas:
            return None
        return TopicRouteData([dataclasses.replace(qds[name]) for name in sorted(qds)], broker_datas)

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo({n: BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs))
                            for n, b in self.broker_addr_table.items()},
                           {c: set(names) for c, names in self.cluster_addr_table.items()})

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(t for t, qds in self.topic_queue_table.items() if not names.isdisjoint(qds))

    def system_topics(self) -> tuple[list[str], str | None]:
        """Cluster and broker names (each is a topic on its brokers), and one broker address to ask."""
        topics: set[str] = set()
        for cluster, names in self.cluster_addr_table.items():
            topics.add(cluster)
            topics.update(names)
        addr = next((b.select_addr() for b in self.broker_addr_table.values() if b.broker_addrs), None)
        return sorted(topics), addr

    # == admin =======================================================================================
    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """Forget ``topic`` (only its queues on ``cluster``'s brokers when a cluster is given)."""
        if not cluster:
            self.topic_queue_table.pop(topic, None)
            return
        for name in self.cluster_addr_table.get(cluster, set()):
            self._remove_queue_data(topic, name)

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        """Make every topic of ``broker_name`` read-only (until its topic table changes); returns the count."""
        return self._set_write_perm(broker_name, wipe=True)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        return self._set_write_perm(broker_name, wipe=False)

    def _set_write_perm(self, broker_name: str, wipe: bool) -> int:
        count = 0
        for qds in self.topic_queue_table.values():
            qd = qds.get(broker_name)
            if qd is not None:
                qd.perm = qd.perm & ~PERM_WRITE if wipe else PERM_READ | PERM_WRITE
                count += 1
        return count
