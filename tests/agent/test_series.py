"""The agent's metric kinds (mcpnode/agent/series.py) against prometheus_client's: the same
operations on both give the same scrape, byte for byte, in every format and escaping; and the
agent's real registry, fed as the metrics tests feed it plus hostile label values, scrapes as
prometheus_client's writers would write it for every Accept a scraper sends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import prometheus_client
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpnode.agent import series
from mcpnode.agent.metrics import AgentMetrics
from mcpnode.codec import promtext
from tests.agent.test_agent_metrics import feed
from tests.support import promref

BUCKETS = (0.001, 0.5, 2.0)


@dataclass
class Twin:
    """One metric made both ways; `shown`: registered now."""

    ours: Any
    theirs: Any
    labelnames: tuple[str, ...]
    shown: bool


def twins(ours_reg: series.Registry, theirs_reg: prometheus_client.CollectorRegistry) -> list[Twin]:
    made = []
    for kind, name, labelnames, shown in (
        ("counter", "t_events", (), True),
        ("counter", "t_by_key", ("key", "rule"), True),
        ("gauge", "t_level", (), False),
        ("gauge", "t_by_gpu", ("gpu",), False),
        ("gauge", "t_ready", (), True),
        ("histogram", "t_latency_seconds", (), True),
        ("histogram", "t_by_source_seconds", ("source",), True),
    ):
        doc = f'{kind} {name}: help with a \\ and "quotes"'
        pair: tuple[Any, Any]
        ours_at = ours_reg if shown else None
        theirs_at = theirs_reg if shown else None
        if kind == "counter":
            pair = (
                series.Counter(name, doc, labelnames, registry=ours_at),
                prometheus_client.Counter(name, doc, labelnames, registry=theirs_at),
            )
        elif kind == "gauge":
            pair = (
                series.Gauge(name, doc, labelnames, registry=ours_at),
                prometheus_client.Gauge(name, doc, labelnames, registry=theirs_at),
            )
        else:
            pair = (
                series.Histogram(name, doc, labelnames, buckets=BUCKETS, registry=ours_at),
                prometheus_client.Histogram(
                    name, doc, labelnames, buckets=BUCKETS, registry=theirs_at
                ),
            )
        made.append(Twin(pair[0], pair[1], labelnames, shown))
    return made


_label_values = st.text(st.characters(blacklist_categories=["Cs"]), max_size=6)
_amounts = st.one_of(
    st.floats(0, 1e9, allow_nan=False),
    st.sampled_from([0.0, 1.0, 1e-9, 0.001, 0.5, 2.0, 2.5, 1234567.0]),
)
_operations = st.lists(
    st.tuples(
        st.sampled_from(["update", "update", "update", "clear", "show", "hide"]),
        st.integers(0, 6),
        st.lists(_label_values, min_size=2, max_size=2),
        _amounts,
    ),
    max_size=40,
)


def _update(metric: Any, twin: Twin, values: list[str], amount: float) -> None:
    target = metric.labels(*values[: len(twin.labelnames)]) if twin.labelnames else metric
    if isinstance(metric, (series.Counter, prometheus_client.Counter)):
        target.inc(amount)
    elif isinstance(metric, (series.Gauge, prometheus_client.Gauge)):
        target.set(amount)
    else:
        target.observe(amount)


@settings(max_examples=200, deadline=None)
@given(operations=_operations)
def test_the_same_operations_scrape_the_same(operations: list[Any]) -> None:
    ours_reg = series.Registry()
    theirs_reg = prometheus_client.CollectorRegistry(auto_describe=True)
    made = twins(ours_reg, theirs_reg)
    for op, index, values, amount in operations:
        twin = made[index]
        if op == "update":
            _update(twin.ours, twin, values, amount)
            _update(twin.theirs, twin, values, amount)
        elif op == "clear" and twin.labelnames:
            twin.ours.clear()
            twin.theirs.clear()
        elif op == "show" and not twin.shown:
            ours_reg.register(twin.ours)
            theirs_reg.register(twin.theirs)
            twin.shown = True
        elif op == "hide" and twin.shown:
            ours_reg.unregister(twin.ours)
            theirs_reg.unregister(twin.theirs)
            twin.shown = False
    theirs = promref.WithoutCreated(theirs_reg)
    for escaping in promref.ESCAPINGS:
        assert promtext.text(ours_reg.collect(), escaping) == promref.text(theirs, escaping)
        assert promtext.openmetrics(ours_reg.collect(), escaping) == promref.openmetrics_text(
            theirs, escaping
        )


def test_misuse_is_refused_as_prometheus_client_refuses_it() -> None:
    reg = series.Registry()
    counter = series.Counter("x", "x", ["a"], registry=reg)
    with pytest.raises(ValueError, match="labels"):
        counter.inc()
    with pytest.raises(ValueError, match="takes labels"):
        counter.labels("1", "2")
    with pytest.raises(ValueError, match=">= 0"):
        counter.labels("1").inc(-1)
    with pytest.raises(ValueError, match="registered already"):
        series.Gauge("x", "again", registry=reg)
    with pytest.raises(ValueError, match="no labels"):
        series.Gauge("y", "y", registry=None).labels("1")
    with pytest.raises(ValueError, match="ascending"):
        series.Histogram("h", "h", buckets=(2.0, 1.0), registry=None)
    with pytest.raises(KeyError):
        reg.unregister(series.Counter("x", "not this one", registry=None))


def hostile(metrics: AgentMetrics) -> None:
    """Label values no configuration should hold but a caller may pass, and series that come,
    go and come back."""
    metrics.count_drift_detected('we"ird\\key\nnewline')
    metrics.count_pin("ünïcode rule")
    metrics.set_nfd_expiry(1.0, None)
    metrics.set_nfd_expiry(2.0, 123456789012.0)
    metrics.set_gpu_process_cpus({})
    metrics.observe_reconcile(5.0)
    metrics.observe_reconcile(1e-9)
    metrics.set_ib_link_downed("mlx5_1/1", 10**12)
    metrics.set_compliance(None, None)
    for i in range(70):
        metrics.count_xid(f"0000:{i:02x}:00.0", 1000 + i)


@pytest.mark.parametrize("accept", promref.ACCEPTS)
def test_the_agent_scrape_is_prometheus_clients(accept: str) -> None:
    metrics = AgentMetrics()
    feed(metrics)
    hostile(metrics)
    body, content_type = metrics.exposition(accept)
    reference = promref.Reference(metrics.registry.collect())
    assert (body, content_type) == promref.scrape(reference, accept)
