"""ACL 2.0's model (RocketMQ 5.3+, ``auth/``): users, resources, policy entries, policies and ACLs, with the JSON
the admin requests carry (``UserInfo``, ``AclInfo``) and the rule that picks the entry deciding a request.

Names are parsed case-insensitively, as RocketMQ's ``getByName``; unknown ones are ``None`` (the validation in
``check_acl`` names what is missing). Bounds keep a hostile admin body from filling memory.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Self

from sluice.common.errors import InvalidNameError, SluiceError
from sluice.common.namespace import namespace_of, validate_namespace

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"

# Bounds (beyond RocketMQ, which has none): what a user or rule may hold.
MAX_USERNAME = 256
MAX_PASSWORD = 1024
MAX_RESOURCE_NAME = 1024
MAX_ENTRIES_PER_ACL = 10_000
MAX_SOURCE_IPS = 256


class AuthenticationError(SluiceError):
    """A request that is not authenticated (RocketMQ's ``AuthenticationException``): NO_PERMISSION, the message as
    the remark."""


class AuthorizationError(SluiceError):
    """A request that is not allowed (RocketMQ's ``AuthorizationException``): NO_PERMISSION, the message as the
    remark."""


class _Named(enum.IntEnum):
    """An enum written by its name (``"Pub"``) and read by it in any case."""

    @property
    def label(self) -> str:
        return self.name.capitalize()

    @classmethod
    def of(cls, name: object) -> Self | None:
        if not isinstance(name, str):
            return None
        wanted = name.strip().lower()
        for member in cls:
            if member.label.lower() == wanted:
                return member
        return None


class Action(_Named):
    UNKNOWN = 0
    ALL = 1
    ANY = 2
    PUB = 3
    SUB = 4
    CREATE = 5
    UPDATE = 6
    DELETE = 7
    GET = 8
    LIST = 9


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    CLUSTER = 2
    NAMESPACE = 3
    TOPIC = 4
    GROUP = 5


class ResourcePattern(_Named):
    ANY = 1
    LITERAL = 2
    PREFIXED = 3

    @property
    def label(self) -> str:
        return self.name


class Decision(_Named):
    ALLOW = 1
    DENY = 2


class PolicyType(_Named):
    CUSTOM = 1
    DEFAULT = 2


class UserType(_Named):
    SUPER = 1
    NORMAL = 2


class UserStatus(_Named):
    ENABLE = 1
    DISABLE = 2

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(slots=True)
class User:
    username: str
    password: str
    user_type: UserType = UserType.NORMAL
    user_status: UserStatus = UserStatus.ENABLE

    @property
    def subject_key(self) -> str:
        return f"User:{self.username}"

    def to_info(self) -> dict[str, Any]:
        """RocketMQ's ``UserInfo`` as its broker writes it (fastjson: keys in order)."""
        return {"password": self.password, "userStatus": self.user_status.label, "userType": self.user_type.label,
                "username": self.username}


def subject_username(subject_key: str | None) -> str | None:
    """``"User:alice"`` → ``"alice"``; None for anything that is not a user subject (the only kind there is)."""
    if not subject_key or ":" not in subject_key:
        return None
    kind, _, name = subject_key.partition(":")
    return name if kind.strip().lower() == "user" else None


def subject_key(username: str) -> str:
    """The one spelling of a user's subject (``user:alice`` and ``User:alice`` are one subject)."""
    return f"User:{username}"


class Resource(NamedTuple):
    type: ResourceType
    name: str | None
    pattern: ResourcePattern

    @classmethod
    def of_topic(cls, name: str) -> Resource:
        return cls(ResourceType.TOPIC, name, ResourcePattern.LITERAL)

    @classmethod
    def of_group(cls, name: str) -> Resource:
        """A group; a retry topic's name (``%RETRY%g``) stands for its group."""
        if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
            name = name[len(RETRY_GROUP_TOPIC_PREFIX):]
        return cls(ResourceType.GROUP, name, ResourcePattern.LITERAL)

    @classmethod
    def of_cluster(cls, name: str) -> Resource:
        return cls(ResourceType.CLUSTER, name, ResourcePattern.LITERAL)

    @classmethod
    def parse(cls, key: str | None) -> Resource | None:
        """``"*"``, ``"Topic:*"``, ``"Topic:orders*"``, ``"Group:g"``, ``"Cluster:c"``; None when it is none of them."""
        if key is None or not key.strip():
            return None
        if key == "*":
            return cls(ResourceType.ANY, None, ResourcePattern.ANY)
        kind, sep, name = key.partition(":")
        rtype = ResourceType.of(kind)
        if rtype is None:
            return None
        if not sep:
            name = ""
        if name == "*":
            return cls(rtype, None, ResourcePattern.ANY)
        if name.endswith("*"):
            return cls(rtype, name[:name.index("*")], ResourcePattern.PREFIXED)
        return cls(rtype, name, ResourcePattern.LITERAL)

    @property
    def key(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        kind = self.type.label
        if self.pattern is ResourcePattern.ANY:
            return f"{kind}:*"
        if self.pattern is ResourcePattern.PREFIXED:
            return f"{kind}:{self.name}*"
        return f"{kind}:{self.name}"

    def matches(self, requested: Resource) -> bool:
        """Whether this (a rule's resource) covers ``requested`` (a request's, always literal)."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is ResourceType.NAMESPACE and requested.type in (ResourceType.TOPIC, ResourceType.GROUP):
            # (beyond RocketMQ, which defines the type and uses it nowhere: a namespace's topics and groups)
            ns = namespace_of(requested.name or "")
            if not ns:
                return False
            if self.pattern is ResourcePattern.ANY:
                return True
            if self.pattern is ResourcePattern.LITERAL:
                return ns == self.name
            return self.name is not None and ns.startswith(self.name)
        if self.type is not requested.type:
            return False
        if self.pattern is ResourcePattern.ANY:
            return True
        if self.pattern is ResourcePattern.LITERAL:
            return requested.name == self.name
        return requested.name is not None and self.name is not None and requested.name.startswith(self.name)


def valid_ip_or_cidr(text: str) -> bool:
    try:
        if "/" in text:
            ipaddress.ip_network(text, strict=False)
        else:
            ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def ip_in_range(ip: str, spec: str) -> bool:
    """RocketMQ's ``isIPInRange``: a plain address matches itself only; a CIDR matches the addresses in it."""
    if "/" not in spec:
        if ip == spec:
            return True
        try:
            return ipaddress.ip_address(ip) == ipaddress.ip_address(spec)
        except ValueError:
            return False
    try:
        return ipaddress.ip_address(ip.strip("[]")) in ipaddress.ip_network(spec, strict=False)
    except ValueError:
        return False


@dataclass(slots=True)
class PolicyEntry:
    resource: Resource
    actions: tuple[Action, ...]
    decision: Decision
    source_ips: tuple[str, ...] = ()

    def matches_actions(self, requested: Sequence[Action]) -> bool:
        """Any one of the requested actions granted (or denied) here is a match, as in RocketMQ."""
        if not self.actions:
            return False
        if Action.ANY in requested or Action.ALL in self.actions:
            return True
        return any(a in self.actions for a in requested)

    def matches_source(self, source_ip: str) -> bool:
        if not self.source_ips:
            return True
        if not source_ip:
            return False
        return any(ip_in_range(source_ip, spec) for spec in self.source_ips)

    def to_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"actions": [a.label for a in self.actions], "decision": self.decision.label,
                                "resource": self.resource.key}
        if self.source_ips:  # RocketMQ leaves the key out when a rule has no source range
            info["sourceIps"] = list(self.source_ips)
        return info


@dataclass(slots=True)
class Policy:
    policy_type: PolicyType
    entries: list[PolicyEntry] = field(default_factory=list)

    def update_entries(self, entries: Iterable[PolicyEntry]) -> None:
        """RocketMQ's ``Policy.updateEntry``: an entry for a resource already here replaces its actions, sources
        and decision; others are added."""
        index = {e.resource: e for e in self.entries}
        for new in entries:
            old = index.get(new.resource)
            if old is not None:
                old.actions, old.source_ips, old.decision = new.actions, new.source_ips, new.decision
            else:
                self.entries.append(new)
                index[new.resource] = new

    def to_info(self) -> dict[str, Any]:
        return {"entries": [e.to_info() for e in self.entries], "policyType": self.policy_type.label}


@dataclass(slots=True)
class Acl:
    subject: str  # "User:alice"
    policies: list[Policy] = field(default_factory=list)

    def policy(self, policy_type: PolicyType) -> Policy | None:
        for p in self.policies:
            if p.policy_type is policy_type:
                return p
        return None

    def copy(self) -> Acl:
        return Acl(self.subject, [Policy(p.policy_type, [PolicyEntry(e.resource, e.actions, e.decision, e.source_ips)
                                                         for e in p.entries]) for p in self.policies])

    def update_policies(self, policies: Iterable[Policy]) -> None:
        """RocketMQ's ``Acl.updatePolicy``: merged into the policy of the same type, or added."""
        for new in policies:
            old = self.policy(new.policy_type)
            if old is None:
                self.policies.append(Policy(new.policy_type, list(new.entries)))
            else:
                old.update_entries(new.entries)

    def delete_entry(self, policy_type: PolicyType, resource: Resource) -> None:
        policy = self.policy(policy_type)
        if policy is None:
            return
        policy.entries = [e for e in policy.entries if e.resource != resource]
        if not policy.entries:
            self.policies.remove(policy)

    def entry_count(self) -> int:
        return sum(len(p.entries) for p in self.policies)

    def to_info(self) -> dict[str, Any]:
        return {"policies": [p.to_info() for p in self.policies], "subject": self.subject}


# == which entry decides ===========================================================================
def _specificity(r: Resource) -> tuple[int, int]:
    """How specific a rule's resource is (lower first). A topic's or group's own name, then a prefix that reaches
    past a namespace's ``%``, then a namespace (its name, then a prefix of it), then other prefixes (the longer
    first), then ``Type:*``, ``Namespace:*`` and ``*``: a Deny of a namespace is not overruled by ``Topic:*``."""
    name = r.name or ""
    if r.type is ResourceType.ANY:
        return 7, 0
    if r.type is ResourceType.NAMESPACE:
        return {ResourcePattern.LITERAL: (2, 0), ResourcePattern.PREFIXED: (3, -len(name)),
                ResourcePattern.ANY: (6, 0)}[r.pattern]
    if r.pattern is ResourcePattern.LITERAL:
        return 0, 0
    if r.pattern is ResourcePattern.PREFIXED:
        return (1 if "%" in name else 4), -len(name)
    return 5, 0


def _compare_entries(e1: PolicyEntry, e2: PolicyEntry) -> int:
    """The most specific rule first (``_specificity``: exact before prefix before ``Type:*``, a longer prefix before
    a shorter one); between equally specific rules, Deny first (the issue's rule, and RocketMQ's stated intent:
    its code orders Allow first there, a tie only two entries of one resource can make)."""
    k1, k2 = _specificity(e1.resource), _specificity(e2.resource)
    if k1 != k2:
        return -1 if k1 < k2 else 1
    if e1.decision is not e2.decision:
        return -1 if e1.decision is Decision.DENY else 1
    return 0


_entry_order = functools.cmp_to_key(_compare_entries)


def deciding_entry(acl: Acl, resource: Resource, actions: Sequence[Action], source_ip: str) -> PolicyEntry | None:
    """The entry that decides a request on ``resource``: among the Custom policy's matching entries the most
    specific; the Default policy's only when no Custom entry matches."""
    for policy_type in (PolicyType.CUSTOM, PolicyType.DEFAULT):
        policy = acl.policy(policy_type)
        if policy is None:
            continue
        found = [e for e in policy.entries if e.resource.matches(resource) and e.matches_actions(actions)
                 and e.matches_source(source_ip)]
        if found:
            return min(found, key=_entry_order) if len(found) > 1 else found[0]
    return None


# == JSON of the admin requests ====================================================================
@dataclass(slots=True)
class EntryDraft:
    """A policy entry as an admin body gave it, before ``check_acl``: any part may be missing."""

    resource: Resource | None
    actions: tuple[Action, ...]
    decision: Decision | None
    source_ips: tuple[str, ...]


@dataclass(slots=True)
class AclDraft:
    subject: str
    policies: list[tuple[PolicyType, list[EntryDraft]]]


def parse_acl_info(info: object, header_subject: str | None) -> AclDraft:
    """An ``AclInfo`` body as RocketMQ's converter reads it: unknown actions dropped, unknown names None, a
    policy without entries skipped, the header's subject when the body names none. ``ValueError`` for a body
    that is not an ACL at all."""
    if not isinstance(info, dict):
        raise ValueError("The body of acl is null")
    subject = info.get("subject")
    if not isinstance(subject, str) or subject_username(subject) is None:
        subject = header_subject or ""
    policies_info = info.get("policies")
    if not isinstance(policies_info, list) or not policies_info:
        raise ValueError("The body of acl is null")
    draft = AclDraft(subject, [])
    count = 0
    for p in policies_info:
        if not isinstance(p, dict):
            raise ValueError("a policy must be a JSON object")
        entries_info = p.get("entries")
        if not isinstance(entries_info, list) or not entries_info:
            continue
        count += len(entries_info)
        if count > MAX_ENTRIES_PER_ACL:
            raise ValueError(f"an ACL holds at most {MAX_ENTRIES_PER_ACL} entries")
        entries = []
        for e in entries_info:
            if not isinstance(e, dict):
                raise ValueError("a policy entry must be a JSON object")
            key = e.get("resource")
            raw_actions = e.get("actions")
            actions = (Action.of(x) for x in (raw_actions if isinstance(raw_actions, list) else ()))
            raw_ips = e.get("sourceIps")
            if isinstance(raw_ips, list) and len(raw_ips) > MAX_SOURCE_IPS:
                raise ValueError(f"an entry lists at most {MAX_SOURCE_IPS} source ips")
            entries.append(EntryDraft(Resource.parse(key) if isinstance(key, str) else None,
                                      tuple(dict.fromkeys(a for a in actions if a is not None)),
                                      Decision.of(e.get("decision")),
                                      tuple(str(x) for x in raw_ips) if isinstance(raw_ips, list) else ()))
        draft.policies.append((PolicyType.of(p.get("policyType")) or PolicyType.CUSTOM, entries))
    return draft


def check_acl(draft: AclDraft) -> Acl:
    """RocketMQ's ``AuthorizationMetadataManagerImpl.validate``, its first complaint as ``AuthorizationError``;
    the ACL, its policies merged by type, when there is none."""
    username = subject_username(draft.subject)
    if username is None:
        raise AuthorizationError("The subject type is null.")
    if not draft.policies:
        raise AuthorizationError("The policies is empty.")
    acl = Acl(subject_key(username))
    for policy_type, drafts in draft.policies:
        if not drafts:
            raise AuthorizationError("The policy entries is empty.")
        entries = []
        for e in drafts:
            if e.resource is None:
                raise AuthorizationError("The resource is null.")
            if e.resource.type is ResourceType.UNKNOWN:
                raise AuthorizationError("The resource type is null.")
            if e.resource.name is not None and len(e.resource.name) > MAX_RESOURCE_NAME:
                raise AuthorizationError(f"The resource name is longer than {MAX_RESOURCE_NAME} characters.")
            if e.resource.type is ResourceType.NAMESPACE and e.resource.name:
                try:
                    validate_namespace(e.resource.name)
                except InvalidNameError as exc:
                    raise AuthorizationError(f"The resource {e.resource.key} names no namespace: {exc}") from None
            if not e.actions:
                raise AuthorizationError("The actions is empty.")
            if Action.ANY in e.actions:
                raise AuthorizationError("The actions can not be Any.")
            for ip in e.source_ips:
                if not ip.strip():
                    raise AuthorizationError("The source ip is empty.")
                if not valid_ip_or_cidr(ip.strip()):
                    raise AuthorizationError("The source ip is invalid.")
            if e.decision is None:
                raise AuthorizationError("The decision is null or illegal.")
            entries.append(PolicyEntry(e.resource, e.actions, e.decision, tuple(ip.strip() for ip in e.source_ips)))
        acl.update_policies([Policy(policy_type, entries)])
    return acl


def acl_from_stored(subject: str, data: dict[str, Any]) -> Acl:
    """An ACL from the broker's own file (``AclInfo``'s JSON, checked when written); ``ValueError`` if it is not."""
    try:
        return check_acl(parse_acl_info({**data, "subject": subject}, subject))
    except AuthorizationError as exc:
        raise ValueError(f"ACL of {subject}: {exc}") from None


def user_from_stored(username: str, data: dict[str, Any]) -> User:
    user_type = UserType.of(data.get("userType"))
    status = UserStatus.of(data.get("userStatus"))
    password = data.get("password")
    if user_type is None or status is None or not isinstance(password, str):
        raise ValueError(f"user {username!r} has no valid password, userType or userStatus")
    return User(username, password, user_type, status)
