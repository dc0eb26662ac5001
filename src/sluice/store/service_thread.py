"""A background service thread with a stop flag and a wake-up (RocketMQ ServiceThread)."""

from __future__ import annotations

import abc
import logging
import threading

log = logging.getLogger(__name__)


class ServiceThread(abc.ABC):
    """Runs ``run_once`` every ``interval`` seconds (or sooner when woken) until stopped."""

    name = "service"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"sluice-{self.name}", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self._wake.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _loop(self) -> None:
        try:
            self.on_start()
        except Exception:
            log.exception("%s failed while starting", self.name)
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.run_once()
            except Exception:  # a service must outlive one bad round; the error is logged
                log.exception("%s failed", self.name)
        try:
            self.on_stop()
        except Exception:
            log.exception("%s failed while stopping", self.name)

    @abc.abstractmethod
    def run_once(self) -> None:
        """One round of the service's work."""

    def on_start(self) -> None:  # noqa: B027 - optional hook
        """First work on the service's thread, before the first wait."""

    def on_stop(self) -> None:  # noqa: B027 - optional hook
        """Last work before the thread ends (a final flush)."""

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
