"""Render a FleetReport: text for people, JSON `mcpnode.fleet-report/v1` for tools
(docs/fleet-report.schema.json)."""

from __future__ import annotations

import json
from typing import Any

from mcpnode.codec.printable import printable
from mcpnode.fleet.report import FleetReport, Outlier, PropertyReport

SCHEMA = "mcpnode.fleet-report/v1"
NOT_REPORTED = "not reported"


def as_text(report: FleetReport) -> str:
    n = len(report.hosts)
    lines = [f"fleet: {n} host(s) read, {len(report.unreadable)} unreadable"]
    if report.unreadable:
        lines.append("unreadable:")
        lines.extend(f"  {printable(u.host)}: {printable(u.reason)}" for u in report.unreadable)
    if n:
        for prop in report.properties:
            lines.extend(_property_lines(prop, n))
    outliers = report.outlier_hosts
    lines.append(
        f"{len(outliers)} outlier host(s)"
        + (f": {printable(', '.join(outliers))}" if outliers else "")
    )
    if report.split_properties:
        lines.append(f"no majority: {', '.join(report.split_properties)}")
    if report.unreadable:
        lines.append(
            f"{len(report.unreadable)} unreadable: "
            + printable(", ".join(u.host for u in report.unreadable))
        )
    return "\n".join(lines) + "\n"


def _property_lines(prop: PropertyReport, n: int) -> list[str]:
    if prop.split:
        lines = [f"{prop.name}: no majority ({len(prop.groups)} groups)"]
        lines.extend(
            f"  {NOT_REPORTED if g.value is None else printable(g.value)}"
            f" ({len(g.hosts)}/{n} hosts): " + printable(", ".join(g.hosts))
            for g in prop.groups
        )
        return lines
    if prop.majority is None:
        return [f"{prop.name}: {NOT_REPORTED} by any host"]
    lines = [f"{prop.name}: majority {printable(prop.majority)} ({prop.majority_hosts}/{n} hosts)"]
    lines.extend(f"  {printable(o.host)}: {_outlier(o)}" for o in prop.outliers)
    return lines


def _outlier(o: Outlier) -> str:
    if o.value is None:
        return NOT_REPORTED
    if o.gpus:
        return printable(", ".join(f"GPU {d.index} {d.value} (fleet: {d.fleet})" for d in o.gpus))
    return printable(o.value)


def as_json(report: FleetReport) -> str:
    return json.dumps(to_json(report), indent=2, ensure_ascii=False) + "\n"


def to_json(report: FleetReport) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "hosts": list(report.hosts),
        "unreadable": [
            {"host": u.host, "source": u.source, "reason": u.reason} for u in report.unreadable
        ],
        "properties": [_property_json(p) for p in report.properties],
        "outlier_hosts": list(report.outlier_hosts),
        "split_properties": list(report.split_properties),
        "ok": report.ok,
    }


def _property_json(p: PropertyReport) -> dict[str, Any]:
    return {
        "name": p.name,
        "title": p.title,
        "per_gpu": p.per_gpu,
        "majority": p.majority,
        "majority_hosts": p.majority_hosts,
        "split": p.split,
        "groups": [{"value": g.value, "hosts": list(g.hosts)} for g in p.groups],
        "outliers": [
            {
                "host": o.host,
                "value": o.value,
                "gpus": [{"index": d.index, "value": d.value, "fleet": d.fleet} for d in o.gpus],
            }
            for o in p.outliers
        ],
    }
