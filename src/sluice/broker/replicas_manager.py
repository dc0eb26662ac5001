"""Controller mode: who is master of a broker group, kept in etcd (RocketMQ 5's ReplicasManager, with etcd as
the controller; docs/ha.md § Failover).

The group's state lives under ``/sluice/<cluster>/<brokerName>/``:

- ``leader``: the master (broker id, addresses, epoch), attached to the master's etcd lease: it disappears
  when the master stops renewing it;
- ``epoch``: the last epoch granted; every new master takes the next one;
- ``syncStateSet``: the brokers that hold every acknowledged message (the master and the slaves a SYNC_MASTER
  waits for); only they may be elected, so a new master never lacks an acknowledged message.

Election is one etcd transaction: "no leader, and the epoch and the in-sync set are as I read them" → put me
as leader under my lease, the next epoch, and an in-sync set of me alone (the slaves join it again once they
have caught up). The master grows the set (locally first: its puts wait for the newcomer before etcd names
it) and shrinks it (etcd first) as its slaves catch up or fall behind, each write conditional on its still
being the leader under its lease. Fencing: a master acknowledges no write once its lease may have run out
(the deadline counts from when the renewal was sent), so a master that was paused or cut off stops on its
own before another can be elected; it learns the new leader and becomes its slave, cutting whatever it wrote
that the new master does not have.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from sluice.common.service import AsyncService
from sluice.etcd.etcd_client import Compare, EtcdClient, EtcdError, KeyValue, Op, is_tls_endpoint
from sluice.remoting.tls import TlsError, client_context

if TYPE_CHECKING:
    from sluice.broker.broker_controller import BrokerController
    from sluice.common.config import BrokerConfig

log = logging.getLogger(__name__)


class RoleHost(Protocol):
    """What the replicas manager steers (``sluice.broker.broker_runner.BrokerRunner``): the broker of the role it
    decides, restarted as master or slave."""

    config: BrokerConfig
    broker: BrokerController | None

    async def become_master(self, epoch: int, sync_state_set: set[int]) -> None: ...

    async def follow(self, address: str, ha_address: str) -> None: ...


TICK = 0.25  # seconds between looks at the group's state
FENCE_WATCH = 0.1  # seconds between looks at whether this master is fenced
JOIN_WITHIN = 2.0  # a slave joins the in-sync set once it had everything the master had this recently
GONE_AFTER = 2.0  # a member disconnected this long leaves the in-sync set (puts stop waiting for it)


def _clock() -> float:
    """Seconds that go on while the machine or VM is suspended (a lease runs out meanwhile too)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class Leader(NamedTuple):
    broker_id: int
    address: str
    ha_address: str
    epoch: int

    def to_json(self) -> bytes:
        return json.dumps({"brokerId": self.broker_id, "address": self.address, "haAddress": self.ha_address,
                           "epoch": self.epoch}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Leader:
        d = json.loads(raw)
        return cls(int(d["brokerId"]), str(d["address"]), str(d["haAddress"]), int(d["epoch"]))


def _members(kv: KeyValue | None) -> set[int] | None:
    if kv is None:
        return None
    return {int(m) for m in json.loads(kv.value)["members"]}


def _sss_value(members: set[int], epoch: int) -> bytes:
    return json.dumps({"members": sorted(members), "epoch": epoch}).encode()


class ReplicasManager(AsyncService):
    """One broker's part in its group's elections; ``await start()``, ``await stop()``."""

    def __init__(self, runner: RoleHost) -> None:
        super().__init__()
        c = runner.config
        self.runner = runner
        self.config = c
        endpoints = [e.strip() for e in c.controller_etcd_endpoints.split(";") if e.strip()]
        tls = None
        if any(is_tls_endpoint(e) for e in endpoints):
            try:
                tls = client_context(c.controller_etcd_tls_ca_path or None, c.controller_etcd_tls_cert_path or None,
                                     c.controller_etcd_tls_key_path or None)
            except (OSError, ssl.SSLError) as exc:
                raise TlsError(f"broker {c.broker_name}: controller_etcd_tls_ca_path / controller_etcd_tls_cert_path "
                               f"/ controller_etcd_tls_key_path: cannot load: {exc}") from None
        self.etcd = EtcdClient(endpoints, timeout=max(0.5, c.controller_lease_ttl / 3000), tls=tls)
        self.prefix = f"/sluice/{c.broker_cluster_name}/{c.broker_name}/".encode()
        self.broker_id = c.broker_id
        self.address = f"{c.broker_ip}:{c.listen_port}"
        self.ha_address = f"{c.broker_ip}:{c.ha_port}"
        self.ttl = max(1, c.controller_lease_ttl // 1000)
        self.lease = 0
        self.lease_valid_until = 0.0  # _clock(): no write is acknowledged past this (fencing)
        self.is_leader = False
        self.leader: Leader | None = None
        self.became_master_at = 0.0
        self._renewed_at = 0.0
        self._waiting_logged = ""
        # Members added by an etcd write whose outcome is unknown (a timeout): kept in the local set until a write
        # known to have applied replaces etcd's set, so that the local set always holds etcd's.
        self._maybe_added: set[int] = set()

    def key(self, name: str) -> bytes:
        return self.prefix + name.encode()

    # == lifecycle ===================================================================================
    async def start(self) -> None:
        await self._new_lease()
        self._spawn(self._run())
        self._spawn(self._watch_fencing())

    async def stop(self) -> None:
        await super().stop()
        self.is_leader = False
        if self.lease:
            try:  # the leader key goes with the lease: the others elect at once instead of after the TTL
                await self.etcd.lease_revoke(self.lease)
            except EtcdError as exc:
                log.info("could not revoke the lease at stop: %s", exc)
        await self.etcd.close()

    def write_guard(self) -> str:
        """Why this master may not acknowledge writes now ("" when it may)."""
        if not self.is_leader:
            return "this broker is no longer the master of its group (the controller elected another)"
        if _clock() >= self.lease_valid_until:
            return "this master could not renew its lease with the controller in time: it takes no write"
        return ""

    async def _new_lease(self) -> None:
        sent = _clock()
        lease = await self.etcd.lease_grant(self.ttl)
        self.lease = lease.id
        self._renewed_at = sent
        self.lease_valid_until = sent + lease.ttl - 0.25
        await self.etcd.put(self.key(f"replicas/{self.broker_id}"),
                            json.dumps({"address": self.address, "haAddress": self.ha_address}).encode(),
                            lease=self.lease)

    async def _keepalive(self) -> None:
        sent = _clock()
        ttl = await self.etcd.lease_keepalive(self.lease)
        if ttl <= 0:
            log.warning("the controller lease of broker %d ran out: taking a new one", self.broker_id)
            self.is_leader = False
            self.lease_valid_until = 0.0
            await self._new_lease()
            return
        self._renewed_at = sent
        self.lease_valid_until = sent + ttl - 0.25

    async def _watch_fencing(self) -> None:
        """Register with the name servers as soon as this master is fenced (or no longer is), without waiting for
        the next period: a fenced master registers its topics read-only (``BrokerController.fenced``). Apart from
        ``_run``, whose etcd calls take their whole timeout while etcd cannot be reached."""
        was = False
        while True:
            await asyncio.sleep(FENCE_WATCH)
            broker = self.runner.broker  # (None while the broker restarts in another role)
            fenced = broker is not None and broker.running and broker.fenced
            if fenced != was:
                was = fenced
                if fenced:
                    log.warning("broker %d is fenced (%s): registering its topics read-only", self.broker_id,
                                self.write_guard())
                if broker is not None:
                    broker.trigger_register()

    async def _run(self) -> None:
        while True:
            try:
                if _clock() - self._renewed_at >= self.ttl / 3:
                    await self._keepalive()
                await self._tick()
            except (EtcdError, OSError, ValueError, KeyError) as exc:
                log.warning("controller (etcd) step failed: %s", exc)
            except Exception:
                log.exception("controller step failed")
            await asyncio.sleep(TICK)

    # == one look at the group =======================================================================
    async def _tick(self) -> None:
        kvs = {kv.key[len(self.prefix):].decode(): kv for kv in await self.etcd.get_prefix(self.prefix)}
        leader_kv = kvs.get("leader")
        if leader_kv is None:
            self.is_leader = False
            members = _members(kvs.get("syncStateSet"))
            if members is None or self.broker_id in members:
                await self._elect(kvs)
            else:
                self._log_waiting(f"no master, and this broker is not in the in-sync set {sorted(members)}: "
                                  "waiting for one of them")
            return
        leader = Leader.from_json(leader_kv.value)
        self.leader = leader
        if leader.broker_id == self.broker_id:
            if leader_kv.lease != self.lease:  # a leader key of this broker's last life: wait for it to expire
                self.is_leader = False
                self._log_waiting("a leader key of this broker's earlier run is still there: waiting for its lease")
                return
            self.is_leader = True
            broker = self.runner.broker
            if broker is None or not broker.role.is_master:
                await self._become_master(leader.epoch)
                return
            await self._maintain_sync_state_set(kvs, leader_kv)
            return
        self.is_leader = False
        await asyncio.shield(self.runner.follow(leader.address, leader.ha_address))

    def _log_waiting(self, why: str) -> None:
        if why != self._waiting_logged:
            log.info("broker %d: %s", self.broker_id, why)
            self._waiting_logged = why

    async def _elect(self, kvs: dict[str, KeyValue]) -> None:
        epoch_kv, sss_kv = kvs.get("epoch"), kvs.get("syncStateSet")
        if _clock() >= self.lease_valid_until:
            return
        broker = self.runner.broker
        local = broker.epochs.last_epoch if broker is not None and broker.epochs is not None else 0
        epoch = max(int(epoch_kv.value) if epoch_kv else 0, local) + 1
        leader = Leader(self.broker_id, self.address, self.ha_address, epoch)

        def unchanged(kv: KeyValue | None, name: str) -> Compare:
            return Compare.mod_revision(self.key(name), "=", kv.mod_revision) if kv else \
                Compare.version(self.key(name), "=", 0)

        r = await self.etcd.txn(
            [Compare.version(self.key("leader"), "=", 0), unchanged(epoch_kv, "epoch"),
             unchanged(sss_kv, "syncStateSet")],
            [Op.put(self.key("leader"), leader.to_json(), lease=self.lease),
             Op.put(self.key("epoch"), str(epoch).encode()),
             Op.put(self.key("syncStateSet"), _sss_value({self.broker_id}, epoch))])
        if not r.succeeded:
            return
        log.warning("broker %d elected master of %s, epoch %d", self.broker_id, self.config.broker_name, epoch)
        self.is_leader = True
        self.leader = leader
        await self._become_master(epoch)

    async def _become_master(self, epoch: int) -> None:
        """Restart as master; if that fails, give the leadership up (the lease goes, and the leader key with it)
        so that another member can be elected, rather than hold it with no master running."""
        self._maybe_added.clear()
        try:
            await asyncio.shield(self.runner.become_master(epoch, {self.broker_id}))
        except Exception:
            log.exception("broker %d could not start as master: giving the leadership up", self.broker_id)
            self.is_leader = False
            self.lease_valid_until = 0.0
            try:
                await self.etcd.lease_revoke(self.lease)
            finally:
                await self._new_lease()
            return
        self.became_master_at = _clock()

    async def _maintain_sync_state_set(self, kvs: dict[str, KeyValue], leader_kv: KeyValue) -> None:
        broker = self.runner.broker
        ha = broker.ha_service if broker is not None else None
        if ha is None:
            return
        sss_kv = kvs.get("syncStateSet")
        members = _members(sss_kv) or {self.broker_id}
        now = _clock()
        mono = time.monotonic()  # (the HA service's times)
        limit = self.config.ha_max_time_slave_not_catchup / 1000
        want = set(members)
        for b in members - {self.broker_id}:
            s = ha.slaves.get(b)
            if s is None:
                gone = now - self.became_master_at > GONE_AFTER
            elif not s.connected:
                gone = mono - s.last_heard > GONE_AFTER
            else:
                gone = mono - max(s.caught_up_at, s.connected_at) > limit  # not caught up for that long
            if gone:
                want.discard(b)
        joining: set[int] = set()
        for s in ha.slaves.values():
            # A newcomer must hold every message acknowledged through the slaves so far (a SYNC_MASTER's confirm
            # offset) and every message consumers may have seen (dispatched), and have had everything the master
            # had a moment ago. One that has all but the last of what was dispatched joins the local set first:
            # nothing more is dispatched (nor, on a SYNC_MASTER, acknowledged) until it has it, and etcd names it
            # at the next look.
            if (s.connected and s.broker_id not in want and mono - s.caught_up_at < JOIN_WITHIN
                    and s.ack_offset >= ha.confirm_offset):
                if s.ack_offset >= ha.store.dispatched_offset:
                    want.add(s.broker_id)
                else:
                    joining.add(s.broker_id)
        if want == members:
            ha.set_sync_state_set(members | self._maybe_added | joining)
            return
        added = want - members
        # Grown here first: puts wait for the newcomers (checked just above, with no await since) before etcd
        # names them; shrunk in etcd first.
        ha.set_sync_state_set(members | added | self._maybe_added | joining)
        epoch = self.leader.epoch if self.leader else 0
        sss_unchanged = (Compare.mod_revision(self.key("syncStateSet"), "=", sss_kv.mod_revision) if sss_kv
                         else Compare.version(self.key("syncStateSet"), "=", 0))
        try:
            r = await self.etcd.txn([Compare.value(self.key("leader"), "=", leader_kv.value),
                                     Compare.lease(self.key("leader"), "=", self.lease), sss_unchanged],
                                    [Op.put(self.key("syncStateSet"), _sss_value(want, epoch))])
        except EtcdError:
            self._maybe_added |= added  # it may yet apply: they stay in the local set until a known write
            raise
        if r.succeeded:
            self._maybe_added.clear()
            ha.set_sync_state_set(want | joining)
            log.info("in-sync set of %s: %s (was %s)", self.config.broker_name, sorted(want), sorted(members))
        else:
            ha.set_sync_state_set(members | self._maybe_added | joining)

    def describe(self) -> dict[str, Any]:
        return {"brokerId": self.broker_id, "leader": self.leader._asdict() if self.leader else None,
                "isLeader": self.is_leader}
