"""deploy/grafana/mcpnode.json: what tools/grafana_dashboard.py writes, in the structure Grafana's
dashboard model reads (Grafana publishes no JSON schema for it, so the parts this dashboard
relies on are checked here: panel ids, the 24-column grid, rows, Prometheus targets over the
`$datasource` variable, the variables the queries use), and every expression names only metrics
mcpnode exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.deploy.promql import exported_names, expr_names
from tools import grafana_dashboard

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "mcpnode.json"
PANEL_TYPES = {"row", "timeseries", "stat", "table"}
# Grafana 10.3 writes schemaVersion 39; older Grafana refuses nothing newer than it knows of
# and migrates older versions forward, so the file says the oldest version it was written for.
MIN_SCHEMA = 36  # Grafana 9: datasource references as {type, uid}


def load() -> dict[str, Any]:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def panels() -> list[dict[str, Any]]:
    return [p for p in load()["panels"] if p["type"] != "row"]


def test_file_is_what_the_generator_writes() -> None:
    assert DASHBOARD.read_text(encoding="utf-8") == grafana_dashboard.rendered()
    assert grafana_dashboard.main(["--check"]) == 0


def test_dashboard_model() -> None:
    doc = load()
    for key, kind in (
        ("title", str),
        ("uid", str),
        ("schemaVersion", int),
        ("panels", list),
        ("templating", dict),
        ("time", dict),
        ("tags", list),
    ):
        assert isinstance(doc[key], kind), key
    assert doc["schemaVersion"] >= MIN_SCHEMA
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", doc["uid"])  # Grafana's uid limit
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)


def test_grid_has_no_overlap_and_rows_hold_their_panels() -> None:
    taken: set[tuple[int, int]] = set()
    for p in load()["panels"]:
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert set(g) == {"h", "w", "x", "y"} and all(isinstance(v, int) for v in g.values())
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["x"] + g["w"] <= 24
        cells = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & taken, p["title"]
        taken |= cells
        if p["type"] == "row":
            assert g == {"h": 1, "w": 24, "x": 0, "y": g["y"]} and p["panels"] == []


def test_every_panel_queries_prometheus_through_the_datasource_variable() -> None:
    names = {v["name"] for v in load()["templating"]["list"]}
    assert names == {"datasource", "instance", "gpu"}
    for p in panels():
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        assert set(p["fieldConfig"]) == {"defaults", "overrides"}
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"]
            used = set(re.findall(r"\$(\w+)", t["expr"])) - {"__rate_interval"}
            assert used <= names, (p["title"], used - names)


def all_exprs() -> list[tuple[str, str]]:
    out = [(p["title"], t["expr"]) for p in panels() for t in p["targets"]]
    for v in load()["templating"]["list"]:
        if v["type"] == "query":
            # label_values(SELECTOR, LABEL): Grafana's call; the selector is PromQL
            call = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["query"]["query"])
            assert call is not None, v["query"]
            out.append((v["name"], call.group(1)))
    return out


def test_every_expression_names_only_exported_metrics() -> None:
    exported = exported_names()
    used: set[str] = set()
    for title, expr in all_exprs():
        names = expr_names(expr)
        assert names, (title, expr)
        assert names <= exported, (title, names - exported)
        used |= names
    # health, placement, tuning and agent vitals each have a panel
    assert {
        "mcpnode_gpu_unhealthy",
        "mcpnode_gpu_processes",
        "mcpnode_tuning_drift_keys",
        "mcpnode_loop_latency_seconds_bucket",
    } <= used


def test_the_metric_check_catches_a_histogram_without_its_bucket() -> None:
    names = expr_names(
        "histogram_quantile(0.9, sum by (le) (rate(mcpnode_loop_latency_seconds[5m])))"
    )
    assert names == {"mcpnode_loop_latency_seconds"}
    assert not names <= exported_names()
