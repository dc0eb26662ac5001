"""Namespaces with the Java remoting client (RocketMQ 5.5.0's ``setNamespace``: the client wraps its topics and
groups as ``ns%name``): two namespaces use the same topic and group names on one Sluice broker and each sees only
its own messages, under the names it knows; Sluice's own clients (``namespace=``) share a namespace with them."""

from __future__ import annotations

import uvloop

from sluice.aio import Producer, PullConsumer
from sluice.client.message import Message
from sluice.common.message import MessageExt


def test_two_java_namespaces_share_topic_and_group_names_and_nothing_else(sluice, java) -> None:
    ns = sluice.namesrv
    for tenant in ("tenant-a", "tenant-b"):
        sluice.create_topic(f"{tenant}%orders", 2)
    counts = {"tenant-a": 3, "tenant-b": 2}
    for tenant, n in counts.items():
        records = java.run("produce", timeout=120, namesrv=ns, topic="orders", group="shop", mode="sync", count=n,
                           prefix=tenant, namespace=tenant)
        assert [r["status"] for r in records if r.get("event") == "sent"] == ["SEND_OK"] * n, records
    broker = sluice.broker

    async def sluice_side() -> list[MessageExt]:
        # Sluice's producer in tenant-b adds one for the Java consumer there; Sluice's consumer in tenant-a reads
        # what the Java producer sent there.
        async with Producer("shop", ns, namespace="tenant-b") as p:
            r = await p.send(Message("orders", "tenant-b-2-grüße from sluice".encode()))
            assert r.queue.topic == "orders"
        c = PullConsumer("audit", ns, namespace="tenant-a", consume_from="first")
        c.subscribe("orders")
        await c.start()
        got: list[MessageExt] = []
        try:
            while len(got) < counts["tenant-a"]:
                more = await c.poll(10)
                assert more, f"got {len(got)} of tenant-a's messages"
                got += more
        finally:
            await c.shutdown()
        return got

    audited = uvloop.run(sluice_side())
    assert sorted(m.body.decode().split("-grüße")[0] for m in audited) == [f"tenant-a-{i}" for i in range(3)]
    assert {m.topic for m in audited} == {"orders"}
    counts["tenant-b"] += 1
    assert {t: sum(broker.store.get_max_offset_in_queue(f"{t}%orders", q) for q in range(2)) for t in counts} == counts
    assert "orders" not in broker.topic_config_manager.table  # (nothing outside the namespaces)
    consumers = {t: java.start("push-consume", namesrv=ns, topic="orders", group="billing", namespace=t,
                               consume_from="CONSUME_FROM_FIRST_OFFSET", expect=n, timeout=60)
                 for t, n in counts.items()}
    for tenant, consumer in consumers.items():
        records = consumer.wait(70)
        assert records[-1] == {"event": "end", "reason": "complete"}, records[-3:]
        got = consumer.received()
        assert sorted(r["body"].split("-grüße")[0] for r in got) == [f"{tenant}-{i}" for i in range(counts[tenant])]
        assert {r["topic"] for r in got} == {"orders"}  # the client shows the name without its namespace
    assert {"tenant-a%billing", "tenant-b%billing"} <= set(broker.subscription_group_manager.table)
