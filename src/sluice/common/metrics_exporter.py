"""The Prometheus endpoint of a Sluice server (RocketMQ's ``metricsExporterType=PROM``): ``GET /metrics`` on its own
port, served on the server's event loop: the sources read the server's state there, without locks, and the text is
made in a worker thread (sluice.common.metrics).

HTTP is kept to what a scraper sends: one GET per connection, a bounded head, a deadline to send it; anything else
gets 404 or 405 and the connection is closed. The exposition is prometheus_client's: the text format 0.0.4 (what
RocketMQ's exporter answers), OpenMetrics to a scraper that asks for it, gzip when accepted, ``?name[]=`` to pick
families, and ``/-/healthy``, as the Prometheus Java client's server has them."""

from __future__ import annotations

import asyncio
import gzip
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import cast
from urllib.parse import parse_qs

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector

from sluice.common.metrics import Family, MetricsSource, Snapshot, merged

log = logging.getLogger(__name__)

MAX_HEAD = 8192  # bytes of request line and headers
HEAD_TIMEOUT = 10.0  # seconds a client has to send them
WRITE_TIMEOUT = 30.0  # seconds a client has to read the answer
MAX_CONNECTIONS = 16  # scrapers at once; more are closed at once
REUSE_SECONDS = 1.0  # scrapes within this of one another share its answer
TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
TEXT = "text/plain; charset=utf-8"


class MetricsExporter:
    """Serves the ``sources``' metrics at ``http://host:port/metrics``; port 0 picks a free one (``port`` after
    start)."""

    def __init__(self, sources: list[MetricsSource], host: str = "127.0.0.1", port: int = 0) -> None:
        self.sources = sources
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task[None]] = set()
        self.scrapes = 0
        # One thread of its own writes the text, one scrape at a time: not the loop's default executor, which the
        # server's own work (TLS reloads, an HA slave's flushes) needs.
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="metrics")
        # (key, when, answer) of the last scrape: scrapers that come together share one collection and text.
        self._last: tuple[tuple[bool, bool, frozenset[str]], float, tuple[bytes, str, bool]] | None = None

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    async def start(self) -> MetricsExporter:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._open):
            task.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)
        self._writer.shutdown(wait=False, cancel_futures=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._open) >= MAX_CONNECTIONS:
            writer.close()
            return
        self._open.add(task)
        try:
            try:
                async with asyncio.timeout(HEAD_TIMEOUT):
                    head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            status, body, ctype, gzipped = await self._answer(head)
            headers = [f"HTTP/1.1 {status}", f"Content-Type: {ctype}", f"Content-Length: {len(body)}",
                       "Connection: close"]
            if gzipped:
                headers.append("Content-Encoding: gzip")
            if head.startswith(b"HEAD "):
                body = b""
            writer.write(("\r\n".join(headers) + "\r\n\r\n").encode() + body)
            async with asyncio.timeout(WRITE_TIMEOUT):  # a scraper that does not read lets go of its slot
                await writer.drain()
        except (ConnectionError, TimeoutError):
            writer.transport.abort()
        finally:
            self._open.discard(task)
            writer.close()

    async def _answer(self, head: bytes) -> tuple[str, bytes, str, bool]:
        status, families, names = self._route(head)
        if families is None:
            body = b"Exporter is healthy.\n" if status.startswith("200") else status.split(" ", 1)[1].encode() + b"\n"
            return status, body, TEXT, False
        accept, gzip_ok = _header(head, b"accept"), b"gzip" in _header(head, b"accept-encoding")
        key = (b"application/openmetrics-text" in accept, gzip_ok, frozenset(names))
        now = time.monotonic()
        if self._last is not None and self._last[0] == key and now - self._last[1] < REUSE_SECONDS:
            body, ctype, gzipped = self._last[2]
        else:
            loop = asyncio.get_running_loop()
            body, ctype, gzipped = await loop.run_in_executor(self._writer, _render, families(), names, accept,
                                                              gzip_ok)
            if body:
                self._last = (key, time.monotonic(), (body, ctype, gzipped))
        if not body:
            return "500 Internal Server Error", b"collecting the metrics failed\n", TEXT, False
        return "200 OK", body, ctype, gzipped

    def _route(self, head: bytes) -> tuple[str, Callable[[], list[Family]] | None, set[str]]:
        """The status, and for a scrape what the sources have now (read here, on the loop) and the names asked."""
        line = head.split(b"\r\n", 1)[0].split(b" ")
        if len(line) != 3 or not line[2].startswith(b"HTTP/1."):
            return "400 Bad Request", None, set()
        method, (path, _, query) = line[0], line[1].partition(b"?")
        if path == b"/-/healthy":
            return "200 OK", None, set()
        if path != b"/metrics":
            return "404 Not Found", None, set()
        if method not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", None, set()
        self.scrapes += 1
        return "200 OK", self._collect, set(parse_qs(query.decode("latin-1")).get("name[]", [])[:100])

    def _collect(self) -> list[Family]:
        """What the sources have now (on the loop: they read the server's state)."""
        families: list[Family] = []
        for source in self.sources:
            try:
                families.extend(source.families())
            except Exception:  # a source's bug must not take the endpoint, or the others' metrics, down with it
                log.exception("reading the metrics of %s failed", type(source).__name__)
        return families


def _render(families: list[Family], names: set[str], accept: bytes, gzipped: bool) -> tuple[bytes, str, bool]:
    """The exposition (in a worker thread): the text, its content type, and whether it is gzipped; no text when
    it could not be made."""
    try:
        metrics: Collector = Snapshot(merged(families))
        if names:
            metrics = _Only(metrics, names)
        if b"application/openmetrics-text" in accept:
            body, ctype = _openmetrics(metrics), openmetrics.CONTENT_TYPE_LATEST
        else:
            body, ctype = generate_latest(metrics), TEXT_0_0_4
    except Exception:
        log.exception("writing the metrics failed")
        return b"", TEXT, False
    return (gzip.compress(body, 1), ctype, True) if gzipped else (body, ctype, False)


def _header(head: bytes, name: bytes) -> bytes:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().lower()
    return b""


_openmetrics = cast(Callable[[Collector], bytes], openmetrics.generate_latest)


class _Only(Collector):
    """The families of ``registry`` named in ``names`` (a sample's name or its family's: ``x_total`` or ``x``)."""

    def __init__(self, registry: Collector, names: set[str]) -> None:
        self.registry = registry
        self.names = names


    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            if family.name in self.names or any(s.name in self.names for s in family.samples):
                yield family
