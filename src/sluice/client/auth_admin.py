"""ACL 2.0's management requests as a client sends them (RocketMQ's ``MQClientAPIImpl.createUser`` …
``listAcl``): users and rules of one broker. ``Admin`` sends the changes to every master of a cluster."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sluice.client.mq_client_api import MQClientAPI
from sluice.common import fastjson
from sluice.remoting.codes import RequestCode


def _body(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def user_info(username: str, password: str | None = None, user_type: str | None = None,
              user_status: str | None = None) -> dict[str, str]:
    info = {"username": username}
    for key, value in (("password", password), ("userType", user_type), ("userStatus", user_status)):
        if value is not None:
            info[key] = value
    return info


def policy_entry(resource: str, actions: str | Sequence[str], decision: str = "Allow",
                 source_ips: Iterable[str] = ()) -> dict[str, Any]:
    """One rule: ``policy_entry("Topic:orders*", "Pub,Sub")``; ``decision`` Allow or Deny."""
    acts = [a.strip() for a in actions.split(",")] if isinstance(actions, str) else list(actions)
    return {"resource": resource, "actions": [a for a in acts if a], "sourceIps": list(source_ips),
            "decision": decision}


def acl_info(subject: str, entries: Iterable[dict[str, Any]], policy_type: str = "Custom") -> dict[str, Any]:
    return {"subject": subject, "policies": [{"policyType": policy_type, "entries": list(entries)}]}


class AuthAdminAPI:
    """The ten requests, to the broker at ``addr``; a refusal raises ``BrokerResponseError`` (code and remark)."""

    def __init__(self, api: MQClientAPI, timeout_ms: int = 3_000) -> None:
        self.api = api
        self.timeout_ms = timeout_ms

    async def _call(self, addr: str, code: int, ext: dict[str, str], body: bytes = b"") -> Any:
        resp = await self.api.invoke_ok(addr, code, ext, body, self.timeout_ms)
        return fastjson.loads(bytes(resp.body)) if resp.body else None

    async def create_user(self, addr: str, info: dict[str, str]) -> None:
        await self._call(addr, RequestCode.AUTH_CREATE_USER, {"username": info["username"]}, _body(info))

    async def update_user(self, addr: str, info: dict[str, str]) -> None:
        await self._call(addr, RequestCode.AUTH_UPDATE_USER, {"username": info["username"]}, _body(info))

    async def delete_user(self, addr: str, username: str) -> None:
        await self._call(addr, RequestCode.AUTH_DELETE_USER, {"username": username})

    async def get_user(self, addr: str, username: str) -> dict[str, Any] | None:
        found = await self._call(addr, RequestCode.AUTH_GET_USER, {"username": username})
        return found if isinstance(found, dict) else None

    async def list_users(self, addr: str, name_filter: str | None = None) -> list[dict[str, Any]]:
        found = await self._call(addr, RequestCode.AUTH_LIST_USER, {"filter": name_filter} if name_filter else {})
        return list(found or [])

    async def create_acl(self, addr: str, info: dict[str, Any]) -> None:
        await self._call(addr, RequestCode.AUTH_CREATE_ACL, {"subject": info["subject"]}, _body(info))

    async def update_acl(self, addr: str, info: dict[str, Any]) -> None:
        await self._call(addr, RequestCode.AUTH_UPDATE_ACL, {"subject": info["subject"]}, _body(info))

    async def delete_acl(self, addr: str, subject: str, resource: str | None = None,
                         policy_type: str | None = None) -> None:
        ext = {"subject": subject}
        if resource:
            ext["resource"] = resource
        if policy_type:
            ext["policyType"] = policy_type
        await self._call(addr, RequestCode.AUTH_DELETE_ACL, ext)

    async def get_acl(self, addr: str, subject: str) -> dict[str, Any] | None:
        found = await self._call(addr, RequestCode.AUTH_GET_ACL, {"subject": subject})
        return found if isinstance(found, dict) else None

    async def list_acls(self, addr: str, subject_filter: str | None = None,
                        resource_filter: str | None = None) -> list[dict[str, Any]]:
        ext = {}
        if subject_filter:
            ext["subjectFilter"] = subject_filter
        if resource_filter:
            ext["resourceFilter"] = resource_filter
        return list(await self._call(addr, RequestCode.AUTH_LIST_ACL, ext) or [])
