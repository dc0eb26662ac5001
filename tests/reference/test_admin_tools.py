"""Differential: the admin side — cluster and route lookups, topic creation, update and deletion, consume stats,
lookups by key and id, queue offsets by time, offset resets — through RocketMQ's Java admin tools
(``DefaultMQAdminExt``) and Sluice's ``Admin``, observed alike on Sluice and on Apache RocketMQ."""

from __future__ import annotations

import re
import threading
from collections import Counter
from typing import Any

from sluice import ConsumeStatus, Message, MessageExt, MessageQueue, Producer, PushConsumer
from sluice.client.admin import Admin, AdminError
from sluice.common.errors import BrokerResponseError
from tests.integration.helpers import FAST, wait_until
from tests.reference.conftest import System, run
from tests.reference.observe import assert_same, both, sluice_message


def send(s: System, topic: str, n: int, prefix: str = "m", queues: int = 4) -> list:
    """``n`` messages from Sluice's producer, message i to queue i % ``queues``."""
    with Producer(s.topic("p"), namesrv=s.namesrv) as producer:
        targets = [MessageQueue(topic, "broker-a", q) for q in range(queues)]
        return [producer.send(Message(topic, f"{prefix}-{i}".encode(), tags="T", keys=[f"{prefix}-key-{i % 5}"]),
                              queue=targets[i % queues]) for i in range(n)]


def consume(s: System, topic: str, group: str, expect: int) -> None:
    """The Java lite pull consumer reads ``expect`` messages and commits them."""
    records = s.java.run("lite-pull", namesrv=s.namesrv, topic=topic, group=group, expect=expect, timeout=40)
    assert sum(1 for r in records if r["event"] == "received") == expect


def test_cluster_info_and_routes_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("t")
        s.create_topic(topic, 4)
        info = s.java_admin.call("clusterInfo")
        info["brokers"]["broker-a"]["addrs"] = {i: a == s.broker_addr for i, a in
                                                info["brokers"]["broker-a"]["addrs"].items()}
        route = s.java_admin.call("topicRoute", topic=topic)
        route["brokers"] = [b["broker_name"] for b in route["brokers"]]

        async def ours() -> dict[str, Any]:
            async with Admin(s.namesrv) as admin:
                r = await admin.topic_route(topic)
                return {"brokers": await admin.brokers() == {"broker-a": s.broker_addr},
                        "queues": [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
                                   for q in r.queue_datas]}

        return {"java_cluster": info, "java_route": route, "sluice": run(ours())}

    assert_same(both(systems, scenario))


def test_topic_creation_update_and_deletion_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("t")
        seen: dict[str, Any] = {}
        s.java_admin.call("createTopic", addr=s.broker_addr, topic=topic, read=3, write=3, perm=6)
        _routed(s, topic, 6)
        seen["sent_to"] = sorted({r.queue.queue_id for r in send(s, topic, 6, queues=3)})
        s.java_admin.call("createTopic", addr=s.broker_addr, topic=topic, read=3, write=3, perm=4)  # read-only
        _routed(s, topic, 4)
        seen["route"] = s.java_admin.call("topicRoute", topic=topic)["queues"]

        async def status() -> list[tuple[int, int, int]]:
            async with Admin(s.namesrv) as admin:
                return [(q.queue_id, q.min_offset, q.max_offset) for q in await admin.topic_status(topic)]

        seen["status"] = run(status())
        s.java_admin.call("deleteTopic", topic=topic, cluster="DefaultCluster")
        try:
            s.java_admin.call("topicRoute", topic=topic)
            seen["after_delete"] = "still routed"
        except Exception as exc:  # AdminError
            seen["after_delete"] = getattr(exc, "code", repr(exc))

        async def gone() -> str:
            async with Admin(s.namesrv) as admin:
                try:
                    await admin.topic_route(topic)
                    return "still routed"
                except AdminError as exc:
                    return type(exc).__name__

        seen["sluice_after_delete"] = run(gone())
        return seen

    observed = assert_same(both(systems, scenario))
    assert observed["sent_to"] == [0, 1, 2] and observed["route"][0]["perm"] == 4
    assert observed["after_delete"] == 17


