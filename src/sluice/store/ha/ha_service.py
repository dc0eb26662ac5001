"""The master's side of replication (RocketMQ HAService / HAConnection / GroupTransferService).

Each slave connects to the master's HA port, says where its log ends and which epochs it holds; the master
answers where the two logs agree (the slave cuts its log there if it holds more) and streams its log from
there, ``ha_transfer_batch_size`` bytes a frame, never across a segment's end or an epoch's start. The slave
reports how far it has stored; a SYNC_MASTER's puts wait for those reports (``wait_for_replicas``): one wait
serves every put of a group, as a group commit does.

Which slaves a put waits for: without a controller, any one connected slave (RocketMQ's HA); with one, every
slave of the in-sync replica set (``sync_state_set``) the controller keeps, so that any of them can be made
master without losing an acknowledged message.
"""

from __future__ import annotations

import asyncio
import calendar
import heapq
import logging
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sluice.common.config import BrokerConfig, MessageStoreConfig
from sluice.remoting.tls import HANDSHAKE_TIMEOUT, ServerTls, TlsAcceptor, bind_socket
from sluice.store.commit_log import CommitLog
from sluice.store.dispatcher import MessageArrivalListener
from sluice.store.ha.epoch_file import EpochFile, consistent_point
from sluice.store.ha.ha_protocol import (
    Auth,
    Handshake,
    HAProtocolError,
    HAVersionError,
    MasterReader,
    Report,
    Welcome,
    auth_matches,
    encode_refuse,
    encode_transfer_header,
    encode_welcome,
)
from sluice.store.put_path import ReplicaOutcome
from sluice.store.results import PutMessageStatus

log = logging.getLogger(__name__)

HA_AUTH_MAX_SKEW = 15 * 60.0  # s between a slave's sign-in time and this master's clock


class MasterStore(Protocol):
    """What the master's HA service uses of its store: the log it serves, how far it is dispatched, and the
    listeners that tell it the log grew."""

    @property
    def config(self) -> MessageStoreConfig: ...

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def dispatched_offset(self) -> int: ...

    @property
    def arrival_listeners(self) -> list[MessageArrivalListener]: ...

    @property
    def append_listeners(self) -> list[Callable[[], None]]: ...

    def request_drain(self) -> None: ...


@dataclass(slots=True)
class SlaveState:
    """What the master knows of one slave."""

    broker_id: int
    address: str
    ack_offset: int = 0
    connected: bool = True
    # When the slave last had everything the master had (monotonic seconds; 0: never): it is in sync while
    # this is recent (controller mode).
    caught_up_at: float = 0.0
    last_heard: float = field(default_factory=time.monotonic)
    connected_at: float = field(default_factory=time.monotonic)
    _sent_max: int = -1  # the master's log end when the last transfer went
    _sent_at: float = 0.0


class _Waiter:
    __slots__ = ("callback", "deadline", "done", "end")

    def __init__(self, end: int, deadline: float, callback: Callable[[ReplicaOutcome], None]) -> None:
        self.end = end
        self.deadline = deadline
        self.callback = callback
        self.done = False

    def __lt__(self, other: _Waiter) -> bool:
        return self.end < other.end


