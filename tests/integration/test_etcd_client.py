"""The etcd client against a real etcd (tests/etcd_server.py): KV, transactions, leases, endpoint failover and the
bounds (response size, timeout)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from sluice.etcd.etcd_client import (
    Compare,
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    KeyValue,
    Op,
    parse_endpoint,
    prefix_range_end,
)
from tests.broker_process import free_port
from tests.etcd_server import EtcdServer, require_etcd

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def wait_for(condition: Callable[[], Awaitable[bool]], timeout: float = 15) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, f"condition not met within {timeout} s"
        await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def _module_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd"), binary=require_etcd())
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def etcd_server(_module_etcd: str) -> str:
    """One etcd for this module's tests (one start instead of one a test), emptied before each."""

    async def clear() -> None:
        async with EtcdClient([_module_etcd]) as etcd:
            for kv in await etcd.get_prefix(b""):
                await etcd.delete(kv.key)

    run(clear())
    return _module_etcd


def dead_endpoint() -> str:
    """An endpoint on which nothing listens."""
    return f"127.0.0.1:{free_port()}"


# -- pure helpers ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("prefix", "end"), [(b"a/", b"a0"), (b"a\xff", b"b"), (b"\xff\xff", b"\0"), (b"", b"\0")])
def test_prefix_range_end_is_the_first_key_after_every_key_with_the_prefix(prefix: bytes, end: bytes) -> None:
    assert prefix_range_end(prefix) == end


@pytest.mark.parametrize(("text", "addr"), [("127.0.0.1:2379", ("127.0.0.1", 2379)),
                                            ("http://10.0.0.1:2380/", ("10.0.0.1", 2380)),
                                            ("https://10.0.0.1:2381", ("10.0.0.1", 2381))])
def test_endpoints_are_host_port_with_or_without_http_scheme(text: str, addr: tuple[str, int]) -> None:
    assert parse_endpoint(text) == addr


@pytest.mark.parametrize("text", ["unix://127.0.0.1:2379", "127.0.0.1", "localhost:http"])
def test_client_refuses_endpoints_it_cannot_speak_to(text: str) -> None:
    with pytest.raises(ValueError):
        EtcdClient([text])


# -- KV -------------------------------------------------------------------------------------------------------------