def _routed(s: System, topic: str, perm: int) -> bool:
    """Wait until the name server routes ``topic`` with ``perm`` (a broker registers changes at once)."""
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if s.java_admin.call("topicRoute", topic=topic)["queues"][0]["perm"] == perm:
                return True
        except Exception:  # AdminError while not routed yet
            pass
        time.sleep(0.1)
    raise AssertionError(f"{topic} never routed with perm {perm} on {s}")


def test_consume_stats_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic, group = s.topic("t"), s.topic("g")
        s.create_topic(topic, 4)
        send(s, topic, 20)
        consume(s, topic, group, 20)
        send(s, topic, 6, prefix="more")
        stats = s.java_admin.call("consumeStats", group=group, topic=topic)
        rows = [(r["topic"], r["broker"], r["queue_id"], r["broker_offset"], r["consumer_offset"])
                for r in stats["offsets"]]

        async def progress() -> list[tuple[str, int, int, int, int]]:
            async with Admin(s.namesrv) as admin:
                p = await admin.group_progress(group, topic)
                return [(q.topic, q.queue_id, q.broker_offset, q.consumer_offset, q.lag) for q in p.queues]

        return {"java": rows, "total_diff": stats["total_diff"], "sluice": run(progress())}

    observed = assert_same(both(systems, scenario))
    assert observed["total_diff"] == 6 and len(observed["java"]) == 4


def test_lookups_by_key_and_by_id_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("t")
        s.create_topic(topic, 4)
        sent = send(s, topic, 20)
        by_key = sorted(m["body"] for m in s.java_admin.call("queryMessage", topic=topic, key="m-key-3"))
        r = sent[7]
        by_id = s.java_admin.call("viewMessage", topic=topic, msgId=r.msg_id)
        by_offset_id = s.java_admin.call("viewMessage", topic=topic, msgId=r.offset_msg_id)
        try:
            s.java_admin.call("viewMessage", topic=topic, msgId="0" * 32)
            missing: Any = "found"
        except Exception as exc:
            missing = type(exc).__name__

        async def ours() -> dict[str, Any]:
            async with Admin(s.namesrv) as admin:
                keyed = await admin.messages_by_key(topic, "m-key-3")
                (one,) = await admin.get_message(r.msg_id, topic)
                (two,) = await admin.get_message(r.offset_msg_id)
                return {"by_key": sorted(m.body.decode() for m in keyed), "by_id": sluice_message(one),
                        "by_offset_id": sluice_message(two)}

        same = [(m["body"], m["queue_id"], m["queue_offset"], m["id"] == r.msg_id) for m in (by_id, by_offset_id)]
        return {"java_by_key": by_key, "java_by_id": same, "java_missing": missing, "sluice": run(ours())}

    observed = assert_same(both(systems, scenario))
    assert observed["java_by_key"] == ["m-13", "m-18", "m-3", "m-8"]


def test_queue_offsets_and_search_by_time_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic = s.topic("t")
        s.create_topic(topic, 4)
        first = send(s, topic, 8, prefix="first")

        async def store_times() -> list[int]:
            async with Admin(s.namesrv) as admin:
                msgs = [(await admin.get_message(r.offset_msg_id))[0] for r in first]
                return [m.store_timestamp for m in msgs]

        when = max(run(store_times())) + 1
        send(s, topic, 8, prefix="second")
        java = [(s.java_admin.call("minOffset", topic=topic, broker="broker-a", queueId=q),
                 s.java_admin.call("maxOffset", topic=topic, broker="broker-a", queueId=q),
                 s.java_admin.call("searchOffset", topic=topic, broker="broker-a", queueId=q, timestamp=when),
                 s.java_admin.call("searchOffset", topic=topic, broker="broker-a", queueId=q, timestamp=0))
                for q in range(4)]

        async def ours() -> list[tuple[int, ...]]:
            async with Admin(s.namesrv) as admin:
                api = admin.api
                out = []
                for q in range(4):
                    mq = MessageQueue(topic, "broker-a", q)
                    addr = s.broker_addr
                    out.append((await api.get_min_offset(addr, mq), await api.get_max_offset(addr, mq),
                                await api.search_offset(addr, mq, when), await api.search_offset(addr, mq, 0)))
                try:
                    await api.get_max_offset(s.broker_addr, MessageQueue(s.topic("none"), "broker-a", 0))
                    out.append(("unknown topic answered",))
                except BrokerResponseError as exc:
                    out.append(("unknown topic", exc.code))
                return out

        return {"java": java, "sluice": run(ours())}

    observed = assert_same(both(systems, scenario))
    assert observed["java"] == [(0, 4, 2, 0)] * 4


