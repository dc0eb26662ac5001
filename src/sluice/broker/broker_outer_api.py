"""What the broker asks of name servers: REGISTER_BROKER / UNREGISTER_BROKER to every one of them."""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from typing import Any

from sluice.common import fastjson
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.errors import RemotingError

log = logging.getLogger(__name__)


class BrokerOuterAPI:
    def __init__(self, client: RemotingClient, timeout_ms: int) -> None:
        self.client = client
        self.timeout_ms = timeout_ms
        # A slave's master, as the name servers last answered its registration: (address, HA address).
        self.master_addresses: tuple[str, str] | None = None
        self._ignored_by: set[str] = set()  # name servers that ignored the last registration (said in a remark)

    async def register_broker_all(self, namesrv_addrs: list[str], cluster: str, broker_addr: str, broker_name: str,
                                  broker_id: int, ha_addr: str, wrapper: dict[str, Any]) -> int:
        """Register with every name server at once; returns how many accepted."""
        body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": wrapper},
                          separators=(",", ":")).encode()
        ext = {"brokerName": broker_name, "brokerAddr": broker_addr, "clusterName": cluster,
               "haServerAddr": ha_addr, "brokerId": str(broker_id), "compressed": "false",
               "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}

        async def one(addr: str) -> bool:
            try:
                resp = await self.client.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(ext),
                                                                              body), self.timeout_ms)
            except RemotingError as exc:
                log.warning("cannot register with name server %s: %s", addr, exc)
                return False
            if resp.code != ResponseCode.SUCCESS:
                log.warning("name server %s refused the registration: %s %s", addr, resp.code, resp.remark)
                return False
            if resp.remark and addr not in self._ignored_by:  # (a replaced master: once a name server, an episode)
                self._ignored_by.add(addr)
                log.warning("name server %s: %s", addr, resp.remark)
            elif not resp.remark:
                self._ignored_by.discard(addr)
            master = resp.ext_fields.get("masterAddr") or ""
            if master and broker_id != 0:
                self.master_addresses = (master, resp.ext_fields.get("haServerAddr") or "")
            return True

        results = await asyncio.gather(*(one(a) for a in namesrv_addrs))
        return sum(results)

    async def unregister_broker_all(self, namesrv_addrs: list[str], cluster: str, broker_addr: str,
                                    broker_name: str, broker_id: int) -> None:
        ext = {"brokerName": broker_name, "brokerAddr": broker_addr, "clusterName": cluster,
               "brokerId": str(broker_id)}

        async def one(addr: str) -> None:
            try:
                await self.client.invoke(addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(ext)),
                                         self.timeout_ms)
            except RemotingError as exc:
                log.info("cannot unregister from name server %s: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in namesrv_addrs))

    async def get_topic_route(self, namesrv_addr: str, topic: str) -> dict[str, Any] | None:
        """A topic's route as a name server has it (None: it knows no such topic); raises ``RemotingError`` when
        it does not answer."""
        resp = await self.client.invoke(namesrv_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                                              {"topic": topic}), self.timeout_ms)
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            return None
        route = fastjson.loads(resp.body)
        return route if isinstance(route, dict) else None
