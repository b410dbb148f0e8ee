"""The bodies of `topo`, `gpus`, `manifest show` and `exec`, written once: parsed options in, the
text to print out. click's commands (cli/main.py) and the console script's fast dispatcher
(cli/fast.py) both call these, so the two entry points cannot say different things.

Nothing here imports click, and nothing is imported at module level: each function imports
what its command needs, so the fast path loads only that (tests/cli/test_cli_fast.py checks it).
Errors are raised as mcpnode's typed errors; each entry point turns them into one line and an
exit status through cli/errors.py.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
    from typing import Any

    from mcpnode.cli.placing import PlacementRequest
    from mcpnode.host import Host
    from mcpnode.placement.apply import Target
    from mcpnode.topology.model import CpuSet, Topology

    # What a command prints: a text, or a writer and its topology (written in pieces through
    # the `write` it is given, then a newline: `topo --format json`, see write_output).
    Output = str | tuple[Callable[[Topology, Callable[[str], object]], None], Topology]


def write_output(output: Output, write: Callable[[str], object]) -> None:
    """Print a command's output through `write`, as the command's own text would read."""
    if isinstance(output, str):
        write(output)
        return
    writer, topology = output
    writer(topology, write)
    write("\n")


def _rendered(
    fmt: str, as_json: Callable[..., str], as_text: Callable[..., str], *args: Any
) -> str:
    """`as_json(*args)` with the newline a JSON document is printed with, or `as_text(*args)`
    (which ends its own lines), by `--format`."""
    return as_json(*args) + "\n" if fmt == "json" else as_text(*args)


# -- discovery views ----------------------------------------------------------------------------


def topo_command(
    root: str, *, tree: bool = False, p2p: bool = False, fmt: str = "text", color: bool = False
) -> Output:
    """`mcpnode topo`: the matrix in `nvidia-smi topo -m` layout (its cells coloured by bucket
    with `color`), the tree (`tree`), the GPU peer-to-peer matrix (`p2p`), or JSON
    (`fmt="json"`, written in pieces). Raises RootError, HostError."""
    from mcpnode.host import Host
    from mcpnode.topology.discover import discover_host

    with Host(root) as host:
        topology = discover_host(host)
        if p2p:
            from mcpnode.audit.p2p import read_p2p
            from mcpnode.cli import render_p2p

            facts = read_p2p(host, topology)
            return _rendered(fmt, render_p2p.as_json, render_p2p.as_text, topology, facts)
    from mcpnode.cli import render_topo

    if fmt == "json":
        return render_topo.write_json, topology
    if tree:
        return render_topo.as_tree(topology)
    return render_topo.as_matrix(topology, color)


def gpus_command(root: str, *, fmt: str = "text") -> str:
    """`mcpnode gpus`: the per-GPU table, or its JSON. Raises RootError, HostError."""
    from mcpnode.cli import render_gpus
    from mcpnode.host import Host
    from mcpnode.topology.discover import discover_host

    with Host(root) as host:
        topology = discover_host(host)
    return _rendered(fmt, render_gpus.as_json, render_gpus.as_text, topology)


def manifest_show_command(
    root: str,
    *,
    published: bool = False,
    fmt: str = "text",
    housekeeping: str = "first-core",
    profiles_dir: Path | None = None,
) -> str:
    """`mcpnode manifest show`: the published manifest (`published`: read and checked by its
    one reader) or the one this host would publish (discovery, the audit, the profile).
    Raises PathNotFound, ManifestError, HostError."""
    from mcpnode.cli import render_placement
    from mcpnode.host import Host

    with Host(root) as host:
        if published:
            from mcpnode.placement.manifest import read_manifest

            doc = read_manifest(host)
        else:
            from mcpnode.placement.build import make_manifest
            from mcpnode.probe.section import manifest_section

            doc = make_manifest(
                host, housekeeping=housekeeping, profiles_dir=profiles_dir, probe=manifest_section
            )
    return render_placement.as_json(doc) if fmt == "json" else render_placement.as_text(doc)


# -- placement: exec (and the target pin and systemd-dropin share) ------------------------------


def placement_target(
    live: Host,
    request: PlacementRequest,
    notice: Callable[[str], object],
    env: Mapping[str, str] | None = None,
) -> tuple[Target, CpuSet | None]:
    """The placement Target for the GPUs the request's selector names, and the CPUs this
    process may use (read once, from the live kernel behind `live`: `all-local` selects by them
    and exec clips to them). The placement is the published manifest's under its root when it
    is current, else discovery's, and then `notice` is given the one line saying why. Selector
    `local-rank` takes the GPU from the launcher's variables in `env` (exec's own environment;
    placement/rank.py), `notice` is told which, and the target keeps the caller's
    CUDA_VISIBLE_DEVICES. Raises UsageError (an unknown GPU, a bad policy, a bad rank),
    PlacementUnavailable, and what discovery raises."""
    from mcpnode.errors import UsageError
    from mcpnode.host import Host
    from mcpnode.placement.apply import SCOPES, caller_cpus, choose_target
    from mcpnode.placement.source import resolve

    chosen = next((s for s in SCOPES if s == request.scope), None)
    if chosen is None:
        raise UsageError(f"--scope {request.scope!r}: expected one of {', '.join(SCOPES)}")

    caller = caller_cpus(live)
    with Host(request.root) as host:
        resolved = resolve(host, housekeeping=request.housekeeping, fresh=request.fresh)
    if resolved.notice is not None:
        notice(f"mcpnode: {resolved.notice}")
    rank = None
    selector = request.selector
    if selector == "local-rank":
        from mcpnode.placement.rank import choose_rank_gpu

        if env is None:
            raise UsageError("--gpu local-rank places a launched rank: it is for exec only")
        rank = choose_rank_gpu(env, resolved.placement)
        selector = rank.selector
    target = choose_target(
        resolved.placement,
        selector,
        scope=chosen,
        policy="bind" if request.membind else "preferred",
        online=resolved.online,
        process_cpus=caller,
    )
    if rank is not None:
        from mcpnode.codec.record import replace

        notice(f"mcpnode: {rank.notice(target.gpus[0].index)}")
        # A rank's code addresses its GPU as cuda:LOCAL_RANK: a one-GPU list would break it.
        kept = tuple((k, v) for k, v in target.env if k != "CUDA_VISIBLE_DEVICES")
        target = replace(target, env=kept)
    return target, caller


def exec_command(
    request: PlacementRequest,
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    dry_run: bool = False,
    fmt: str = "text",
    notice: Callable[[str], object],
) -> str:
    """`mcpnode exec`: place this process on the GPU's CPUs, memory node and environment and
    execve `command` (returns only by raising), or with `dry_run` return what it would do and
    what would stop it, as text or JSON. One live Host and one read of this process's CPUs
    serve the selection and the clip; plan_exec checks the target against this kernel before
    it clips (docs/placement.md). Raises UsageError, PlacementUnavailable, CommandNotFound,
    HostError."""
    from mcpnode.errors import UsageError
    from mcpnode.host import Host
    from mcpnode.placement.apply import plan_exec, run_exec

    if fmt == "json" and not dry_run:
        raise UsageError("--format json needs --dry-run: exec replaces this process")
    live = Host("/")
    target, caller = placement_target(live, request, notice, env)
    plan = plan_exec(live, target, command, env, dry_run=dry_run, allowed=caller)
    if not dry_run:
        run_exec(live, plan, env)
    if fmt == "json":
        from mcpnode.cli.render_json import exec_json

        return exec_json(plan)
    from mcpnode.cli.render_exec import exec_text

    return exec_text(plan)


# -- tuning -------------------------------------------------------------------------------------


def recommend_command(root: str, *, fmt: str = "text") -> str:
    """`mcpnode profiles recommend`: the shipped profile for the host at `root`, with reasons,
    from discovery and the virtualization check. Raises RootError, HostError."""
    from mcpnode.cli import render_tuning
    from mcpnode.host import Host
    from mcpnode.topology import virt
    from mcpnode.topology.discover import discover_host
    from mcpnode.tuning.recommend import HostFacts, recommend

    with Host(root) as host:
        topology = discover_host(host)
        found = virt.detect(host)
    answered = [g.nvml for g in topology.gpus if g.nvml is not None]
    nvswitch = (
        any(x.active and x.remote_type == "SWITCH" for n in answered for x in n.nvlinks)
        if answered
        else None
    )
    online = [c for c in topology.cpus.cpus if c.online]
    facts = HostFacts(
        virtual=found.virtual,
        hypervisor=found.hypervisor,
        virt_evidence=found.evidence,
        gpus=tuple((g.nvml.name or "") if g.nvml is not None else "" for g in topology.gpus),
        nvswitch=nvswitch,
        rdma_nics=tuple(sorted({r for n in topology.nics for r in n.rdma_devices})),
        numa_nodes=sum(1 for n in topology.numa_nodes if n.has_cpus),
        gpu_nodes=tuple(sorted({g.numa_node for g in topology.gpus if g.numa_node is not None})),
        smt=any(len(c.siblings) > 1 for c in online) if online else None,
    )
    result = recommend(facts)
    return _rendered(fmt, render_tuning.recommend_json, render_tuning.recommend_text, result)


# -- the agent --------------------------------------------------------------------------------


def agent_command(
    root: str,
    config_path: str | None = None,
    *,
    profiles_dir: Path | None = None,
    inject_fd: int | None = None,
) -> int:
    """`mcpnode agent`: run the node agent until it stops (systemd Type=notify); its exit
    status (mcpnode/exitcodes.py). `config_path` defaults to the agent's
    (/etc/mcpnode/mcpnode.toml under the root). Raises HostError / RootError when the root
    cannot be read."""
    from mcpnode.agent.config import CONFIG_PATH
    from mcpnode.agent.service import Agent
    from mcpnode.host import Host
    from mcpnode.logs import configure_logging

    configure_logging("auto", "info")
    with Host(root) as host, Host("/") as live:
        agent = Agent(
            host,
            live,
            CONFIG_PATH if config_path is None else config_path,
            profiles_dir=profiles_dir,
            inject_fd=inject_fd,
        )
        return agent.run()
