"""sluice.remoting.tls on its own: contexts that follow their files, the self-signed certificate of test mode, the
settings' errors, and the acceptor's handling of clients that say nothing or too much at once."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from pathlib import Path
from types import SimpleNamespace

import pytest

from sluice.remoting import tls as tls_module
from sluice.remoting.tls import (
    ClientAuth,
    ServerTls,
    TlsAcceptor,
    TlsError,
    TlsMode,
    bind_socket,
    self_signed,
    server_tls,
)
from tests.tls_certs import CertificateAuthority, common_name


async def _end(sock: socket.socket) -> bytes:
    """What the server sends before it closes (b"": nothing; a close with unread bytes is a reset)."""
    try:
        return await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 1), 5)
    except ConnectionResetError:
        return b""


def _settings(**overrides: str) -> SimpleNamespace:
    base = {"tls_server_mode": "permissive", "tls_server_cert_path": "", "tls_server_key_path": "",
            "tls_server_key_password": "", "tls_server_trust_cert_path": "", "tls_server_need_client_auth": "none"}
    return SimpleNamespace(**{**base, **overrides})


def test_bad_settings_are_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(TlsError, match="tls_server_cert_path and tls_server_key_path are set together"):
        server_tls(_settings(tls_server_cert_path="/x.pem"), "broker", str(tmp_path))
    with pytest.raises(TlsError, match="tls_server_need_client_auth = 'require' needs tls_server_trust_cert_path"):
        server_tls(_settings(tls_server_need_client_auth="require"), "broker", str(tmp_path))
    with pytest.raises(TlsError, match="tls_server_trust_cert_path '/nowhere.pem': no such readable file"):
        server_tls(_settings(tls_server_trust_cert_path="/nowhere.pem"), "broker", str(tmp_path))
    with pytest.raises(TlsError, match="cannot load the certificate and its key"):
        server_tls(_settings(tls_server_cert_path="/x.pem", tls_server_key_path="/x.key"), "broker", str(tmp_path))
    assert server_tls(_settings(tls_server_mode="disabled"), "broker", str(tmp_path)) is None


def test_the_self_signed_certificate_is_made_at_the_first_tls_client_kept_and_made_anew_for_a_new_host(
        tmp_path: Path) -> None:
    tls = ServerTls(TlsMode.PERMISSIVE, "", "", name="broker", self_signed_dir=str(tmp_path), hosts=("10.1.2.3",))
    assert not tls.loaded and not (tmp_path / "self-signed.pem").exists()  # a server without TLS clients pays nothing
    tls.context()
    cert = (tmp_path / "self-signed.pem").read_bytes()
    assert (tmp_path / "self-signed.key").stat().st_mode & 0o777 == 0o600
    assert self_signed(str(tmp_path), ("10.1.2.3",)) == (str(tmp_path / "self-signed.pem"),
                                                         str(tmp_path / "self-signed.key"))
    assert (tmp_path / "self-signed.pem").read_bytes() == cert  # kept: a client may pin it
    self_signed(str(tmp_path), ("10.9.9.9",))
    assert (tmp_path / "self-signed.pem").read_bytes() != cert


def test_a_changed_certificate_is_loaded_and_a_broken_one_leaves_the_last_good_in_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tls_module, "RELOAD_CHECK_INTERVAL", 0.0)
    ca = CertificateAuthority(tmp_path / "pki")
    first, first_key = ca.issue("first")
    second, second_key = ca.issue("second")
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    cert.write_bytes(first.read_bytes())
    key.write_bytes(first_key.read_bytes())
    tls = ServerTls(TlsMode.ENFORCING, str(cert), str(key), name="broker")
    before = tls.context()
    cert.write_bytes(b"-----BEGIN CERTIFICATE-----\nhalf")
    assert tls.context() is before and tls.reloads == 0
    key.write_bytes(second_key.read_bytes())
    cert.write_bytes(second.read_bytes())
    after = tls.context()
    assert after is not before and tls.reloads == 1

    async def served() -> str:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=after)
        port = server.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cafile=str(ca.cert_path))
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
        der = writer.get_extra_info("ssl_object").getpeercert(True)
        writer.close()
        server.close()
        return common_name(der)

    assert asyncio.run(served()) == "second"


def test_mutual_tls_without_a_trust_file_cannot_be_configured() -> None:
    with pytest.raises(TlsError):
        ServerTls(TlsMode.ENFORCING, "", "", client_auth=ClientAuth.OPTIONAL)


def test_the_acceptor_bounds_the_clients_still_silent_and_closes_them_when_their_time_is_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tls_module, "FIRST_BYTE_TIMEOUT", 3.0)
    tls = ServerTls(TlsMode.PERMISSIVE, "", "", self_signed_dir=str(tmp_path))
    connected: list[ssl.SSLContext | None] = []

    async def scenario() -> tuple[float, float, bytes]:
        async def on_connection(sock: socket.socket, ctx: ssl.SSLContext | None) -> None:
            connected.append(ctx)
            sock.close()

        acceptor = TlsAcceptor(tls, on_connection, "test", max_pending=2)
        listening = bind_socket("127.0.0.1", 0)
        acceptor.start(listening)
        port = listening.getsockname()[1]
        loop = asyncio.get_running_loop()
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        while acceptor._silent < 2:
            await asyncio.sleep(0.01)
        t0 = loop.time()
        over = socket.create_connection(("127.0.0.1", port))  # over the bound: closed at once
        over.setblocking(False)
        assert await _end(over) == b""
        refused_after = loop.time() - t0
        over.close()
        for s in silent:
            s.setblocking(False)
        ends = await asyncio.gather(*(_end(s) for s in silent))  # the others once their time is up
        timed_out_after = loop.time() - t0
        assert list(ends) == [b"", b""]
        talker = socket.create_connection(("127.0.0.1", port))
        talker.sendall(b"\x00\x00\x00\x10")  # a remoting frame's length: plaintext
        talker.setblocking(False)
        end = await _end(talker)
        talker.close()
        for s in silent:
            s.close()
        acceptor.close()
        assert acceptor.refused_over_limit == 1
        return refused_after, timed_out_after, end

    refused_after, timed_out_after, end = asyncio.run(scenario())
    assert refused_after < 1.5 < timed_out_after, (refused_after, timed_out_after)
    assert end == b"" and connected == [None]  # only the one that spoke, as plaintext


def test_the_first_byte_tells_tls_from_plaintext(tmp_path: Path) -> None:
    tls = ServerTls(TlsMode.ENFORCING, "", "", self_signed_dir=str(tmp_path))
    seen: list[bool] = []

    async def scenario() -> int:
        async def on_connection(sock: socket.socket, ctx: ssl.SSLContext | None) -> None:
            seen.append(ctx is not None)
            sock.close()

        acceptor = TlsAcceptor(tls, on_connection, "test")
        listening = bind_socket("127.0.0.1", 0)
        acceptor.start(listening)
        port = listening.getsockname()[1]
        for first in (b"\x16\x03\x01", b"\x00\x00"):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(first)
            s.setblocking(False)
            await _end(s)
            s.close()
        acceptor.close()
        return acceptor.refused_plaintext

    assert asyncio.run(scenario()) == 1
    assert seen == [True]  # enforcing: the plaintext one never reached the server
    assert os.path.exists(tmp_path / "self-signed.pem")
