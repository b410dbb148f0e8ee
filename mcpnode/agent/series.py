"""The metric kinds `AgentMetrics` (metrics.py) is built of: counters, gauges and histograms,
with or without labels, held in a `Registry` that hands their families to the exposition
(codec/promtext.py). They behave as prometheus_client's `Counter`, `Gauge`, `Histogram` and
`CollectorRegistry` do for what the agent uses of them, so the families, their samples and
their order are the ones prometheus_client would give (tests/agent/test_series.py runs the
same operations on both and compares the scrapes byte for byte), less the `<name>_created`
samples: prometheus_client adds one to every counter and histogram series (when it was
created); the text format has no place for it, so Prometheus would ingest it as one more gauge
per series, which nothing uses (OpenMetrics makes it optional). The agent never exposed them.

prometheus_client is not used because importing any part of it imports its HTTP servers and
push-gateway client, `ssl` included (codec/promtext.py). Single-threaded, as the agent's loop
is: no locks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

from mcpnode.codec.promtext import Family, MetricType, Sample, format_value

_Child = TypeVar("_Child", "CounterChild", "GaugeChild", "HistogramChild")


class _Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class CounterChild(_Value):
    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        """Raises ValueError for a negative `amount`: a counter only goes up."""
        if amount < 0:
            raise ValueError(f"a counter is only incremented by amounts >= 0, not {amount}")
        self.value += amount


class GaugeChild(_Value):
    __slots__ = ()

    def set(self, value: float) -> None:
        self.value = float(value)


class HistogramChild:
    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self.counts = [0.0] * len(bounds)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        """One more observation in the first bucket whose upper bound is >= `amount`."""
        self.sum += amount
        for i, bound in enumerate(self._bounds):
            if amount <= bound:
                self.counts[i] += 1
                break


class _Metric(Generic[_Child]):
    """One family: its unlabelled value, or its children by label values in the order they
    were first asked for (as prometheus_client keeps them)."""

    type: MetricType

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: Registry | None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], _Child] = {}
        self._single: _Child | None = None if self.labelnames else self._child()
        if registry is not None:
            registry.register(self)

    def _child(self) -> _Child:
        raise NotImplementedError

    def _lone(self) -> _Child:
        if self._single is None:
            raise ValueError(f"{self.name} has labels {self.labelnames}: call .labels() first")
        return self._single

    def labels(self, *values: object) -> _Child:
        """The series of these label values (str() of each), created at 0 on first use.

        Raises ValueError for a metric without labels or the wrong number of values."""
        if not self.labelnames:
            raise ValueError(f"{self.name} has no labels")
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, not {values}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._child()
        return child

    def clear(self) -> None:
        """Removes every labelled series."""
        self._children.clear()

    def _series(self) -> Iterable[tuple[tuple[tuple[str, str], ...], _Child]]:
        if self._single is not None:
            yield (), self._single
        for values, child in self._children.items():
            yield tuple(zip(self.labelnames, values, strict=True)), child

    def samples(self) -> list[Sample]:
        raise NotImplementedError

    def family(self) -> Family:
        return Family(self.name, self.documentation, self.type, self.samples())


class Counter(_Metric[CounterChild]):
    """Its samples are `<name>_total`; `name` is given without that suffix."""

    type = "counter"

    def _child(self) -> CounterChild:
        return CounterChild()

    def inc(self, amount: float = 1) -> None:
        self._lone().inc(amount)

    def samples(self) -> list[Sample]:
        total = self.name + "_total"
        return [Sample(total, labels, child.value) for labels, child in self._series()]


class Gauge(_Metric[GaugeChild]):
    type = "gauge"

    def _child(self) -> GaugeChild:
        return GaugeChild()

    def set(self, value: float) -> None:
        self._lone().set(value)

    def samples(self) -> list[Sample]:
        return [Sample(self.name, labels, child.value) for labels, child in self._series()]


class Histogram(_Metric[HistogramChild]):
    """Cumulative `<name>_bucket{le}` samples up to `+Inf` (added when `buckets` lacks it),
    then `<name>_count` and `<name>_sum`."""

    type = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: Registry | None,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError(f"{name}: buckets not in ascending order")
        if bounds and bounds[-1] != math.inf:
            bounds.append(math.inf)
        if len(bounds) < 2:
            raise ValueError(f"{name}: a histogram needs at least two buckets")
        self.bounds = tuple(bounds)
        super().__init__(name, documentation, labelnames, registry=registry)

    def _child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def observe(self, amount: float) -> None:
        self._lone().observe(amount)

    def samples(self) -> list[Sample]:
        out: list[Sample] = []
        les = [format_value(b) for b in self.bounds]
        for labels, child in self._series():
            acc = 0.0
            for le, count in zip(les, child.counts, strict=True):
                acc += count
                out.append(Sample(self.name + "_bucket", (*labels, ("le", le)), acc))
            out.append(Sample(self.name + "_count", labels, acc))
            if self.bounds[0] >= 0:  # a negative bucket makes the sum meaningless
                out.append(Sample(self.name + "_sum", labels, child.sum))
        return out


class Registry:
    """Metrics in the order they were registered (a metric registered again goes last)."""

    def __init__(self) -> None:
        self._metrics: dict[str, _Metric[Any]] = {}

    def register(self, metric: _Metric[Any]) -> None:
        """Raises ValueError when a metric of the same name is registered already."""
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} is registered already")
        self._metrics[metric.name] = metric

    def unregister(self, metric: _Metric[Any]) -> None:
        """Raises KeyError when `metric` is not registered."""
        if self._metrics.get(metric.name) is not metric:
            raise KeyError(metric.name)
        del self._metrics[metric.name]

    def collect(self) -> Iterable[Family]:
        for metric in self._metrics.values():
            yield metric.family()