class HAService:
    """Serve the slaves of this master; ``await start()``, ``await stop()``; the store's ``replication`` on a
    SYNC_MASTER."""

    def __init__(self, store: MasterStore, epochs: EpochFile, config: BrokerConfig,
                 tls: ServerTls | None = None) -> None:
        self.store = store
        self.tls = tls  # the broker's (tls_server_mode): None is plaintext only
        self._acceptor: TlsAcceptor | None = None
        self.epochs = epochs
        self.config = config
        self.broker_id = config.broker_id
        self.slaves: dict[int, SlaveState] = {}
        self._writers_by_slave: dict[int, asyncio.StreamWriter] = {}
        # The end of the last put answered OK through the slaves: a slave joins the in-sync set only once it has
        # this much of the log (it has every acknowledged message).
        self.confirm_offset = 0
        # Controller mode: the brokers of the in-sync replica set (this one too); None: any slave will do.
        self.sync_state_set: set[int] | None = None
        self.port = 0
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._wakes: set[asyncio.Event] = set()
        self._by_end: list[_Waiter] = []
        self._by_deadline: deque[_Waiter] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def epoch(self) -> int:
        return self.epochs.last_epoch

    # == lifecycle ===================================================================================
    async def start(self, host: str, port: int) -> int:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self.tls is not None:
            loop = self._loop

            async def connected(sock: socket.socket, ctx: ssl.SSLContext | None) -> None:
                reader = asyncio.StreamReader(limit=1 << 16)
                protocol = asyncio.StreamReaderProtocol(reader, self._serve)
                await loop.connect_accepted_socket(lambda: protocol, sock, ssl=ctx,
                                                   ssl_handshake_timeout=HANDSHAKE_TIMEOUT if ctx else None)

            listening = bind_socket(host, port)
            self._acceptor = TlsAcceptor(self.tls, connected, f"HA port of broker {self.broker_id}", max_pending=16)
            self._acceptor.start(listening)
            self.port = listening.getsockname()[1]
        else:
            self._server = await asyncio.start_server(self._serve, host, port, limit=1 << 16)
            self.port = self._server.sockets[0].getsockname()[1]
        self.store.arrival_listeners.append(self._on_arrival)
        self.store.append_listeners.append(self._on_append)
        log.info("HA service of broker %d listening on %s:%d (epoch %d)", self.broker_id, host, self.port,
                 self.epoch)
        return self.port

    async def stop(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
            self._acceptor = None
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self._timer is not None:
            self._timer.cancel()
        for waiter in self._by_end:
            self._settle(waiter, (PutMessageStatus.FLUSH_SLAVE_TIMEOUT, "the broker is shutting down"))
        self._by_end.clear()
        self._by_deadline.clear()
        if self._on_arrival in self.store.arrival_listeners:
            self.store.arrival_listeners.remove(self._on_arrival)
        if self._on_append in self.store.append_listeners:
            self.store.append_listeners.remove(self._on_append)

    # == group transfer ==============================================================================
    def in_sync_slaves(self) -> list[SlaveState]:
        """The slaves a put may be acknowledged by now."""
        if self.sync_state_set is not None:
            return [self.slaves.get(b) or SlaveState(b, "", connected=False)
                    for b in sorted(self.sync_state_set) if b != self.broker_id]
        end = self.store.commit_log.max_offset
        return [s for s in self.slaves.values()
                if s.connected and end - s.ack_offset < self.config.ha_max_gap_not_in_sync]

    def replica_bound(self) -> int | None:
        """How far consumers may see this master's log as far as its replicas go (``MessageStore.replica_bound``):
        in controller mode, what every slave of the in-sync set holds, since any of them may be elected; None
        (no bound) when the set is this master alone, or without a controller (RocketMQ's confirm offset)."""
        if self.sync_state_set is None or not self.sync_state_set - {self.broker_id}:
            return None
        return max(0, self.replicated_offset())

    def replicated_offset(self) -> int:
        """How far the log is on the slaves a put waits for: the least of the in-sync set (controller mode),
        the most of any connected slave (otherwise); -1 when there is none."""
        slaves = self.in_sync_slaves()
        if not slaves:
            return -1
        acks = [s.ack_offset for s in slaves]
        return min(acks) if self.sync_state_set is not None else max(acks)

    def wait_for_replicas(self, end_offset: int, callback: Callable[[ReplicaOutcome], None],
                          deadline: float | None = None) -> None:
        """``callback(None)`` once the slaves a put waits for have the log up to ``end_offset``, else why not:
        FLUSH_SLAVE_TIMEOUT at ``deadline`` (the loop's clock), or ``sync_flush_timeout`` from now."""
        if not self.in_sync_slaves():
            callback((PutMessageStatus.SLAVE_NOT_AVAILABLE, "no slave is in sync with the master"))
            return
        if self.replicated_offset() >= end_offset:
            self.confirm_offset = max(self.confirm_offset, end_offset)
            callback(None)
            return
        assert self._loop is not None
        latest = self._loop.time() + self.store.config.sync_flush_timeout / 1000
        w = _Waiter(end_offset, latest if deadline is None else min(deadline, latest), callback)
        heapq.heappush(self._by_end, w)
        self._by_deadline.append(w)
        if self._timer is None:
            self._timer = self._loop.call_at(w.deadline, self._expire)
        self._wake_all()

    def wait_for_replicas_threadsafe(self, end_offset: int, callback: Callable[[ReplicaOutcome], None]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self.wait_for_replicas, end_offset, callback)

    def _settle(self, w: _Waiter, outcome: ReplicaOutcome) -> None:
        if w.done:
            return
        w.done = True
        try:
            w.callback(outcome)
        except Exception:
            log.exception("answering a replicated put failed")

    def _acked(self) -> None:
        """A slave reported (or the set changed): answer the puts its log now covers, and dispatch what it
        confirms."""
        self.store.request_drain()
        if not self._by_end:
            return
        acked = self.replicated_offset()
        while self._by_end and self._by_end[0].end <= acked:
            w = heapq.heappop(self._by_end)
            if not w.done:
                self.confirm_offset = max(self.confirm_offset, w.end)
            self._settle(w, None)

    def _expire(self) -> None:
        assert self._loop is not None
        self._timer = None
        now = self._loop.time()
        q = self._by_deadline
        expired = False
        while q and (q[0].done or q[0].deadline <= now):
            w = q.popleft()
            if not w.done:
                expired = True
                self._settle(w, (PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                                 f"no in-sync slave stored the message within {self.store.config.sync_flush_timeout}"
                                 " ms"))
        if expired:
            self._by_end = [w for w in self._by_end if not w.done]
            heapq.heapify(self._by_end)
        if q:
            self._timer = self._loop.call_at(q[0].deadline, self._expire)

    def set_sync_state_set(self, members: set[int] | None) -> None:
        """The controller changed the in-sync replica set: puts wait for its slaves from now on."""
        self.sync_state_set = None if members is None else set(members)
        self._acked()

    # == connections =================================================================================
    def _on_arrival(self, _topic: str, _queue_id: int, _offset: int) -> None:
        """Records were dispatched: the slaves hear the new confirm offset."""
        self._on_append()

    def _on_append(self) -> None:
        """The log grew (from the store thread): the transfers go on."""
        if not self._wakes:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake_all()
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        for e in self._wakes:
            e.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        slave: SlaveState | None = None
        try:
            frames = MasterReader()
            try:
                auth, hs = await self._read_handshake(reader, frames)
            except HAVersionError as exc:
                log.warning("slave at %s refused: %s", address, exc)
                writer.write(encode_refuse(str(exc)))
                await writer.drain()
                return
            if hs is None:
                return
            unauthenticated = self._unauthenticated(auth)
            if unauthenticated is not None:
                log.warning("slave %d at %s refused: %s", hs.broker_id, address, unauthenticated)
                writer.write(encode_refuse(unauthenticated))
                await writer.drain()
                return
            welcome = self._welcome(hs)
            if isinstance(welcome, str):
                log.warning("slave %d at %s refused: %s", hs.broker_id, address, welcome)
                writer.write(encode_refuse(welcome))
                await writer.drain()
                return
            old = self.slaves.get(hs.broker_id)
            if old is not None and old.connected:
                log.warning("slave %d connected again from %s: the older connection is closed", hs.broker_id,
                            address)
                older = self._writers_by_slave.get(hs.broker_id)
                if older is not None:
                    older.close()
            # What it has counts from its first report (it reports at once), not from what its handshake claims.
            slave = SlaveState(hs.broker_id, address)
            self.slaves[hs.broker_id] = slave
            self._writers_by_slave[hs.broker_id] = writer
            self._forget_gone_slaves()
            log.info("slave %d at %s joined: its log %s, copying from %d", hs.broker_id, address,
                     f"is cut at {welcome.cut_at}" if welcome.cut_at >= 0 else f"ends at {hs.max_offset}",
                     welcome.start_offset)
            writer.write(encode_welcome(welcome))
            if welcome.cut_at >= 0:
                await writer.drain()  # the slave cuts its log and comes back
                return
            reading = asyncio.create_task(self._read_reports(reader, frames, slave))
            try:
                await self._transfer(writer, slave, welcome.start_offset, reading)
            finally:
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
        except (ConnectionError, asyncio.IncompleteReadError, HAProtocolError, TimeoutError) as exc:
            log.info("HA connection from %s closed: %s", address, exc or type(exc).__name__)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("HA connection from %s failed", address)
        finally:
            if slave is not None and self.slaves.get(slave.broker_id) is slave:
                slave.connected = False
                slave.last_heard = time.monotonic()
                if self._writers_by_slave.get(slave.broker_id) is writer:
                    del self._writers_by_slave[slave.broker_id]
                self._acked()
            self._writers.discard(writer)
            writer.close()
            self._tasks.discard(task)

    def _forget_gone_slaves(self) -> None:
        """Disconnected slaves outside the in-sync set are forgotten (the table stays bounded)."""
        keep = self.sync_state_set or set()
        for b in [b for b, s in self.slaves.items() if not s.connected and b not in keep]:
            del self.slaves[b]

    async def _read_handshake(self, reader: asyncio.StreamReader,
                              frames: MasterReader) -> tuple[Auth | None, Handshake | None]:
        """The slave's credentials (if it sent them first) and its handshake."""
        auth: Auth | None = None
        async with asyncio.timeout(self.config.ha_housekeeping_interval / 1000):
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    return auth, None
                for frame in frames.feed(data):
                    if isinstance(frame, Auth) and auth is None:
                        auth = frame
                    elif isinstance(frame, Handshake):
                        return auth, frame
                    else:
                        raise HAProtocolError("a slave must start with a handshake")

    def _unauthenticated(self, auth: Auth | None) -> str | None:
        """With authentication on, why a slave may not copy this master's log (None: it may): only the inner
        client credentials, signed within 15 minutes of this master's clock."""
        c = self.config
        if not c.authentication_enabled:
            return None
        inner = c.inner_client_authentication_credentials
        if inner is None:
            return "authentication is on and this master has no inner client credentials for its slaves"
        if auth is None:
            return "authentication is on: a slave must sign in with the inner client credentials"
        if not auth_matches(auth, inner.access_key, inner.secret_key):
            return "the slave's credentials are not the inner client credentials (check signature failed.)"
        try:
            stamp = calendar.timegm(time.strptime(auth.date_time, "%Y%m%dT%H%M%SZ"))
        except ValueError:
            return "the slave's sign-in time is not yyyyMMddTHHmmssZ"
        if abs(time.time() - stamp) > HA_AUTH_MAX_SKEW:
            return "the slave's sign-in is more than 15 minutes from this master's clock"
        return None

    def _welcome(self, hs: Handshake) -> Welcome | str:
        """Where the slave's log agrees with ours, or why it cannot copy from us."""
        if hs.broker_id == self.broker_id:
            return f"the slave has this master's broker id {hs.broker_id}"
        cl = self.store.commit_log
        my_end = cl.max_offset
        my_min = cl.min_offset if cl.queue.files else 0
        entries = self.epochs.entries
        if hs.max_offset == 0:
            return Welcome(self.epoch, my_end, -1, my_min, entries)
        point = consistent_point(hs.epochs, hs.max_offset, entries, my_end)
        if point < 0:
            return (f"the slave's log (to {hs.max_offset}, epochs {[tuple(e) for e in hs.epochs]}) shares no epoch "
                    f"with this master's ({[tuple(e) for e in entries]}): empty the slave's store to copy anew")
        start = min(point, hs.max_offset)
        if start < my_min:
            return (f"the slave's log ends at {start}, before this master's oldest segment at {my_min}: empty "
                    "the slave's store to copy anew")
        return Welcome(self.epoch, my_end, point if point < hs.max_offset else -1, start, entries)

    async def _read_reports(self, reader: asyncio.StreamReader, frames: MasterReader, slave: SlaveState) -> None:
        housekeeping = self.config.ha_housekeeping_interval / 1000
        while True:
            async with asyncio.timeout(housekeeping):
                data = await reader.read(1 << 16)
            if not data:
                raise ConnectionResetError("the slave closed the connection")
            for frame in frames.feed(data):
                if not isinstance(frame, Report):
                    raise HAProtocolError("a second handshake")
                self._on_report(slave, frame.ack_offset)

    def _on_report(self, slave: SlaveState, ack: int) -> None:
        now = time.monotonic()
        slave.last_heard = now
        if ack > self.store.commit_log.max_offset:
            raise HAProtocolError(f"slave {slave.broker_id} reports offset {ack}, past this log's end")
        slave.ack_offset = max(slave.ack_offset, ack)
        if slave.ack_offset >= self.store.commit_log.max_offset:
            slave.caught_up_at = now
        elif slave._sent_max >= 0 and slave.ack_offset >= slave._sent_max:
            slave.caught_up_at = max(slave.caught_up_at, slave._sent_at)
        self._acked()

    async def _transfer(self, writer: asyncio.StreamWriter, slave: SlaveState, start: int,
                        reading: asyncio.Task) -> None:
        """Stream the log from ``start``; a heartbeat when there is nothing to send for a while."""
        cl = self.store.commit_log
        batch = self.config.ha_transfer_batch_size
        heartbeat = self.config.ha_send_heartbeat_interval / 1000
        wake = asyncio.Event()
        self._wakes.add(wake)
        nxt = start
        last_sent = time.monotonic()
        try:
            confirmed = -1  # the confirm offset the slave was last told
            while not reading.done():
                end = cl.max_offset
                confirm = self.store.dispatched_offset
                if nxt < end:
                    chunk = self._chunk(nxt, end, batch)
                    if chunk is None:
                        raise ConnectionAbortedError(f"the log at {nxt} is gone (deleted or cut)")
                    epoch, data = chunk
                    slave._sent_max, slave._sent_at = end, time.monotonic()
                    writer.write(encode_transfer_header(epoch, nxt, confirm, len(data)))
                    writer.write(data)
                    confirmed = confirm
                    nxt += len(data)
                    last_sent = time.monotonic()
                    await writer.drain()
                    continue
                wake.clear()
                if cl.max_offset > nxt:
                    continue
                if confirm != confirmed or time.monotonic() - last_sent >= heartbeat:
                    writer.write(encode_transfer_header(self.epoch, nxt, confirm, 0))
                    confirmed = confirm
                    last_sent = time.monotonic()
                    await writer.drain()
                woken = asyncio.ensure_future(wake.wait())
                try:
                    await asyncio.wait([woken, reading], timeout=min(heartbeat, 0.5),
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    woken.cancel()
            reading.result()  # raises why the reading ended
        finally:
            self._wakes.discard(wake)

    def _chunk(self, nxt: int, end: int, batch: int) -> tuple[int, bytes] | None:
        """The next bytes to send from ``nxt``: within one segment and one epoch, at most ``batch``."""
        cl = self.store.commit_log
        mf = cl.queue.find_by_offset(nxt)
        if mf is None:
            return None
        pos = nxt - mf.file_from_offset
        size = min(batch, mf.wrote_position - pos, end - nxt)
        epoch = 0
        for e in self.epochs.entries:
            if e.start_offset <= nxt:
                epoch = e.epoch
            else:
                size = min(size, e.start_offset - nxt)
                break
        if size <= 0:
            return None
        return epoch, bytes(mf.buf[pos:pos + size])

    # == reporting ===================================================================================
    def lag(self) -> dict[int, int]:
        """Bytes each connected slave is behind this master's log."""
        end = self.store.commit_log.max_offset
        return {s.broker_id: end - s.ack_offset for s in self.slaves.values() if s.connected}