def test_offset_resets_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        topic, group = s.topic("t"), s.topic("g")
        s.create_topic(topic, 4)
        first = send(s, topic, 8, prefix="first")

        async def store_times() -> int:
            async with Admin(s.namesrv) as admin:
                return max([(await admin.get_message(r.offset_msg_id))[0].store_timestamp for r in first])

        when = run(store_times()) + 1
        send(s, topic, 8, prefix="second")
        consume(s, topic, group, 16)
        reset = s.java_admin.call("resetOffsetByTimestamp", topic=topic, group=group, timestamp=when)
        stats = s.java_admin.call("consumeStats", group=group, topic=topic)
        errors = []
        for what in ({"topic": s.topic("none"), "group": group}, {"topic": topic, "group": s.topic("no-group")}):
            try:
                s.java_admin.call("resetOffsetByTimestamp", timestamp=when, **what)
                errors.append("accepted")
            except Exception as exc:
                errors.append(getattr(exc, "code", repr(exc)))
        return {"reset": reset, "committed": [(r["queue_id"], r["consumer_offset"]) for r in stats["offsets"]],
                "errors": errors}

    observed = assert_same(both(systems, scenario))
    assert [r["offset"] for r in observed["reset"]] == [2, 2, 2, 2]


def test_sluice_push_consumer_online_during_a_reset_consumes_again_alike(systems):
    """The broker tells the consumer of the reset in its next pull (OFFSET_MOVED). Sluice's push consumer is busy
    with messages pulled before the reset: it starts the queue afresh from the new offset and reads them again,
    while the listener calls still running on the old ones commit nothing — against RocketMQ's server-side reset
    too."""

    def scenario(s: System) -> dict[str, Any]:
        topic, group = s.topic("t"), s.topic("g")
        s.create_topic(topic, 4)
        first = send(s, topic, 8, prefix="first")

        async def store_times() -> int:
            async with Admin(s.namesrv) as admin:
                return max([(await admin.get_message(r.offset_msg_id))[0].store_timestamp for r in first])

        when = run(store_times()) + 1
        second = send(s, topic, 8, prefix="second")
        got: list[str] = []
        held: list[str] = []
        release = threading.Event()
        consumer = PushConsumer(group, namesrv=s.namesrv, **FAST)
        consumer.subscribe(topic, "*")

        @consumer.listener
        def handle(msgs: list[MessageExt]) -> ConsumeStatus:
            for m in msgs:
                if m.body.startswith(b"second") and not release.is_set():
                    held.append(m.body.decode())
                    release.wait(60)  # busy with it while the reset happens
                got.append(m.body.decode())
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.start()
        try:
            wait_until(lambda: len(got) == 8 and len(held) == 8, 30, f"the listener busy with every second-* on {s}")
            s.java_admin.call("resetOffsetByTimestamp", topic=topic, group=group, timestamp=when)
            send(s, topic, 4, prefix="poke")  # wakes the pulls the broker holds: their answer tells of the reset
            release.set()
            every = {**{f"first-{i}": 1 for i in range(8)}, **{f"second-{i}": 2 for i in range(8)},
                     **{f"poke-{i}": 1 for i in range(4)}}
            wait_until(lambda: Counter(got) == every, 30, f"the messages after the reset time again on {s}")
            ends = {q: 2 * sum(1 for r in second if r.queue.queue_id == q) + 1 for q in range(4)}
            wait_until(lambda: {r["queue_id"]: r["consumer_offset"] for r in s.java_admin.call(
                "consumeStats", group=group, topic=topic)["offsets"]} == ends, 30, f"the offsets committed on {s}")
        finally:
            release.set()
            consumer.shutdown()
        return dict(sorted(Counter(got).items()))

    counts = assert_same(both(systems, scenario))
    assert counts["second-0"] == 2  # once as it was being consumed at the reset, once more after it


