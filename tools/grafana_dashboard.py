"""The Grafana dashboard deploy/grafana/mcpnode.json, generated from the panels below.

`python3 -m tools.grafana_dashboard` writes it; `--check` exits 1 when the file differs from what
it would write (tests/deploy/test_grafana_dashboard.py runs the same comparison and checks the
structure Grafana reads, and that every expression names only metrics mcpnode exports).

The model is Grafana's dashboard JSON (schemaVersion 39, Grafana 10.3 and later migrate it
forward on load): `panels[]` with `gridPos` on a 24-column grid, rows as `type: row` panels,
every query a Prometheus target over the `$datasource` variable, so the file imports into any
Grafana with a Prometheus data source. Per node (`$instance`) and per GPU (`$gpu`): health,
placement, tuning and the agent's vitals.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "deploy" / "grafana" / "mcpnode.json"
SCHEMA_VERSION = 39
WIDTH = 24  # Grafana's grid
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
NODE = 'instance=~"$instance"'
GPU = 'instance=~"$instance", gpu=~"$gpu"'

Panel = dict[str, Any]


def target(expr: str, legend: str, ref: str = "A", instant: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
    }
    if instant:
        out.update(instant=True, format="table", range=False)
    return out


def timeseries(title: str, unit: str, *targets: dict[str, Any], stack: bool = False) -> Panel:
    custom: dict[str, Any] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10}
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    return {
        "type": "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "targets": list(targets),
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def stat(title: str, unit: str, expr: str, legend: str, red_from: float | None = None) -> Panel:
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if red_from is not None:
        steps.append({"color": "red", "value": red_from})
    return {
        "type": "stat",
        "title": title,
        "datasource": DATASOURCE,
        "targets": [target(expr, legend)],
        "fieldConfig": {
            "defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
            "graphMode": "none",
            "textMode": "auto",
            "orientation": "auto",
            "justifyMode": "auto",
        },
    }


def table(title: str, expr: str) -> Panel:
    return {
        "type": "table",
        "title": title,
        "datasource": DATASOURCE,
        "targets": [target(expr, "", instant=True)],
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True, "cellHeight": "sm"},
        "transformations": [
            {"id": "organize", "options": {"excludeByName": {"Time": True, "__name__": True}}}
        ],
    }


def rate(selector: str) -> str:
    return f"increase({selector}[$__rate_interval])"


def quantile(q: float, histogram: str) -> str:
    return (
        f"histogram_quantile({q}, sum by (instance, le) "
        f"(rate({histogram}_bucket{{{NODE}}}[$__rate_interval])))"
    )


SECTIONS: tuple[tuple[str, tuple[tuple[int, int, Panel], ...]], ...] = (
    (
        "GPU health",
        (
            (
                6,
                8,
                stat(
                    "Unhealthy GPUs",
                    "none",
                    f"sum by (instance) (mcpnode_gpu_unhealthy{{{NODE}}})",
                    "{{instance}}",
                    red_from=1,
                ),
            ),
            (
                18,
                8,
                timeseries(
                    "XIDs by GPU and XID",
                    "none",
                    target(
                        rate(f"mcpnode_gpu_xid_total{{{GPU}}}"), "{{instance}} {{gpu}} XID {{xid}}"
                    ),
                ),
            ),
            (
                8,
                8,
                timeseries(
                    "NVLink error counters",
                    "none",
                    target(
                        f"mcpnode_gpu_nvlink_errors{{{GPU}}}", "{{instance}} {{gpu}} {{counter}}"
                    ),
                ),
            ),
            (
                8,
                8,
                timeseries(
                    "PCIe replays",
                    "none",
                    target(f"mcpnode_gpu_pcie_replays{{{GPU}}}", "{{instance}} {{gpu}}"),
                ),
            ),
            (
                8,
                8,
                timeseries(
                    "NVSwitch SXIDs and IB link flaps",
                    "none",
                    target(
                        rate(f"mcpnode_nvswitch_sxid_total{{{NODE}}}"),
                        "{{instance}} {{switch}} SXID {{sxid}}",
                    ),
                    target(
                        rate(f"mcpnode_ib_link_flaps_total{{{NODE}}}"),
                        "{{instance}} {{port}} flaps",
                        "B",
                    ),
                ),
            ),
            (
                24,
                8,
                table(
                    "GPUs (node_exporter textfile)",
                    f"mcpnode_gpu_info{{{NODE}}} * on (instance, gpu) group_left "
                    f'mcpnode_gpu_pcie_link_width{{{NODE}, kind="current"}}',
                ),
            ),
        ),
    ),
    (
        "Placement",
        (
            (
                12,
                8,
                timeseries(
                    "GPU processes by where their CPUs are",
                    "none",
                    target(
                        f"sum by (instance, gpu, cpus) (mcpnode_gpu_processes{{{GPU}}})",
                        "{{instance}} {{gpu}} {{cpus}}",
                    ),
                    stack=True,
                ),
            ),
            (
                6,
                8,
                timeseries(
                    "Pinned processes",
                    "none",
                    target(f"mcpnode_pinned_processes{{{NODE}}}", "{{instance}}"),
                    target(
                        rate(f"mcpnode_pins_total{{{NODE}}}"), "{{instance}} pins {{rule}}", "B"
                    ),
                ),
            ),
            (
                6,
                8,
                timeseries(
                    "Exclusive slice CPUs per GPU",
                    "none",
                    target(f"mcpnode_placement_slice_cpus{{{NODE}}}", "{{instance}} GPU {{gpu}}"),
                ),
            ),
        ),
    ),
    (
        "Tuning and audit",
        (
            (
                6,
                8,
                stat(
                    "Compliant (1) / not (0)",
                    "none",
                    f"min by (instance) (mcpnode_tuning_compliant{{{NODE}}})",
                    "{{instance}}",
                ),
            ),
            (
                6,
                8,
                timeseries(
                    "Drifted keys; compliance known",
                    "none",
                    target(f"mcpnode_tuning_drift_keys{{{NODE}}}", "{{instance}} drifted"),
                    target(f"mcpnode_tuning_compliance_known{{{NODE}}}", "{{instance}} known", "B"),
                ),
            ),
            (
                6,
                8,
                timeseries(
                    "Drift detected and remediated",
                    "none",
                    target(
                        rate(f"mcpnode_drift_detected_total{{{NODE}}}"),
                        "{{instance}} {{key}} detected",
                    ),
                    target(
                        rate(f"mcpnode_drift_remediated_total{{{NODE}}}"),
                        "{{instance}} {{key}} remediated",
                        "B",
                    ),
                ),
            ),
            (
                6,
                8,
                timeseries(
                    "Audit findings by status",
                    "none",
                    target(f"mcpnode_audit_findings{{{NODE}}}", "{{instance}} {{status}}"),
                ),
            ),
            (
                24,
                6,
                table("Keys the agent gave up on", f"mcpnode_drift_given_up{{{NODE}}} == 1"),
            ),
        ),
    ),
    (
        "Agent",
        (
            (
                6,
                8,
                stat(
                    "Ready", "none", f"min by (instance) (mcpnode_ready{{{NODE}}})", "{{instance}}"
                ),
            ),
            (
                6,
                8,
                timeseries(
                    "Loop lateness and verify cycle (p99)",
                    "s",
                    target(quantile(0.99, "mcpnode_loop_latency_seconds"), "{{instance}} loop"),
                    target(quantile(0.99, "mcpnode_reconcile_seconds"), "{{instance}} verify", "B"),
                ),
            ),
            (
                6,
                8,
                timeseries(
                    "Events by source",
                    "none",
                    target(rate(f"mcpnode_events_total{{{NODE}}}"), "{{instance}} {{source}}"),
                    stack=True,
                ),
            ),
            (
                6,
                8,
                timeseries(
                    "NFD labels: time left before they expire",
                    "s",
                    target(
                        f"mcpnode_nfd_expiry_timestamp_seconds{{{NODE}}} - time()", "{{instance}}"
                    ),
                ),
            ),
            (
                8,
                8,
                timeseries(
                    "Publish, apply and reload results",
                    "none",
                    target(
                        f'mcpnode_publish_last_result{{{NODE}, result="failed"}}',
                        "{{instance}} publish failed",
                    ),
                    target(
                        f'mcpnode_apply_last_result{{{NODE}, result="failed"}}',
                        "{{instance}} apply failed",
                        "B",
                    ),
                    target(
                        rate(f"mcpnode_config_reload_total{{{NODE}}}"),
                        "{{instance}} reload {{result}}",
                        "C",
                    ),
                ),
            ),
            (
                8,
                8,
                timeseries(
                    "Metrics endpoint",
                    "none",
                    target(rate(f"mcpnode_scrapes_total{{{NODE}}}"), "{{instance}} scrapes"),
                    target(
                        rate(f"mcpnode_http_connections_dropped_total{{{NODE}}}"),
                        "{{instance}} dropped {{reason}}",
                        "B",
                    ),
                ),
            ),
            (
                8,
                8,
                table("Versions", f"mcpnode_build_info{{{NODE}}}"),
            ),
        ),
    ),
)


def layout() -> list[Panel]:
    """Rows and their panels with ids and grid positions: panels fill a row left to right and
    wrap when the next does not fit."""
    panels: list[Panel] = []
    y = 0
    next_id = 1
    for title, section in SECTIONS:
        panels.append(
            {
                "type": "row",
                "title": title,
                "id": next_id,
                "collapsed": False,
                "gridPos": {"h": 1, "w": WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        x = 0
        row_h = 0
        for w, h, panel in section:
            if x + w > WIDTH:
                y += row_h
                x, row_h = 0, 0
            panels.append({"id": next_id, "gridPos": {"h": h, "w": w, "x": x, "y": y}, **panel})
            next_id += 1
            x += w
            row_h = max(row_h, h)
        y += row_h
    return panels


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-values", "qryType": 1},
        "refresh": 2,  # on time range change: nodes and GPUs come and go
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {},
        "sort": 1,
    }


def dashboard() -> dict[str, Any]:
    return {
        "title": "mcpnode",
        "uid": "mcpnode-nodes",
        "description": "GPU node health, placement, tuning and the mcpnode agent",
        "tags": ["mcpnode", "gpu"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "timezone": "browser",
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "templating": {
            "list": [
                {
                    "type": "datasource",
                    "name": "datasource",
                    "label": "Data source",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                variable("instance", "Node", "label_values(mcpnode_build_info, instance)"),
                variable(
                    "gpu",
                    "GPU",
                    'label_values(mcpnode_gpu_unhealthy{instance=~"$instance"}, gpu)',
                ),
            ]
        },
        "panels": layout(),
    }


def rendered() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.grafana_dashboard", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    text = rendered()
    if args.check:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text:
            print("out of date, run python3 -m tools.grafana_dashboard", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
