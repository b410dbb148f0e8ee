"""Render a manifest (the dict of placement/manifest.py) for people; JSON is the file itself."""

from __future__ import annotations

from typing import Any

from mcpnode.codec.printable import printable
from mcpnode.placement.manifest import dumps


def _p(value: object, unknown: str = "unknown") -> str:
    """A manifest value for the terminal: control characters escaped (mcpnode/codec/printable.py),
    `unknown` for null."""
    return unknown if value is None or value == "" else printable(str(value))


def as_json(manifest: dict[str, Any]) -> str:
    return dumps(manifest)


def as_text(manifest: dict[str, Any], published: str | None = None) -> str:
    host = manifest["host"]
    place = manifest["placement"]
    lines = [
        f"host {_p(host['hostname'])}  kernel {_p(host['kernel'])}"
        f"  driver {_p(host['driver'], 'not recorded')}  {manifest['content_hash'][:19]}",
        f"housekeeping CPUs {place['housekeeping_cpus'] or '-'}"
        f" ({_p(place['housekeeping_policy'])})",
        "",
        f"{'GPU':<4} {'NODE':<5} {'SLICE':<24} {'MEM':<4} {'NICS':<28} {'NVLINK PEERS':<16} UUID",
    ]
    for g in place["gpus"]:
        nics = (
            ",".join(f"{_p(n['rdma'] or n['address'])}({_p(n['bucket'])})" for n in g["nics"])
            or "-"
        )
        node = "unknown" if g["numa_node"] is None else str(g["numa_node"])
        peers = ",".join(str(p) for p in g["nvlink_peers"]) or "-"
        lines.append(
            f"{g['index']:<4} {node:<5} {g['slice_cpus'] or '-':<24} {g['memory_nodes'] or '-':<4}"
            f" {nics:<28} {peers:<16} {_p(g['uuid'], '-')}"
        )
    tuning = manifest["tuning"]
    if tuning["error"]:
        lines.append(f"\ntuning: not verified ({_p(tuning['error'])})")
    elif tuning["profile"] is None:
        lines.append("\ntuning: no active profile (not tuned by mcpnode)")
    elif tuning["compliant"] is None:
        why = _p(tuning.get("unknown_reason") or "compliance could not be told")
        lines.append(f"\ntuning: profile {_p(tuning['profile'])}, compliance unknown ({why})")
    else:
        state = "compliant" if tuning["compliant"] else f"{len(tuning['drift'])} key(s) drifted"
        lines.append(f"\ntuning: profile {_p(tuning['profile'])}, {state}")
    audit = manifest["audit"]
    if audit is not None:
        counts = " ".join(f"{_p(k)} {_p(v)}" for k, v in audit["counts"].items())
        failed = f"; failed: {_p(', '.join(audit['failed']))}" if audit["failed"] else ""
        lines.append(f"audit: {counts}{failed}")
    for problem in place["problems"]:
        lines.append(f"placement: {_p(problem)}")
    if published is not None:
        lines.append(f"published {published}")
    return "\n".join(lines) + "\n"
