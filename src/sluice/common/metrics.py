"""What every server's metrics share: the labels on every series (RocketMQ's ``cluster``, ``node_type``,
``node_id`` and ``metricsLabel``), families built from Sluice's own counters, and the overflow series past the
cardinality limit (OpenTelemetry's ``otel_metric_overflow``, as RocketMQ's exporter shows it).

Counters live in plain dicts on the hot paths (a dict lookup and an addition); the families are made only when a
scraper asks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

OVERFLOW_LABELS = {"otel_metric_overflow": "true"}
# The descriptions RocketMQ's default views give every gauge and counter (histograms keep their own).
GAUGE_HELP = "default view for gauge."
COUNTER_HELP = "default view for counter."


def parse_metrics_label(spec: str) -> dict[str, str]:
    """``"region:eu,zone:a"`` → labels (the config's pattern has checked the form)."""
    return dict(item.split(":", 1) for item in spec.split(",") if item) if spec else {}


def bool_label(value: bool) -> str:
    return "true" if value else "false"


class Families:
    """Builds families whose every series carries ``base`` labels (each series names its own further labels, as
    OpenTelemetry's do: a family may mix label sets)."""

    def __init__(self, base: dict[str, str]) -> None:
        self.base = base

    def labels(self, extra: dict[str, str] | None) -> dict[str, str]:
        return {**self.base, **(OVERFLOW_LABELS if extra is None else extra)}

    def gauge(self, name: str, series: Iterable[tuple[dict[str, str] | None, float]]) -> Metric:
        family = GaugeMetricFamily(name, GAUGE_HELP)
        for extra, value in series:
            family.add_sample(name, self.labels(extra), value)
        return family

    def counter(self, name: str, series: Iterable[tuple[dict[str, str] | None, float]]) -> Metric:
        family = CounterMetricFamily(name, COUNTER_HELP)  # (``name_total``: prometheus_client keeps one ``_total``)
        for extra, value in series:
            family.add_sample(family.name + "_total", self.labels(extra), value)
        return family

    def histogram(self, name: str, doc: str, bounds: Sequence[float],
                  series: Iterable[tuple[dict[str, str] | None, Sequence[float]]]) -> Metric:
        """``series``: per label set, the count in each bucket (not cumulative; the last is +Inf) then the sum."""
        family = HistogramMetricFamily(name, doc)
        for extra, counts in series:
            labels = self.labels(extra)
            cumulative = 0.0
            for bound, n in zip((*(_le(b) for b in bounds), "+Inf"), counts[:-1], strict=True):
                cumulative += n
                family.add_sample(name + "_bucket", {**labels, "le": bound}, cumulative)
            family.add_sample(name + "_count", labels, cumulative)
            family.add_sample(name + "_sum", labels, counts[-1])
        return family


def _le(bound: float) -> str:
    return repr(float(bound))


def target_info() -> Metric:
    """OpenTelemetry's ``target_info 1`` (no resource attributes: RocketMQ's meter provider has an empty one)."""
    family = GaugeMetricFamily("target_info", "Target metadata")
    family.add_sample("target_info", {}, 1)
    return family



class MergedCollector(Collector):
    """Several servers' collectors on one endpoint (``sluice dev``): families of one name become one, their
    series side by side (told apart by ``node_type``), as an exposition allows a name once."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self.collectors = list(collectors)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for collector in self.collectors:
            for family in collector.collect():
                first = merged.get(family.name)
                if first is None:
                    merged[family.name] = family
                elif family.name == "target_info":
                    continue
                else:
                    first.samples.extend(family.samples)
        yield from merged.values()

    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return registry
