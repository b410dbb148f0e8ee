"""Dynamic shell completion: what a `--profile`, a profile NAME, a `--gpu` and an audit `--only` /
`--skip` may be on the machine the command line is about (its `--root`, `/` by default).

click's completion scripts (tools/manpages.py installs them) call `mcpnode` back with
`_MCPNODE_COMPLETE`; click then calls these with the context parsed so far (defaults included)
and the word being completed. They read through Host like every command, and never raise: a
root that cannot be read completes nothing, as a shell would for a missing directory.

- profiles: every profile `profiles list` shows (shipped, then /etc/mcpnode/profiles under the
  root, or --profiles-dir), each with its summary;
- GPUs: each GPU's index and its UUID (`exec --gpu`, `pin`, `systemd-dropin` take either), and
  `all-local` where the option takes it; from discovery, NVML included;
- finding ids: the ids this root's audit produces now (an audit runs, about half a second),
  and each area's pattern (`gpu.*`), since `--only`/`--skip` take patterns.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mcpnode.errors import McpnodeError

if TYPE_CHECKING:
    import click
    from click.shell_completion import CompletionItem


def _root(ctx: click.Context) -> str:
    root = ctx.params.get("root")
    return root if isinstance(root, str) and root else "/"


def _items(pairs: list[tuple[str, str | None]], incomplete: str) -> list[CompletionItem]:
    from click.shell_completion import CompletionItem

    return [CompletionItem(v, help=h) for v, h in pairs if v.startswith(incomplete)]


def profile_names(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Profile names under the root, with their summaries."""
    from mcpnode.host import Host
    from mcpnode.tuning.profile import list_profiles

    del param
    system_dir = ctx.params.get("profiles_dir")
    try:
        with Host(_root(ctx)) as host:
            rows = list_profiles(host, system_dir if isinstance(system_dir, Path) else None)
    except (McpnodeError, OSError):
        return []
    return _items([(r.name, r.summary) for r in rows], incomplete)


def gpu_selectors(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """GPU indices and UUIDs of the root, each with the other as help; `all-local` too when the
    option's metavar offers it."""
    from mcpnode.host import Host
    from mcpnode.topology.discover import discover_host

    try:
        with Host(_root(ctx)) as host:
            gpus = discover_host(host).gpus
    except (McpnodeError, OSError):
        return []
    pairs: list[tuple[str, str | None]] = []
    for g in gpus:
        uuid = g.nvml.uuid if g.nvml is not None else None
        name = g.nvml.name if g.nvml is not None else None
        pairs.append((str(g.index), " ".join(x for x in (uuid, name, str(g.address)) if x)))
    for g in gpus:
        if g.nvml is not None and g.nvml.uuid:
            pairs.append((g.nvml.uuid, f"GPU {g.index}"))
    if "all-local" in (param.metavar or ""):
        pairs.append(("all-local", "every GPU local to the process's NUMA node"))
    return _items(pairs, incomplete)


def finding_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The finding ids of the root's audit now, and every area's pattern (`gpu.*`)."""
    from mcpnode.audit.run import AREAS, run_audit
    from mcpnode.host import Host

    del param
    pairs: list[tuple[str, str | None]] = [(f"{a.prefix}.*", a.title) for a in AREAS]
    try:
        with Host(_root(ctx)) as host:
            report = run_audit(host)
    except (McpnodeError, OSError):
        return _items(pairs, incomplete)
    seen: dict[str, str] = {}
    for f in report.findings:
        seen.setdefault(f.id, f.status.value)
    pairs.extend((fid, status) for fid, status in sorted(seen.items()))
    return _items(pairs, incomplete)
