"""What an operator reads of a broker and a name server (``mqadmin clusterList``, ``brokerStatus``, ``haStatus``,
``brokerConsumeStats``, ``producerConnection``, ``deleteSubGroup``, ``getBrokerConfig``, ``getNamesrvConfig``):
answered with RocketMQ's keys and Sluice's values, secrets hidden."""

from __future__ import annotations

import asyncio
import json

from sluice.aio import Producer
from sluice.client.admin import Admin
from sluice.client.message import Message
from sluice.remoting.codes import RequestCode, ResponseCode
from tests.conftest import Cluster


def test_status_requests_answer_with_rocketmqs_keys(empty_cluster: Cluster) -> None:
    c = empty_cluster
    broker = c.start_broker()
    c.create_topic("status-t", 2)
    ns, addr = c.namesrv_addr, broker.broker_addr

    async def go() -> None:
        async with Producer("status-pg", ns) as producer, Admin(ns) as admin:
            for i in range(3):
                await producer.send(Message("status-t", b"x%d" % i))
            resp = await admin.api.invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                          body=b'{"groupName":"status-g"}')
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            resp = await admin.api.invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "status-g", "topic": "status-t", "queueId": "0", "commitOffset": "0"})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            info = json.loads((await admin.api.invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO, {})).body)["table"]
            assert info["brokerActive"] == "true" and info["brokerVersionDesc"] == "V5_5_0"
            assert info["msgPutTotalTodayNow"] == "3"
            for key in ("putTps", "getTransferredTps", "pullThreadPoolQueueSize",
                        "pullThreadPoolQueueHeadWaitTimeMills", "sendThreadPoolQueueSize", "commitLogDiskRatio",
                        "msgPutTotalTodayMorning"):
                assert key in info, key
            assert 0.0 < float(info["commitLogDiskRatio"]) < 1.0

            resp = await admin.api.invoke(addr, RequestCode.VIEW_BROKER_STATS_DATA,
                                          {"statsName": "TOPIC_PUT_NUMS", "statsKey": "status-t"})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            stats = json.loads(resp.body)
            assert stats["statsMinute"]["sum"] == stats["statsDay"]["sum"] == 3 and stats["statsMinute"]["tps"] > 0
            resp = await admin.api.invoke(addr, RequestCode.VIEW_BROKER_STATS_DATA,
                                          {"statsName": "TOPIC_PUT_NUMS", "statsKey": "nope"})
            assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR,
                                                "The stats <TOPIC_PUT_NUMS> <nope> not exist")

            ha = json.loads((await admin.api.invoke(addr, RequestCode.GET_BROKER_HA_STATUS, {})).body)
            assert ha["master"] is True and ha["haConnectionInfo"] == [] and ha["masterCommitLogMaxOffset"] > 0

            resp = await admin.api.invoke(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                          {"producerGroup": "status-pg"})
            assert resp.code == ResponseCode.SUCCESS and len(json.loads(resp.body)["connectionSet"]) == 1
            resp = await admin.api.invoke(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "nope"})
            assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "the producer group[nope] not exist")

            resp = await admin.api.invoke(addr, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "false"})
            assert resp.code == ResponseCode.SUCCESS
            stats = bytes(resp.body).decode()
            assert '"brokerAddr"' in stats and '{"status-g":[{"consumeTps"' in stats, stats
            assert '"totalDiff":' in stats and '"totalDiff":0' not in stats, stats

            resp = await admin.api.invoke(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                          {"groupName": "status-g", "cleanOffset": "true"})
            assert resp.code == ResponseCode.SUCCESS

            resp = await admin.api.invoke(addr, RequestCode.GET_BROKER_CONFIG, {})
            text = bytes(resp.body).decode()
            assert resp.code == ResponseCode.SUCCESS and "brokerName=broker-a\n" in text
            assert "flushDiskType=" in text and "version" in resp.ext_fields
            resp = await admin.api.invoke(addr, RequestCode.UPDATE_BROKER_CONFIG, {},
                                          body=b"fileReservedTime=48\nautoCreateTopicEnable=false\n")
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            resp = await admin.api.invoke(addr, RequestCode.UPDATE_BROKER_CONFIG, {}, body=b"listenPort=1\n")
            assert resp.code == ResponseCode.INVALID_PARAMETER and "listenPort" in (resp.remark or "")
            text = bytes((await admin.api.invoke(addr, RequestCode.GET_BROKER_CONFIG, {})).body).decode()
            assert "fileReservedTime=48\n" in text and "autoCreateTopicEnable=false\n" in text
            assert broker.config.store.file_reserved_time == 48
            resp = await admin.api.invoke(ns, RequestCode.GET_NAMESRV_CONFIG, {})
            assert resp.code == ResponseCode.SUCCESS and "kvConfigPath=" in bytes(resp.body).decode()
    asyncio.run(go())


def test_the_earliest_message_time_is_the_oldest_records_store_time(empty_cluster: Cluster) -> None:
    c = empty_cluster
    broker = c.start_broker(store_clean_resource_interval=100)
    c.create_topic("earliest-t", 1)
    ns, addr = c.namesrv_addr, broker.broker_addr

    async def earliest(admin: Admin) -> int:
        info = json.loads((await admin.api.invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO, {})).body)["table"]
        return int(info["earliestMessageTimeStamp"])

    async def go() -> tuple[int, int, int]:
        async with Producer("earliest-pg", ns) as producer, Admin(ns) as admin:
            empty = await earliest(admin)  # (an empty log: unknown, as RocketMQ's -1)
            first = await producer.send(Message("earliest-t", b"first"))
            await producer.send(Message("earliest-t", b"second"))
            stored = (await admin.get_message(first.offset_msg_id))[0].store_timestamp
            async with asyncio.timeout(30):  # (read by the retention thread: within its interval)
                while (seen := await earliest(admin)) == -1:
                    await asyncio.sleep(0.05)
            return empty, seen, stored

    empty, seen, stored = asyncio.run(go())
    assert empty == -1 and seen == stored


