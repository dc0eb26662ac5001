"""A real name server on 127.0.0.1, spoken to with real remoting frames."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sluice.common.config import NamesrvConfig
from sluice.common.errors import StoreConfigError
from sluice.common.structs import DataVersion, TopicConfig
from sluice.namesrv import NamesrvController, TopicConfigSerializeWrapper, encode_register_broker_body
from sluice.remoting.client import RemotingClient
from sluice.remoting.codec import FrameDecoder
from sluice.remoting.codes import RequestCode, ResponseCode
from sluice.remoting.command import RemotingCommand

BROKER_ADDR = "127.0.0.1:10911"


def run(test: Callable[..., Awaitable[None]], *args: Any) -> None:
    asyncio.run(asyncio.wait_for(test(*args), 60))


@contextlib.asynccontextmanager
async def namesrv(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[NamesrvController, RemotingClient]]:
    config = NamesrvConfig(host="127.0.0.1", port=0, kv_config_path=str(tmp_path / "namesrv" / "kvConfig.json"),
                           **settings)
    controller = NamesrvController(config)
    await controller.start()
    client = RemotingClient()
    try:
        yield controller, client
    finally:
        await client.close()
        await controller.stop()


def register_request(topics: list[TopicConfig], broker_name: str = "broker-a", broker_addr: str = BROKER_ADDR,
                     broker_id: int = 0, compressed: bool = False, counter: int = 1, crc: bool = True,
                     cluster: str = "DefaultCluster") -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper(DataVersion(1700000000000, counter), {t.topic_name: t for t in topics})
    body = encode_register_broker_body(wrapper, compressed=compressed)
    ext = {"brokerName": broker_name, "brokerAddr": broker_addr, "clusterName": cluster,
           "haServerAddr": "127.0.0.1:10912", "brokerId": str(broker_id), "compressed": str(compressed).lower(),
           "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF if crc else 0)}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body)


async def get_route(client: RemotingClient, addr: str, topic: str) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))


async def wait_until_gone(client: RemotingClient, addr: str, topic: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await get_route(client, addr, topic)).code == ResponseCode.TOPIC_NOT_EXIST:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"route of {topic} still there after {timeout} s")


@pytest.mark.parametrize("compressed", [False, True])
def test_registered_topic_is_routable(tmp_path: Path, compressed: bool):
    async def scenario() -> None:
        async with namesrv(tmp_path) as (ns, client):
            resp = await client.invoke(ns.address, register_request(
                [TopicConfig("TopicTest", 4, 4), TopicConfig("TBW102", 8, 8, 7)], compressed=compressed))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            route = await get_route(client, ns.address, "TopicTest")
            assert route.code == ResponseCode.SUCCESS
            d = json.loads(bytes(route.body))
            assert d == {"brokerDatas": [{"brokerAddrs": {"0": BROKER_ADDR}, "brokerName": "broker-a",
                                          "cluster": "DefaultCluster"}],
                         "filterServerTable": {},
                         "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                                         "writeQueueNums": 4}]}
            q = d["queueDatas"][0]
            assert all(type(q[k]) is int for k in ("perm", "readQueueNums", "writeQueueNums", "topicSysFlag"))
            assert json.loads(bytes((await get_route(client, ns.address, "TBW102")).body))["queueDatas"][0][
                "perm"] == 7
    run(scenario)


def test_unknown_topic_is_topic_not_exist(tmp_path: Path):
    async def scenario() -> None:
        async with namesrv(tmp_path) as (ns, client):
            resp = await get_route(client, ns.address, "Nope")
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST == 17
            assert resp.remark.startswith("No topic route info in name server for the topic: Nope")
            assert bytes(resp.body) == b""
    run(scenario)


def test_route_request_as_the_cpp_client_sends_it(tmp_path: Path):
    """Raw frame: numeric ext values, language CPP, version 63, trailing newline in the JSON header."""
    async def scenario() -> None:
        async with namesrv(tmp_path) as (ns, client):
            await client.invoke(ns.address, register_request([TopicConfig("TopicTest", 4, 4)]))
            header = (json.dumps({"code": 105, "extFields": {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "x",
                                                             "topic": "TopicTest"},
                                  "flag": 0, "language": "CPP", "opaque": 7, "remark": "", "version": 63}) + "\n"
                      ).encode()
            reader, writer = await asyncio.open_connection("127.0.0.1", ns.port)
            writer.write(struct.pack(">II", 4 + len(header), len(header)) + header)
            (length,) = struct.unpack(">I", await reader.readexactly(4))
            frame = struct.pack(">I", length) + await reader.readexactly(length)
            writer.close()
            await writer.wait_closed()
            (resp,) = FrameDecoder().feed(frame)
            assert (resp.code, resp.opaque, resp.flag) == (0, 7, 1)
            raw_header = json.loads(frame[8:8 + (struct.unpack_from(">I", frame, 4)[0] & 0xFFFFFF)])
            assert all(type(raw_header[k]) is int for k in ("code", "opaque", "flag", "version"))
            assert json.loads(bytes(resp.body))["brokerDatas"][0]["brokerAddrs"] == {"0": BROKER_ADDR}
    run(scenario)


def test_slave_registration_and_cluster_info(tmp_path: Path):
    async def scenario() -> None:
        async with namesrv(tmp_path) as (ns, client):
            await client.invoke(ns.address, register_request([TopicConfig("T", 4, 4)]))
            resp = await client.invoke(ns.address, register_request([TopicConfig("T", 4, 4)],
                                                                     broker_addr="127.0.0.1:10921", broker_id=1))
            assert resp.code == ResponseCode.SUCCESS
            assert resp.ext_fields == {"masterAddr": BROKER_ADDR, "haServerAddr": "127.0.0.1:10912"}
            await client.invoke(ns.address, register_request([TopicConfig("T", 4, 4), TopicConfig("B", 1, 1)],
                                                             broker_name="broker-b", broker_addr="127.0.0.1:10931",
                                                             cluster="Other"))
            info = await client.invoke(ns.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert json.loads(bytes(info.body)) == {
                "brokerAddrTable": {
                    "broker-a": {"brokerAddrs": {"0": BROKER_ADDR, "1": "127.0.0.1:10921"}, "brokerName": "broker-a",
                                 "cluster": "DefaultCluster"},
                    "broker-b": {"brokerAddrs": {"0": "127.0.0.1:10931"}, "brokerName": "broker-b",
                                 "cluster": "Other"}},
                "clusterAddrTable": {"DefaultCluster": ["broker-a"], "Other": ["broker-b"]}}
            topics = await client.invoke(ns.address,
                                         RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
            assert json.loads(bytes(topics.body)) == {"topicList": ["B", "T"]}
            by_cluster = await client.invoke(ns.address, RemotingCommand.request(RequestCode.GET_TOPICS_BY_CLUSTER,
                                                                                   {"cluster": "DefaultCluster"}))
            assert json.loads(bytes(by_cluster.body)) == {"topicList": ["T"]}
            route = json.loads(bytes((await get_route(client, ns.address, "T")).body))
            assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-a", "broker-b"]
    run(scenario)


def test_silent_broker_expires(tmp_path: Path):
    async def scenario() -> None:
        async with namesrv(tmp_path, broker_channel_expired_time=150, scan_not_active_broker_interval=30) as (ns, c):
            broker = RemotingClient()
            try:
                await broker.invoke(ns.address, register_request([TopicConfig("T", 4, 4)]))
                conn = await broker.connection(ns.address)
                assert (await get_route(c, ns.address, "T")).code == ResponseCode.SUCCESS
                await wait_until_gone(c, ns.address, "T")
                deadline = time.monotonic() + 60
                while not conn.closed:  # the expired broker's connection is closed by the name server
                    assert time.monotonic() < deadline, "the expired broker's connection stayed open"
                    await asyncio.sleep(0.02)
            finally:
                await broker.close()
    run(scenario)


def test_closing_the_broker_connection_drops_it(tmp_path: Path):
    async def scenario() -> None:
        async with namesrv(tmp_path) as (ns, client):
            broker = RemotingClient()
            await broker.invoke(ns.address, register_request([TopicConfig("T", 4, 4)]))
            await broker.invoke(ns.address, register_request([TopicConfig("T", 4, 4)], counter=2))
            assert (await get_route(client, ns.address, "T")).code == ResponseCode.SUCCESS
            await broker.close()
            await wait_until_gone(client, ns.address, "T")
            assert ns.route_info.broker_live_table == {}
    run(scenario)


def test_unregister_and_query_data_version(tmp_path: Path):
    async def scenario() -> None:
        async with namesrv(tmp_path) as (ns, client):
            await client.invoke(ns.address, register_request([TopicConfig("T", 4, 4)], counter=3))
            ext = {"brokerName": "broker-a", "brokerAddr": BROKER_ADDR, "clusterName": "DefaultCluster",
                   "brokerId": "0"}
            for counter, changed in ((3, "false"), (4, "true")):
                body = json.dumps({"counter": counter, "timestamp": 1700000000000}).encode()
                resp = await client.invoke(ns.address, RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, ext,
                                                                                body))
                assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["changed"] == changed
                assert json.loads(bytes(resp.body)) == {"counter": 3, "stateVersion": 0, "timestamp": 1700000000000}
            resp = await client.invoke(ns.address, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext))
            assert resp.code == ResponseCode.SUCCESS
            assert (await get_route(client, ns.address, "T")).code == ResponseCode.TOPIC_NOT_EXIST
    run(scenario)


def test_crc_mismatch_and_bad_input_are_system_errors(tmp_path: Path):
    async def scenario() -> None:
        async with namesrv(tmp_path) as (ns, client):
            req = register_request([TopicConfig("T", 4, 4)])
            req.ext_fields["bodyCrc32"] = "12345"
            resp = await client.invoke(ns.address, req)
            assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
            req = register_request([TopicConfig("T", 4, 4)])
            del req.ext_fields["brokerName"]
            resp = await client.invoke(ns.address, req)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "brokerName" in resp.remark
            req = register_request([TopicConfig("T", 4, 4)], crc=False)
            req.ext_fields["brokerId"] = "zero"
            resp = await client.invoke(ns.address, req)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "brokerId" in resp.remark
            req = register_request([], crc=False)
            req.body = b"{not json"
            resp = await client.invoke(ns.address, req)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "not JSON" in resp.remark
            req = register_request([], crc=False, compressed=True)
            req.body = b"garbage"
            resp = await client.invoke(ns.address, req)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "inflate" in resp.remark
            resp = await client.invoke(ns.address, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC))
            assert resp.code == ResponseCode.SYSTEM_ERROR and "topic" in resp.remark
            resp = await client.invoke(ns.address, RemotingCommand.request(
                RequestCode.QUERY_DATA_VERSION, {"brokerAddr": BROKER_ADDR}, b"[]"))
            assert resp.code == ResponseCode.SYSTEM_ERROR
            # The name server still works after all that.
            assert (await client.invoke(ns.address, register_request([TopicConfig("T", 4, 4)]))).code == 0
    run(scenario)


def test_unknown_request_code_is_not_supported(tmp_path: Path):
    async def scenario() -> None:
        async with namesrv(tmp_path) as (ns, client):
            resp = await client.invoke(ns.address, RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"}))
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
            assert "not supported" in resp.remark
    run(scenario)


def test_kv_config_round_trip_and_persistence(tmp_path: Path):
    def kv(code: RequestCode, **ext: str) -> RemotingCommand:
        return RemotingCommand.request(code, ext)

    async def first_life() -> None:
        async with namesrv(tmp_path) as (ns, client):
            put = await client.invoke(ns.address, kv(RequestCode.PUT_KV_CONFIG, namespace="NS", key="k", value="v"))
            assert put.code == ResponseCode.SUCCESS
            await client.invoke(ns.address, kv(RequestCode.PUT_KV_CONFIG, namespace="NS", key="gone", value="x"))
            await client.invoke(ns.address, kv(RequestCode.DELETE_KV_CONFIG, namespace="NS", key="gone"))
            got = await client.invoke(ns.address, kv(RequestCode.GET_KV_CONFIG, namespace="NS", key="k"))
            assert (got.code, got.ext_fields) == (ResponseCode.SUCCESS, {"value": "v"})
            missing = await client.invoke(ns.address, kv(RequestCode.GET_KV_CONFIG, namespace="NS", key="gone"))
            assert missing.code == ResponseCode.QUERY_NOT_FOUND
            assert missing.remark == "No config item, Namespace: NS Key: gone"
            no_ns = await client.invoke(ns.address, kv(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="Other"))
            assert no_ns.code == ResponseCode.QUERY_NOT_FOUND
            bad = await client.invoke(ns.address, kv(RequestCode.PUT_KV_CONFIG, namespace="NS", key="k"))
            assert bad.code == ResponseCode.SYSTEM_ERROR and "value" in bad.remark

    async def second_life() -> None:
        async with namesrv(tmp_path) as (ns, client):
            got = await client.invoke(ns.address, kv(RequestCode.GET_KV_CONFIG, namespace="NS", key="k"))
            assert got.ext_fields == {"value": "v"}
            table = await client.invoke(ns.address, kv(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="NS"))
            assert json.loads(bytes(table.body)) == {"table": {"k": "v"}}

    run(first_life)
    on_disk = json.loads((tmp_path / "namesrv" / "kvConfig.json").read_text())
    assert on_disk == {"configTable": {"NS": {"k": "v"}}}
    run(second_life)


def test_order_topic_config_goes_into_routes_and_registration_replies(tmp_path: Path):
    async def scenario() -> None:
        async with namesrv(tmp_path) as (ns, client):
            await client.invoke(ns.address, RemotingCommand.request(
                RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"}))
            resp = await client.invoke(ns.address, register_request([TopicConfig("T", 4, 4)]))
            assert json.loads(bytes(resp.body)) == {"table": {"T": "broker-a:4"}}
            route = json.loads(bytes((await get_route(client, ns.address, "T")).body))
            assert route["orderTopicConf"] == "broker-a:4"
    run(scenario)


def test_corrupt_kv_config_file_is_a_clear_error(tmp_path: Path):
    path = tmp_path / "namesrv" / "kvConfig.json"
    path.parent.mkdir()
    path.write_text('{"configTable": {"NS": ')

    async def scenario() -> None:
        controller = NamesrvController(NamesrvConfig(host="127.0.0.1", port=0, kv_config_path=str(path)))
        with pytest.raises(StoreConfigError, match="kvConfig.json"):
            await controller.start()
        await controller.stop()

    run(scenario)
    path.write_text('{"configTable": {"NS": ["not", "an", "object"]}}')
    run(scenario)
