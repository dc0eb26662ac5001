#!/usr/bin/env python3
"""How fast the dashboard's pages are over a big cluster: 3 brokers (one process, one name server), 1,000 topics
of 4 queues, 500 consumer groups, a few thousand messages; each page's server time (the HTTP round trip from
another thread, 5 tries: median and worst) and, where Chromium is installed, its load in the browser (navigation
start to the load event). The groups table is read as a page does after its first visit (the background keeps it).

    .venv/bin/python bench/dashboard.py [--topics 1000] [--groups 500] [--brokers 3] [--no-browser]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from typing import Any

from sluice.broker.broker_controller import BrokerController
from sluice.client.admin import Admin
from sluice.client.aio.producer import Producer
from sluice.client.message import Message
from sluice.common.config import BrokerConfig, MessageStoreConfig, NamesrvConfig
from sluice.dashboard import Dashboard, DashboardConfig
from sluice.namesrv import NamesrvController

LITE_GROUPS = 20  # bound to the lite parent topic: what its page lists at most
PAGES = ["/", "/cluster", "/topics", "/topics?kind=all", "/topics/bench-topic-0007", "/topics/bench-lite",
         "/topics/bench-lite?lite=chat-0007", "/groups", "/groups/bench-group-0007",
         "/messages?topic=bench-topic-0007&begin=0", "/dlq", "/acl", "/producers"]


async def build(root: str, brokers: int, topics: int, groups: int) -> tuple[list[Any], Dashboard]:
    ns = await NamesrvController(NamesrvConfig(port=0, kv_config_path=f"{root}/kv.json")).start()
    servers: list[Any] = [ns]
    for i in range(brokers):
        name = f"broker-{'abcdefgh'[i]}"
        store = MessageStoreConfig(store_path_root_dir=f"{root}/{name}", mapped_file_size_commit_log=64 << 20,
                                   enable_lmq=True, enable_multi_dispatch=True)
        servers.append(await BrokerController(BrokerConfig(broker_name=name, listen_port=0, namesrv_addr=ns.address,
                                                           store=store)).start())
    for b in servers[1:]:
        await b.register_broker_all()
    async with Admin(ns.address) as admin:
        sem = asyncio.Semaphore(32)

        async def topic(i: int) -> None:
            async with sem:
                await admin.create_topic(f"bench-topic-{i:04d}", queues=4, wait=0)

        async def group(i: int) -> None:
            async with sem:
                await admin.update_group(f"bench-group-{i:04d}")

        await asyncio.gather(*(topic(i) for i in range(topics)))
        await asyncio.gather(*(group(i) for i in range(groups)))
        # A lite parent topic with lite topics on every broker and groups bound to it.
        await admin.create_topic("bench-lite", queues=4, wait=0,
                                 attributes="+message.type=LITE,+lite.topic.expiration=60")
        await asyncio.gather(*(admin.update_group(f"bench-lite-group-{i:02d}", attributes="+lite.bind.topic=bench-lite")
                               for i in range(LITE_GROUPS)))
    for b in servers[1:]:
        await b.register_broker_all()
    async with Producer("bench-dashboard", ns.address) as producer:
        for start in range(0, 4000, 100):
            await asyncio.gather(*(producer.send(Message(f"bench-topic-{i % 20:04d}", b"x" * 200))
                                   for i in range(start, start + 100)))
        for start in range(0, 1000, 100):  # 200 lite topics, 5 messages each
            await asyncio.gather(*(producer.send(Message("bench-lite", b"y" * 200, lite_topic=f"chat-{i % 200:04d}"))
                                   for i in range(start, start + 100)))
    dashboard = await Dashboard(DashboardConfig(ns.address, port=0)).start()
    return servers, dashboard


def get(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        r.read()
        assert r.status == 200, (url, r.status)
    return time.perf_counter() - t0


def browser_load(base: str) -> dict[str, float]:
    if not (shutil.which("chromedriver") and shutil.which("chromium")):
        return {}
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or ""), options=options)
    out = {}
    try:
        for page in PAGES:
            times = []
            for _ in range(3):
                driver.get(base + page)
                times.append(driver.execute_script(
                    "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime;"))
            out[page] = statistics.median(times) / 1000
    finally:
        driver.quit()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--groups", type=int, default=500)
    p.add_argument("--no-browser", action="store_true")
    a = p.parse_args()
    root = tempfile.mkdtemp(prefix="sluice-bench-dashboard-")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(600)

    t0 = time.monotonic()
    servers, dashboard = run(build(root, a.brokers, a.topics, a.groups))
    print(f"cluster of {a.brokers} brokers, {a.topics} topics, {a.groups} groups made in "
          f"{time.monotonic() - t0:.1f} s; dashboard at {dashboard.address}")
    try:
        first = get(dashboard.address + "/groups")  # the first visit makes the groups table
        print(f"first visit of /groups (makes the table of {a.groups} groups): {first * 1000:.0f} ms")
        deadline = time.monotonic() + 60
        while not dashboard.state.sampler.groups_at and time.monotonic() < deadline:
            time.sleep(0.1)
        print("\n| page | server median | server worst | browser load |\n|---|---:|---:|---:|")
        loads = {} if a.no_browser else browser_load(dashboard.address)
        for page in PAGES:
            times = [get(dashboard.address + page) for _ in range(5)]
            load = f"{loads[page] * 1000:.0f} ms" if page in loads else "-"
            print(f"| `{page}` | {statistics.median(times) * 1000:.0f} ms | {max(times) * 1000:.0f} ms | {load} |")
    finally:
        run(dashboard.stop())
        for s in reversed(servers):
            run(s.stop())
        loop.call_soon_threadsafe(loop.stop)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
