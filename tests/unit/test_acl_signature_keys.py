"""What ACL 2.0 keeps between requests, so that a signature is not recomputed from scratch: a secret's prepared HMAC
key, the order a request's fields are signed in, each user's key in the broker. Each gives what the plain
computation gives, and none outlives a change of the secret or of the users."""

from __future__ import annotations

import base64
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.auth import signature
from sluice.auth.audit import AuditLog
from sluice.auth.credentials import Credentials, signing_hook
from sluice.auth.evaluator import KEY_CACHE_SIZE, Authenticator
from sluice.auth.model import Acl, AuthenticationError, User
from sluice.auth.signature import (
    SIGNATURE,
    UNIQUE_KEY_QUERY,
    V4_9_3,
    HmacSha1Key,
    remoting_content,
    sign_remoting,
)
from sluice.remoting.command import RemotingCommand

secrets = st.text(max_size=80) | st.binary(min_size=60, max_size=200).map(lambda b: b.hex())
parts = st.lists(st.binary(max_size=300), max_size=3)


@given(secrets, parts)
def test_a_prepared_key_gives_the_bytes_of_hmac_digest(secret: str, content: list[bytes]) -> None:
    expected = hmac.digest(secret.encode("utf-8"), b"".join(content), "sha1")
    key = HmacSha1Key(secret)
    assert key.digest(tuple(content)) == expected
    assert key.digest(b"".join(content)) == expected
    assert key.base64(tuple(memoryview(p) for p in content)) == base64.b64encode(expected).decode("ascii")
    assert key.digest(tuple(content)) == expected  # (again: the prepared state is not consumed)


def test_a_key_checks_a_signature_as_signature_matches_does() -> None:
    key = HmacSha1Key("secret")
    good = key.base64(b"text")
    assert key.matches(b"text", good)
    assert not key.matches(b"text", good[:-2] + "A=")
    assert not key.matches(b"text", None)
    assert not key.matches(b"text", "é" + good[1:])  # (not ASCII: refused, not raised)
    assert signature.signature_matches("secret", b"text", good)
    assert not signature.signature_matches("", b"text", HmacSha1Key("").base64(b"text"))  # (no secret: refused)


def _reference_content(ext: dict[str, str], body: bytes, version: int | None) -> bytes:
    """What the signature covers, computed the plain way: every field but Signature (and _UNIQUE_KEY_QUERY for an
    old client) sorted by name, values joined, then the body."""
    legacy = version is not None and version <= V4_9_3 and UNIQUE_KEY_QUERY in ext
    names = [k for k in sorted(ext) if k != SIGNATURE and not (legacy and k == UNIQUE_KEY_QUERY)]
    return "".join(ext[k] for k in names).encode("utf-8", "replace") + body


names = st.sampled_from(["a", "b", "topic", SIGNATURE, UNIQUE_KEY_QUERY, "AccessKey", "é", "Z"]) | st.text(max_size=4)


@given(st.dictionaries(names, st.text(max_size=12), max_size=10), st.binary(max_size=20),
       st.sampled_from([None, V4_9_3, V4_9_3 + 10]), st.randoms())
def test_the_signed_content_is_the_sorted_fields_whatever_their_order(ext: dict[str, str], body: bytes,
                                                                      version: int | None, rnd: object) -> None:
    items = list(ext.items())
    for _ in range(2):  # (the same names in another order: a cached order must not be reused for it wrongly)
        assert b"".join(remoting_content(dict(items), body, version)) == _reference_content(ext, body, version)
        rnd.shuffle(items)  # type: ignore[attr-defined]


def test_the_same_names_from_an_old_and_a_new_client_are_signed_differently() -> None:
    ext = {"b": "t", UNIQUE_KEY_QUERY: "true", "AccessKey": "ak"}
    assert b"".join(remoting_content(ext, b"", V4_9_3)) == b"akt"
    assert b"".join(remoting_content(ext, b"", V4_9_3 + 1)) == b"aktruet"
    assert b"".join(remoting_content(ext, b"", V4_9_3)) == b"akt"


