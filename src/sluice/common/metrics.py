"""What every server's metrics share: the labels on every series (RocketMQ's ``cluster``, ``node_type``,
``node_id`` and ``metricsLabel``), families built from Sluice's own counters, the overflow series past the
cardinality limit (OpenTelemetry's ``otel_metric_overflow``, as RocketMQ's exporter shows it), and the exposition.

Counters live in plain dicts on the hot paths (a dict lookup and an addition). A scrape takes two steps: on the
server's loop, a ``MetricsSource`` copies what it reads into ``Family`` values (plain lists, the loop's state read
without locks); in a worker thread, they become prometheus_client families and text, the costly part (a broker
with thousands of topics writes megabytes), away from the loop."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from sluice.common.namespace import NAMESPACE_SEPARATOR, namespace_of, unwrap

OVERFLOW_LABELS = {"otel_metric_overflow": "true"}
# The descriptions RocketMQ's default views give every gauge and counter (histograms keep their own).
GAUGE_HELP = "default view for gauge."
COUNTER_HELP = "default view for counter."

# Further labels (None: the overflow series), or a key the family's ``label_of`` turns into them; the value, or
# for a histogram the counts per bucket (the last +Inf) then the sum.
Series = tuple[Any, float]
HistogramSeries = tuple[Any, Sequence[float]]
LabelOf = Callable[[Any], dict[str, str] | None]


def parse_metrics_label(spec: str) -> dict[str, str]:
    """``"region:eu,zone:a"`` → labels (the config's pattern has checked the form)."""
    return dict(item.split(":", 1) for item in spec.split(",") if item) if spec else {}


def with_namespace(labels: dict[str, str]) -> dict[str, str]:
    """A namespace's topic and group (``ns%orders`` on the broker) labelled as their clients name them, with the
    namespace beside (``topic="orders", namespace="ns"``); names outside any namespace as they are."""
    namespace = ""
    for key in ("topic", "consumer_group"):
        value = labels.get(key)
        ns = namespace_of(value) if value and NAMESPACE_SEPARATOR in value else ""
        if ns:
            labels[key] = unwrap(value, ns)  # type: ignore[arg-type]
            namespace = namespace or ns
    if namespace:
        labels["namespace"] = namespace
    return labels


def bool_label(value: bool) -> str:
    return "true" if value else "false"


@dataclass(slots=True)
class Family:
    """One family's series as read on the loop; ``metric()`` makes it prometheus_client's (in any thread)."""

    kind: str  # gauge, counter, histogram
    name: str
    doc: str
    base: dict[str, str]
    series: Sequence[Series] | Sequence[HistogramSeries]
    bounds: Sequence[float] = ()
    label_of: LabelOf | None = None  # (called in the worker thread: it must only compute)

    def labels(self, key: Any) -> dict[str, str]:
        extra = self.label_of(key) if self.label_of is not None and key is not None else key
        return with_namespace({**self.base, **(OVERFLOW_LABELS if extra is None else extra)})

    def metric(self) -> Metric:
        if self.kind == "gauge":
            gauge = GaugeMetricFamily(self.name, self.doc)
            for extra, value in self.series:
                gauge.add_sample(self.name, self.labels(extra), value)  # type: ignore[arg-type]
            return gauge
        if self.kind == "counter":
            counter = CounterMetricFamily(self.name, self.doc)  # (``name_total``: one ``_total`` is kept)
            for extra, value in self.series:
                counter.add_sample(counter.name + "_total", self.labels(extra), value)  # type: ignore[arg-type]
            return counter
        histogram = HistogramMetricFamily(self.name, self.doc)
        les = (*(repr(float(b)) for b in self.bounds), "+Inf")
        for extra, counts in self.series:
            labels = self.labels(extra)
            cumulative = 0.0
            for le, n in zip(les, counts[:-1], strict=True):  # type: ignore[index]
                cumulative += n
                histogram.add_sample(self.name + "_bucket", {**labels, "le": le}, cumulative)
            histogram.add_sample(self.name + "_count", labels, cumulative)
            histogram.add_sample(self.name + "_sum", labels, counts[-1])  # type: ignore[index]
        return histogram


class Families:
    """Makes families whose every series carries ``base`` labels (each series names its own further labels, as
    OpenTelemetry's do: a family may mix label sets). ``series`` are read now, into lists."""

    def __init__(self, base: dict[str, str]) -> None:
        self.base = base

    def gauge(self, name: str, series: Iterable[Series], label_of: LabelOf | None = None) -> Family:
        return Family("gauge", name, GAUGE_HELP, self.base, list(series), (), label_of)

    def counter(self, name: str, series: Iterable[Series], label_of: LabelOf | None = None) -> Family:
        return Family("counter", name, COUNTER_HELP, self.base, list(series), (), label_of)

    def histogram(self, name: str, doc: str, bounds: Sequence[float], series: Iterable[HistogramSeries],
                  label_of: LabelOf | None = None) -> Family:
        """``series``: per label set, the count in each bucket (not cumulative; the last is +Inf) then the sum (a
        copy: the counters go on changing)."""
        return Family("histogram", name, doc, self.base, [(key, list(counts)) for key, counts in series], bounds,
                      label_of)


def target_info() -> Family:
    """OpenTelemetry's ``target_info 1`` (no resource attributes: RocketMQ's meter provider has an empty one)."""
    one: list[Series] = [({}, 1.0)]
    return Family("gauge", "target_info", "Target metadata", {}, one)


class MetricsSource(Protocol):
    """A server's metrics: ``families()`` is called on the server's loop and must only read."""

    def families(self) -> list[Family]: ...


def merged(families: Iterable[Family]) -> list[Metric]:
    """prometheus_client's families, those of one name made one (``sluice dev``'s servers share an endpoint; an
    exposition allows a name once), empty ones left out (as RocketMQ's exporter leaves them out)."""
    by_name: dict[str, Metric] = {}
    for family in families:
        if not family.series:
            continue
        first = by_name.get(family.name)
        if first is None:
            by_name[family.name] = family.metric()
        elif family.name != "target_info":
            first.samples.extend(family.metric().samples)
    return list(by_name.values())


class Snapshot(Collector):
    """Families read already, for prometheus_client's exposition."""

    def __init__(self, metrics: Sequence[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


def collect(sources: Iterable[MetricsSource]) -> list[Metric]:
    """Everything the sources have now, in the calling thread (tests, one-off use)."""
    return merged(f for source in sources for f in source.families())
