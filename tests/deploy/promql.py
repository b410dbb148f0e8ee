"""What the alert rule and dashboard tests share: the metric names a PromQL expression uses, and
the sample names the agent's endpoint and the node_exporter textfile really expose."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from mcpnode.agent.metrics import AgentMetrics
from mcpnode.placement.exporters import prom
from tests.agent.test_agent_metrics import feed
from tests.support.exportcase import AUDIT, placement, topology

# PromQL's functions, operators and keywords that the shipped expressions use.
PROMQL_WORDS = {
    "increase", "delta", "rate", "irate", "or", "unless", "and", "offset", "time", "clamp_min",
    "on", "ignoring", "sum", "max", "min", "count", "avg", "topk", "histogram_quantile",
    "label_values", "group_left", "bool",
}  # fmt: skip


def exported_names() -> set[str]:
    """Every sample name the agent's endpoint and the textfile expose, fed as the endpoint test
    feeds them (every family measured), plus `up`, which Prometheus writes for every target."""
    metrics = AgentMetrics()
    feed(metrics)
    host = "hgx-h100-8gpu-8nic"
    texts = (metrics.render().decode(), prom.render(topology(host), placement(host), AUDIT))
    names = {
        s.name for text in texts for f in text_string_to_metric_families(text) for s in f.samples
    }
    return names | {"up"}


def expr_names(expr: str) -> set[str]:
    """The metric names of a PromQL expression: what is left after label matchers, range and
    `by`/`without` label lists, strings, durations, numbers, Grafana's `$variables` and
    PromQL's words are taken out."""
    bare = re.sub(r'"[^"]*"', " ", expr)
    bare = re.sub(r"\{[^}]*\}", " ", bare)
    bare = re.sub(r"\[[^\]]*\]", " ", bare)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    bare = re.sub(r"\$\w+", " ", bare)
    bare = re.sub(r"\b\d+[smhdwy]\b|\b\d+(\.\d+)?\b", " ", bare)
    return set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare)) - PROMQL_WORDS
