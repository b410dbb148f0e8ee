"""One name per concept: the node_exporter textfile (placement/exporters/prom.py) and the agent's
live endpoint (agent/metrics.py) spell a shared concept the same way, and docs/exporters.md lists
every family of both.

A dashboard or alert written against one source must work on the other: `mcpnode_drift_keys`
on the endpoint beside `mcpnode_tuning_drift_keys` in the textfile was one concept under two
names."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from mcpnode.agent.metrics import AgentMetrics
from mcpnode.placement.exporters import prom
from tests.agent.test_agent_metrics import ALL_FAMILIES, feed
from tests.support.exportcase import AUDIT, placement, topology

REPO = Path(__file__).resolve().parents[2]

# Concepts both publish.
SHARED = {
    "mcpnode_audit_findings",
    "mcpnode_tuning_compliance_known",
    "mcpnode_tuning_compliant",
    "mcpnode_tuning_drift_keys",
}


def textfile_families() -> set[str]:
    host = "hgx-h100-8gpu-8nic"
    text = prom.render(topology(host), placement(host), AUDIT)
    return {f.name for f in text_string_to_metric_families(text)}


def endpoint_families() -> set[str]:
    metrics = AgentMetrics()
    feed(metrics)
    found = {f.name for f in text_string_to_metric_families(metrics.render().decode())}
    assert found == ALL_FAMILIES  # every family measured, as the endpoint test feeds them
    return found


def concept(name: str) -> frozenset[str]:
    """A name's words without the prefix and the `tuning` qualifier: two different names with
    the same words are one concept spelled twice."""
    return frozenset(name.split("_")) - {"mcpnode", "tuning"}


def test_shared_concepts_have_one_name() -> None:
    textfile, endpoint = textfile_families(), endpoint_families()
    assert textfile & endpoint >= SHARED, SHARED - (textfile & endpoint)
    spelled_twice = [
        (a, b)
        for a in sorted(textfile)
        for b in sorted(endpoint)
        if a != b and concept(a) == concept(b)
    ]
    assert not spelled_twice, f"one concept, two names: {spelled_twice}"


def test_the_concept_rule_catches_the_old_spelling() -> None:
    assert concept("mcpnode_drift_keys") == concept("mcpnode_tuning_drift_keys")
    assert concept("mcpnode_drift_detected") != concept("mcpnode_tuning_drift_keys")


def test_docs_list_every_family() -> None:
    doc = (REPO / "docs" / "exporters.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`(mcpnode_[a-z0-9_]+)", doc))
    missing = (textfile_families() | endpoint_families()) - listed
    assert not missing, f"docs/exporters.md does not list {sorted(missing)}"
