"""The real ``mqadmin`` (RocketMQ 5.5.0's ``MQAdminStartup``) against Sluice, one command after another as an operator
types them, each judged on what it prints: mqadmin exits 0 even after printing an exception, so the output is
what tells."""

from __future__ import annotations

import asyncio
import json
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sluice import ConsumeStatus, OffsetOption
from sluice.aio import LitePushConsumer, Producer, PushConsumer
from sluice.client.admin import Admin
from sluice.client.message import Message
from sluice.common.lite import POLICY_MIN
from sluice.common.message import MessageExt
from tests.broker_process import free_port_with_fast_channel
from tests.conftest import Cluster
from tests.interop.java_clients import JavaBuild

SESSION = "sluice.interop.MqAdminSession"
JVM = ("-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
Check = Callable[[str], bool]


@pytest.fixture
def node(empty_cluster: Cluster) -> Iterator[Cluster]:
    empty_cluster.start_broker("broker-a")
    empty_cluster.create_topic("ops-t", 4)
    yield empty_cluster


class MqAdmin:
    """mqadmin commands run one after another in one JVM (``MqAdminSession``): what each printed. A JVM start per
    command cost more than the commands."""

    def __init__(self, build: JavaBuild, home: Path, jvm: tuple[str, ...] = JVM) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(build.argv(SESSION, jvm=jvm, home=home), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8")
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def __call__(self, *args: str, timeout: float = 120, limit_ms: int = 0) -> str:
        """What the command printed; ``limit_ms``: one that never ends by itself (clusterRT) is interrupted then."""
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"args": args, "limitMs": limit_ms} if limit_ms else args) + "\n")
            self.proc.stdin.flush()
            deadline, skipped = time.monotonic() + timeout, []
            while True:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
                if line is None:
                    raise AssertionError(f"mqadmin session ended at {args[0]}: {''.join(skipped)[-1500:]}")
                if line.startswith('{"out":'):
                    return str(json.loads(line)["out"])
                skipped.append(line)  # what the JVM printed outside a command (its own warnings)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def mqadmin(java_build: JavaBuild, tmp_path: Path) -> Iterator[MqAdmin]:
    session = MqAdmin(java_build, tmp_path / "home")
    try:
        yield session
    finally:
        session.close()


def _no_error(out: str) -> bool:
    return not re.search(r"Exception|command failed|not supported|ERROR", out)


