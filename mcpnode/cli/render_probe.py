"""`mcpnode probe` renderers: a table per GPU (measured, expected, ratio, fastest node), the peer
matrix, the findings; and JSON (schema mcpnode.probe-report/v1, docs/probe.md), which carries the
raw run too, so a replay of it can be compared with the live output byte for byte."""

from __future__ import annotations

import json
from typing import Any

from mcpnode.audit.model import Status
from mcpnode.cli.render_audit import finding_json
from mcpnode.codec.printable import printable
from mcpnode.probe.analysis import Figure, GpuFigures, PeerFigures, ProbeReport
from mcpnode.probe.expected import PcieExpectation
from mcpnode.probe.model import run_json

REPORT_SCHEMA = "mcpnode.probe-report/v1"


def _num(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def _ratio(f: Figure, exp: PcieExpectation | None) -> str:
    if f.median_gbps is None or exp is None:
        return "-"
    return f"{f.median_gbps / exp.gbps:.2f}"


def _gpu_text(g: GpuFigures) -> list[str]:
    exp = g.expected
    promise = f"{exp.label} {exp.gbps:.1f} GB/s" if exp is not None else "unknown"
    load = g.link_under_load
    under = (
        f"Gen{load.gen if load.gen is not None else '?'} x{load.width if load.width else '?'}"
        if load is not None
        else "not read"
    )
    head = (
        f"GPU {g.index} {g.address} {printable(g.name or '')}".rstrip()
        + f": promised {promise}; under load {under}; placement node"
        f" {g.placed_node if g.placed_node is not None else '?'}"
    )
    if g.error is not None:
        return [head, f"  not probed: {printable(g.error)}"]
    lines = [head, "  node  h2d GB/s  ratio  d2h GB/s  ratio  latency us h2d/d2h  CPUs"]
    fastest = g.fastest_node
    for n in g.nodes:
        marks = "".join(
            m for m, on in (("*", n.node == fastest), ("p", n.node == g.placed_node)) if on
        )
        lines.append(
            f"  {str(n.node) + marks:<5} {_num(n.h2d.median_gbps):>8}  {_ratio(n.h2d, exp):>5}"
            f"  {_num(n.d2h.median_gbps):>8}  {_ratio(n.d2h, exp):>5}"
            f"  {_num(n.h2d.latency_us):>8}/{_num(n.d2h.latency_us):<9}  {n.cpus or '-'}"
        )
        for d, f in (("h2d", n.h2d), ("d2h", n.d2h)):
            if f.error is not None:
                lines.append(f"        {d}: {printable(f.error)}")
    return lines


def _peer_cell(p: PeerFigures) -> str:
    if not p.can_access:
        return "no P2P"
    if p.figure.median_gbps is None:
        return "error"
    return f"{p.figure.median_gbps:.0f}/{_num(p.expected_gbps, '.0f')}"


def as_text(report: ProbeReport, source: str) -> str:
    run = report.run
    s = run.settings
    out = [
        f"probe {printable(run.measured_at)} ({printable(source)});"
        f" CUDA {printable(run.cuda_driver_version or '?')};"
        f" {s.samples} samples of {s.copies_per_sample} x {s.buffer_bytes >> 20} MiB,"
        f" medians; * fastest node, p placement node",
        "",
    ]
    for g in report.gpus:
        out.extend(_gpu_text(g))
        out.append("")
    if report.peers:
        index = sorted({p.src_index for p in report.peers} | {p.dst_index for p in report.peers})
        cells = {(p.src_index, p.dst_index): _peer_cell(p) for p in report.peers}
        width = max(9, *(len(c) for c in cells.values()))
        out.append("peer copies, GB/s measured/expected (row -> column)")
        out.append(" " * 6 + "".join(f"GPU{j}".rjust(width + 1) for j in index))
        for i in index:
            row = "".join(
                ("X" if i == j else cells.get((i, j), "-")).rjust(width + 1) for j in index
            )
            out.append(f"GPU{i}".ljust(6) + row)
        links = sorted({p.link for p in report.peers})
        out.append(f"links: {printable(', '.join(links))}")
        out.append("")
    counts = {st: 0 for st in Status}
    for f in report.findings:
        counts[f.status] += 1
        if f.status in (Status.FAIL, Status.WARN):
            out.append(f"[{f.status.value}] {f.id} {printable(f.summary)}")
            if f.remedy:
                out.append(f"       remedy: {printable(f.remedy)}")
    for p in report.problems:
        out.append(f"problem: {printable(p)}")
    out.append(
        ", ".join(f"{counts[st]} {st.value}" for st in Status)
        + f" of {len(report.findings)} probe findings"
    )
    return "\n".join(out) + "\n"


def _figure_json(f: Figure, exp: float | None) -> dict[str, Any]:
    return {
        "median_gbps": None if f.median_gbps is None else round(f.median_gbps, 3),
        "ratio": None if f.median_gbps is None or not exp else round(f.median_gbps / exp, 4),
        "spread": None if f.spread is None else round(f.spread, 4),
        "latency_us": None if f.latency_us is None else round(f.latency_us, 3),
        "samples": f.samples,
        "error": f.error,
    }


def _expected_json(e: PcieExpectation | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "gen": e.gen,
        "width": e.width,
        "gbps": round(e.gbps, 3),
        "encoding": e.encoding,
        "encoding_efficiency": round(e.encoding_efficiency, 5),
        "tlp_efficiency": round(e.tlp_efficiency, 5),
        "source": e.source,
    }


def report_json(report: ProbeReport, source: str) -> dict[str, Any]:
    gpus = []
    for g in report.gpus:
        exp = g.expected.gbps if g.expected is not None else None
        load = g.link_under_load
        gpus.append(
            {
                "index": g.index,
                "address": str(g.address),
                "name": g.name,
                "placed_node": g.placed_node,
                "fastest_node": g.fastest_node,
                "expected": _expected_json(g.expected),
                "link_under_load": None if load is None else {"gen": load.gen, "width": load.width},
                "nodes": [
                    {
                        "node": n.node,
                        "cpus": n.cpus,
                        "h2d": _figure_json(n.h2d, exp),
                        "d2h": _figure_json(n.d2h, exp),
                    }
                    for n in g.nodes
                ],
                "error": g.error,
            }
        )
    peers = [
        {
            "src": p.src_index,
            "dst": p.dst_index,
            "link": p.link,
            "nvlinks": p.nvlink.links if p.nvlink is not None else None,
            "nvlink_version": p.nvlink.version if p.nvlink is not None else None,
            "can_access": p.can_access,
            "expected_gbps": None if p.expected_gbps is None else round(p.expected_gbps, 3),
            **_figure_json(p.figure, p.expected_gbps),
        }
        for p in report.peers
    ]
    return {
        "schema": REPORT_SCHEMA,
        "source": source,
        "gpus": gpus,
        "peers": peers,
        "findings": [finding_json(f) for f in report.findings],
        "problems": list(report.problems),
        "run": run_json(report.run),
    }


def as_json(report: ProbeReport, source: str) -> str:
    return json.dumps(report_json(report, source), indent=2) + "\n"
