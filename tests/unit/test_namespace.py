"""Namespaces: names wrapped, unwrapped and read as RocketMQ 5.5's NamespaceUtil does (its answers for these inputs
were taken from the Java class); namespaces that are none refused."""

from __future__ import annotations

import pytest

from sluice.auth.model import Acl, Action, Decision, Policy, PolicyEntry, PolicyType, Resource, deciding_entry
from sluice.common.errors import InvalidNameError
from sluice.common.namespace import namespace_of, unwrap, validate_namespace, wrap


@pytest.mark.parametrize(("ns", "name", "wrapped"), [
    ("A", "orders", "A%orders"),
    ("A", "A%orders", "A%orders"),  # (already wrapped)
    ("A", "B%x", "A%B%x"),
    ("A", "%RETRY%g", "%RETRY%A%g"),
    ("A", "%DLQ%g", "%DLQ%A%g"),
    ("A", "%RETRY%A%g", "%RETRY%A%g"),
    ("A", "%x", "A%%x"),
    ("A", "orders_REPLY_TOPIC", "A%orders_REPLY_TOPIC"),  # (a namespace's reply topic is its own)
    ("A", "cid_rmq_sys_g", "A%cid_rmq_sys_g"),  # (RocketMQ's system-group check is case-sensitive)
    ("A", "CID_RMQ_SYS_g", "CID_RMQ_SYS_g"),
    ("A", "rmq_sys_wheel_timer", "rmq_sys_wheel_timer"),
    ("A", "TBW102", "TBW102"),
    ("A", "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC", "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC"),
    ("", "orders", "orders"),
])
def test_names_are_wrapped_as_namespaceutil_wraps_them(ns: str, name: str, wrapped: str) -> None:
    assert wrap(ns, name) == wrapped
    if ns and wrapped != name and not name.startswith(ns + "%"):
        assert namespace_of(wrapped) == ns and unwrap(wrapped) == name and unwrap(wrapped, ns) == name


def test_unwrap_takes_off_only_the_namespace_named() -> None:
    assert unwrap("A%x", "B") == "A%x" and unwrap("A%x") == "x" and unwrap("%RETRY%A%g", "A") == "%RETRY%g"
    assert namespace_of("orders") == "" and namespace_of("%RETRY%A%g") == "A" and namespace_of("%x") == ""


@pytest.mark.parametrize("ns", ["A\n", "a%b", "a|b", "rmq_sys_x", "CID_RMQ_SYS_x", "cid_rmq_sys_", "x" * 65, ""])
def test_a_namespace_that_is_none_is_refused(ns: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_namespace(ns)


def _decide(entries: list[tuple[str, str]], resource: Resource) -> tuple[str, Decision] | None:
    acl = Acl("User:u", [Policy(PolicyType.CUSTOM, [
        PolicyEntry(Resource.parse(key), (Action.SUB,), Decision.ALLOW if d == "Allow" else Decision.DENY)
        for key, d in entries])])
    found = deciding_entry(acl, resource, (Action.SUB,), "10.0.0.1")
    return None if found is None else (found.resource.key, found.decision)


def test_a_namespace_rule_is_less_specific_than_a_names_own_and_more_than_a_type_wide_one() -> None:
    secret = Resource.of_topic("secret%payroll")
    assert _decide([("Topic:*", "Allow"), ("Namespace:secret", "Deny")], secret) == ("Namespace:secret",
                                                                                      Decision.DENY)
    assert _decide([("Topic:s*", "Allow"), ("Namespace:secret", "Deny")], secret)[1] is Decision.DENY
    assert _decide([("Group:*", "Allow"), ("Namespace:secret", "Deny")],
                   Resource.of_group("%RETRY%secret%g"))[1] is Decision.DENY
    assert _decide([("Topic:secret%payroll", "Allow"), ("Namespace:secret", "Deny")], secret)[1] is Decision.ALLOW
    assert _decide([("Topic:secret%pay*", "Allow"), ("Namespace:secret", "Deny")], secret)[1] is Decision.ALLOW
    assert _decide([("Namespace:sec*", "Allow"), ("Namespace:secret", "Deny")], secret)[1] is Decision.DENY
    assert _decide([("Namespace:*", "Deny"), ("Topic:*", "Allow")], secret)[1] is Decision.ALLOW
    assert _decide([("Namespace:secret", "Allow")], Resource.of_topic("orders")) is None  # (in no namespace)