def test_a_reset_past_what_sluices_push_consumer_holds_drops_it_alike(systems):
    """A reset to the end while the consumer holds a backlog it has pulled but not consumed yet: what it holds is
    dropped unconsumed (as RocketMQ's client drops its process queue), only the message its listener was already
    working on completes, and it reads on from the end."""

    def scenario(s: System) -> dict[str, Any]:
        topic, group = s.topic("t"), s.topic("g")
        s.create_topic(topic, 4)
        send(s, topic, 16)
        got: list[str] = []
        held: list[str] = []
        release = threading.Event()
        consumer = PushConsumer(group, namesrv=s.namesrv, consume_thread_nums=1, **FAST)
        consumer.subscribe(topic, "*")

        @consumer.listener
        def handle(msgs: list[MessageExt]) -> ConsumeStatus:
            for m in msgs:
                if not release.is_set():
                    held.append(m.body.decode())
                    release.wait(60)  # busy while the reset happens
                got.append(m.body.decode())
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.start()
        try:
            holding = lambda: sum(pq.msg_count for pq in consumer.aio.process_queues.values())  # noqa: E731
            wait_until(lambda: len(held) == 1 and holding() == 16, 30, f"the consumer holding every message on {s}")
            s.java_admin.call("resetOffsetByTimestamp", topic=topic, group=group, timestamp=-1)
            send(s, topic, 4, prefix="poke")  # wakes the pulls the broker holds: their answer tells of the reset
            wait_until(lambda: holding() <= 4, 30, f"the backlog dropped on {s}")  # (the pokes may be in)
            release.set()
            wait_until(lambda: {f"poke-{i}" for i in range(4)} <= set(got), 30, f"the new messages on {s}")
            wait_until(lambda: {r["queue_id"]: r["consumer_offset"] for r in s.java_admin.call(
                "consumeStats", group=group, topic=topic)["offsets"]} == {q: 5 for q in range(4)}, 30,
                       f"the offsets committed at the end on {s}")
        finally:
            release.set()
            consumer.shutdown()
        return {"consumed": len(got), "pokes": sorted(b for b in got if b.startswith("poke"))}

    observed = assert_same(both(systems, scenario))
    assert observed["consumed"] == 5  # the one in the listener's hands, then the four sent after the reset


def _shape(value: str) -> str:
    """What kind of value a runtime-info or config entry holds, as text: RocketMQ's three TPS windows (one not yet
    filled is empty), a boolean, a whole number, a number, or other text."""
    parts = value.split(" ")
    if len(parts) == 3 and all(re.fullmatch(r"(-?\d+(\.\d+)?(E-?\d+)?)?", p) for p in parts):
        return "tps"
    v = value.strip()
    if v in ("true", "false"):
        return "bool"
    if re.fullmatch(r"-?\d+", v):
        return "int"
    if re.fullmatch(r"-?\d+(\.\d+)?(E-?\d+)?", v):
        return "number"
    return "text"


# Sluice's own runtime keys (docs/operations.md, interop.md): its event loop, back-pressure, replication.
SLUICE_RUNTIME_KEYS = frozenset({
    "backPressure", "backPressureEpisodes", "backPressureRefused", "brokerRole", "confirmOffset", "eventLoopBusyMaxMs",
    "eventLoopLagMaxMs", "flushDiskType", "gcPauseMaxMs", "haInSyncSlaves", "haSlaveLagBytes", "heldBytes",
    "heldPulls", "haMasterAddress", "fenced", "replyUndeliveredTotal", "brokerPermission"})
