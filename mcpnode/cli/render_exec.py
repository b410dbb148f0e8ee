"""Text for `mcpnode exec --dry-run`, `pin` and `systemd-dropin`."""

from __future__ import annotations

import shlex

from mcpnode.codec.printable import printable
from mcpnode.placement.apply import ExecPlan, PinResult, Target
from mcpnode.placement.memory import MemoryMove


def target_text(target: Target, *, memory_applied: bool = True) -> str:
    """The selected GPUs and what placing on them means; `memory_applied=False` for pin, which
    cannot change another process's memory policy."""
    lines = []
    for g in target.gpus:
        lines.append(
            f"GPU {g.index} ({printable(g.uuid or 'uuid unknown')}, {g.address}), NUMA node "
            f"{g.numa_node if g.numa_node is not None else 'unknown'} "
            f"({printable(g.numa_source)})"
        )
    lines.append(f"cpus: {target.cpus.cpulist()} ({target.scope})")
    policy: str = target.policy
    if policy == "preferred" and len(target.memory_nodes) > 1:
        policy += f" (node {min(target.memory_nodes)} first)"
    memory = f"{policy} {target.memory_nodes.cpulist()}"
    if not memory_applied:
        memory = (
            f"not changed (placement: {memory}; set_mempolicy acts on the calling thread "
            "only, migratepages(8) moves existing pages)"
        )
    lines.append(f"memory: {memory}")
    lines.extend(f"env: {printable(name)}={printable(value)}" for name, value in target.env)
    return "\n".join(lines) + "\n"


def exec_text(plan: ExecPlan) -> str:
    """What `exec` would do, and what would stop it on this machine."""
    out = target_text(plan.target)
    shown = plan.executable or plan.argv[0]
    out += f"exec: {printable(shlex.join([shown, *plan.argv[1:]]))}\n"
    out += "".join(f"problem: {printable(p)}\n" for p in plan.problems)
    return out


def pin_text(result: PinResult) -> str:
    out = f"pid {result.pid}\n" + target_text(result.target, memory_applied=False)
    for t in result.threads:
        out += f"thread {t.tid}: {t.before.cpulist()} -> {t.after.cpulist()}\n"
    for tid in result.vanished:
        out += f"thread {tid}: exited while pinning\n"
    return out


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.1f} MiB"


def _per_node(memory: dict[int, int]) -> str:
    return ", ".join(f"node {n} {_mib(b)}" for n, b in memory.items()) or "no pages"


def migrate_text(move: MemoryMove) -> str:
    """`pin --migrate`'s report: numa_maps before and after, what moved, what could not."""
    return (
        f"memory before: {_per_node(move.before)}\n"
        f"migrate_pages: nodes {move.from_nodes.cpulist()} -> {move.to_nodes.cpulist()}, "
        f"{_mib(move.moved_bytes)} arrived, {move.not_moved_pages} page(s) could not be moved\n"
        f"memory after: {_per_node(move.after)}\n"
    )