def test_put_then_get_returns_the_value_and_its_revisions(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            first = await etcd.put(b"broker/a", b"one")
            second = await etcd.put(b"broker/a", b"two")
            assert second > first
            kv = await etcd.get(b"broker/a")
            assert kv == KeyValue(b"broker/a", b"two", create_revision=first, mod_revision=second, version=2,
                                  lease=0)

    run(go())


def test_get_of_an_absent_key_is_none(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            assert await etcd.get(b"nothing-here") is None

    run(go())


def test_get_prefix_returns_exactly_the_keys_under_the_prefix_in_key_order(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            for key in (b"group/b", b"group", b"group/a", b"group0", b"groupz", b"group/\xff"):
                await etcd.put(key, key + b"!")
            kvs = await etcd.get_prefix(b"group/")
            assert [kv.key for kv in kvs] == [b"group/a", b"group/b", b"group/\xff"]
            assert [kv.value for kv in kvs] == [b"group/a!", b"group/b!", b"group/\xff!"]
            assert await etcd.get_prefix(b"none/") == []

    run(go())


def test_delete_reports_how_many_keys_it_deleted(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            await etcd.put(b"k", b"v")
            assert await etcd.delete(b"k") == 1
            assert await etcd.delete(b"k") == 0
            assert await etcd.get(b"k") is None

    run(go())


def test_binary_keys_and_values_round_trip_on_uvloop(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            key, value = bytes(range(1, 256)), bytes(range(256)) * 4
            await etcd.put(key, value)
            kv = await etcd.get(key)
            assert kv is not None and kv.key == key and kv.value == value
            lease = await etcd.lease_grant(30)
            assert await etcd.lease_keepalive(lease.id) > 0  # a chunked answer, then the connection again
            assert await etcd.delete(key) == 1

    # on uvloop, as the broker runs
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(asyncio.wait_for(go(), 60))


# -- transactions ---------------------------------------------------------------------------------------------------


def test_create_if_absent_succeeds_once_and_then_fails_showing_the_winner(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            def create(value: bytes) -> Any:
                return etcd.txn([Compare.version(b"master/broker-a", "=", 0)],
                                [Op.put(b"master/broker-a", value)], [Op.get(b"master/broker-a")])

            won = await create(b"broker-1")
            assert won.succeeded
            assert [r.kind for r in won.responses] == ["put"]
            lost = await create(b"broker-2")
            assert not lost.succeeded
            assert lost.revision == won.revision
            [answer] = lost.responses
            assert answer.kind == "get" and [kv.value for kv in answer.kvs] == [b"broker-1"]

    run(go())


def test_compare_on_mod_revision_fails_once_the_key_changed(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            rev = await etcd.put(b"epoch", b"1")
            await etcd.put(b"epoch", b"2")  # someone else's write in between
            stale = await etcd.txn([Compare.mod_revision(b"epoch", "=", rev)], [Op.put(b"epoch", b"3")], [])
            assert not stale.succeeded and stale.responses == []
            current = await etcd.get(b"epoch")
            assert current is not None and current.value == b"2"
            fresh = await etcd.txn([Compare.mod_revision(b"epoch", "=", current.mod_revision)],
                                   [Op.put(b"epoch", b"3"), Op.delete(b"other"), Op.get(b"epoch")], [])
            assert fresh.succeeded
            assert [r.kind for r in fresh.responses] == ["put", "delete", "get"]
            assert fresh.responses[1].deleted == 0
            assert fresh.responses[2].kvs[0].value == b"3"

    run(go())


def test_compares_on_value_create_revision_and_lease(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            lease = await etcd.lease_grant(30)
            created = await etcd.put(b"isr", b"a,b", lease=lease.id)
            holds = [Compare.value(b"isr", "=", b"a,b"), Compare.create_revision(b"isr", "=", created),
                     Compare.lease(b"isr", "=", lease.id), Compare.version(b"isr", ">", 0)]
            assert (await etcd.txn(holds, [Op.put(b"isr", b"a", lease=lease.id)], [])).succeeded
            assert not (await etcd.txn([Compare.value(b"isr", "=", b"a,b")], [Op.delete(b"isr")], [])).succeeded
            assert not (await etcd.txn([Compare.lease(b"isr", "!=", lease.id)], [Op.delete(b"isr")], [])).succeeded
            kv = await etcd.get(b"isr")
            assert kv is not None and kv.value == b"a" and kv.lease == lease.id

    run(go())


def test_compare_refuses_an_unknown_operator() -> None:
    with pytest.raises(ValueError):
        Compare.version(b"k", "==", 0)  # type: ignore[arg-type]


# -- leases ---------------------------------------------------------------------------------------------------------


def test_a_key_put_with_a_lease_disappears_once_the_lease_expires(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            lease = await etcd.lease_grant(1)
            assert lease.id != 0 and lease.ttl >= 1
            await etcd.put(b"alive/broker-a", b"1", lease=lease.id)
            kv = await etcd.get(b"alive/broker-a")
            assert kv is not None and kv.lease == lease.id

            async def gone() -> bool:
                return await etcd.get(b"alive/broker-a") is None

            await wait_for(gone, timeout=20)
            assert await etcd.lease_keepalive(lease.id) == 0

    run(go())


def test_keepalive_returns_the_ttl_and_zero_once_the_lease_is_revoked(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            lease = await etcd.lease_grant(30)
            assert lease.ttl == 30
            assert 0 < await etcd.lease_keepalive(lease.id) <= 30
            await etcd.put(b"owned", b"x", lease=lease.id)
            await etcd.lease_revoke(lease.id)
            assert await etcd.lease_keepalive(lease.id) == 0
            assert await etcd.get(b"owned") is None
            # the keep-alive connection is still good after the chunked (streamed) answers
            assert await etcd.put(b"after", b"y") > 0

    run(go())


def test_revoking_an_unknown_lease_is_an_error_with_etcds_code(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            with pytest.raises(EtcdError) as err:
                await etcd.lease_revoke(12345)
            assert not isinstance(err.value, EtcdUnavailable)
            assert err.value.code == 5 and "lease not found" in err.value.message

    run(go())


def test_a_put_with_an_unknown_lease_is_refused(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server]) as etcd:
            with pytest.raises(EtcdError, match="lease not found"):
                await etcd.put(b"k", b"v", lease=999)
            assert await etcd.get(b"k") is None

    run(go())


# -- endpoints and bounds -------------------------------------------------------------------------------------------


def test_the_second_endpoint_is_used_when_the_first_is_down(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([dead_endpoint(), f"http://{etcd_server}"]) as etcd:
            await etcd.put(b"k", b"v")
            kv = await etcd.get(b"k")
            assert kv is not None and kv.value == b"v"
            assert etcd.endpoint == f"http://{etcd_server}"

    run(go())


def test_calls_move_to_the_next_endpoint_when_the_current_server_stops(tmp_path: Path) -> None:
    binary = require_etcd()
    first, second = EtcdServer(tmp_path, "first", binary), EtcdServer(tmp_path, "second", binary)
    try:
        a, b = first.start(), second.start()

        async def go() -> None:
            async with EtcdClient([a, b]) as etcd:
                await etcd.put(b"where", b"first")
                assert etcd.endpoint == a
                first.stop()  # the client holds an idle keep-alive connection to it
                # two separate clusters: the answer shows which one served the read
                assert await etcd.get(b"where") is None
                assert etcd.endpoint == b
                await etcd.put(b"where", b"second")
                kv = await etcd.get(b"where")
                assert kv is not None and kv.value == b"second"

        run(go())
    finally:
        first.stop()
        second.stop()


def test_nothing_listening_is_a_clear_etcd_unavailable() -> None:
    endpoints = [dead_endpoint(), dead_endpoint()]

    async def go() -> None:
        async with EtcdClient(endpoints, timeout=1) as etcd:
            with pytest.raises(EtcdUnavailable) as err:
                await etcd.get(b"k")
            for endpoint in endpoints:
                assert endpoint in str(err.value)

    run(go())


def test_a_server_that_never_answers_times_out_as_unavailable() -> None:
    async def go() -> None:
        accepted: list[asyncio.StreamWriter] = []

        async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer)

        server = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with EtcdClient([f"127.0.0.1:{port}"], timeout=0.3) as etcd:
                started = time.monotonic()
                with pytest.raises(EtcdUnavailable, match="no answer within"):
                    await etcd.get(b"k")
                with pytest.raises(EtcdUnavailable, match="may or may not have been applied"):
                    await etcd.put(b"k", b"v")
                assert time.monotonic() - started < 10
        finally:
            for w in accepted:
                w.close()
            server.close()
            await server.wait_closed()

    run(go())


def test_a_response_larger_than_the_bound_is_refused(etcd_server: str) -> None:
    async def go() -> None:
        async with EtcdClient([etcd_server], max_response_bytes=64 << 10) as etcd:
            await etcd.put(b"big", b"x" * (100 << 10))  # the put's answer is small
            with pytest.raises(EtcdError, match="larger than 65536 bytes") as err:
                await etcd.get(b"big")
            assert not isinstance(err.value, EtcdUnavailable)
            await etcd.put(b"small", b"y")  # the refused answer's connection was dropped; a new one serves
            kv = await etcd.get(b"small")
            assert kv is not None and kv.value == b"y"

    run(go())


def test_a_closed_client_refuses_calls(etcd_server: str) -> None:
    async def go() -> None:
        etcd = EtcdClient([etcd_server])
        await etcd.put(b"k", b"v")
        await etcd.close()
        with pytest.raises(EtcdUnavailable, match="closed"):
            await etcd.get(b"k")

    run(go())


def test_over_tls_a_client_with_a_certificate_etcd_trusts_gets_in_and_one_without_does_not(tmp_path: Path) -> None:
    from sluice.remoting.tls import client_context
    from tests.tls_certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "pki")
    cert, key = ca.issue("etcd", client_too=True)
    server = EtcdServer(tmp_path / "etcd", binary=require_etcd(), tls=(str(cert), str(key), str(ca.cert_path)))
    endpoint = server.start()
    try:
        assert endpoint.startswith("https://")
        broker_cert, broker_key = ca.issue("broker", server=False)

        async def go() -> None:
            mutual = client_context(cafile=str(ca.cert_path), certfile=str(broker_cert), keyfile=str(broker_key))
            async with EtcdClient([endpoint], tls=mutual) as etcd:
                await etcd.put(b"tls/k", b"v")
                kv = await etcd.get(b"tls/k")
                assert kv is not None and kv.value == b"v"
            async with EtcdClient([endpoint], tls=client_context(cafile=str(ca.cert_path))) as anonymous:
                with pytest.raises(EtcdError):
                    await anonymous.get(b"tls/k")
            async with EtcdClient([endpoint.replace("https://", "http://")]) as plaintext:
                with pytest.raises(EtcdError):
                    await plaintext.get(b"tls/k")

        run(go())
    finally:
        server.stop()
