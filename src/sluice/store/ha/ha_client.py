"""The slave's side of replication (RocketMQ HAClient): copy the master's log into this store.

Connect to the master's HA port, say where this log ends and which epochs it holds, and take the master's
bytes from where the two logs agree, storing them exactly as they came (``MessageStore.append_replicated``
checks and dispatches every record). When the master says this log holds bytes it does not (this broker was
a master that wrote what nobody copied), ``on_cut`` is called with the offset to cut the log at: the broker
restarts its store cut there, and connects again. Reports go back after every read (flushed first when the
store flushes synchronously) and every ``ha_send_heartbeat_interval``; a master silent for
``ha_housekeeping_interval`` is left, and the connection made again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from sluice.common.config import BrokerConfig
from sluice.common.errors import MessageFormatError
from sluice.common.service import AsyncService
from sluice.remoting.tls import inner_client_tls
from sluice.store.commit_log import CommitLog, CommitLogClosed, ReplicationGap
from sluice.store.ha.epoch_file import EpochEntry, EpochFile, consistent_point
from sluice.store.ha.ha_protocol import (
    Handshake,
    HAProtocolError,
    Refuse,
    SlaveReader,
    Transfer,
    Welcome,
    encode_auth,
    encode_handshake,
    encode_report,
)

log = logging.getLogger(__name__)

# The largest transfer a slave takes: the largest batch a master may be configured to send.
MAX_TRANSFER = 64 * 1024 * 1024
RETRY_INTERVAL = 1.0


class SlaveStore(Protocol):
    """What a slave's HA client uses of its store: the log it appends the master's bytes to, and (controller
    mode) the bound that holds records until the master confirms them."""

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def sync_flush(self) -> bool: ...

    replica_bound: Callable[[], int | None] | None

    async def append_replicated_async(self, offset: int, data: memoryview | bytes) -> int: ...

    def request_drain(self) -> None: ...


class HAClient(AsyncService):
    """Keep this slave's log a copy of its master's; ``start()``, ``await stop()``."""

    def __init__(self, store: SlaveStore, epochs: EpochFile, config: BrokerConfig,
                 master_address: Callable[[], str], on_cut: Callable[[int], Awaitable[None]]) -> None:
        super().__init__()
        self.store = store
        self.epochs = epochs
        self.config = config
        self.master_address = master_address
        self.on_cut = on_cut
        self.tls = inner_client_tls(config, f"broker {config.broker_id}'s HA client")  # tls_enable
        # Called when the master could not be reached or left: the broker asks the name server again where
        # its master is (a restarted master may have new addresses).
        self.on_lost: Callable[[], None] | None = None
        self.connected_to = ""
        self.master_epoch = 0
        self.master_max_offset = 0  # as the master last said (lag = this − our end, roughly)
        # How far the master said its log may be seen (its confirm offset). In controller mode records past it are
        # held, not dispatched, on this slave too (nothing until the master has said); without a controller a
        # slave serves what it holds, as RocketMQ's does.
        self.master_confirm = 0
        self.gated = bool(config.controller_etcd_endpoints)
        if self.gated:
            store.replica_bound = lambda: self.master_confirm
        self.last_error = ""
        self._master_epochs: list[EpochEntry] = []
        self._running = False

    def start(self) -> None:
        self._running = True
        self._spawn(self._run())

    async def stop(self) -> None:
        self._running = False
        await super().stop()

    async def reconnect(self) -> None:
        """Leave the current master (a new one was named) and connect again."""
        await self.stop()
        self.start()

    async def _run(self) -> None:
        while self._running:
            address = self.master_address()
            if not address:  # not known yet: look again soon
                await asyncio.sleep(0.1)
                continue
            try:
                cut = await self._session(address)
            except (OSError, asyncio.IncompleteReadError, HAProtocolError, TimeoutError, ReplicationGap,
                    MessageFormatError, CommitLogClosed) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("replication from %s stopped: %s", address, self.last_error)
                cut = None
                if self.on_lost is not None:
                    self.on_lost()
            finally:
                self.connected_to = ""
            if cut is not None:
                self._running = False
                await self.on_cut(cut)
                return
            if self._running:
                await asyncio.sleep(RETRY_INTERVAL)

    async def _session(self, address: str) -> int | None:
        """One connection; returns where to cut the log when the master says so, else None when it ends."""
        host, _, port = address.rpartition(":")
        async with asyncio.timeout(self.config.remoting.connect_timeout_millis / 1000):
            reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 16, ssl=self.tls,
                                                           server_hostname=host if self.tls else None)
        try:
            store = self.store
            inner = self.config.inner_client_authentication_credentials
            if inner is not None and self.config.authentication_enabled:  # (its master's setting, as all of ACL's)
                writer.write(encode_auth(inner.access_key, inner.secret_key,
                                         time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())))
            writer.write(encode_handshake(Handshake(self.config.broker_id, store.commit_log.max_offset,
                                                    self.epochs.entries)))
            frames = SlaveReader(MAX_TRANSFER)
            housekeeping = self.config.ha_housekeeping_interval / 1000
            heartbeat = self.config.ha_send_heartbeat_interval / 1000
            welcomed = False
            last_heard = last_report = time.monotonic()
            while self._running:
                try:
                    async with asyncio.timeout(heartbeat):
                        data = await reader.read(1 << 20)
                except TimeoutError:
                    data = None
                if data == b"":
                    raise ConnectionResetError("the master closed the connection")
                now = time.monotonic()
                if data:
                    last_heard = now
                elif now - last_heard >= housekeeping:
                    raise TimeoutError(f"the master was silent for {housekeeping:.0f} s")
                stored = False
                for frame in frames.feed(data or b""):
                    if isinstance(frame, Refuse):
                        raise HAProtocolError(f"the master refused this slave: {frame.reason}")
                    if isinstance(frame, Welcome):
                        if welcomed:
                            raise HAProtocolError("a second welcome")
                        welcomed = True
                        cut = await self._welcome(frame, address)
                        if cut is not None:
                            return cut
                        stored = True  # report at once: the master learns where this slave stands
                    elif not welcomed:
                        raise HAProtocolError("a transfer before the welcome")
                    else:
                        if frame.data:
                            await self._store(frame)
                            stored = True
                        if frame.confirm != self.master_confirm:
                            self.master_confirm = frame.confirm
                            if self.gated:
                                store.request_drain()
                if len(self.epochs.entries) < len(self._master_epochs):  # this log reached a new epoch's start
                    await self._note_epochs(self.store.commit_log.max_offset)
                if welcomed and (stored or now - last_report >= heartbeat):
                    await self._report(writer)
                    last_report = now
            return None
        finally:
            writer.close()

    async def _welcome(self, w: Welcome, address: str) -> int | None:
        store = self.store
        end = store.commit_log.max_offset
        for a, b in zip(w.epochs, w.epochs[1:], strict=False):
            if not (a.epoch < b.epoch and a.start_offset <= b.start_offset):
                raise HAProtocolError(f"the master's epochs are out of order ({tuple(a)} then {tuple(b)})")
        if end and w.cut_at != (expected := self._cut_point(w, end)):
            raise HAProtocolError(f"the master says to cut this log at {w.cut_at}, but by the epochs it is "
                                  f"{expected}: not cutting")
        if 0 <= w.cut_at < end:
            log.warning("this slave's log holds %d bytes from offset %d that master %s does not: cutting it there",
                        end - w.cut_at, w.cut_at, address)
            return w.cut_at
        if w.start_offset != end and not (end == 0 and not store.commit_log.queue.files):
            raise ReplicationGap(f"the master starts at {w.start_offset}, this log ends at {end}")
        self.connected_to = address
        self.master_epoch = w.epoch
        self.master_max_offset = w.master_max_offset
        self._master_epochs = list(w.epochs)
        await self._note_epochs(w.start_offset)
        log.info("replicating from %s (epoch %d) from offset %d; the master's log ends at %d", address, w.epoch,
                 w.start_offset, w.master_max_offset)
        return None

    def _cut_point(self, w: Welcome, end: int) -> int:
        """Where this log must be cut by its epochs and the master's (-1: nowhere), as the master reckons it."""
        point = consistent_point(self.epochs.entries, end, w.epochs, w.master_max_offset)
        return point if 0 <= point < end else -1

    async def _note_epochs(self, end: int) -> None:
        """This log now holds the master's epochs that began at or before ``end`` (the file written off the
        loop)."""
        entries = [e for e in self._master_epochs if e.start_offset <= end]
        await asyncio.get_running_loop().run_in_executor(None, self.epochs.replace, entries)

    async def _store(self, t: Transfer) -> None:
        end = await self.store.append_replicated_async(t.offset, t.data)
        self.master_max_offset = max(self.master_max_offset, end)

    async def _report(self, writer: asyncio.StreamWriter) -> None:
        store = self.store
        if store.sync_flush:
            # The master counts this slave's copy as durable only once it is on disk (off the loop).
            acked = await asyncio.get_running_loop().run_in_executor(None, store.commit_log.queue.flush)
        else:
            acked = store.commit_log.max_offset
        writer.write(encode_report(acked))
        await writer.drain()
