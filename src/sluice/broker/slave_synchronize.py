"""A slave's copy of its master's metadata (RocketMQ SlaveSynchronize): topic configs, consumer offsets,
delay-level offsets, the timer service's progress, subscription groups, and ACL 2.0's users and rules, fetched
every ``SYNC_INTERVAL`` seconds with GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET,
GET_TIMER_CHECK_POINT, GET_ALL_SUBSCRIPTIONGROUP_CONFIG, AUTH_LIST_USER and AUTH_LIST_ACL, and kept in the slave's
own config files, so that a slave made master goes on from where its master was."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice.broker.subscription_group_manager import SubscriptionGroupConfig
from sluice.common import fastjson
from sluice.common.files import ConfigWriter
from sluice.common.service import AsyncService
from sluice.common.structs import DataVersion, TopicConfig
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import RemotingError

if TYPE_CHECKING:
    from sluice.auth.auth_metadata_manager import AuthMetadataManager
    from sluice.broker.subscription_group_manager import SubscriptionGroupManager
    from sluice.broker.topic_config_manager import TopicConfigManager
    from sluice.common.config import BrokerConfig
    from sluice.remoting.client import RemotingClient
    from sluice.store.message_store import MessageStore

log = logging.getLogger(__name__)

SYNC_INTERVAL = 3.0


class SlaveSynchronize(AsyncService):
    """``start()`` on a slave; ``await stop()``. ``master_addr()`` names the master's remoting address."""

    def __init__(self, config: BrokerConfig, client: RemotingClient, store: MessageStore,
                 topic_config_manager: TopicConfigManager, subscription_group_manager: SubscriptionGroupManager,
                 trigger_register: Callable[[], None], master_addr: Callable[[], str],
                 auth_metadata: AuthMetadataManager | None = None) -> None:
        super().__init__()
        self.auth_metadata = auth_metadata
        self.config = config
        self.client = client
        self.store = store
        self.topic_config_manager = topic_config_manager
        self.subscription_group_manager = subscription_group_manager
        self.trigger_register = trigger_register
        self.master_addr = master_addr
        self.synced_at = 0.0  # loop time of the last complete sync (0: never)
        self._delay_writer: ConfigWriter | None = None
        self._delay_offsets: dict[str, Any] = {}
        self._timer_writer: ConfigWriter | None = None
        self._timer_checkpoint: dict[str, int] = {}

    def start(self) -> None:
        config_dir = self.config.store.store_path_config
        self._delay_writer = ConfigWriter(os.path.join(config_dir, "delayOffset.json"),
                                          lambda: {"offsetTable": self._delay_offsets})
        self._timer_writer = ConfigWriter(os.path.join(config_dir, "timercheck.json"),
                                          lambda: {"masterCheckpoint": self._timer_checkpoint})
        self._spawn(self._run())

    async def stop(self) -> None:
        await super().stop()
        for writer in (self._delay_writer, self._timer_writer):
            if writer is not None:
                await asyncio.get_running_loop().run_in_executor(None, writer.close)

    async def _run(self) -> None:
        while True:
            addr = self.master_addr()
            if not addr:  # not known yet: look again soon
                await asyncio.sleep(0.1)
                continue
            try:
                await self.sync_all(addr)
            except (RemotingError, ValueError, TypeError, KeyError, AttributeError) as exc:
                log.warning("copying the metadata of master %s failed: %s", addr, exc)
            await asyncio.sleep(SYNC_INTERVAL)

    async def _get(self, addr: str, code: RequestCode, kind: type = dict) -> Any:
        """The master's answer to ``code``: a JSON object (or, ``kind=list``, an array; no body: an empty one)."""
        resp = await self.client.invoke(addr, RemotingCommand.request(code), self.config.register_broker_timeout_mills)
        if resp.code != ResponseCode.SUCCESS:
            raise ValueError(f"{code.name} answered {resp.code} {resp.remark}")
        data = fastjson.loads(resp.body) if resp.body else kind()
        if not isinstance(data, kind):
            raise ValueError(f"{code.name} answered {type(data).__name__}, not a {kind.__name__}")
        return data

    async def sync_auth(self, addr: str) -> None:
        """The master's users and ACLs (AUTH_LIST_USER, AUTH_LIST_ACL: the inner credentials are a super user's)."""
        if self.auth_metadata is None:
            return
        users = await self._get(addr, RequestCode.AUTH_LIST_USER, list)
        acls = await self._get(addr, RequestCode.AUTH_LIST_ACL, list)
        data = {"users": {u["username"]: {k: v for k, v in u.items() if k != "username"} for u in users},
                "acls": {a["subject"]: {"policies": a["policies"]} for a in acls}}
        await asyncio.wrap_future(self.auth_metadata.replace_all(data))

    async def sync_all(self, addr: str) -> None:
        topics = await self._get(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        m = self.topic_config_manager
        version = DataVersion.from_json(topics.get("dataVersion"))
        if version != m.data_version:
            table = {n: TopicConfig.from_json(tc) for n, tc in (topics.get("topicConfigTable") or {}).items()}
            with m._lock:
                m.table = table
                m.data_version = version
            m.persist()
            self.trigger_register()
        offsets = await self._get(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        fresh = {k: {int(q): int(o) for q, o in v.items()} for k, v in (offsets.get("offsetTable") or {}).items()}
        self.store.consumer_offsets.replace_offsets(fresh)
        delay = await self._get(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        delay_table = {str(int(k)): int(v) for k, v in (delay.get("offsetTable") or {}).items()}
        if delay_table != self._delay_offsets and self._delay_writer is not None:
            self._delay_offsets = delay_table
            self._delay_writer.request()
        timers = await self._get(addr, RequestCode.GET_TIMER_CHECK_POINT)
        checkpoint = {"enqueueOffset": int(timers["enqueueOffset"]), "dequeueMs": int(timers["dequeueMs"])}
        if checkpoint != self._timer_checkpoint and self._timer_writer is not None:
            self._timer_checkpoint = checkpoint
            self._timer_writer.request()
        groups = await self._get(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        sg = self.subscription_group_manager
        version = DataVersion.from_json(groups.get("dataVersion"))
        if version != sg.data_version:
            gtable = {n: SubscriptionGroupConfig.from_json(g)
                      for n, g in (groups.get("subscriptionGroupTable") or {}).items()}
            with sg._lock:
                sg.table = gtable
                sg.data_version = version
            sg.persist()
        await self.sync_auth(addr)
        self.synced_at = asyncio.get_running_loop().time()