def test_everyday_mqadmin_commands_print_what_an_operator_expects(node: Cluster, mqadmin: MqAdmin) -> None:
    ns, addr = node.namesrv_addr, node.brokers[0].broker_addr

    async def produce() -> str:
        async with Producer("ops-pg", ns) as producer:
            result = None
            for i in range(8):
                result = await producer.send(Message("ops-t", f"ops-{i}".encode(), keys=[f"ops-key-{i}"]))
            assert result is not None
            return result
    last = asyncio.run(produce())
    msg_id, queue_id, offset = last.msg_id, last.queue.queue_id, last.queue_offset

    commands: list[tuple[tuple[str, ...], Check]] = [
        (("clusterList", "-n", ns), lambda o: bool(re.search(r"DefaultCluster\s+broker-a\s+0\s+\S+\s+V5_5_0.*true\s*$",
                                                             o, re.M))),
        (("brokerStatus", "-n", ns, "-b", addr), lambda o: "brokerActive" in o and re.search(
            r"msgPutTotalTodayNow\s*: 8", o) is not None and "null" not in o),
        (("topicList", "-n", ns), lambda o: "ops-t" in o),
        (("topicRoute", "-n", ns, "-t", "ops-t"), lambda o: '"brokerName":"broker-a"' in o.replace(" ", "")),
        (("topicStatus", "-n", ns, "-t", "ops-t"), lambda o: len(re.findall(r"broker-a\s+\d\s+0\s+\d", o)) == 4),
        (("updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", "ops-new", "-r", "2", "-w", "2"),
         lambda o: "success" in o),
        (("updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", "ops-g"), lambda o: "success" in o),
        (("updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", "ops-g2", "-r", "5"), lambda o: "success" in o),
        (("updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", "ops-prio", "-r", "4", "-w", "4", "-a",
          "+message.type=PRIORITY"), lambda o: "success" in o and _no_error(o)),
        (("updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", "ops-prio", "-r", "4", "-w", "4", "-a",
          "+message.type=URGENT"), lambda o: "value is not in set" in o),
        (("updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", "ops-g3", "--attributes", "+priority.factor=50"),
         lambda o: "success" in o and _no_error(o)),
        (("queryMsgByKey", "-n", ns, "-t", "ops-t", "-k", "ops-key-3"), lambda o: "ops-key-3" in o or "#Message ID"
         in o),
        (("queryMsgById", "-n", ns, "-t", "ops-t", "-i", msg_id), lambda o: "ops-t" in o and _no_error(o)),
        (("getBrokerConfig", "-n", ns, "-b", addr), lambda o: re.search(r"brokerName\s+=\s+broker-a", o) is not None),
        (("getNamesrvConfig", "-n", ns), lambda o: "kvConfigPath" in o and _no_error(o)),
        (("haStatus", "-n", ns, "-c", "DefaultCluster"), lambda o: "#MasterAddr" in o and _no_error(o)),
        (("brokerConsumeStats", "-n", ns, "-b", addr), lambda o: "Diff Total" in o and _no_error(o)),
        (("updateBrokerConfig", "-n", ns, "-b", addr, "-k", "fileReservedTime", "-v", "48"),
         lambda o: "success" in o and _no_error(o)),
        (("updateBrokerConfig", "-n", ns, "-b", addr, "-k", "listenPort", "-v", "1"),
         lambda o: "listenPort cannot be changed while the broker runs" in o),
        (("statsAll", "-n", ns, "-t", "ops-t"), lambda o: bool(re.search(r"^ops-t\s.*\s8\s*\S*$", o, re.M))
         and _no_error(o)),
        (("deleteSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", "ops-g"), lambda o: "success." in o),
        (("topicClusterList", "-n", ns, "-t", "ops-t"), lambda o: "DefaultCluster" in o and _no_error(o)),
        (("queryMsgByOffset", "-n", ns, "-t", "ops-t", "-b", "broker-a", "-i", str(queue_id), "-o", str(offset)),
         lambda o: msg_id in o and _no_error(o)),
        (("printMsg", "-n", ns, "-t", "ops-t", "-d", "true"), lambda o: all(f"ops-{i}" in o for i in range(8))
         and _no_error(o)),
        (("sendMessage", "-n", ns, "-t", "ops-t", "-p", "from-mqadmin", "-k", "mqadmin-key"),
         lambda o: "SEND_OK" in o and _no_error(o)),
        (("consumeMessage", "-n", ns, "-t", "ops-t", "-b", "broker-a", "-i", str(queue_id), "-o", "0", "-c", "1"),
         lambda o: "Consume ok" in o and _no_error(o)),
        (("checkMsgSendRT", "-n", ns, "-t", "ops-t", "-a", "5", "-s", "64"),
         lambda o: "Avg RT" in o and o.count("true") >= 5 and _no_error(o)),
        (("updateTopicPerm", "-n", ns, "-c", "DefaultCluster", "-t", "ops-new", "-p", "4"),
         lambda o: "success" in o and _no_error(o)),
        (("deleteTopic", "-n", ns, "-c", "DefaultCluster", "-t", "ops-new"), lambda o: "success" in o),
        (("updateOrderConf", "-n", ns, "-t", "ops-t", "-m", "put", "-v", "broker-a:4"),
         lambda o: "success" in o and _no_error(o)),
        (("updateOrderConf", "-n", ns, "-t", "ops-t", "-m", "get"), lambda o: "broker-a:4" in o and _no_error(o)),
        (("allocateMQ", "-n", ns, "-t", "ops-t", "-i", "10.0.0.1,10.0.0.2"),
         lambda o: "10.0.0.1" in o and "10.0.0.2" in o and _no_error(o)),
        (("getConsumerConfig", "-n", ns, "-g", "ops-g2"), lambda o: "retryMaxTimes" in o and _no_error(o)),
        (("wipeWritePerm", "-n", ns, "-b", "broker-a"),
         lambda o: re.search(r"wipe write perm of broker\[broker-a\] in name server\[\S+\] OK, [1-9]", o) is not None),
        (("topicRoute", "-n", ns, "-t", "ops-t"), lambda o: '"perm":4' in o.replace(" ", "")),  # (read only now)
        (("addWritePerm", "-n", ns, "-b", "broker-a"),
         lambda o: re.search(r"add write perm of broker\[broker-a\] in name server\[\S+\] OK, [1-9]", o) is not None),
        (("topicRoute", "-n", ns, "-t", "ops-t"), lambda o: '"perm":6' in o.replace(" ", "")),
    ]
    failed = {}
    for args, check in commands:
        out = mqadmin(*args)
        if not check(out):
            failed[" ".join(args[:1])] = out[-1500:]
    rt = mqadmin("clusterRT", "-n", ns, "-a", "5", "-s", "64", "-i", "1", limit_ms=4000)  # (runs until stopped)
    before_stop, _, stop = rt.partition("SubCommandException: CLusterSendMsgRTCommand command failed")
    if not (re.search(r"^DefaultCluster\s+broker-a\s+[\d.]+\s+5\s+0\s*$", before_stop, re.M)
            and _no_error(before_stop) and "sleep interrupted" in stop):  # (its end: stopped, not failing)
        failed["clusterRT"] = rt[-3000:]
    assert not failed, failed
    broker = node.brokers[0]
    assert broker.topic_config_manager.get("ops-prio").attributes == {"message.type": "PRIORITY"}
    assert broker.subscription_group_manager.table["ops-g3"].priority_factor == 50

    # producerConnection, consumerConnection and consumerStatus need clients online: they run while some are.
    async def with_clients() -> dict[str, str]:
        consumer = PushConsumer("ops-live-g", ns, consume_from="first", rebalance_interval=500)
        consumer.subscribe("ops-t")
        consumer.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
        async with Producer("ops-live-pg", ns) as producer:
            await producer.send(Message("ops-t", b"live"))
            await consumer.start()
            try:
                async with asyncio.timeout(30):
                    while sum(mq.topic == "ops-t" for mq in consumer.process_queues) < 4:
                        await asyncio.sleep(0.1)
                return {
                    "producerConnection": await asyncio.to_thread(
                        mqadmin, "producerConnection", "-n", ns, "-g", "ops-live-pg", "-t", "ops-t"),
                    "consumerConnection": await asyncio.to_thread(
                        mqadmin, "consumerConnection", "-n", ns, "-g", "ops-live-g"),
                    "consumerStatus": await asyncio.to_thread(
                        mqadmin, "consumerStatus", "-n", ns, "-g", "ops-live-g", "-i",
                        consumer.client.client_id),
                    "queryMsgById -d": await asyncio.to_thread(  # handed to that client's listener
                        mqadmin, "queryMsgById", "-n", ns, "-t", "ops-t", "-i", msg_id, "-g",
                        "ops-live-g", "-d", consumer.client.client_id),
                }
            finally:
                await consumer.shutdown()
    outs = asyncio.run(with_clients())
    assert re.search(r"0001\s+\S+", outs["producerConnection"]) and _no_error(outs["producerConnection"]), outs
    assert "ops-live-g" in outs["consumerConnection"] or "CONSUME_PASSIVELY" in outs["consumerConnection"] \
        or "CLUSTERING" in outs["consumerConnection"], outs["consumerConnection"][-1500:]
    assert "CR_SUCCESS" in outs["queryMsgById -d"], outs["queryMsgById -d"][-1500:]
    assert "#Consumer Properties#" in outs["consumerStatus"] and "ops-t" in outs["consumerStatus"] \
        and _no_error(outs["consumerStatus"]), outs["consumerStatus"][-1500:]

    # The group's offsets, once it has some: progress, reset, skip, clone.
    offsets: list[tuple[tuple[str, ...], Check]] = [
        (("consumerProgress", "-n", ns, "-g", "ops-live-g"), lambda o: "ops-t" in o and "Diff Total" in o
         and _no_error(o)),
        (("resetOffsetByTime", "-n", ns, "-g", "ops-live-g", "-t", "ops-t", "-s", "0"),
         lambda o: "broker-a" in o and _no_error(o)),
        (("skipAccumulatedMessage", "-n", ns, "-g", "ops-live-g", "-t", "ops-t"),
         lambda o: "broker-a" in o and _no_error(o)),
        (("cloneGroupOffset", "-n", ns, "-s", "ops-live-g", "-d", "ops-clone-g", "-t", "ops-t"),
         lambda o: "success" in o and _no_error(o)),
    ]
    for args, check in offsets:
        out = mqadmin(*args)
        if not check(out):
            failed[" ".join(args[:1])] = out[-1500:]
    assert not failed, failed


