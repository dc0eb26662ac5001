"""The users and ACLs a standalone gRPC front (``sluice proxy``) checks against: a copy of its brokers', taken from
a master with AUTH_LIST_USER and AUTH_LIST_ACL (signed with the inner credentials, a super user's) at start and
every ``refresh`` seconds after (RocketMQ's proxy caches them for ``userCacheRefreshSecond`` /
``aclCacheRefreshSecond``, 60 s). In memory only: the front writes no secret to disk.

Until the first copy arrives nobody is let in (every user is unknown), and copies are tried again from 1 s, doubling,
up to ``refresh``. A failed refresh keeps the last copy for at most ten refresh intervals (RocketMQ's
``userCacheExpiredSecond`` is ten times its refresh too); after that nobody is let in until a copy succeeds again,
so that a user deleted or disabled on the brokers cannot outlive a broken copy.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from sluice.auth.model import Acl, User, acl_from_stored, subject_key, subject_username, user_from_stored
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.service import AsyncService
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

DEFAULT_REFRESH_SECONDS = 60.0
EXPIRY_INTERVALS = 10
MAX_TABLE_BYTES = 64 << 20


class BrokerAuthMetadata(AsyncService):
    def __init__(self, api: MQClientAPI, refresh: float = DEFAULT_REFRESH_SECONDS, timeout_ms: int = 5_000) -> None:
        super().__init__()
        self.api = api
        self.refresh = refresh
        self.timeout_ms = timeout_ms
        self.users: dict[str, User] = {}
        self.acls: dict[str, Acl] = {}
        self.generation = 0
        self.copied_from = ""
        self.copied_at = 0.0
        self.copies = 0
        self.last_error = ""

    def get_user(self, username: str) -> User | None:
        return self.users.get(username)

    def get_acl(self, subject: str) -> Acl | None:
        username = subject_username(subject)
        return None if username is None else self.acls.get(subject_key(username))

    async def start(self) -> None:
        await self.copy_once()
        self._spawn(self._loop(), "auth-metadata-refresh")

    async def _loop(self) -> None:
        retry = min(1.0, self.refresh)
        while True:
            ok = self.copies > 0 and not self.last_error
            await asyncio.sleep(self.refresh if ok else retry)
            if await self.copy_once():
                retry = min(1.0, self.refresh)
                continue
            retry = min(retry * 2, self.refresh)
            age = asyncio.get_running_loop().time() - self.copied_at
            if self.copies and age > EXPIRY_INTERVALS * self.refresh and (self.users or self.acls):
                self.users, self.acls = {}, {}
                self.generation += 1
                log.error("the users and ACLs copied from the brokers are older than %.0f s: nobody is let in until "
                          "a copy succeeds again (%s)", EXPIRY_INTERVALS * self.refresh, self.last_error)

    async def copy_once(self) -> bool:
        """Copy the users and ACLs of the first master that answers; False (the last copy kept) when none did."""
        try:
            info = await self.api.get_cluster_info()
            masters = sorted(addrs["0"] for b in (info.get("brokerAddrTable") or {}).values()
                             if isinstance(addrs := b.get("brokerAddrs"), dict) and "0" in addrs)
        except Exception as exc:
            return self._failed(f"the name server's cluster info: {exc}")
        if not masters:
            return self._failed("no master broker is registered")
        problems = []
        for addr in masters:
            try:
                users = await self._list(addr, RequestCode.AUTH_LIST_USER)
                acls = await self._list(addr, RequestCode.AUTH_LIST_ACL)
                table_users = {u["username"]: user_from_stored(u["username"], u) for u in users}
                table_acls = {a["subject"]: acl_from_stored(a["subject"], a) for a in acls}
            except Exception as exc:
                problems.append(f"{addr}: {exc}")
                continue
            if (table_users, table_acls) != (self.users, self.acls):
                self.users, self.acls = table_users, table_acls
                self.generation += 1
            self.copied_from, self.last_error = addr, ""
            self.copied_at = asyncio.get_running_loop().time()
            self.copies += 1
            return True
        return self._failed("; ".join(problems))

    async def _list(self, addr: str, code: RequestCode) -> list[dict[str, Any]]:
        resp = await self.api.remoting.invoke(addr, RemotingCommand.request(code), self.timeout_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise ValueError(f"{code.name} answered {resp.code}: {resp.remark}")
        if len(resp.body) > MAX_TABLE_BYTES:
            raise ValueError(f"{code.name} answered {len(resp.body)} bytes")
        data = orjson.loads(resp.body) if resp.body else []
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise ValueError(f"{code.name} answered {type(data).__name__}, not a list of objects")
        return data

    def _failed(self, why: str) -> bool:
        if why != self.last_error:
            log.warning("the users and ACLs could not be copied from the brokers (%s); %s", why,
                        "keeping the last copy" if self.copies else "nobody is let in until they are")
        self.last_error = why
        return False


__all__ = ["BrokerAuthMetadata"]
