"""BrokerController: wires the store, the managers, the processors and the remoting server of one broker."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sluice.auth.audit import AuditLog
from sluice.auth.auth_metadata_manager import AuthMetadataManager
from sluice.auth.authorization_context_builder import AuthorizationContext
from sluice.auth.credentials import is_loopback, signing_hook
from sluice.auth.evaluator import Authenticator, Authorizer, parse_whitelist
from sluice.auth.model import Action, AuthorizationError, Resource
from sluice.auth.remoting_auth_pipeline import RemotingAuthPipeline, source_ip
from sluice.broker.broker_metrics_manager import BrokerMetricsManager
from sluice.broker.broker_outer_api import BrokerOuterAPI
from sluice.broker.broker_stats import BrokerStats, format_stats_line
from sluice.broker.broker_stats import log as stats_log
from sluice.broker.client_channel_info import ClientChannelInfo
from sluice.broker.consumer_filter_manager import ConsumerFilterManager
from sluice.broker.consumer_manager import ConsumerManager
from sluice.broker.consumer_order_info_manager import ConsumerOrderInfoManager
from sluice.broker.lite.lite_topics import LiteTopics
from sluice.broker.pop.ack_message_processor import AckMessageProcessor
from sluice.broker.pop.pop_buffer_merge_service import PopBufferMergeService
from sluice.broker.pop.pop_long_polling_service import PopLongPollingService
from sluice.broker.pop.pop_message_processor import PopMessageProcessor
from sluice.broker.pop.pop_revive_service import PopReviveService
from sluice.broker.processors.admin_broker_processor import AdminBrokerProcessor
from sluice.broker.processors.auth_admin_processor import AuthAdminProcessor
from sluice.broker.processors.broker_status_processor import BrokerStatusProcessor
from sluice.broker.processors.client_manage_processor import ClientManageProcessor
from sluice.broker.processors.consumer_manage_processor import ConsumerManageProcessor
from sluice.broker.processors.end_transaction_processor import EndTransactionProcessor
from sluice.broker.processors.pull_message_processor import PullMessageProcessor
from sluice.broker.processors.query_assignment_processor import (
    MessageRequestModeManager,
    QueryAssignmentProcessor,
)
from sluice.broker.processors.query_message_processor import QueryMessageProcessor
from sluice.broker.processors.recall_message_processor import RecallMessageProcessor
from sluice.broker.processors.reply_message_processor import ReplyMessageProcessor
from sluice.broker.processors.send_message_processor import SendMessageProcessor
from sluice.broker.producer_manager import ProducerManager
from sluice.broker.pull_request_hold_service import PullRequestHoldService
from sluice.broker.rebalance_lock_manager import RebalanceLockManager
from sluice.broker.runtime_config import RuntimeConfig
from sluice.broker.schedule_message_service import ScheduleMessageService
from sluice.broker.slave_synchronize import SlaveSynchronize
from sluice.broker.subscription_group_manager import SubscriptionGroupManager
from sluice.broker.timer_message_service import TimerMessageService
from sluice.broker.topic_config_manager import TopicConfigManager
from sluice.broker.transactional_message_service import TransactionalMessageService
from sluice.common.config import BrokerConfig, BrokerRole, MessageStoreConfig
from sluice.common.loop_lag import LoopLagProbe
from sluice.common.message import host_to_bytes
from sluice.common.metrics_exporter import MetricsExporter
from sluice.common.naming import SCHEDULE_TOPIC, reply_topic
from sluice.common.service import AsyncService
from sluice.common.structs import TopicConfig, TopicRouteData
from sluice.common.sysflag import PERM_READ, PERM_WRITE
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection
from sluice.remoting.dispatcher import RequestDispatcher, RestrictedDispatcher
from sluice.remoting.errors import RemotingError
from sluice.remoting.rpc_latency import RpcLatency
from sluice.remoting.server import RemotingServer
from sluice.remoting.tls import bind_socket, inner_client_tls, server_tls
from sluice.store.ha.epoch_file import EpochFile
from sluice.store.ha.ha_client import HAClient
from sluice.store.ha.ha_service import HAService
from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

# RocketMQ's accessMessageInMemoryMaxRatio: a message further than this share of RAM behind the log's end is
# considered swapped out (decides where a brand-new group starts, see query_consumer_offset).
ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO = 0.40


# What a slave refuses: everything that writes its store or its metadata (they come from the master).
SLAVE_REFUSED = frozenset({
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2, RequestCode.CONSUMER_SEND_MSG_BACK,
    RequestCode.END_TRANSACTION, RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_SUBSCRIPTIONGROUP, RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE,
    RequestCode.BATCH_ACK_MESSAGE, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, RequestCode.PEEK_MESSAGE,
    RequestCode.NOTIFICATION, RequestCode.POLLING_INFO, RequestCode.SET_MESSAGE_REQUEST_MODE,
    RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ, RequestCode.POP_LITE_MESSAGE,
    RequestCode.LITE_SUBSCRIPTION_CTL,
    RequestCode.AUTH_CREATE_USER, RequestCode.AUTH_UPDATE_USER, RequestCode.AUTH_DELETE_USER,
    RequestCode.AUTH_CREATE_ACL, RequestCode.AUTH_UPDATE_ACL, RequestCode.AUTH_DELETE_ACL,
})

# What the fast (VIP) channel does not serve, as RocketMQ registers no processor for them there: the reads that
# long-poll.
FAST_CHANNEL_REFUSED = frozenset(int(code) for code in (
    RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, RequestCode.POP_MESSAGE, RequestCode.PEEK_MESSAGE,
    RequestCode.NOTIFICATION, RequestCode.POLLING_INFO, RequestCode.POP_LITE_MESSAGE))


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


class BrokerController(AsyncService):
    """One broker: ``await start()``, serve, ``await stop()``."""

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__()
        self.config = config
        self.runtime_config = RuntimeConfig(config)
        self.runtime_config.load()  # what updateBrokerConfig changed in an earlier run, before anything reads it
        self.broker_addr = ""
        self.store: MessageStore = None  # type: ignore[assignment]  # created in start(): STOREHOST needs the port
        self.topic_config_manager = TopicConfigManager(config)
        self.subscription_group_manager = SubscriptionGroupManager(config)
        self.consumer_manager = ConsumerManager(config.channel_expired_timeout, self._notify_consumer_ids_changed)
        self.consumer_filter_manager = ConsumerFilterManager(prepare=config.enable_property_filter)
        self.producer_manager = ProducerManager(config.channel_expired_timeout)
        self.lock_manager = RebalanceLockManager(config.rebalance_lock_max_live_time)
        self.hold_service = PullRequestHoldService(config.max_held_pulls)
        self.pop_polling = PopLongPollingService(config.max_pop_polling_size, config.pop_polling_size)
        self.pop_revive: PopReviveService = None  # type: ignore[assignment]
        self.pop_buffer: PopBufferMergeService = None  # type: ignore[assignment]
        self.lite: LiteTopics | None = None  # (made with the processors: it needs the store)
        self.request_modes = MessageRequestModeManager(config.store.store_path_config)
        self.order_info = ConsumerOrderInfoManager(config.store.store_path_config)
        self.loop_lag = LoopLagProbe()
        self.stats = BrokerStats()
        self.metrics = BrokerMetricsManager(config, self)
        self.metrics_exporter: MetricsExporter | None = None
        self.dispatcher = RequestDispatcher()
        # TLS (tls_server_mode): the remoting port and the HA port share one context that follows its files.
        self.tls = server_tls(config, f"broker {config.broker_name}",
                              os.path.join(config.store.store_path_root_dir, "tls"),
                              (config.broker_ip, config.listen_host))
        self.server = RemotingServer(self.dispatcher, config.remoting, f"broker {config.broker_name}",
                                     on_close=self._on_connection_closed, tls=self.tls)
        # RocketMQ's fast channel (fastListenPort = listen_port - 2), where clients with vipChannelEnabled send
        # (RocketMQ Dashboard by default) and RocketMQ slaves ask their master: the same handlers and checks.
        self.fast_server = RemotingServer(RestrictedDispatcher(self.dispatcher, FAST_CHANNEL_REFUSED),
                                          config.remoting, f"broker {config.broker_name} (fast channel)",
                                          on_close=self._on_connection_closed, tls=self.tls)
        self.fast_server.rpc_latency = self.server.rpc_latency
        self.server.peers.append(self.fast_server)  # (one limit of connections for both ports)
        self.fast_server.peers.append(self.server)
        # ACL 2.0: the users and rules, and (when on) the check of every request; the inner credentials sign what
        # this broker sends (registrations, a slave's copying).
        self.auth_metadata = AuthMetadataManager(os.path.join(config.store.store_path_config, "auth.json"))
        self.authorizer: Authorizer | None = None  # (with authorization on)
        inner = config.inner_client_authentication_credentials
        self.client = RemotingClient(config.remoting, request_hook=signing_hook(
            None if inner is None else (inner.access_key, inner.secret_key)),
            tls=inner_client_tls(config, f"broker {config.broker_name}"))
        self.outer_api = BrokerOuterAPI(self.client, config.register_broker_timeout_mills)
        self.schedule_service: ScheduleMessageService = None  # type: ignore[assignment]
        self.transaction_service: TransactionalMessageService = None  # type: ignore[assignment]
        self.timer_service: TimerMessageService = None  # type: ignore[assignment]
        self.boot_timestamp = int(time.time() * 1000)
        # Replication (docs/ha.md): a master's HA service, a slave's HA client and metadata copy. Where a slave's
        # master is: ``master_address`` (remoting) and ``master_ha_address``, from the config, the name server's
        # answer to the registration, or the controller (``BrokerRunner``). ``on_cut`` restarts the broker with
        # its log cut where the master says (set by the runner).
        self.role: BrokerRole = config.broker_role
        self.epochs: EpochFile = None  # type: ignore[assignment]
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self.master_address = ""
        self.master_ha_address = config.ha_master_address
        self.on_cut: Callable[[int], Awaitable[None]] | None = None
        # Controller mode (set by the runner before start): why a master may not take writes now (fencing),
        # and the slaves its puts wait for.
        self.write_guard: Callable[[], str] | None = None
        self.initial_sync_state_set: set[int] | None = None
        self.running = False
        self._registered_fenced = False
        self._register_now = asyncio.Event()
        self._memory = _total_memory()

    @property
    def port(self) -> int:
        return self.server.port

    # == lifecycle ===================================================================================
    async def start(self, truncate_at: int | None = None, epoch: int | None = None) -> BrokerController:
        """Open the store (cut at ``truncate_at``: a slave agreeing with its master) and serve. A master begins a
        new term: ``epoch`` (the controller's), else the last one + 1."""
        c = self.config
        slave = not self.role.is_master
        sock = bind_socket(c.listen_host, c.listen_port)
        try:
            await self._open_store(sock.getsockname()[1], truncate_at)
        except BaseException:
            sock.close()
            raise
        loop = asyncio.get_running_loop()
        try:
            await self._begin_term(epoch)
        except BaseException:
            sock.close()
            await loop.run_in_executor(None, self.store.shutdown)
            raise
        try:
            await self._load_metadata()
            if not slave:
                await self._load_master_services()
            self._register_processors()
            if not slave:
                self._adopt_replicated_topics()
                await self._start_ha_service()
            await self.server.start(sock=sock)
            await self._start_fast_channel()
        except BaseException:
            for server in (self.fast_server, self.server):
                try:
                    await server.stop()
                except Exception:  # (the error that stopped the start is the one to raise)
                    log.exception("stopping %s after a failed start", server.name)
            sock.close()
            if self.ha_service is not None:
                await self.ha_service.stop()
            await loop.run_in_executor(None, self.store.shutdown)
            raise
        if slave:
            self._start_replication()
        else:
            for service in (self.schedule_service, self.transaction_service, self.timer_service, self.pop_revive,
                            self.pop_buffer):
                service.start()
            if self.lite is not None:
                self.lite.start()
        self.loop_lag.start(loop)
        self.running = True
        # Registered once before start() returns, as RocketMQ's start() does: a client that asks the name server
        # right after finds this broker (and its TBW102, for a topic created by sending).
        try:
            await self._register_once()
        except BaseException:  # (cancelled meanwhile: no broker half started)
            await self.stop()
            raise
        if not self.running:  # stopped while registering
            return self
        self._spawn(self._register_loop())
        self._spawn(self._scan_clients_loop())
        self._spawn(self._stats_loop())
        if c.metrics_exporter_type == "PROM":
            try:
                self.metrics_exporter = await MetricsExporter(
                    [self.metrics], c.metrics_prom_exporter_host or c.listen_host,
                    c.metrics_prom_exporter_port).start()
            except BaseException:  # (a taken port): no broker half started
                await self.stop()
                raise
            log.info("broker %s metrics at %s", c.broker_name, self.metrics_exporter.address)
        log.info("broker %s (%s) serving on %s, store %s, %s", c.broker_name, c.broker_cluster_name, self.broker_addr,
                 c.store.store_path_root_dir, c.store.flush_disk_type.value)
        if not c.authentication_enabled and not is_loopback(c.listen_host):
            log.warning("broker %s listens on %s with authentication off: anyone who reaches the port may do "
                        "anything (authentication_enabled, docs/security.md)", c.broker_name, c.listen_host)
        return self

    async def _open_store(self, port: int, truncate_at: int | None) -> None:
        """Open the store, whose records name this broker's address (STOREHOST), cut at ``truncate_at``."""
        c = self.config
        self.broker_addr = f"{c.broker_ip}:{port}"
        host_to_bytes(self.broker_addr)  # STOREHOST must be an IPv4 address
        store_config = c.store.replace(store_host=self.broker_addr)
        self.config.store = store_config
        self.store = MessageStore(store_config)
        loop = asyncio.get_running_loop()
        # In controller mode a slave serves only what its master confirms: its tail may be what a master wrote
        # and nobody else, and a failover may elect another (RocketMQ gates on the confirm offset there only).
        hold = not self.role.is_master and bool(c.controller_etcd_endpoints)
        opening = loop.run_in_executor(None, self.store.start, truncate_at, hold)
        try:
            await asyncio.shield(opening)
        except asyncio.CancelledError:  # the store opens anyway (its thread goes on): close it again
            await asyncio.gather(opening, return_exceptions=True)
            if self.store.running:
                await loop.run_in_executor(None, self.store.shutdown)
            raise
        self.store.bind_loop(loop)
        self.store.slave_mode = not self.role.is_master
        self.store.write_guard = self.write_guard

    async def _begin_term(self, epoch: int | None) -> None:
        """Load the epochs. Those that began past the log's end (it was cut) are forgotten; a master's new term
        begins here, before any of its services writes (a torn transaction's repair, say)."""
        loop = asyncio.get_running_loop()
        self.epochs = EpochFile(os.path.join(self.config.store.store_path_root_dir, "epochFileCheckpoint")).load()
        await loop.run_in_executor(None, self.epochs.truncate_to, self.store.commit_log.max_offset)
        if self.role.is_master:
            term = epoch if epoch is not None else max(self.epochs.last_epoch + 1, int(time.time() * 1000))
            if term > self.epochs.last_epoch:
                await loop.run_in_executor(None, self.epochs.append, term, self.store.commit_log.max_offset)

    async def _load_metadata(self) -> None:
        """The config files, and what the store tells the broker (arrivals wake held pulls and pops; a failed
        fsync makes it read-only)."""
        c = self.config
        loop = asyncio.get_running_loop()
        self.topic_config_manager.load()
        self.subscription_group_manager.load()
        self.request_modes.load()
        self.order_info.load()
        await self._load_auth()
        self.ensure_system_topic(SCHEDULE_TOPIC, len(c.delay_levels))
        self.ensure_system_topic(reply_topic(c.broker_cluster_name), 1)
        self.store.arrival_listeners.append(self.hold_service.notify_message_arriving)
        self.store.arrival_listeners.append(self.pop_polling.notify_message_arriving)

        def store_failed() -> None:  # (on the store's thread)
            loop.call_soon_threadsafe(self._store_failed)

        self.store.write_failure_listeners.append(store_failed)
        if not self.role.is_master:  # the timer wheel is rebuilt from the log if this broker becomes master
            await loop.run_in_executor(None, _forget_timer_state, c.store)

    async def _load_auth(self) -> None:
        """Users and ACLs; the first super users (a master's: a slave copies its master's); the request check."""
        c = self.config
        self.auth_metadata.load()
        if self.role.is_master:
            firsts = [(u.username, u.password) for u in (c.init_authentication_user,) if u is not None]
            inner = c.inner_client_authentication_credentials
            if inner is not None:
                firsts.append((inner.access_key, inner.secret_key))
            for username, password in firsts:
                created = self.auth_metadata.ensure_super_user(username, password)
                if created is not None:
                    await asyncio.wrap_future(created)
                    log.info("super user %s created", username)
        if c.authorization_enabled and not c.authentication_enabled:
            log.warning("authorization is on and authentication off: a request is checked as the user its AccessKey "
                        "claims, unproven (as in RocketMQ); turn authentication_enabled on too")
        if c.authentication_enabled or c.authorization_enabled:
            audit = AuditLog()
            self.authorizer = Authorizer(self.auth_metadata, audit, parse_whitelist(c.authorization_whitelist)) \
                if c.authorization_enabled else None
            self.dispatcher.refusal = RemotingAuthPipeline(
                Authenticator(self.auth_metadata, audit, parse_whitelist(c.authentication_whitelist))
                if c.authentication_enabled else None,
                self.authorizer, c.broker_cluster_name).refusal
            if not self.auth_metadata.users:
                log.warning("authentication is on and there is no user: every request will be refused (set "
                            "init_authentication_user)")

    async def _load_master_services(self) -> None:
        """A master's delayed, timer, transaction and POP services, their state loaded (a slave's work of theirs
        is its master's, copied)."""
        c = self.config
        self.schedule_service = ScheduleMessageService(self.store, c.delay_levels, c.schedule_poll_interval,
                                                       c.store.flush_consumer_offset_interval)
        self.schedule_service.load()
        self.schedule_service.on_delivered = self.stats.record_delivered
        self.timer_service = TimerMessageService(self.store, self.ensure_system_topic)
        self.timer_service.on_delivered = self.stats.record_timer_delivered
        self.timer_service.load()  # (before the transactions': the repair of a torn commit applies timers)
        self.transaction_service = TransactionalMessageService(c, self.broker_addr, self.store, self.producer_manager,
                                                               self.ensure_system_topic, self.schedule_service,
                                                               self.timer_service, self._may_check_transaction)
        self.transaction_service.on_half = self.stats.record_half
        self.transaction_service.load()  # before the first END_TRANSACTION can arrive
        self.pop_revive = PopReviveService(c, self.broker_addr, self.store, self.subscription_group_manager,
                                           self.ensure_system_topic)
        await asyncio.get_running_loop().run_in_executor(None, self.pop_revive.load)  # before the first pop or ack
        self.pop_buffer = PopBufferMergeService(c, self.store, self.pop_revive)

    def _register_processors(self) -> None:
        """Each processor, given what it uses; a slave refuses what would write."""
        c, store, addr = self.config, self.store, self.broker_addr
        topics, groups = self.topic_config_manager, self.subscription_group_manager
        pop = PopMessageProcessor(c, addr, store, self.stats, topics, groups, self.ensure_system_topic,
                                  self.pop_revive, self.pop_polling, self.order_info, self.swapped_out,
                                  self.pop_buffer)
        ack = AckMessageProcessor(c, store, topics, self.pop_revive, self.pop_polling, self.order_info,
                                  self.pop_buffer)
        self.lite = LiteTopics(c, store, topics, groups, self.order_info, pop, self.pop_revive, self._topic_route)
        ack.lite_bind_topic = self.lite.bind_topic
        ack.on_lite_settled = self.lite.settled
        ack.on_lite_invisible = self.lite.invisible_until
        processors = (
            SendMessageProcessor(c, addr, store, self.dispatcher, self.stats, topics, groups, self.ensure_system_topic,
                                 self.trigger_register, self.schedule_service, self.timer_service,
                                 self.transaction_service),
            PullMessageProcessor(c, addr, store, topics, groups, self.consumer_manager, self.consumer_filter_manager,
                                 self.hold_service, self.stats, self.swapped_out),
            ConsumerManageProcessor(store, self.consumer_manager, self.swapped_out),
            ClientManageProcessor(c, self.consumer_manager, self.producer_manager, self.consumer_filter_manager,
                                  self.lock_manager, groups, self.ensure_system_topic),
            QueryMessageProcessor(store),
            AdminBrokerProcessor(c, addr, store, self.consumer_manager, self.lock_manager, topics, groups,
                                 self.trigger_register, self.topic_config_wrapper, self.schedule_service,
                                 self.timer_service, self.producer_manager),
            BrokerStatusProcessor(c, addr, store, self, self.runtime_config, self.trigger_register),
            EndTransactionProcessor(c, store, self.transaction_service, self.stats),
            ReplyMessageProcessor(c, addr, store, self.stats, topics, self.producer_manager),
            RecallMessageProcessor(c, addr, store, self.stats, topics, self.timer_service, self.role.is_master),
            pop, ack, *self.lite.processors,
            QueryAssignmentProcessor(c, self.outer_api, self.request_modes, topics, groups, self.consumer_manager),
            AuthAdminProcessor(self.auth_metadata))
        for processor in processors:
            self.dispatcher.register_processor(processor)
        if not self.role.is_master:
            for code in SLAVE_REFUSED:
                self.dispatcher.handlers[int(code)] = self._refuse_on_slave

    async def _topic_route(self, topic: str) -> TopicRouteData | None:
        """``topic``'s route from the first name server that answers (None: none knows it, or none answers)."""
        for addr in self.config.namesrv_addrs:
            try:
                route = await self.outer_api.get_topic_route(addr, topic)
            except (RemotingError, ValueError) as exc:
                log.debug("route of %s from %s: %s", topic, addr, exc)
                continue
            return None if route is None else TopicRouteData.from_json(route)
        return None

    async def _start_fast_channel(self) -> None:
        c = self.config
        if not c.fast_channel_enabled or c.fast_listen_port == 0:
            return
        try:
            sock = bind_socket(c.listen_host, c.fast_listen_port)
        except OSError as exc:
            # RocketMQ will not start then; here only the clients that ask for the fast channel miss it.
            log.warning("the fast channel's port %d (listen_port - 2) cannot be bound (%s): clients with "
                        "vipChannelEnabled (RocketMQ Dashboard's isVIPChannel) cannot reach this broker; "
                        "free the port, or set fast_channel_enabled = false to silence this", c.fast_listen_port,
                        exc.strerror)
            return
        try:
            await self.fast_server.start(sock=sock)
        except BaseException:
            sock.close()
            raise
        log.info("broker %s: fast channel on %s:%d", c.broker_name, c.listen_host, c.fast_listen_port)

    async def _start_ha_service(self) -> None:
        """A master's HA service: where its slaves connect; a SYNC_MASTER's puts wait for them."""
        c = self.config
        self.ha_service = HAService(self.store, self.epochs, c, self.tls)
        self.ha_service.set_sync_state_set(self.initial_sync_state_set)
        try:
            await self.ha_service.start(c.listen_host, c.ha_port)
        except OSError as exc:
            if c.ha_listen_port or c.controller_etcd_endpoints or not c.ha_port:
                raise OSError(exc.errno, f"the HA port {c.listen_host}:{c.ha_port} cannot be bound "
                                         f"(ha_listen_port): {exc.strerror}") from exc
            # listen_port + 1 was only a default: the name server tells slaves where the HA port is.
            log.warning("the default HA port %d (listen_port + 1) is taken (%s): listening on a free one",
                        c.ha_port, exc.strerror)
            await self.ha_service.start(c.listen_host, 0)
        if self.role is BrokerRole.SYNC_MASTER:
            self.store.replication = self.ha_service
        self.store.replica_bound = self.ha_service.replica_bound

    def _start_replication(self) -> None:
        """A slave's copy of its master: the log (HA client) and the metadata (SlaveSynchronize)."""
        c = self.config
        self.ha_client = HAClient(self.store, self.epochs, c, lambda: self.master_ha_address, self._cut)
        if self.follow_name_server:
            self.ha_client.on_lost = self.trigger_register
        self.ha_client.start()
        self.slave_sync = SlaveSynchronize(c, self.client, self.store, self.topic_config_manager,
                                           self.subscription_group_manager, self.trigger_register,
                                           lambda: self.master_address, self.auth_metadata)
        self.slave_sync.start()

    @property
    def rpc_latency(self) -> RpcLatency:
        return self.server.rpc_latency

    async def stop(self) -> None:
        """Graceful: unregister, stop taking requests, answer held pulls, flush and close the store."""
        if not self.running:
            return
        self.running = False
        self._register_now.set()
        c = self.config
        self.loop_lag.stop()
        await super().stop()
        if self.metrics_exporter is not None:
            await self.metrics_exporter.stop()
        if c.namesrv_addrs:
            await self.outer_api.unregister_broker_all(c.namesrv_addrs, c.broker_cluster_name, self.broker_addr,
                                                       c.broker_name, self.registered_id)
        self.hold_service.wake_all()
        self.pop_polling.wake_all()
        await asyncio.sleep(0)
        await asyncio.gather(self.server.stop(), self.fast_server.stop())
        if self.ha_client is not None:
            await self.ha_client.stop()
        if self.slave_sync is not None:
            await self.slave_sync.stop()
        if self.ha_service is not None:
            await self.ha_service.stop()
        # (the buffered pop checkpoints are written before the revive service commits its offsets)
        for service in (self.schedule_service, self.transaction_service, self.timer_service, self.pop_buffer,
                        self.pop_revive, self.lite):
            if service is not None:
                await service.stop()
        await self.client.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.topic_config_manager.close)
        await loop.run_in_executor(None, self.subscription_group_manager.close)
        await loop.run_in_executor(None, self.request_modes.close)
        await loop.run_in_executor(None, self.order_info.close)
        await loop.run_in_executor(None, self.auth_metadata.close)
        await loop.run_in_executor(None, self.store.shutdown)
        if self.timer_service is not None:
            await loop.run_in_executor(None, self.timer_service.close)
        log.info("broker %s stopped", c.broker_name)

    async def __aenter__(self) -> BrokerController:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # == name server registration =====================================================================
    def topic_config_wrapper(self) -> dict[str, Any]:
        """The topic table as registered: a broker that may not be written (or read) registers every topic with
        that permission taken away, as RocketMQ does, so that clients route around it."""
        m = self.topic_config_manager
        broker_perm = self.config.broker_permission
        fenced = self.fenced
        if fenced != self._registered_fenced:
            # (name servers take a broker's topic table only when its data version moved)
            self._registered_fenced = fenced
            m.data_version.next_version(int(time.time() * 1000))
        if fenced:
            broker_perm &= ~PERM_WRITE
        table = {}
        for n, tc in sorted(m.table.items()):
            d = tc.to_json()
            if broker_perm & (PERM_READ | PERM_WRITE) != PERM_READ | PERM_WRITE:
                d["perm"] = tc.perm & broker_perm
            table[n] = d
        version = m.data_version.to_json()
        # The master epoch this broker's log has reached: a name server keeps the registration of a group's master
        # with the newest one, so a replaced master that still registers is not routed to.
        version["stateVersion"] = self.epochs.last_epoch if self.epochs is not None else 0
        return {"dataVersion": version, "topicConfigTable": table}

    @property
    def fenced(self) -> bool:
        """A master that may not acknowledge writes now (its controller lease lapsed, or another was elected):
        it registers its topics without write permission, never as the writable master."""
        return self.role.is_master and self.write_guard is not None and bool(self.write_guard())

    def _may_check_transaction(self, channel: ClientChannelInfo, topic: str) -> bool:
        """Whether a producer may be asked about a half message of ``topic`` (it carries the message): with
        authorization on, its user must be allowed to publish to that topic."""
        if self.authorizer is None:
            return True
        try:
            publish = AuthorizationContext(Resource.of_topic(topic), (Action.PUB,))
            self.authorizer.authorize(channel.user, [publish], source_ip(channel.conn.remote_addr),
                                      str(int(RequestCode.CHECK_TRANSACTION_STATE)))
        except AuthorizationError:
            return False
        return True

    @property
    def special_service_running(self) -> bool:
        """A master's delayed, transaction-check and POP-revive services are running (RocketMQ's
        ``isSpecialServiceRunning``: ``brokerActive`` in the runtime info)."""
        return self.schedule_service is not None and not self.fenced

    @property
    def registered_id(self) -> int:
        """The id the name servers know this broker by: 0 for a master (brokerId 0 is the master's), its own
        id for a slave."""
        return 0 if self.role.is_master else self.config.broker_id

    @property
    def ha_address(self) -> str:
        """Where this broker's slaves connect (a master's HA port)."""
        if self.ha_service is None:
            return self.broker_addr
        return f"{self.config.broker_ip}:{self.ha_service.port}"

    @property
    def follow_name_server(self) -> bool:
        """A slave learns its master from the name server, unless a controller names it."""
        return not self.config.controller_etcd_endpoints

    def _refuse_on_slave(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                            f"broker {self.config.broker_name} ({self.broker_addr}) is a slave: it takes no "
                            f"writes; send to its master (brokerId 0)")

    async def _cut(self, offset: int) -> None:
        if self.on_cut is None:
            log.error("this slave's log must be cut at %d to agree with its master, but nothing can restart it "
                      "(start it with sluice broker): replication stopped", offset)
            return
        await self.on_cut(offset)

    def _adopt_replicated_topics(self) -> None:
        """A master whose log holds queues of topics it has no config for (a slave promoted before it copied
        the config of a topic created just before: SlaveSynchronize runs every few seconds) makes them routable
        again, with as many queues as it holds, rather than answering that they do not exist."""
        queues: dict[str, int] = {}
        for topic, queue_id in self.store.consume_queues:
            queues[topic] = max(queues.get(topic, 0), queue_id + 1)
        for topic, n in sorted(queues.items()):
            if topic.startswith(("rmq_sys_", "RMQ_SYS_", SCHEDULE_TOPIC)):
                continue  # internal: the services that use them create them as they need them
            if self.topic_config_manager.get(topic) is None:
                self.topic_config_manager.update(TopicConfig(topic, n, n))
                log.warning("topic %s has queues in the log but no config: configured with %d queues", topic, n)

    def _store_failed(self) -> None:
        """On the loop, after the store refused writes for good (a failed fsync): no longer writeable, so
        clients send elsewhere; reads go on."""
        self.config.broker_permission &= ~PERM_WRITE
        # (name servers take a broker's topic table only when its data version moved)
        self.topic_config_manager.data_version.next_version(int(time.time() * 1000))
        self.trigger_register()

    def trigger_register(self) -> None:
        """Register with the name servers now (a topic was created or changed)."""
        self._register_now.set()

    async def register_broker_all(self) -> int:
        c = self.config
        if not c.namesrv_addrs:
            return 0
        accepted = await self.outer_api.register_broker_all(c.namesrv_addrs, c.broker_cluster_name,
                                                            self.broker_addr, c.broker_name, self.registered_id,
                                                            self.ha_address, self.topic_config_wrapper())
        master = self.outer_api.master_addresses
        if not self.role.is_master and master is not None and self.follow_name_server:
            self.master_address = master[0]
            if not self.config.ha_master_address and master[1]:
                self.master_ha_address = master[1]
        return accepted

    async def _register_once(self) -> None:
        self._register_now.clear()
        try:
            await self.register_broker_all()
        except Exception:
            log.exception("registration with the name servers failed")

    async def _register_loop(self) -> None:
        """Re-register every period, and at once when told to (``trigger_register``)."""
        period = self.config.register_name_server_period / 1000
        while self.running:  # not ``while True``: 3.11's wait_for (Connection.invoke) can swallow stop()'s cancel
            try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancel of stop()
                async with asyncio.timeout(period):
                    await self._register_now.wait()
            except TimeoutError:
                pass
            if self.running:
                await self._register_once()

    async def _stats_loop(self) -> None:
        """Sample the counters once a second (the runtime info's TPS) and log the stats line once a
        ``stats_log_interval`` (RocketMQ's per-minute stats)."""
        next_line = time.monotonic() + self.config.stats_log_interval / 1000
        while self.running:
            await asyncio.sleep(1.0)
            self.stats.sample()
            if self.config.stats_log_interval > 0 and time.monotonic() >= next_line:
                next_line += self.config.stats_log_interval / 1000
                stats_log.info(format_stats_line(self.stats.snapshot(self.store)))

    # == clients =====================================================================================
    async def _scan_clients_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.client_scan_interval / 1000)
            self.consumer_manager.scan_not_active()
            self.producer_manager.scan_not_active()
            self.consumer_filter_manager.retain(self.consumer_manager.groups)

    def _on_connection_closed(self, conn: Connection) -> None:
        self.consumer_manager.on_connection_closed(conn)
        self.producer_manager.on_connection_closed(conn)
        if self.lite is not None:
            self.lite.connection_closed(conn)

    def _notify_consumer_ids_changed(self, group: str, members: list[ClientChannelInfo]) -> None:
        if not self.config.notify_consumer_ids_changed_enable:
            return
        g = self.subscription_group_manager.table.get(group)
        if g is not None and not g.notify_consumer_ids_changed_enable:
            return
        for ch in members:
            ch.conn.write(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                  {"consumerGroup": group}, oneway=True))

    # == helpers for processors ======================================================================
    def ensure_system_topic(self, topic: str, queue_nums: int, perm: int = 6) -> TopicConfig:
        """Retry, dead-letter and schedule topics: created when first needed, then routable."""
        existing = self.topic_config_manager.get(topic)
        if existing is not None:
            return existing
        tc = self.topic_config_manager.create_system_topic(topic, queue_nums, perm)
        self.trigger_register()
        return tc

    def swapped_out(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """Whether the message at ``queue_offset`` is too far behind the log's end to be in memory."""
        phys = self.store.get_commit_log_offset_in_queue(topic, queue_id, queue_offset)
        return self.store.get_max_phy_offset() - phys > self._memory * ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO


def _forget_timer_state(store: MessageStoreConfig) -> None:
    """A slave keeps no timer log of its own (its master's progress comes with SlaveSynchronize)."""
    shutil.rmtree(store.store_path_timer_log, ignore_errors=True)
    try:
        os.unlink(os.path.join(store.store_path_config, "timercheck.json"))
    except FileNotFoundError:
        pass

