"""One broker process: the BrokerController of its current role, restarted in place when that role changes
(a slave made master, a master made slave) or when its log must be cut to agree with a new master.

A role change goes through a stop and a start of the broker, as a restart would: every service loads its
state from the store the same way, so a promoted slave picks up its master's delayed messages, transactions,
timers and POP checkpoints from the log and the metadata it copied. Without a controller the role is the
configured one; with one (``controller_etcd_endpoints``) the ``ReplicasManager`` decides it.
"""

from __future__ import annotations

import asyncio
import logging

from sluice.broker.broker_controller import BrokerController
from sluice.broker.replicas_manager import ReplicasManager
from sluice.common.config import BrokerConfig, BrokerRole
from sluice.common.config_loader import ConfigError

log = logging.getLogger(__name__)


class BrokerRunner:
    """``await start()``, ``await stop()``; ``broker`` is the current BrokerController (None while switching)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker: BrokerController | None = None
        self.replicas: ReplicasManager | None = None
        self._lock = asyncio.Lock()
        self._stopping = False
        self._pending: set[asyncio.Task[None]] = set()
        c = config
        if c.controller_etcd_endpoints:
            if c.broker_id < 1:
                raise ConfigError("broker_id: in controller mode every broker of a group needs its own id of 1 "
                                  "or more (the master registers as 0)")
            if c.listen_port == 0 or c.ha_port == 0:
                raise ConfigError("listen_port: in controller mode a broker needs a fixed port (and HA port): "
                                  "the controller tells the others where the master is")
            # The flavour of master this broker is when elected.
            self.master_role = BrokerRole.ASYNC_MASTER if c.broker_role is BrokerRole.ASYNC_MASTER \
                else BrokerRole.SYNC_MASTER
        else:
            self.master_role = c.broker_role
            if c.broker_role is BrokerRole.SLAVE and c.broker_id < 1:
                raise ConfigError("broker_id: a slave needs an id of 1 or more (0 is the master's)")
            if c.broker_role.is_master and c.broker_id != 0:
                raise ConfigError(f"broker_id: a master's id is 0, not {c.broker_id} (or set broker_role = SLAVE)")

    @property
    def port(self) -> int:
        return self.broker.port if self.broker is not None else 0

    async def start(self) -> BrokerRunner:
        if self.config.controller_etcd_endpoints:
            # Until the controller says otherwise, a slave: serving reads, taking no writes.
            await self._start(BrokerRole.SLAVE)
            self.replicas = ReplicasManager(self)
            await self.replicas.start()
        else:
            await self._start(self.config.broker_role)
        return self

    async def stop(self) -> None:
        self._stopping = True
        # A restart under way finishes (a half-made one would leave a store open); one not begun is skipped.
        await asyncio.gather(*self._pending, return_exceptions=True)
        if self.replicas is not None:
            await self.replicas.stop()
        async with self._lock:
            if self.broker is not None:
                await self.broker.stop()
                self.broker = None

    async def __aenter__(self) -> BrokerRunner:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _start(self, role: BrokerRole, truncate_at: int | None = None, epoch: int | None = None,
                     sync_state_set: set[int] | None = None, master: tuple[str, str] | None = None) -> None:
        b = BrokerController(self.config.replace(broker_role=role))
        b.on_cut = self._on_cut
        if self.replicas is not None:
            b.write_guard = self.replicas.write_guard
            b.initial_sync_state_set = sync_state_set
        if master is not None:
            b.master_address, b.master_ha_address = master
        await b.start(truncate_at, epoch)
        self.broker = b

    async def _restart(self, role: BrokerRole, truncate_at: int | None = None, epoch: int | None = None,
                       sync_state_set: set[int] | None = None, master: tuple[str, str] | None = None,
                       expect: BrokerController | None = None) -> None:
        """Stop the broker and start it again as ``role``; with ``expect``, only if that is still the broker (a
        cut asked for by a broker that has been replaced since is moot)."""
        async with self._lock:
            if self._stopping or (expect is not None and self.broker is not expect):
                return
            old = self.broker
            if master is None and old is not None and old.master_ha_address:
                master = (old.master_address, old.master_ha_address)
            if old is not None:
                await old.stop()
            self.broker = None
            log.warning("broker %s/%d restarting as %s%s", self.config.broker_name, self.config.broker_id,
                        role.value, f", its log cut at {truncate_at}" if truncate_at is not None else "")
            await self._start(role, truncate_at, epoch, sync_state_set, master)

    async def become_master(self, epoch: int, sync_state_set: set[int]) -> None:
        await self._restart(self.master_role, epoch=epoch, sync_state_set=sync_state_set)

    async def follow(self, address: str, ha_address: str) -> None:
        """Be a slave of the master at ``address`` (HA at ``ha_address``)."""
        b = self.broker
        if b is not None and not b.role.is_master:
            if (b.master_address, b.master_ha_address) != (address, ha_address):
                b.master_address, b.master_ha_address = address, ha_address
                if b.ha_client is not None:
                    await b.ha_client.reconnect()
            return
        await self._restart(BrokerRole.SLAVE, master=(address, ha_address))

    async def _on_cut(self, offset: int) -> None:
        b = self.broker
        role = b.role if b is not None else BrokerRole.SLAVE
        task = asyncio.get_running_loop().create_task(self._restart(role, truncate_at=offset, expect=b))
        self._pending.add(task)
        task.add_done_callback(self._restarted)

    def _restarted(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("broker %s/%d could not restart with its log cut: %s; it serves nothing until it is started "
                      "again", self.config.broker_name, self.config.broker_id, task.exception(),
                      exc_info=task.exception())
