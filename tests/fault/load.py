"""The clients of a fault test, as one process (run where the test says: a network namespace of its own).

``python -m tests.fault.load --namesrv A --topic T --out DIR [--etcd E --group-name G]`` runs until ``DIR/stop``
appears:

- ``--senders`` sync senders (Sluice's asyncio producer), each sending ``<n>-<i>-<attempt>`` in turn; a send
  that is not answered SEND_OK is sent again (the next attempt); every SEND_OK is noted with its time;
- a push consumer group subscribed from the start to the end, noting every delivery;
- with ``--etcd``, a watcher of the group's master in etcd (each change with its time).

Then it waits (60 s at most) until the live group has had every acknowledged message, reads the whole topic from
the beginning with a new group (what is stored), and writes ``DIR/result.json``: ``acked`` {body: time},
``delivered`` [body...] (the live group's, in order, duplicates kept), ``stored`` [body...], ``leaders``
[[time, broker id, epoch]...], ``outcomes`` {status or error: count}. Times are ``time.time()``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time
from collections import Counter
from pathlib import Path

from sluice.aio import ConsumeStatus, Message, Producer, PullConsumer, PushConsumer, SendStatus
from sluice.common.message import MessageExt
from sluice.etcd.etcd_client import EtcdClient, EtcdError

log = logging.getLogger("load")


class Load:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.acked: dict[str, float] = {}
        self.delivered: list[str] = []
        self.leaders: list[tuple[float, int, int]] = []
        self.outcomes: Counter[str] = Counter()
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        a = self.args
        consumer = PushConsumer(f"{a.topic}-live", a.namesrv, consume_from="first", rebalance_interval=1000,
                                persist_consumer_offset_interval=500, heartbeat_broker_interval=1000)
        consumer.subscribe(a.topic)

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            self.delivered.extend(m.body.decode() for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.register_listener(listener)
        await consumer.start()
        tasks = [asyncio.create_task(self._watch_stop())]
        if a.etcd:
            tasks.append(asyncio.create_task(self._watch_leader()))
        async with Producer(f"{a.topic}-load", a.namesrv, send_msg_timeout=3000) as producer:
            senders = [asyncio.create_task(self._send(producer, n)) for n in range(a.senders)]
            (self.out / "started").write_text("started")
            await self.stopping.wait()
            for t in senders:
                t.cancel()
            await asyncio.gather(*senders, return_exceptions=True)
        log.warning("load: sends stopped, %d acknowledged; waiting for the live group", len(self.acked))
        deadline = time.monotonic() + 60
        while set(self.acked) - set(self.delivered) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        log.warning("load: the live group has %d of them; shutting it down",
                    len(set(self.acked) & set(self.delivered)))
        async with asyncio.timeout(30):
            await consumer.shutdown()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        log.warning("load: reading the whole topic")
        async with asyncio.timeout(60):
            stored = await self._read_all()
        log.warning("load: %d stored", len(stored))
        result = {"acked": self.acked, "delivered": self.delivered, "stored": stored,
                  "leaders": self.leaders, "outcomes": dict(self.outcomes)}
        tmp = self.out / "result.json.tmp"
        tmp.write_text(json.dumps(result))
        os.replace(tmp, self.out / "result.json")

    async def _watch_stop(self) -> None:
        while not (self.out / "stop").exists():
            await asyncio.sleep(0.1)
        self.stopping.set()

    async def _send(self, producer: Producer, n: int) -> None:
        i = attempt = 0
        while True:
            # Every attempt has a body of its own: a message served and then taken back by a failover can never
            # be mistaken for a later attempt's copy that was kept.
            body = f"{n}-{i}-{attempt}"
            attempt += 1
            try:
                r = await producer.send(Message(self.args.topic, body.encode(), keys=[body]))
            except Exception as exc:  # the route is moving: send it again
                self.outcomes[type(exc).__name__] += 1
                await asyncio.sleep(0.05)
                continue
            self.outcomes[r.status.name] += 1
            if r.status is SendStatus.SEND_OK:
                self.acked[body] = time.time()
                i += 1
                attempt = 0
            else:
                await asyncio.sleep(0.05)

    async def _watch_leader(self) -> None:
        key = f"/sluice/DefaultCluster/{self.args.group_name}/leader".encode()
        last: tuple[int, int] | None = None
        async with EtcdClient([self.args.etcd], timeout=1.0) as etcd:
            while True:
                try:
                    kv = await etcd.get(key)
                except (EtcdError, OSError):
                    kv = None
                if kv is not None:
                    d = json.loads(kv.value)
                    now = (int(d["brokerId"]), int(d["epoch"]))
                    if now != last:
                        last = now
                        self.leaders.append((time.time(), *now))
                await asyncio.sleep(0.1)

    async def _read_all(self) -> list[str]:
        return await read_all(self.args.namesrv, self.args.topic, f"{self.args.topic}-check")


async def read_all(namesrv: str, topic: str, group: str) -> list[str]:
    """Every body stored in ``topic``, read from the beginning of every queue by a new group (duplicates kept)."""
    got: list[str] = []
    async with PullConsumer(group, namesrv) as reader:
        queues = await reader.fetch_queues(topic)
        await reader.assign(queues)
        for q in queues:
            await reader.seek_to_begin(q)
        empty = 0
        while empty < 3:
            msgs = await reader.poll(1.0)
            empty = 0 if msgs else empty + 1
            got.extend(m.body.decode() for m in msgs)
    return got


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--senders", type=int, default=8)
    p.add_argument("--etcd", default="")
    p.add_argument("--group-name", default="broker-ha")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(Load(args).run())


if __name__ == "__main__":
    main()