def test_the_broker_config_never_shows_a_secret(empty_cluster: Cluster) -> None:
    from sluice.common.config import AuthUser
    c = empty_cluster
    c.credentials = ("root", "root-secret-value")
    broker = c.start_broker(authentication_enabled=True, authorization_enabled=True,
                            init_authentication_user=AuthUser(username="root", password="root-secret-value"))

    async def go() -> str:
        async with Admin(c.namesrv_addr, credentials=c.credentials) as admin:
            resp = await admin.api.invoke(broker.broker_addr, RequestCode.GET_BROKER_CONFIG, {})
            assert resp.code == ResponseCode.SUCCESS
            return bytes(resp.body).decode()
    text = asyncio.run(go())
    assert "initAuthenticationUser=******\n" in text and "root-secret-value" not in text


def test_a_consumers_running_info_is_relayed_from_the_client_itself(empty_cluster: Cluster) -> None:
    """GET_CONSUMER_RUNNING_INFO (``mqadmin consumerStatus``): the broker asks the client it names and answers with
    what the client said — its properties, subscriptions and each queue's cache; a client not online is named."""
    from sluice import ConsumeStatus, PushConsumer
    from sluice.common.fastjson import loads as fastjson_loads
    from tests.integration.helpers import FAST, wait_until
    c = empty_cluster
    broker = c.start_broker()
    c.create_topic("running-t", 2)
    consumer = PushConsumer("running-g", namesrv=c.namesrv_addr, **FAST)
    consumer.subscribe("running-t")
    consumer.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    consumer.start()
    try:
        wait_until(lambda: sum(mq.topic == "running-t" for mq in consumer.aio.process_queues) == 2, 30,
                   "the consumer to hold both queues")
        client_id = consumer.aio.client.client_id

        async def ask(cid: str) -> tuple[int, str | None, bytes]:
            async with Admin(c.namesrv_addr) as admin:
                resp = await admin.api.invoke(broker.broker_addr, RequestCode.GET_CONSUMER_RUNNING_INFO,
                                              {"consumerGroup": "running-g", "clientId": cid,
                                               "jstackEnable": "false"})
                return resp.code, resp.remark, bytes(resp.body)
        code, _, body = asyncio.run(ask(client_id))
        assert code == ResponseCode.SUCCESS
        info = fastjson_loads(body)
        assert info["properties"]["clientId"] == client_id and info["properties"]["PROP_CONSUME_TYPE"]
        assert sorted(s["topic"] for s in info["subscriptionSet"]) == ["%RETRY%running-g", "running-t"]
        assert sorted(k["queueId"] for k in info["mqTable"] if k["topic"] == "running-t") == [0, 1]
        code, remark, _ = asyncio.run(ask("nobody@1"))
        assert (code, remark) == (ResponseCode.SYSTEM_ERROR, "The Consumer <nobody@1> not online")
    finally:
        consumer.shutdown()


def test_a_stored_message_is_handed_to_one_clients_listener_directly(empty_cluster: Cluster) -> None:
    """CONSUME_MESSAGE_DIRECTLY (the dashboard's "resend to this consumer"): the broker relays the stored message to
    the client it names, whose listener gets it once; the client's ConsumeMessageDirectlyResult is the answer. A
    message of another topic than the one named is not handed out."""
    import threading

    from sluice import ConsumeStatus, Producer, PushConsumer
    from sluice.common.fastjson import loads as fastjson_loads
    from tests.integration.helpers import FAST, wait_until
    c = empty_cluster
    broker = c.start_broker()
    c.create_topic("direct-t", 1)
    c.create_topic("direct-other", 1)
    with Producer("direct-pg", namesrv=c.namesrv_addr) as producer:
        other = producer.send(Message("direct-other", b"not-for-you"))
    seen: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list) -> ConsumeStatus:
        with lock:
            seen.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS
    consumer = PushConsumer("direct-g", namesrv=c.namesrv_addr, **FAST)
    consumer.subscribe("direct-t")
    consumer.register_listener(listener)
    consumer.start()
    try:
        with Producer("direct-pg2", namesrv=c.namesrv_addr) as producer:
            sent = producer.send(Message("direct-t", b"hello"))
        wait_until(lambda: seen == [b"hello"], 30, "the consumer to get the message once")

        async def direct(msg_id: str, topic: str) -> tuple[int, str | None, bytes]:
            async with Admin(c.namesrv_addr) as admin:
                resp = await admin.api.invoke(broker.broker_addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, {
                    "consumerGroup": "direct-g", "clientId": consumer.aio.client.client_id, "msgId": msg_id,
                    "brokerName": "broker-a", "topic": topic}, timeout_ms=10_000)
                return resp.code, resp.remark, bytes(resp.body)
        code, remark, body = asyncio.run(direct(sent.offset_msg_id, "direct-t"))
        assert code == ResponseCode.SUCCESS, remark
        result = fastjson_loads(body)
        assert result["consumeResult"] == "CR_SUCCESS" and result["autoCommit"] is True
        assert seen == [b"hello", b"hello"]
        code, _, _ = asyncio.run(direct(other.offset_msg_id, "direct-t"))
        assert code == ResponseCode.SYSTEM_ERROR and b"not-for-you" not in b"".join(seen)
    finally:
        consumer.shutdown()
