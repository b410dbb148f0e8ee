"""The manifest's optional `probe` section: the figures of the last probe run kept on the host
(record.py), judged against this topology and placement (docs/manifest.md, "probe").

placement/build.py cannot import this module (the probe sits above placement); the commands
that publish a manifest pass `manifest_section` in (build_all's `probe` argument).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcpnode.errors import HostError, ProbeDataError
from mcpnode.probe.record import load_recorded

if TYPE_CHECKING:
    from mcpnode.host import Host
    from mcpnode.placement.plan import Placement
    from mcpnode.probe.analysis import ProbeReport
    from mcpnode.topology.model import Topology


def _r(v: float | None, nd: int = 2) -> float | None:
    return None if v is None else round(v, nd)


def section(report: ProbeReport, source: str) -> dict[str, Any]:
    """The JSON-ready section for `report` (fields in docs/manifest.md)."""
    status = {(f.id, f.subject): f.status.value for f in report.findings}
    gpus = []
    for g in report.gpus:
        gpus.append(
            {
                "index": g.index,
                "address": str(g.address),
                "placed_node": g.placed_node,
                "fastest_node": g.fastest_node,
                "expected_gbps": _r(g.expected.gbps if g.expected is not None else None),
                "nodes": [
                    {
                        "node": n.node,
                        "h2d_gbps": _r(n.h2d.median_gbps),
                        "d2h_gbps": _r(n.d2h.median_gbps),
                        "h2d_latency_us": _r(n.h2d.latency_us),
                        "d2h_latency_us": _r(n.d2h.latency_us),
                    }
                    for n in g.nodes
                ],
                "placement": status.get(("probe.placement", str(g.address))),
                "pcie": status.get(("probe.pcie", str(g.address))),
            }
        )
    peers = [
        {
            "src": p.src_index,
            "dst": p.dst_index,
            "link": p.link,
            "gbps": _r(p.figure.median_gbps),
            "expected_gbps": _r(p.expected_gbps),
            "status": status.get(("probe.nvlink", p.subject)) if p.nvlink is not None else None,
        }
        for p in report.peers
    ]
    return {
        "measured_at": report.run.measured_at,
        "source": source,
        "error": None,
        "gpus": gpus,
        "peers": peers,
        "problems": list(report.problems),
    }


def manifest_section(host: Host, topo: Topology, placement: Placement) -> dict[str, Any] | None:
    """The section for the run kept under `host`, None when no probe ever ran there. A kept run
    that cannot be read gives a section whose `error` says why, never an exception."""
    try:
        found = load_recorded(host)
    except (ProbeDataError, HostError) as err:
        return {
            "measured_at": None,
            "source": None,
            "error": str(err),
            "gpus": [],
            "peers": [],
            "problems": [],
        }
    if found is None:
        return None
    # The analysis (and what it imports) only once a run was kept: the agent calls this at
    # every publish, and most hosts never ran the probe.
    from mcpnode.probe.analysis import analyse

    run, source = found
    return section(analyse(topo, placement, run), source)
