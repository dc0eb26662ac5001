"""The dashboard in a real browser: Debian's Chromium, headless, driven by its chromedriver through Selenium, against
a real cluster and a real dashboard on free ports. Without Chromium the tests skip (they fail instead where
``$SLUICE_REQUIRE_BROWSER`` is set, as in CI). ``$SLUICE_SCREENSHOTS=DIR`` keeps each page's screenshot there
(docs/dashboard.md's are made so)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.dashboard import Dashboard, DashboardConfig
from tests.conftest import Cluster, ServerLoop

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> tuple[str, str] | None:
    driver = shutil.which("chromedriver")
    binary = next((b for b in map(shutil.which, CHROMIUM) if b), None)
    return (binary, driver) if binary and driver else None


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    found = _browser()
    if found is None:
        reason = "chromium and chromedriver are not installed (scripts/ensure_chromium.sh installs them)"
        if os.environ.get("SLUICE_REQUIRE_BROWSER", "") not in ("", "0"):
            pytest.fail(f"{reason}; $SLUICE_REQUIRE_BROWSER is set, so the browser tests may not skip", pytrace=False)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(found[1]), options=options)
    driver.set_page_load_timeout(60)
    driver.implicitly_wait(10)  # (an element of the page a click leads to is waited for, not missed)
    try:
        yield driver
    finally:
        driver.quit()


class DashboardSite:
    """A cluster, its dashboard, and the browser looking at it."""

    def __init__(self, cluster: Cluster, dashboard: Dashboard, driver: Any, shots: Path) -> None:
        self.cluster = cluster
        self.dashboard = dashboard
        self.driver = driver
        self.shots = shots

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr

    def open(self, path: str) -> Any:
        self.driver.get(self.dashboard.address + path)
        return self.driver

    def text(self, css: str) -> str:
        from selenium.webdriver.common.by import By

        return str(self.driver.find_element(By.CSS_SELECTOR, css).text)

    def says(self, css: str, expected: str, timeout: float = 30) -> str:
        """Wait until element ``css`` holds ``expected`` and return its text. A click that submits a form reads
        its answer so: the page it leaves may still be there (with a message of its own), or go stale mid-read."""
        seen: list[str] = []

        def holds() -> bool:
            seen[:] = [self.text(css)]
            return expected in seen[0]

        self.wait_for(holds, f"{css} to say {expected!r}", timeout)
        return seen[0]

    def texts(self, css: str) -> list[str]:
        from selenium.webdriver.common.by import By

        return [str(e.text) for e in self.driver.find_elements(By.CSS_SELECTOR, css)]

    def absent(self, css: str) -> bool:
        """Whether the page has no element ``css`` (asked of the page at once: ``find_elements`` would wait out
        the implicit wait first)."""
        return bool(self.driver.execute_script("return document.querySelector(arguments[0]) === null;", css))

    def click(self, css: str) -> None:
        from selenium.webdriver.common.by import By

        self.driver.find_element(By.CSS_SELECTOR, css).click()

    def fill(self, css: str, value: str) -> None:
        from selenium.webdriver.common.by import By

        field = self.driver.find_element(By.CSS_SELECTOR, css)
        field.clear()
        field.send_keys(value)

    def shot(self, name: str) -> None:
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))

    def wait_for(self, cond: Callable[[], bool], what: str, timeout: float = 30, reload: bool = False) -> None:
        """Wait for ``cond`` (reloading the page between tries with ``reload``); fail naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if cond():
                    return
            except Exception:  # (an element not there yet)
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; the page says:\n"
                                     f"{self.driver.find_element('tag name', 'body').text[:3000]}")
            if reload:
                self.driver.refresh()
            time.sleep(0.2)


def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    keep = os.environ.get("SLUICE_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        return Path(keep)
    return tmp_path_factory.mktemp("screenshots")


def start_site(tmp_path_factory: pytest.TempPathFactory, driver: Any, brokers: int = 1,
               **broker_settings: Any) -> tuple[ServerLoop, Cluster, Dashboard, Path]:
    loop = ServerLoop()
    cluster = Cluster(tmp_path_factory.mktemp("cluster"), loop)
    for i in range(brokers):
        cluster.start_broker(f"broker-{'abc'[i]}", **broker_settings)
    if broker_settings.get("authentication_enabled"):
        creds = broker_settings["init_authentication_user"]
        cluster.credentials = (creds.username, creds.password)
    dashboard = loop.run(Dashboard(DashboardConfig(cluster.namesrv_addr, port=0, sample_seconds=1.0,
                                                   groups_refresh_seconds=1.0,
                                                   state_dir=str(tmp_path_factory.mktemp("dlq-state")))).start())
    return loop, cluster, dashboard, screenshot_dir(tmp_path_factory)


def stop_site(loop: ServerLoop, cluster: Cluster, dashboard: Dashboard) -> None:
    try:
        loop.run(dashboard.stop())
        cluster.close()
    finally:
        loop.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, chrome: Any) -> Iterator[DashboardSite]:
    """A name server, one broker (light queues on, for lite topics) and the dashboard (ACL off: no login)."""
    loop, cluster, dashboard, shots = start_site(tmp_path_factory, chrome, store_enable_lmq=True,
                                                 store_enable_multi_dispatch=True)
    try:
        yield DashboardSite(cluster, dashboard, chrome, shots)
    finally:
        stop_site(loop, cluster, dashboard)
