"""The dashboard's sessions, CSRF tokens, login throttle and where a login may send the browser next."""

from __future__ import annotations

import pytest

from sluice.dashboard.pages.login import LoginThrottle, _safe_next
from sluice.dashboard.sessions import SessionStore


def test_a_flood_of_new_visitors_evicts_anonymous_sessions_never_a_logged_in_one() -> None:
    store = SessionStore(b"k" * 32, idle_seconds=1800, max_sessions=3)
    user = store.new()
    user.username = "root"
    cookie = store.cookie_value(user)
    for _ in range(100):
        store.new()
    assert len(store) == 3 and store.get(cookie) is user


def test_one_user_keeps_at_most_twenty_sessions_the_oldest_go() -> None:
    store = SessionStore(b"k" * 32, idle_seconds=1800, max_sessions=1000)
    other = store.new()
    other.username = "root"
    mine = []
    for _ in range(25):
        s = store.new()
        s.username = "bob"
        store.limit_user("bob")
        mine.append(store.cookie_value(s))
    assert [store.get(c) is not None for c in mine] == [False] * 5 + [True] * 20
    assert store.get(store.cookie_value(other)) is other


def test_a_forged_or_foreign_cookie_or_token_names_no_session_and_never_fails() -> None:
    store = SessionStore(b"k" * 32, idle_seconds=1800, max_sessions=10)
    s = store.new()
    other = SessionStore(b"x" * 32, idle_seconds=1800, max_sessions=10)
    assert store.get(store.cookie_value(s)) is s
    assert store.get(other.cookie_value(s)) is None  # signed with another key
    for cookie in ("", "no-dot", f"{s.sid}.é", f"{s.sid}.\u2603", "." * 50):
        assert store.get(cookie) is None
    assert store.csrf_ok(s, store.csrf_token(s))
    for token in (None, "", "é", "\u2603" * 30, store.csrf_token(store.new())):
        assert not store.csrf_ok(s, token)


@pytest.mark.parametrize("target", ["https://example.com/", "//example.com", "/\t/example.com", "/\n/x",
                                    "/\\example.com", " /x", "x", "/%0a/x" + "a" * 3000, "/\x7f/x"])
def test_a_login_never_sends_the_browser_to_another_site(target: str) -> None:
    assert _safe_next(target) == "/"


def test_a_login_goes_back_to_the_page_that_asked_for_it() -> None:
    assert _safe_next("/topics/orders?kind=all") == "/topics/orders?kind=all"


def test_failed_logins_from_one_address_wait_after_five() -> None:
    throttle = LoginThrottle()
    for _ in range(LoginThrottle.FAILURES - 1):
        throttle.failed("10.0.0.1")
    assert not throttle.blocked("10.0.0.1")
    throttle.failed("10.0.0.1")
    assert throttle.blocked("10.0.0.1") and not throttle.blocked("10.0.0.2")
