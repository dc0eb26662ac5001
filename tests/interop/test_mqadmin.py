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

from sluice import ConsumeStatus
from sluice.aio import Producer, PushConsumer
from sluice.client.message import Message
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

    def __init__(self, build: JavaBuild, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(build.argv(SESSION, jvm=JVM, home=home), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8")
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def __call__(self, *args: str, timeout: float = 120) -> str:
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(args) + "\n")
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
            return result.msg_id
    msg_id = asyncio.run(produce())

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
        (("deleteTopic", "-n", ns, "-c", "DefaultCluster", "-t", "ops-new"), lambda o: "success" in o),
    ]
    failed = {}
    for args, check in commands:
        out = mqadmin(*args)
        if not check(out):
            failed[" ".join(args[:1])] = out[-1500:]
    assert not failed, failed

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