def test_mqadmin_with_the_vip_channel_on_is_served_on_the_brokers_fast_channel(empty_cluster: Cluster,
                                                                             java_build: JavaBuild,
                                                                             tmp_path: Path) -> None:
    """What RocketMQ Dashboard does by default (``isVIPChannel``): its admin client sends to listen_port - 2."""
    port = free_port_with_fast_channel()
    broker = empty_cluster.start_broker(listen_port=port)
    empty_cluster.create_topic("vip-t", 2)
    ns, addr = empty_cluster.namesrv_addr, broker.broker_addr
    session = MqAdmin(java_build, tmp_path / "home", JVM + ("-Dcom.rocketmq.sendMessageWithVIPChannel=true",))
    try:
        commands: list[tuple[tuple[str, ...], Check]] = [
            (("sendMessage", "-n", ns, "-t", "vip-t", "-p", "through-vip", "-k", "vip-key"),
             lambda o: "SEND_OK" in o and _no_error(o)),
            (("brokerStatus", "-n", ns, "-b", addr), lambda o: re.search(r"msgPutTotalTodayNow\s*: 1", o) is not None
             and _no_error(o)),
            (("updateSubGroup", "-n", ns, "-b", addr, "-g", "vip-g"), lambda o: "success" in o and _no_error(o)),
            (("topicStatus", "-n", ns, "-t", "vip-t"), lambda o: len(re.findall(r"broker-a\s+\d\s+0\s+\d", o)) == 2
             and _no_error(o)),
            (("queryMsgByKey", "-n", ns, "-t", "vip-t", "-k", "vip-key"), lambda o: "vip-key" in o and _no_error(o)),
        ]
        failed = {}
        for args, check in commands:
            before = broker.fast_server.accepted  # (each command's admin client connects anew)
            out = session(*args)
            if not check(out):
                failed[args[0]] = out[-1500:]
            elif broker.fast_server.accepted == before:
                failed[args[0]] = "served, but not through the fast channel"
        assert not failed, failed
    finally:
        session.close()