# Sluice's own settings (docs/configuration.md): none is a RocketMQ setting under another name.
SLUICE_SETTINGS = frozenset({
    "authenticationEnabled", "authenticationWhitelist", "authorizationEnabled", "authorizationWhitelist",
    "channelMaxIdleTimeSeconds", "clientScanInterval", "commitLogPwriteMinBytes", "controllerEtcdEndpoints",
    "controllerEtcdTlsCaPath", "controllerEtcdTlsCertPath", "controllerEtcdTlsKeyPath", "controllerLeaseTtl",
    "defaultTimeoutMillis", "deleteFilesBatchMax", "flushIntervalIndex", "groupCommitMaxWait", "haMasterAddress",
    "initAuthenticationUser", "innerClientAuthenticationCredentials", "maxConnections", "maxFilterMessageCount",
    "maxFrameSize", "maxHeldPulls", "maxInflightRequests", "maxPropertiesSize", "maxReconsumeTimes",
    "osPageCacheBusyTimeoutMs", "rebalanceLockMaxLiveTime", "reconnectBackoffMaxMillis", "reconnectBackoffMillis",
    "retryQueueNums", "schedulePollInterval", "statsLogInterval", "storeHost", "tlsClientAuthServer",
    "tlsClientCertPath", "tlsClientKeyPassword", "tlsClientKeyPath", "tlsClientTrustCertPath", "tlsEnable",
    "tlsServerCertPath", "tlsServerKeyPassword", "tlsServerKeyPath", "tlsServerMode", "tlsServerNeedClientAuth",
    "tlsServerTrustCertPath", "waitTimeMsInSendQueue", "warmMappedFileAhead", "warmMappedFileChunk",
    "warmMappedFileEnable", "writeBufferHigh", "writeBufferLow", "writeBufferMax", "writeCoalesceFrames",
    "fastChannelEnabled", "metricsExporterType", "metricsPromExporterHost", "metricsPromExporterPort", "metricsLabel",
    "maxLmqDispatch", "lmqMappedFileSizeConsumeQueue"})


def test_a_brokers_runtime_info_and_config_have_rocketmqs_keys_and_kinds_of_value(systems):
    """``brokerStatus`` and ``getBrokerConfig`` as RocketMQ 5.5 answers them: every runtime key RocketMQ's broker
    reports, with the same kind of value (windows of rates, numbers, text); every setting under RocketMQ's name and
    in RocketMQ's unit, Sluice's own named as such."""
    def scenario(s: System) -> tuple[dict[str, str], dict[str, str]]:
        topic = s.topic("t")
        s.create_topic(topic, 2)
        send(s, topic, 5, queues=2)

        async def go() -> tuple[dict[str, str], dict[str, str]]:
            async with Admin(s.namesrv) as admin:
                return await admin.broker_runtime_info(s.broker_addr), await admin.broker_config(s.broker_addr)
        return run(go())

    out = both(systems, scenario)
    (info, config), (rinfo, rconfig) = out["sluice"], out["rocketmq"]

    def keys(table: dict[str, str]) -> set[str]:  # (the commit log's path is in one key's name)
        return {"commitLogDiskRatio_<path>" if k.startswith("commitLogDiskRatio_") else k for k in table}

    assert keys(rinfo) - keys(info) == set()
    assert keys(info) - keys(rinfo) <= SLUICE_RUNTIME_KEYS
    assert {k: (rinfo[k], info[k]) for k in set(info) & set(rinfo) if _shape(info[k]) != _shape(rinfo[k])} == {}
    assert re.fullmatch(r"Total : [\d.]+ [KMGTPE]?i?B, Free : [\d.]+ [KMGTPE]?i?B\.", info["commitLogDirCapacity"])
    assert info["putMessageDistributeTime"].count(":") == 13  # (RocketMQ's says null until its first full minute)
    assert int(info["putMessageSizeTotal"]) > 0 and float(info["putMessageAverageSize"]) > 0

    assert set(config) - set(rconfig) <= SLUICE_SETTINGS
    assert {k: (rconfig[k], config[k]) for k in set(config) & set(rconfig)
            if _shape(config[k]) != _shape(rconfig[k])} == {}
    assert config["diskSpaceWarningLevelRatio"] == rconfig["diskSpaceWarningLevelRatio"] == "90"
