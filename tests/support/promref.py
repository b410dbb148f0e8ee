"""prometheus_client as the reference mcpnode's own exposition (mcpnode/codec/promtext.py) and
metric kinds (mcpnode/agent/series.py) are compared with, byte for byte.

`Reference` hands promtext families to prometheus_client as its own `Metric` objects, so the
library's writers (`generate_latest`, `openmetrics.generate_latest`, `choose_encoder`'s pick)
format the same content; `WithoutCreated` drops the `<name>_created` samples from a
prometheus_client registry, as the agent never exposed them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics

from mcpnode.codec.promtext import Family

ACCEPTS = (
    "",
    "text/plain",
    "text/plain;version=0.0.4",
    "text/plain;version=1.0.0",
    "text/plain;version=1.0.0;escaping=allow-utf-8",
    "text/plain; version=1.0.0; escaping=dots",
    "text/plain;version=1.0.0;escaping=values",
    "text/plain;version=1.0.0;escaping=bogus",
    "text/plain;version=1.0.0.1",
    "application/openmetrics-text",
    "application/openmetrics-text; version=1.0.0",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8",
    "application/openmetrics-text; version=2.0.0; escaping=dots",
    "application/openmetrics-text;version=1.0.0;escaping=values",
    "application/openmetrics-text; version= 1.0.0",
    "application/openmetrics-text; version=3",
    "application/openmetrics-text;version=0.0.1,text/plain;version=1.0.0;escaping=dots",
    # What Prometheus 2.x/3.x sends by default (scrape_protocols: OpenMetrics first).
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
    "text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
    "text/html, */*",
)
ESCAPINGS = ("allow-utf-8", "underscores", "dots", "values")


class Reference:
    """A prometheus_client collector over promtext families."""

    def __init__(self, families: Iterable[Family]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            metric = Metric(family.name, family.documentation, family.type)
            for s in family.samples:
                metric.add_sample(s.name, dict(s.labels), s.value)
            yield metric


class WithoutCreated:
    """A prometheus_client registry's families less their `<name>_created` samples."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            family.samples = [s for s in family.samples if s.name != family.name + "_created"]
            yield family


def text(collector: Reference | WithoutCreated, escaping: str = "underscores") -> bytes:
    return generate_latest(collector, escaping=escaping)


def openmetrics_text(collector: Reference | WithoutCreated, escaping: str = "underscores") -> bytes:
    out: bytes = openmetrics.generate_latest(collector, escaping=escaping)  # type: ignore[no-untyped-call]
    return out


def scrape(collector: Reference | WithoutCreated, accept: str) -> tuple[bytes, str]:
    """What prometheus_client's own server answers to `accept`: the body and Content-Type."""
    encoder, content_type = choose_encoder(accept)
    return encoder(collector), content_type