def test_mqadmin_lite_commands_show_the_lite_topics_a_sluice_consumer_reads(empty_cluster: Cluster,
                                                                           mqadmin: MqAdmin) -> None:
    """mqadmin 5.5's lite commands (getBrokerLiteInfo, getLiteTopicInfo, getLiteClientInfo, getLiteGroupInfo,
    triggerLiteDispatch) while Sluice's lite push consumer reads two lite topics and one lags."""
    broker = empty_cluster.start_broker("broker-a", store_enable_lmq=True, store_enable_multi_dispatch=True)
    empty_cluster.create_topic("ops-lite", 2, attributes="+message.type=LITE,+lite.topic.expiration=60")
    ns, addr = empty_cluster.namesrv_addr, broker.broker_addr
    gate = threading.Event()

    def listener(m: MessageExt) -> None:
        if m.body == b"slow-0":  # (held: lite topic "slow" lags while the commands run)
            gate.wait(60)

    async def run() -> dict[str, str]:
        async with Admin(ns) as admin:
            await admin.update_group("ops-lite-g", attributes="+lite.bind.topic=ops-lite")
        async with Producer("ops-lite-pg", ns) as producer:
            for i in range(7):
                await producer.send(Message("ops-lite", f"slow-{i}".encode(), lite_topic="slow"))
            consumer = LitePushConsumer("ops-lite-g", ns, bind_topic="ops-lite")
            consumer.register_listener(listener)
            await consumer.start()
            try:
                await consumer.subscribe_lite("slow", "quick", offset=OffsetOption("POLICY", POLICY_MIN))
                cid = consumer.client.client_id
                return {name: await asyncio.to_thread(mqadmin, *args) for name, args in (
                    ("getBrokerLiteInfo", ("getBrokerLiteInfo", "-n", ns, "-b", addr, "-d")),
                    ("getLiteTopicInfo", ("getLiteTopicInfo", "-n", ns, "-p", "ops-lite", "-l", "slow", "-s")),
                    ("getLiteClientInfo", ("getLiteClientInfo", "-n", ns, "-p", "ops-lite", "-g", "ops-lite-g",
                                           "-c", cid, "-s")),
                    ("getLiteGroupInfo", ("getLiteGroupInfo", "-n", ns, "-p", "ops-lite", "-g", "ops-lite-g",
                                          "-k", "5")),
                    ("getLiteGroupInfo -l", ("getLiteGroupInfo", "-n", ns, "-p", "ops-lite", "-g", "ops-lite-g",
                                             "-l", "slow")),
                    ("triggerLiteDispatch", ("triggerLiteDispatch", "-n", ns, "-p", "ops-lite", "-g",
                                             "ops-lite-g")))} | {"cid": cid}
            finally:
                gate.set()
                await consumer.shutdown()

    outs = asyncio.run(run())
    cid = outs.pop("cid")
    checks: dict[str, Check] = {
        "getBrokerLiteInfo": lambda o: re.search(rf"^{re.escape(addr)}\s+default\s+20000\s+1\s+2\s", o, re.M)
        is not None and 'Topic Meta: {"ops-lite":60}' in o and 'Group Meta: {"ops-lite":["ops-lite-g"]}' in o,
        "getLiteTopicInfo": lambda o: "Lite Topic Info: [ops-lite] [slow] [%LMQ%$ops-lite$slow]" in o
        and re.search(r"^broker-a\s+0\s+7\s+\d{4}-\d\d-\d\d [\d:,]+\s+true\s+1\s*$", o, re.M) is not None
        and f"[{cid}@ops-lite-g]" in o,
        "getLiteClientInfo": lambda o: re.search(r"^broker-a\s+2\s+\d{4}-", o, re.M) is not None
        and "Lite Topics: [%LMQ%$ops-lite$quick, %LMQ%$ops-lite$slow]" in o,
        "getLiteGroupInfo": lambda o: "Total Lag Count: 7" in o and len(re.findall(r"^1\s+slow\s+7\s", o, re.M)) == 2,
        "getLiteGroupInfo -l": lambda o: re.search(r"^broker-a\s+7\s+0\s+7\s", o, re.M) is not None,
        "triggerLiteDispatch": lambda o: re.search(r"^broker-a\s+dispatched", o, re.M) is not None,
    }
    failed = {name: out[-1500:] for name, out in outs.items() if not (checks[name](out) and _no_error(out))}
    assert not failed, failed
