"""`mcpnode ps`: the processes using GPUs and whether each runs where the manifest places it."""

from __future__ import annotations

import json
from typing import Any

import click

from mcpnode.cli.options import root_option


@click.command("ps")
@root_option
@click.option("--fresh", is_flag=True, help="Discover the placement instead of the manifest's.")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.pass_context
def ps(ctx: click.Context, root: str, fresh: bool, fmt: str) -> None:
    """Every process using a GPU (NVML, else /proc/PID/fd), its allowed CPUs and where its
    memory is, against the GPU's placement: placed, misplaced (and why) or unknown.
    Exit 0 when every process is placed, 1 when one is misplaced, 3 when one is unknown."""
    from mcpnode.agent.autopin import find_gpu_processes
    from mcpnode.exitcodes import EXIT_FINDINGS, EXIT_UNKNOWN
    from mcpnode.host import Host
    from mcpnode.placement.ps import Found, ps_rows
    from mcpnode.placement.source import resolve
    from mcpnode.topology.discover import discover
    from mcpnode.topology.nvml import open_backend

    live = Host("/")
    with Host(root) as host:
        resolved = resolve(host, fresh=fresh)
        backend = open_backend(host)
        try:
            scan = find_gpu_processes(live, discover(host, backend), backend)
        finally:
            backend.close()
    if resolved.notice is not None:
        click.echo(f"mcpnode: {resolved.notice}", err=True)
    found = [Found(p.pid, p.gpu_index, p.source, p.ns_pid) for p in scan.processes]
    rows = ps_rows(live, found, resolved.placement)
    if fmt == "json":
        click.echo(_json(rows, scan.problems, scan.unreadable, resolved.source))
    else:
        click.echo(_text(rows, scan.problems, scan.unreadable), nl=False)
    if any(r.verdict == "misplaced" for r in rows):
        ctx.exit(EXIT_FINDINGS)
    if any(r.verdict == "unknown" for r in rows):
        ctx.exit(EXIT_UNKNOWN)


def _memory_text(memory: Any) -> str:
    if memory is None:
        return "?"
    return ",".join(f"N{n}={b / (1 << 20):.0f}M" for n, b in memory.items()) or "-"


def _text(rows: Any, problems: Any, unreadable: int) -> str:
    from mcpnode.codec.printable import printable

    head = f"{'PID':>8} {'GPU':>3} {'SRC':4} {'COMM':16} {'CPUS':14} {'MEMORY':22} VERDICT"
    lines = [head]
    for r in rows:
        cpus = r.cpus.cpulist() if r.cpus is not None else "?"
        lines.append(
            # comm is the process's to set (PR_SET_NAME): escaped whole, never cut mid-escape
            f"{r.pid:>8} {r.gpu:>3} {r.source:4} {printable(r.comm or '?'):16} {cpus[:14]:14} "
            f"{_memory_text(r.memory)[:22]:22} {r.verdict} ({r.cpu}, memory {r.mem}): {r.reason}"
        )
    if not rows:
        lines.append("(no process is using a GPU)")
    lines.extend(f"note: {printable(p)}" for p in problems)
    if unreadable:
        lines.append(f"note: {unreadable} process(es) could not be read (exited, or EACCES)")
    return "\n".join(lines) + "\n"


def _json(rows: Any, problems: Any, unreadable: int, source: str) -> str:
    from mcpnode.placement.ps import LOCAL_SHARE, SCHEMA

    doc = {
        "schema": SCHEMA,
        "placement_source": source,
        "local_share": LOCAL_SHARE,
        "processes": [
            {
                "pid": r.pid,
                "ns_pid": r.ns_pid,
                "comm": r.comm,
                "gpu": r.gpu,
                "uuid": r.uuid,
                "source": r.source,
                "cpus": r.cpus.cpulist() if r.cpus is not None else None,
                "memory_bytes": (
                    {str(n): b for n, b in r.memory.items()} if r.memory is not None else None
                ),
                "cpu_placement": r.cpu,
                "memory_placement": r.mem,
                "verdict": r.verdict,
                "reason": r.reason,
            }
            for r in rows
        ],
        "problems": list(problems),
        "unreadable": unreadable,
    }
    return json.dumps(doc, indent=2)
