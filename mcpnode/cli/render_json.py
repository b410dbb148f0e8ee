"""`--format json` for the commands whose text output is in render_exec.py and main.py:
`exec --dry-run`, `pin`, `systemd-dropin` and `snapshot`. Pure: values in, a JSON document out.

Each document names its schema and version (`mcpnode.exec-plan/v1`, ...), as every JSON output
of mcpnode does; CPU and NUMA node sets are kernel cpulists (`0-47,96-143`), as in the manifest
(docs/manifest.md), so a launcher can pass them to `taskset -c` or `numactl` unchanged.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcpnode.placement.apply import ExecPlan, PinResult, Target
    from mcpnode.placement.memory import MemoryMove
    from mcpnode.snapshot import SnapshotResult

EXEC_SCHEMA = "mcpnode.exec-plan/v1"
PIN_SCHEMA = "mcpnode.pin/v1"
DROPIN_SCHEMA = "mcpnode.systemd-dropin/v1"
SNAPSHOT_SCHEMA = "mcpnode.snapshot/v1"


def _dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2) + "\n"


def target_doc(target: Target) -> dict[str, Any]:
    """The GPUs chosen and what placing on them means."""
    return {
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "pci_address": str(g.address),
                "numa_node": g.numa_node,
                "numa_source": g.numa_source,
            }
            for g in target.gpus
        ],
        "scope": target.scope,
        "cpus": target.cpus.cpulist(),
        "memory_policy": target.policy,
        "memory_nodes": target.memory_nodes.cpulist(),
        "env": dict(target.env),
    }


def exec_json(plan: ExecPlan) -> str:
    """What `exec --dry-run` would run: the program resolved (null when not found), its
    arguments, the placement, and what would stop it on this machine."""
    return _dumps(
        {
            "schema": EXEC_SCHEMA,
            "dry_run": True,
            "executable": plan.executable,
            "argv": list(plan.argv),
            "placement": target_doc(plan.target),
            "problems": list(plan.problems),
        }
    )


def pin_json(result: PinResult, move: MemoryMove | None = None) -> str:
    """What `pin` did: every thread's affinity before and after, the threads that exited, and
    with `--migrate` the process's memory per NUMA node before and after the move."""
    migration = None
    if move is not None:
        migration = {
            "from_nodes": move.from_nodes.cpulist(),
            "to_nodes": move.to_nodes.cpulist(),
            "before_bytes": {str(n): b for n, b in sorted(move.before.items())},
            "after_bytes": {str(n): b for n, b in sorted(move.after.items())},
            "moved_bytes": move.moved_bytes,
            "not_moved_pages": move.not_moved_pages,
        }
    return _dumps(
        {
            "schema": PIN_SCHEMA,
            "pid": result.pid,
            "placement": target_doc(result.target),
            # pin cannot change another process's memory policy (set_mempolicy(2) acts on the
            # calling thread): the placement's memory part is what a restart should use.
            "memory_policy_applied": False,
            "threads": [
                {"tid": t.tid, "before": t.before.cpulist(), "after": t.after.cpulist()}
                for t in result.threads
            ],
            "vanished": list(result.vanished),
            "migration": migration,
        }
    )


def dropin_json(unit: str, path: str, text: str, target: Target, *, written: bool) -> str:
    """The drop-in for `unit`: its logical path, whether it was written, its text, and the
    placement it encodes."""
    return _dumps(
        {
            "schema": DROPIN_SCHEMA,
            "unit": unit,
            "path": path,
            "written": written,
            "placement": target_doc(target),
            "text": text,
        }
    )


def snapshot_json(result: SnapshotResult) -> str:
    """What `snapshot` wrote: the tarball, what it holds, and what discovery found in it."""
    return _dumps(
        {
            "schema": SNAPSHOT_SCHEMA,
            "path": str(result.path),
            "files": result.files,
            "symlinks": result.links,
            "directories": result.dirs,
            "gpus": len(result.topology.gpus),
            "problems": [
                {"code": p.code, "source": p.source, "detail": p.detail}
                for p in result.topology.problems
            ],
            "probe_recorded": result.probed,
        }
    )
