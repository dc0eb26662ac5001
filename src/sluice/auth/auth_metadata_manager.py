"""The users and ACLs a broker keeps (RocketMQ's ``AuthenticationMetadataManager`` and
``AuthorizationMetadataManager`` over its local providers): in memory, and in ``config/auth.json`` (owner-only,
written atomically and fsynced off the event loop; a change is answered once it is on disk).

Every change bumps ``generation``, which the authorizer's decision cache is keyed by.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from sluice.auth.model import (
    MAX_ENTRIES_PER_ACL,
    MAX_PASSWORD,
    MAX_USERNAME,
    Acl,
    AuthenticationError,
    AuthorizationError,
    PolicyType,
    Resource,
    User,
    UserStatus,
    UserType,
    acl_from_stored,
    subject_key,
    subject_username,
    user_from_stored,
)
from sluice.common.config_manager import ConfigManager

MAX_USERS = 100_000


class AuthMetadataManager(ConfigManager):
    file_mode = 0o600
    malformed = "is malformed (users and ACLs)"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.users: dict[str, User] = {}
        self.acls: dict[str, Acl] = {}
        self.generation = 0

    # == the file ==
    def encode(self) -> dict[str, Any]:
        return {"users": {name: {k: v for k, v in u.to_info().items() if k != "username"}
                          for name, u in self.users.items()},
                "acls": {subject: {"policies": acl.to_info()["policies"]} for subject, acl in self.acls.items()}}

    def decode(self, data: dict[str, Any]) -> None:
        users = {name: user_from_stored(name, info) for name, info in dict(data.get("users", {})).items()}
        acls = {subject: acl_from_stored(subject, info) for subject, info in dict(data.get("acls", {})).items()}
        with self._lock:
            self.users, self.acls = users, acls
            self.generation += 1

    def replace_all(self, data: dict[str, Any]) -> Future[None]:
        """Take a master's table (a slave's copy), as ``encode`` wrote it."""
        before = self.encode()
        if before == data:
            done: Future[None] = Future()
            done.set_result(None)
            return done
        self.decode(data)
        return self.persist()

    def _changed(self) -> Future[None]:
        self.generation += 1
        return self.persist()

    # == users ==
    def get_user(self, username: str) -> User | None:
        return self.users.get(username)

    def list_users(self, name_filter: str | None = None) -> list[User]:
        names = sorted(self.users, key=lambda n: n.encode("utf-8"))
        return [self.users[n] for n in names if not name_filter or name_filter in n]

    @staticmethod
    def _check_user(user: User) -> None:
        if not user.username.strip():
            raise AuthenticationError("username can not be blank")
        if len(user.username) > MAX_USERNAME:
            raise AuthenticationError(f"username is longer than {MAX_USERNAME} characters")
        if ":" in user.username or any(c.isspace() or ord(c) < 32 for c in user.username):
            raise AuthenticationError("username can not hold ':', spaces or control characters")
        if len(user.password) > MAX_PASSWORD:
            raise AuthenticationError(f"password is longer than {MAX_PASSWORD} characters")

    def create_user(self, user: User) -> Future[None]:
        self._check_user(user)
        if not user.password.strip():
            raise AuthenticationError("password can not be blank")
        with self._lock:
            if user.username in self.users:
                raise AuthenticationError("The user is existed")
            if len(self.users) >= MAX_USERS:
                raise AuthenticationError(f"there are {MAX_USERS} users already")
            self.users[user.username] = user
        return self._changed()

    def update_user(self, username: str, password: str | None, user_type: UserType | None,
                    user_status: UserStatus | None) -> Future[None]:
        with self._lock:
            old = self.users.get(username)
            if old is None:
                raise AuthenticationError("The user is not exist")
            new = User(username, password if password and password.strip() else old.password,
                       user_type or old.user_type, user_status or old.user_status)
            self._check_user(new)
            self.users[username] = new
        return self._changed()

    def delete_user(self, username: str) -> Future[None]:
        """The user and its ACL (none: nothing to do)."""
        if not username.strip():
            raise AuthenticationError("username can not be blank")
        with self._lock:
            had = self.users.pop(username, None) is not None
            had = self.acls.pop(subject_key(username), None) is not None or had
        if not had:
            done: Future[None] = Future()
            done.set_result(None)
            return done
        return self._changed()

    def ensure_super_user(self, username: str, password: str) -> Future[None] | None:
        """A first super user (``init_authentication_user``, the inner credentials): created when absent, never
        changed."""
        with self._lock:
            if username in self.users:
                return None
        return self.create_user(User(username, password, UserType.SUPER, UserStatus.ENABLE))

    # == ACLs ==
    def get_acl(self, subject: str) -> Acl | None:
        username = subject_username(subject)
        return None if username is None else self.acls.get(subject_key(username))

    def list_acls(self, subject_filter: str | None = None, resource_filter: str | None = None) -> list[Acl]:
        out = []
        for subject in sorted(self.acls, key=lambda s: s.encode("utf-8")):
            if subject_filter and subject_filter not in subject:
                continue
            acl = self.acls[subject]
            if resource_filter and resource_filter not in subject:
                policies = []
                for p in acl.policies:
                    entries = [e for e in p.entries if resource_filter in e.resource.key]
                    if entries or not p.entries:
                        policies.append(type(p)(p.policy_type, entries))
                if not policies:
                    continue
                acl = Acl(acl.subject, policies)
            out.append(acl)
        return out

    def put_acl(self, acl: Acl) -> Future[None]:
        """Create the subject's ACL, or merge ``acl`` into it (RocketMQ's create and update do the same)."""
        username = subject_username(acl.subject)
        with self._lock:
            if username is None or username not in self.users:
                raise AuthorizationError(f"The subject of {acl.subject} is not exist.")
            old = self.acls.get(acl.subject)
            if old is None:
                merged = acl
            else:
                merged = old.copy()  # (the live one stays as it is if this one is refused)
                merged.update_policies(acl.policies)
            if merged.entry_count() > MAX_ENTRIES_PER_ACL:
                raise AuthorizationError(f"The policy entries are too many (at most {MAX_ENTRIES_PER_ACL}).")
            self.acls[acl.subject] = merged
        return self._changed()

    def delete_acl(self, subject: str, policy_type: PolicyType | None, resource: Resource | None) -> Future[None]:
        username = subject_username(subject)
        if username is None:
            raise AuthorizationError("The subject is null.")
        subject = subject_key(username)
        with self._lock:
            if username not in self.users:
                raise AuthorizationError("The subject is not exist.")
            old = self.acls.get(subject)
            if old is None:
                raise AuthorizationError("The acl is not exist.")
            if resource is None:
                del self.acls[subject]
            else:
                acl = old.copy()
                acl.delete_entry(policy_type or PolicyType.CUSTOM, resource)
                if acl.policies:
                    self.acls[subject] = acl
                else:
                    del self.acls[subject]
        return self._changed()
