"""`mcpnode topo --p2p`: NVML's peer-to-peer read matrix in `nvidia-smi topo -p2p r`'s layout
(TAB separated, ` X ` on the diagonal, then its Legend), so the two can be diffed, and beside it
mcpnode's readiness of each pair (audit/p2p.py: NVLink, NVML's status, ACS on the PCIe path).
"""

from __future__ import annotations

import json
from typing import Any

from mcpnode.audit.p2p import P2pFacts, readiness
from mcpnode.audit.pcicfg import acs_names
from mcpnode.codec.printable import printable
from mcpnode.topology.model import Topology

SCHEMA = "mcpnode.p2p/v1"
# nvidia-smi's legend for `topo -p2p`, as its help lists the status codes.
NVML_LEGEND = """\
Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""
READINESS_LEGEND = """\
Legend:

  X    = Self
  NV#  = Peer traffic over # NVLinks
  OK   = PCIe P2P: NVML says OK and no bridge on the path redirects it
  ACS  = A bridge on the PCIe path has ACS SrcValid/ReqRedir/CmpltRedir on (see p2p.acs)
  ?    = A bridge's config space could not be read (needs root)
  DR   = Disabled by a registry key (NVML status 4)
  CNS, GNS, TNS, NS, U = NVML's status, as above
"""


def nvml_matrix(topo: Topology) -> list[list[str]] | None:
    """NVML's P2P read status per GPU pair, by index; None when NVML did not answer."""
    nvml = topo.nvml
    if nvml is None or not nvml.available or not nvml.gpus:
        return None
    status = {(s.a, s.b): s.status or "U" for s in nvml.p2p_read}
    idx = [g.index for g in nvml.gpus]
    return [["X" if a == b else status.get((a, b), "U") for b in idx] for a in idx]


def _table(rows: list[list[str]]) -> list[str]:
    labels = [f"GPU{i}" for i in range(len(rows))]
    out = [" \t" + "\t".join(labels) + "\t"]
    for label, row in zip(labels, rows, strict=True):
        cells = [" X " if c == "X" else c for c in row]
        out.append(f" {label}\t" + "\t".join(cells) + "\t")
    return out


def as_text(topo: Topology, facts: P2pFacts) -> str:
    out: list[str] = []
    if not topo.gpus:
        return "No NVIDIA GPUs found on this host: no peer-to-peer matrix.\n"
    nvml = nvml_matrix(topo)
    out.append("NVML peer-to-peer read status (nvidia-smi topo -p2p r):")
    if nvml is None:
        reason = topo.nvml.reason if topo.nvml is not None else "NVML was not asked"
        out.append(f"  NVML unavailable: {printable(reason or '')}")
        out.append("")
    else:
        out.extend(_table(nvml))
        out.append("")
        out.append(NVML_LEGEND)
    out.append("mcpnode peer-to-peer readiness (NVLink, NVML, ACS on the PCIe path):")
    out.extend(_table(readiness(topo, facts)))
    out.append("")
    out.append(READINESS_LEGEND)
    redirecting = [b for b in facts.bridges if b.acs is not None and b.acs.redirecting]
    if redirecting:
        out.append("Bridges redirecting P2P:")
        for b in redirecting:
            assert b.acs is not None
            out.append(f"  {b.address}: ACSCtl {acs_names(b.acs.control)}")
        out.append("")
    return "\n".join(out) + "\n"


def as_json(topo: Topology, facts: P2pFacts) -> str:
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "gpus": [str(g.address) for g in topo.gpus],
        "nvml": nvml_matrix(topo),
        "readiness": readiness(topo, facts) if topo.gpus else [],
        "bridges": [
            {
                "address": str(b.address),
                "acs_capability": None if b.acs is None else b.acs.capability,
                "acs_control": None if b.acs is None else b.acs.control,
                "readable": b.read.text is not None,
            }
            for b in facts.bridges
        ],
        "virtual": facts.virtual,
    }
    return json.dumps(doc, indent=2)