def test_requests_of_many_fields_are_signed_without_being_kept_and_what_is_kept_is_bounded() -> None:
    many = {f"k{i:03}": str(i) for i in range(200)}
    assert b"".join(remoting_content(many, b"")) == _reference_content(many, b"", None)
    assert not any(len(k[0]) == 200 for k in signature._SIGNED_FIELDS)
    for i in range(signature._SIGNED_FIELDS_SIZE + 10):
        remoting_content({f"n{i}": "v", "a": "w"}, None)
    assert len(signature._SIGNED_FIELDS) <= signature._SIGNED_FIELDS_SIZE


def test_a_request_signed_with_a_kept_key_is_the_request_signed_with_the_secret() -> None:
    a, b = {"b": "orders", "a": "pg"}, {"b": "orders", "a": "pg"}
    sign_remoting(a, b"payload", "alice", "secret", "token")
    sign_remoting(b, b"payload", "alice", HmacSha1Key("secret"), "token")
    assert a == b


def test_a_provider_s_new_secret_signs_the_next_request() -> None:
    current = [Credentials("alice", "one")]
    hook = signing_hook(lambda: current[0])
    assert hook is not None
    for secret in ("one", "one", "two", "one"):
        current[0] = Credentials("alice", secret)
        request = RemotingCommand(310, {"b": "orders"}, b"body")
        hook(request)
        expected = {"b": "orders", "AccessKey": "alice"}
        sign_remoting(expected, b"body", "alice", secret)
        assert request.ext_fields == expected


class _Users:
    def __init__(self) -> None:
        self.users: dict[str, User] = {}
        self.generation = 0

    def get_user(self, username: str) -> User | None:
        return self.users.get(username)

    def get_acl(self, subject: str) -> Acl | None:
        return None


def _signed(secret: str) -> tuple[str, tuple[bytes, ...]]:
    ext = {"b": "orders"}
    sign_remoting(ext, b"body", "alice", secret)
    return ext[SIGNATURE], remoting_content(ext, b"body")


def test_a_changed_password_is_used_at_once_even_without_a_new_generation() -> None:
    users = _Users()
    users.users["alice"] = User("alice", "old")
    auth = Authenticator(users, AuditLog())
    sig, content = _signed("old")
    assert auth.authenticate("alice", sig, content, "310") is not None
    users.users["alice"] = User("alice", "new")  # (a front's copy may change its users before its generation)
    with pytest.raises(AuthenticationError, match="check signature failed."):
        auth.authenticate("alice", sig, content, "310")
    sig, content = _signed("new")
    assert auth.authenticate("alice", sig, content, "310") is not None


def test_kept_keys_go_when_the_users_change_and_stay_bounded() -> None:
    users = _Users()
    users.users["alice"] = User("alice", "pw")
    auth = Authenticator(users, AuditLog())
    sig, content = _signed("pw")
    auth.authenticate("alice", sig, content, "310")
    assert "alice" in auth._keys
    users.generation += 1
    del users.users["alice"]
    with pytest.raises(AuthenticationError, match="User:alice is not found."):
        auth.authenticate("alice", sig, content, "310")
    users.users["bob"] = User("bob", "pw")
    auth.authenticate("bob", sig, content, "310")
    assert list(auth._keys) == ["bob"]
    for i in range(KEY_CACHE_SIZE + 5):
        users.users[f"u{i}"] = User(f"u{i}", "pw")
        auth.authenticate(f"u{i}", sig, content, "310")
    assert len(auth._keys) <= KEY_CACHE_SIZE


def test_an_empty_password_or_a_missing_signature_is_refused() -> None:
    users = _Users()
    users.users["alice"] = User("alice", "")
    auth = Authenticator(users, AuditLog())
    with pytest.raises(AuthenticationError, match="check signature failed."):
        auth.authenticate("alice", HmacSha1Key("").base64(b"x"), (b"x",), "310")
    users.users["alice"] = User("alice", "pw")
    with pytest.raises(AuthenticationError, match="check signature failed."):
        auth.authenticate("alice", None, (b"x",), "310")
