"""Differential: namespaces (the Java remoting client's ``setNamespace``, Sluice's ``namespace=``) against Sluice and
against Apache RocketMQ — two namespaces use the same topic and group names; each producer's messages reach only its
namespace's consumers, under the names the clients use, and the brokers keep them as ``ns%name``."""

from __future__ import annotations

from typing import Any

from sluice import Message, Producer, PullConsumer
from sluice.client.admin import Admin
from tests.reference.conftest import System, run
from tests.reference.observe import assert_same, both


def test_two_namespaces_share_topic_and_group_names_alike(systems):
    def scenario(s: System) -> dict[str, Any]:
        tenants = {s.topic("a"): 3, s.topic("b"): 2}
        for tenant in tenants:
            s.create_topic(f"{tenant}%orders", 2)
        for tenant, n in tenants.items():
            records = s.java.run("produce", timeout=120, namesrv=s.namesrv, topic="orders", group="shop",
                                 mode="sync", count=n, prefix=tenant, namespace=tenant)
            assert [r["status"] for r in records if r.get("event") == "sent"] == ["SEND_OK"] * n, records
        first = next(iter(tenants))
        with Producer("shop", namesrv=s.namesrv, namespace=first) as p:  # (Sluice's client in the first one too)
            sent = p.send(Message("orders", f"{first}-sluice".encode()))
        tenants[first] += 1
        out: dict[str, Any] = {"sluice producer's topic": sent.queue.topic}
        consumers = {t: s.java.start("push-consume", namesrv=s.namesrv, topic="orders", group="billing",
                                     namespace=t, consume_from="CONSUME_FROM_FIRST_OFFSET", expect=n, timeout=60)
                     for t, n in tenants.items()}
        for tenant, consumer in consumers.items():
            records = consumer.wait(70)
            assert records[-1] == {"event": "end", "reason": "complete"}, records[-3:]
            got = consumer.received()
            out[f"java consumer in {tenant}"] = sorted((r["topic"], r["body"]) for r in got)
        with PullConsumer("audit", namesrv=s.namesrv, namespace=first, consume_from="first") as c:
            c.subscribe("orders")
            seen: list[Any] = []
            for _ in range(60):
                if len(seen) >= tenants[first]:
                    break
                seen += c.poll(1.0)
        out["sluice consumer"] = sorted((m.topic, m.body.decode()) for m in seen)

        async def names() -> list[str]:
            async with Admin(s.namesrv) as admin:
                return sorted(t for t in await admin.list_topics() if t.endswith("%orders") and s.prefix in t)

        out["topics on the broker"] = run(names())
        return out

    observed = assert_same(both(systems, scenario))
    a = next(k for k in observed if k.startswith("java consumer in"))
    assert {topic for topic, _ in observed[a]} == {"orders"} and observed["sluice producer's topic"] == "orders"
    assert len(observed["topics on the broker"]) == 2
