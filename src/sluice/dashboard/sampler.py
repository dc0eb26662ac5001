"""What the overview charts and alerts read: every broker's runtime info sampled every few seconds (rates from its
counters), a few minutes of it kept; and the consumer groups' table (lag, consume rate, clients), refreshed in the
background because it costs a request per group and broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.client.admin import Admin, AdminError
from sluice.common.errors import ClientError
from sluice.common.sysflag import PERM_READ, PERM_WRITE
from sluice.remoting.errors import RemotingError

log = logging.getLogger(__name__)

DISK_ALERT_RATIO = 0.85  # RocketMQ's forced clean-up starts here (diskSpaceCleanForciblyRatio)
LAG_ALERT_MESSAGES = 10_000
SLAVE_LAG_ALERT_BYTES = 64 * 1024 * 1024


def _float(value: Any, default: float = 0.0) -> float:
    try:
        return float(str(value).split()[0])
    except (ValueError, IndexError):
        return default


@dataclass(slots=True)
class BrokerSample:
    """One broker at one moment, as its runtime info says."""

    name: str
    addr: str
    broker_id: int
    cluster: str
    at: float  # time.time()
    role: str = ""
    version: str = ""
    put_total: int = 0
    get_total: int = 0
    put_rate: float = 0.0  # messages a second since the sample before
    get_rate: float = 0.0
    stored_bytes: int = 0
    disk_ratio: float = 0.0
    back_pressure: str = "none"
    fenced: str = ""
    permission: int = PERM_READ | PERM_WRITE  # brokerPermission (a broker that does not say: both)
    slave_lag: dict[str, int] = field(default_factory=dict)  # slave id → bytes behind
    in_sync: str = ""
    ha_keys: frozenset[str] = frozenset()  # which replication keys the runtime info had
    loop_lag_ms: float = 0.0
    uptime: str = ""
    error: str = ""  # it did not answer
    mono: float = field(default_factory=time.monotonic)  # (rates from the monotonic clock: no spike at a clock step)

    @classmethod
    def from_runtime(cls, name: str, addr: str, broker_id: int, cluster: str, table: dict[str, str],
                     before: BrokerSample | None) -> BrokerSample:
        now = time.time()
        s = cls(name, addr, broker_id, cluster, now, role=table.get("brokerRole", ""),
                version=table.get("brokerVersionDesc", ""), uptime=table.get("runtime", ""))
        s.put_total = int(_float(table.get("msgPutTotalTodayNow")))
        s.get_total = int(_float(table.get("msgGetTotalTodayNow")))
        elapsed = s.mono - before.mono if before is not None else 0.0
        if before is not None and not before.error and elapsed > 0 and s.put_total >= before.put_total:
            s.put_rate = (s.put_total - before.put_total) / elapsed
            s.get_rate = max(s.get_total - before.get_total, 0) / elapsed
        else:
            s.put_rate = _float(table.get("putTps"))
            s.get_rate = _float(table.get("getTransferredTps"))
        low, high = _float(table.get("commitLogMinOffset")), _float(table.get("commitLogMaxOffset"))
        s.stored_bytes = max(int(high - low), 0)
        s.disk_ratio = _float(table.get("commitLogDiskRatio"))
        s.back_pressure = table.get("backPressure", "none") or "none"
        s.fenced = table.get("fenced", "")
        s.permission = int(_float(table.get("brokerPermission"), PERM_READ | PERM_WRITE))
        s.in_sync = table.get("haInSyncSlaves", "")
        s.ha_keys = frozenset(k for k in ("haInSyncSlaves", "haSlaveLagBytes") if k in table)
        s.loop_lag_ms = _float(table.get("eventLoopLagMaxMs"))
        for part in (table.get("haSlaveLagBytes") or "").split(","):
            sid, sep, lag = part.partition(":")
            if sep:
                s.slave_lag[sid] = int(_float(lag))
        return s

    @property
    def key(self) -> str:
        return f"{self.name}/{self.broker_id}"

    def alerts(self) -> list[str]:
        out = []
        if self.error:
            out.append(f"broker {self.name} ({self.addr}) does not answer: {self.error}")
            return out
        if self.disk_ratio >= DISK_ALERT_RATIO:
            out.append(f"broker {self.name}: its disk is {self.disk_ratio:.0%} full")
        if self.back_pressure != "none":
            out.append(f"broker {self.name} is pushing back: {self.back_pressure}")
        if self.fenced and self.fenced != "false":
            out.append(f"broker {self.name} refuses writes: {self.fenced}")
        if self.role.endswith("MASTER") and not self.permission & PERM_WRITE:
            out.append(f"broker {self.name} is read-only by its permission (brokerPermission {self.permission}): "
                       f"producers send elsewhere")
        if not self.permission & PERM_READ:
            out.append(f"broker {self.name} serves no reads by its permission (brokerPermission "
                       f"{self.permission}): consumers read nothing of it")
        in_sync = {i for i in self.in_sync.split(",") if i}
        for sid, lag in self.slave_lag.items():
            if lag >= SLAVE_LAG_ALERT_BYTES:
                out.append(f"broker {self.name}: slave {sid} is {lag:,} bytes behind")
            elif "haInSyncSlaves" in self.ha_keys and sid not in in_sync:
                out.append(f"broker {self.name}: slave {sid} is out of sync")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "addr": self.addr, "brokerId": self.broker_id, "at": self.at,
                "putRate": round(self.put_rate, 2), "getRate": round(self.get_rate, 2),
                "storedBytes": self.stored_bytes, "error": self.error}


@dataclass(slots=True)
class GroupRow:
    """A consumer group in the groups table."""

    name: str
    lag: int = 0
    retry_lag: int = 0
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)  # committed, per queue
    inflight: int = 0  # pulled, not yet committed
    ready: int = 0  # stored, not yet pulled
    queueing_ms: int = 0  # how long its oldest message not yet pulled has waited (of any queue)
    consumed: int = 0  # the sum of its committed offsets (its consume rate is the change of it)
    rate: float = 0.0
    clients: int = 0
    topics: list[str] = field(default_factory=list)  # subscribed by its online clients
    offset_topics: set[str] = field(default_factory=set)  # where it has committed offsets
    topic_lag: dict[str, int] = field(default_factory=dict)  # its lag on each of them
    consume_type: str = ""
    message_model: str = ""
    brokers: list[str] = field(default_factory=list)
    error: str = ""


class Sampler:
    """Samples in the background with the dashboard's own admin client; ``record`` also takes samples made with a
    visitor's client (ACL on, no credentials of its own)."""

    def __init__(self, admin_factory: Callable[[], Awaitable[Admin]], sample_seconds: float,
                 history_seconds: float, groups_refresh_seconds: float) -> None:
        self._admin_factory = admin_factory
        self.sample_seconds = sample_seconds
        self.groups_refresh_seconds = groups_refresh_seconds
        self._keep = max(int(history_seconds / sample_seconds), 2)
        self.history: dict[str, deque[BrokerSample]] = {}
        self.latest: dict[str, BrokerSample] = {}
        self.groups: dict[str, GroupRow] = {}
        self.groups_at = 0.0
        self.groups_error = ""
        self.refused = ""  # why sampling with the dashboard's own client is refused (ACL on, no credentials)
        self._task: asyncio.Task[None] | None = None
        self._groups_lock = asyncio.Lock()
        self._groups_started = 0.0  # when the refresh that made the table began (rates are over that span)
        self.groups_wanted_until = 0.0  # the groups table is kept fresh in the background while pages read it
        # Each group's lag, retry lag, consume rate, inflight, ready and queueing latency (ms) at each refresh of the
        # table (its charts).
        self.group_history: dict[str, deque[tuple[float, int, int, float, int, int, int]]] = {}
        self._group_keep = max(int(history_seconds / groups_refresh_seconds), 2)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="dashboard-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                admin = await self._admin_factory()
                await self.sample(admin)
                self.refused = ""
                if time.monotonic() < self.groups_wanted_until:
                    await self._refresh_groups_quietly(admin)
            except asyncio.CancelledError:
                raise
            except ClientError as exc:
                self.refused = str(exc)
            except Exception:  # (a sampling round never ends the sampler)
                log.exception("dashboard: sampling the brokers failed")
            await asyncio.sleep(self.sample_seconds)

    async def sample(self, admin: Admin, record: bool = True) -> list[BrokerSample]:
        """Every broker of every cluster (masters and slaves) now; kept in the history (``record``)."""
        info = await admin.cluster_info()
        cluster_of = {b: c for c, names in info.cluster_addr_table.items() for b in names}
        targets = [(name, bid, addr, cluster_of.get(name, ""))
                   for name, data in sorted(info.broker_addr_table.items())
                   for bid, addr in sorted(data.broker_addrs.items())]

        async def one(name: str, bid: int, addr: str, cluster: str) -> BrokerSample:
            before = self.latest.get(f"{name}/{bid}")
            try:
                table = await asyncio.wait_for(admin.broker_runtime_info(addr), 5)
            except (TimeoutError, AdminError, RemotingError, OSError) as exc:
                return BrokerSample(name, addr, bid, cluster, time.time(), error=str(exc) or type(exc).__name__)
            return BrokerSample.from_runtime(name, addr, bid, cluster, table, before)

        samples = list(await asyncio.gather(*(one(*t) for t in targets)))
        if record:
            self.record(samples)
        return samples

    def record(self, samples: list[BrokerSample]) -> None:
        live = set()
        for s in samples:
            live.add(s.key)
            before = self.latest.get(s.key)
            if before is not None and s.mono - before.mono < self.sample_seconds / 2:
                continue  # (a visitor's fresh sample right after the background one: not a point of its own)
            self.latest[s.key] = s
            self.history.setdefault(s.key, deque(maxlen=self._keep)).append(s)
        for gone in set(self.latest) - live:  # a broker no longer registered
            self.latest.pop(gone, None)
            self.history.pop(gone, None)

    def alerts(self, groups: bool = True) -> list[str]:
        """The brokers' alerts, and (``groups``) the lagging groups' from a fresh groups table."""
        out = [a for s in self.latest.values() for a in s.alerts()]
        if groups and self.groups_fresh:
            out.extend(f"consumer group {g.name} is {g.lag:,} messages behind" for g in self.groups.values()
                       if g.lag >= LAG_ALERT_MESSAGES)
        return out

    async def _refresh_groups_quietly(self, admin: Admin) -> None:
        """A background refresh: a failure is said on the groups page (and logged once), the last table kept."""
        try:
            await self.refresh_groups(admin)
        except (ClientError, RemotingError, OSError, TimeoutError) as exc:
            if not self.groups_error:
                log.warning("dashboard: the groups table could not be made: %s", exc)
            self.groups_error = str(exc) or type(exc).__name__
        else:
            self.groups_error = ""

    @property
    def groups_fresh(self) -> bool:
        """The table is young enough to show as current (a few refresh intervals)."""
        return bool(self.groups_at) and time.monotonic() - self.groups_at < 3 * self.groups_refresh_seconds

    async def groups_for(self, own: Admin, *, keep_fresh: bool = True) -> dict[str, GroupRow]:
        """The shared groups table (made with the dashboard's own client ``own``, never a visitor's): the one the
        background keeps fresh while pages that list groups are read (``keep_fresh``), made now when it is
        missing or stale."""
        if keep_fresh:
            self.groups_wanted_until = time.monotonic() + 60
        if not self.groups_fresh:
            await self.refresh_groups(own)
        return self.groups

    async def fresh_groups(self, admin: Admin) -> dict[str, GroupRow]:
        """The groups table made now with ``admin`` and kept nowhere (a visitor who may not see the shared one)."""
        return await self._groups(admin, {}, time.monotonic())

    async def refresh_groups(self, admin: Admin, *, max_age: float | None = None) -> dict[str, GroupRow]:
        """The groups table, made again when older than ``max_age`` (default: the refresh interval)."""
        age = self.groups_refresh_seconds if max_age is None else max_age
        if time.monotonic() - self.groups_at < age and self.groups_at:
            return self.groups
        async with self._groups_lock:
            if time.monotonic() - self.groups_at < age and self.groups_at:
                return self.groups
            started = time.monotonic()
            self.groups = await self._groups(admin, self.groups, started)
            self.groups_at = time.monotonic()
            self._groups_started = started
            self._record_groups(self.groups)
        return self.groups

    def _record_groups(self, rows: dict[str, GroupRow]) -> None:
        now = time.time()
        for name, row in rows.items():
            if not row.error:
                self.group_history.setdefault(name, deque(maxlen=self._group_keep)).append(
                    (now, row.lag, row.retry_lag, row.rate, row.inflight, row.ready, row.queueing_ms))
        for gone in set(self.group_history) - set(rows):  # (deleted groups: their history goes with them)
            del self.group_history[gone]

    async def _groups(self, admin: Admin, before: dict[str, GroupRow], started: float) -> dict[str, GroupRow]:
        infos = await admin.list_groups()
        rows: dict[str, GroupRow] = {}
        sem = asyncio.Semaphore(32)

        async def progress(row: GroupRow) -> None:
            async with sem:
                try:
                    p = await admin.group_progress(row.name)
                except (AdminError, ClientError, RemotingError, OSError) as exc:
                    if "has no committed offsets" not in str(exc):
                        row.error = str(exc)
                    return
            for q in p.queues:
                row.offsets[(q.topic, q.broker_name, q.queue_id)] = max(q.consumer_offset, 0)
                row.offset_topics.add(q.topic)
                row.topic_lag[q.topic] = row.topic_lag.get(q.topic, 0) + q.lag
                if q.topic.startswith("%RETRY%"):
                    row.retry_lag += q.lag
                else:
                    row.lag += q.lag
                row.inflight += q.inflight
                row.ready += q.ready
                row.queueing_ms = max(row.queueing_ms, q.queueing_latency_ms)
                row.consumed += max(q.consumer_offset, 0)
            old = before.get(row.name)
            if old is not None and not old.error and self._groups_started:
                # Per queue both tables hold (a queue's first commit is not a burst of consumption), forward only.
                moved = sum(max(row.offsets[k] - v, 0) for k, v in old.offsets.items() if k in row.offsets)
                row.rate = moved / max(started - self._groups_started, 1e-3)

        for info in infos:
            rows[info.name] = GroupRow(info.name, clients=len(info.clients), topics=info.topics,
                                       consume_type=info.consume_type, message_model=info.message_model,
                                       brokers=info.brokers)
        await asyncio.gather(*(progress(r) for r in rows.values()))
        return rows
