"""ACL 2.0's management requests (AUTH_CREATE_USER … AUTH_LIST_ACL, RocketMQ's ``AdminBrokerProcessor``): users
and their rules, answered as RocketMQ 5.5 answers them, each change on disk before its answer.

Only a super user may create, promote or change a super user; with authentication off (no ``AccessKey``), the
caller counts as one, as in RocketMQ.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import Future
from typing import Any

from sluice.auth.auth_metadata_manager import AuthMetadataManager
from sluice.auth.model import (
    AuthenticationError,
    AuthorizationError,
    PolicyType,
    Resource,
    User,
    UserStatus,
    UserType,
    check_acl,
    parse_acl_info,
    subject_key,
    subject_username,
)
from sluice.auth.signature import ACCESS_KEY
from sluice.common import fastjson
from sluice.remoting.codes import ResponseCode
from sluice.remoting.command import RemotingCommand
from sluice.remoting.connection import Connection

log = logging.getLogger(__name__)

SYSTEM_ERROR_REMARK = "An system error occurred, please try again later."


def _body_json(req: RemotingCommand) -> object:
    if not req.body:
        return None
    try:
        return fastjson.loads(bytes(req.body))
    except ValueError:
        return None


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class AuthAdminProcessor:
    def __init__(self, metadata: AuthMetadataManager) -> None:
        self.metadata = metadata

    def _caller_is_super(self, req: RemotingCommand) -> bool:
        ak = req.ext_fields.get(ACCESS_KEY)
        if not ak:
            return True
        user = self.metadata.get_user(ak)
        return user is not None and user.user_type is UserType.SUPER

    async def _done(self, req: RemotingCommand, change: Future[None]) -> RemotingCommand:
        try:
            await asyncio.wrap_future(change)
        except OSError as exc:
            log.error("users and ACLs could not be written: %s", exc)
            return req.response(ResponseCode.SYSTEM_ERROR, SYSTEM_ERROR_REMARK)
        return req.response(ResponseCode.SUCCESS)

    @staticmethod
    def _refused(req: RemotingCommand, exc: Exception) -> RemotingCommand:
        return req.response(ResponseCode.NO_PERMISSION, str(exc))

    # == users ==
    @staticmethod
    def _user_request(req: RemotingCommand) -> tuple[str, dict[str, Any]] | RemotingCommand:
        """The user named and the UserInfo body of a create or an update; or the refusal."""
        username = req.ext_fields.get("username", "")
        if not username.strip():
            return req.response(ResponseCode.INVALID_PARAMETER, "The username is blank")
        info = _body_json(req)
        if not isinstance(info, dict):
            return req.response(ResponseCode.SYSTEM_ERROR, "The body of the user is not a UserInfo JSON object")
        return username, info

    async def auth_create_user(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        parsed = self._user_request(req)
        if isinstance(parsed, RemotingCommand):
            return parsed
        username, info = parsed
        user_type = UserType.of(info.get("userType"))
        if user_type is UserType.SUPER and not self._caller_is_super(req):
            return req.response(ResponseCode.SYSTEM_ERROR, "The super user can only be create by super user")
        password = info.get("password")
        try:
            if not isinstance(password, str) or not password.strip():
                raise AuthenticationError("password can not be blank")
            user = User(username, password, user_type or UserType.NORMAL,
                        UserStatus.of(info.get("userStatus")) or UserStatus.ENABLE)
            change = self.metadata.create_user(user)
        except AuthenticationError as exc:
            return self._refused(req, exc)
        log.info("user %s created (%s)", username, user.user_type.label)
        return await self._done(req, change)

    async def auth_update_user(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        parsed = self._user_request(req)
        if isinstance(parsed, RemotingCommand):
            return parsed
        username, info = parsed
        user_type = UserType.of(info.get("userType"))
        caller_super = self._caller_is_super(req)
        if user_type is UserType.SUPER and not caller_super:
            return req.response(ResponseCode.SYSTEM_ERROR, "The super user can only be update by super user")
        old = self.metadata.get_user(username)
        if old is None:
            return self._refused(req, AuthenticationError("The user is not exist"))
        if old.user_type is UserType.SUPER and not caller_super:
            return self._refused(req, AuthenticationError("The super user can only be update by super user"))
        password = info.get("password")
        try:
            change = self.metadata.update_user(username, password if isinstance(password, str) else None, user_type,
                                               UserStatus.of(info.get("userStatus")))
        except AuthenticationError as exc:
            return self._refused(req, exc)
        log.info("user %s updated", username)
        return await self._done(req, change)

    async def auth_delete_user(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        username = req.ext_fields.get("username", "")
        old = self.metadata.get_user(username)
        if old is not None and old.user_type is UserType.SUPER and not self._caller_is_super(req):
            return self._refused(req, AuthenticationError("The super user can only be update by super user"))
        try:
            change = self.metadata.delete_user(username)
        except AuthenticationError as exc:
            return self._refused(req, exc)
        if old is not None:
            log.info("user %s deleted", username)
        return await self._done(req, change)

    def auth_get_user(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        username = req.ext_fields.get("username", "")
        if not username.strip():
            return req.response(ResponseCode.INVALID_PARAMETER, "The username is blank")
        user = self.metadata.get_user(username)
        return req.response(ResponseCode.SUCCESS, body=_json(user.to_info()) if user is not None else b"")

    def auth_list_user(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        users = self.metadata.list_users(req.ext_fields.get("filter") or None)
        return req.response(ResponseCode.SUCCESS, body=_json([u.to_info() for u in users]) if users else b"")

    # == ACLs ==
    async def _put_acl(self, req: RemotingCommand) -> RemotingCommand:
        try:
            draft = parse_acl_info(_body_json(req), req.ext_fields.get("subject"))
        except ValueError as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, str(exc))
        try:
            acl = check_acl(draft)
            change = self.metadata.put_acl(acl)
        except AuthorizationError as exc:
            return self._refused(req, exc)
        log.info("ACL of %s written (%d entries)", acl.subject, acl.entry_count())
        return await self._done(req, change)

    async def auth_create_acl(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return await self._put_acl(req)

    async def auth_update_acl(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return await self._put_acl(req)

    async def auth_delete_acl(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        ext = req.ext_fields
        subject = ext.get("subject") or ""
        policy_type = PolicyType.of(ext.get("policyType")) or PolicyType.CUSTOM
        try:
            change = self.metadata.delete_acl(subject, policy_type, Resource.parse(ext.get("resource")))
        except AuthorizationError as exc:
            return self._refused(req, exc)
        log.info("ACL of %s: %s deleted", subject, ext.get("resource") or "every entry")
        return await self._done(req, change)

    def auth_get_acl(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        subject = req.ext_fields.get("subject") or ""
        username = subject_username(subject)
        if username is None:
            return req.response(ResponseCode.SYSTEM_ERROR, SYSTEM_ERROR_REMARK)
        if self.metadata.get_user(username) is None:
            return self._refused(req, AuthorizationError("The subject is not exist."))
        acl = self.metadata.get_acl(subject_key(username))
        return req.response(ResponseCode.SUCCESS, body=_json(acl.to_info()) if acl is not None else b"")

    def auth_list_acl(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        acls = self.metadata.list_acls(req.ext_fields.get("subjectFilter") or None,
                                       req.ext_fields.get("resourceFilter") or None)
        return req.response(ResponseCode.SUCCESS, body=_json([a.to_info() for a in acls]) if acls else b"")
