"""RocketMQ's fast (VIP) channel: a broker also listens on listen_port - 2, where clients with ``vipChannelEnabled``
(RocketMQ Dashboard's default) send everything but the long-polling reads."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sluice.client.message import Message
from sluice.client.mq_client_api import MQClientAPI
from sluice.common.errors import BrokerResponseError
from sluice.common.message_codec import decode_record
from sluice.common.structs import ConsumerData, HeartbeatData, MessageQueue, SubscriptionData
from sluice.remoting.client import RemotingClient
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.headers.send import SendMessageRequestHeader
from tests.broker_process import free_port_with_fast_channel
from tests.conftest import Cluster, ServerLoop
from tests.integration.test_acl import ROOT, _auth_user


def _send_v2(topic: str, body: bytes) -> tuple[dict[str, str], bytes]:
    props = Message(topic, body).wire_for_send("FASTCHANNEL0000000000000001", 4 << 20, None).decode()
    header = SendMessageRequestHeader("fast-pg", topic, "TBW102", 4, 0, 0, int(time.time() * 1000), 0, props)
    return header.encode_v2(), body


def test_the_fast_channel_serves_sends_and_admin_requests_but_not_long_polling_reads(empty_cluster: Cluster) -> None:
    port = free_port_with_fast_channel()
    broker = empty_cluster.start_broker(listen_port=port)
    empty_cluster.create_topic("fast-t", 1)
    fast = f"127.0.0.1:{port - 2}"

    async def go() -> None:
        remoting = RemotingClient()
        api = MQClientAPI(remoting, [empty_cluster.namesrv_addr])
        try:
            ext, body = _send_v2("fast-t", b"through the fast channel")
            sent = await api.invoke(fast, RequestCode.SEND_MESSAGE_V2, ext, body)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            assert (await api.get_broker_runtime_info(fast))["msgPutTotalTodayNow"] == "1"
            mq = MessageQueue("fast-t", broker.config.broker_name, 0)
            assert await api.get_max_offset(fast, mq) == 1

            with pytest.raises(BrokerResponseError) as refused:
                await api.pull_message(fast, "fast-g", mq, 0, 32)
            assert refused.value.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert "request type 11 not supported" in refused.value.remark
            # The main port reads what the fast one took.
            pulled = await api.pull_message(broker.broker_addr, "fast-g", mq, 0, 32)
            assert decode_record(pulled.body).body == b"through the fast channel"

            # A consumer that beats on the fast channel is online until that connection closes.
            hb = HeartbeatData("fast-client@1", consumers=[ConsumerData("fast-g", subscriptions=[
                SubscriptionData("fast-t", "*")])])
            await api.send_heartbeat(fast, hb)
            assert await api.get_consumer_id_list(broker.broker_addr, "fast-g") == ["fast-client@1"]
        finally:
            await remoting.close()

        remoting = RemotingClient()
        api = MQClientAPI(remoting, [empty_cluster.namesrv_addr])
        try:
            deadline = time.monotonic() + 30
            while await api.get_consumer_id_list(broker.broker_addr, "fast-g"):
                assert time.monotonic() < deadline, "the closed fast-channel connection's consumer stayed online"
                await asyncio.sleep(0.02)
        finally:
            await remoting.close()

    asyncio.run(go())


def test_a_broker_whose_fast_channel_port_is_taken_still_serves_its_main_port(empty_cluster: Cluster,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    import socket
    port = free_port_with_fast_channel()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port - 2))
        squatter.listen()
        broker = empty_cluster.start_broker(listen_port=port)
    assert broker.port == port
    assert any("fast channel's port" in r.getMessage() and str(port - 2) in r.getMessage() for r in caplog.records)


def test_with_acl_on_the_fast_channel_refuses_what_is_not_signed(tmp_path: Path, server_loop: ServerLoop) -> None:
    port = free_port_with_fast_channel()
    c = Cluster(tmp_path, server_loop)
    c.credentials = ROOT
    try:
        c.start_broker(listen_port=port, authentication_enabled=True, authorization_enabled=True,
                       init_authentication_user=_auth_user(*ROOT))
        c.create_topic("fast-acl", 1)

        async def go() -> None:
            remoting = RemotingClient()
            api = MQClientAPI(remoting, [c.namesrv_addr])
            try:
                ext, body = _send_v2("fast-acl", b"unsigned")
                refused = await api.invoke(f"127.0.0.1:{port - 2}", RequestCode.SEND_MESSAGE_V2, ext, body)
                assert refused.code == ResponseCode.NO_PERMISSION
                assert refused.remark == "username cannot be null."
                with pytest.raises(BrokerResponseError) as info:
                    await api.get_broker_runtime_info(f"127.0.0.1:{port - 2}")
                assert info.value.code == ResponseCode.NO_PERMISSION
            finally:
                await remoting.close()

        asyncio.run(go())
    finally:
        c.close()


def test_the_two_ports_share_one_connection_limit(empty_cluster: Cluster) -> None:
    from sluice.common.config import RemotingConfig
    port = free_port_with_fast_channel()
    broker = empty_cluster.start_broker(listen_port=port, remoting=RemotingConfig(max_connections=2))

    async def go() -> None:
        clients = [RemotingClient(), RemotingClient()]
        try:
            for client, p in zip(clients, (port, port - 2), strict=True):
                api = MQClientAPI(client, [empty_cluster.namesrv_addr])
                await api.get_broker_runtime_info(f"127.0.0.1:{p}", 30_000)  # one connection open on each port
            reader, writer = await asyncio.open_connection("127.0.0.1", port - 2)
            try:
                assert await asyncio.wait_for(reader.read(1), 30) == b""  # closed at once: over the limit
            finally:
                writer.close()
            acceptor = broker.fast_server.acceptor  # (the TLS-detecting acceptor: on by default)
            deadline = time.monotonic() + 30  # (counted on the servers' thread)
            while broker.fast_server.refused + (acceptor.refused_over_limit if acceptor else 0) != 1:
                assert time.monotonic() < deadline, "the refusal was not counted"
                await asyncio.sleep(0.01)
        finally:
            for client in clients:
                await client.close()

    asyncio.run(go())
