"""The `mcpnode` command. Commands are thin: parse, call one core function, render.

Heavy modules (pynvml, pyudev) are imported inside the commands that need them so
`mcpnode --help` stays fast.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from mcpnode import __version__
from mcpnode.cli import commands, complete
from mcpnode.cli.color import color_option, stdout_color
from mcpnode.cli.errors import error_line
from mcpnode.cli.options import (
    F,
    check_output_dir,
    config_option,
    format_option,
    housekeeping_option,
    profiles_dir_option,
    root_option,
    state_dir_option,
)
from mcpnode.errors import (
    McpnodeError,
)

if TYPE_CHECKING:
    from mcpnode.audit.model import Status
    from mcpnode.cli.placing import PlacementRequest
    from mcpnode.host import Host
    from mcpnode.tuning.journal import JournalStore
    from mcpnode.tuning.partition import CpuPartition
    from mcpnode.tuning.profile import Profile

from mcpnode.exitcodes import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_UNKNOWN,
    EXIT_USAGE,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mcpnode")
@color_option
def cli(color: str | None) -> None:
    """Node agent for GPU inference hosts: discover, tune, audit, place."""
    del color  # read by the commands that colour (cli/color.py)


@cli.command()
@root_option
@click.option("--tree", is_flag=True, help="NUMA -> host bridge -> switch -> device tree.")
@click.option(
    "--p2p", is_flag=True, help="GPU peer-to-peer matrix (`nvidia-smi topo -p2p r`) and ACS."
)
@format_option
@color_option
@click.pass_context
def topo(ctx: click.Context, root: str, tree: bool, p2p: bool, fmt: str, color: str | None) -> None:
    """GPU/NIC topology matrix in `nvidia-smi topo -m` layout (or a tree, or JSON)."""
    colored = stdout_color(ctx, color)
    output = commands.topo_command(root, tree=tree, p2p=p2p, fmt=fmt, color=colored)
    # click.echo drops colour codes off a terminal unless told: --color=always means it
    commands.write_output(output, lambda text: click.echo(text, nl=False, color=colored))


@cli.command()
@root_option
@format_option
def gpus(root: str, fmt: str) -> None:
    """Per-GPU table: bus id, NUMA, PCIe, NVLink, persistence, ECC, row remapping, MIG, fabric."""
    _echo(commands.gpus_command(root, fmt=fmt))


@cli.command()
@root_option
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    callback=check_output_dir,
    help="Tarball to write (.tar.gz or .tar.bz2).",
)
@click.option(
    "--probe", "with_probe", is_flag=True, help="Also record a probe run (uses the GPUs)."
)
@format_option
def snapshot(root: str, output: Path, with_probe: bool, fmt: str) -> None:
    """Capture exactly the files discovery reads into a tarball usable as --root."""
    from mcpnode.host import Host
    from mcpnode.snapshot import write_snapshot

    with Host(root) as host:
        result = write_snapshot(host, output, probe=with_probe)
    if fmt == "json":
        from mcpnode.cli.render_json import snapshot_json

        click.echo(snapshot_json(result), nl=False)
        return
    click.echo(
        f"wrote {result.path}: {result.files} files, {result.links} symlinks, "
        f"{result.dirs} directories; {len(result.topology.gpus)} GPUs, "
        f"{len(result.topology.problems)} problems" + ("; probe recorded" if result.probed else "")
    )


# -- tuning -----------------------------------------------------------------------------------


T = TypeVar("T")

PROFILE_HELP = "Profile name: a shipped profile, or one in /etc/mcpnode/profiles (which wins)."


def echo_rendered(
    fmt: str, value: T, as_json: Callable[[T], str], as_text: Callable[[T], str]
) -> None:
    """Print `value` as `--format` asks: the JSON document (one line more), or the text, which
    ends its own lines."""
    if fmt == "json":
        click.echo(as_json(value))
    else:
        click.echo(as_text(value), nl=False)


def wait_option(fn: F) -> F:
    return click.option(
        "--wait",
        "wait_s",
        type=click.FloatRange(0, 3600),
        default=5.0,
        show_default=True,
        metavar="SECONDS",
        help="How long to wait for another mcpnode run to release the state lock (exit 75).",
    )(fn)


def _journal_store(
    host: Host, state_dir: Path | None, command: str = "mcpnode", wait_s: float = 5.0
) -> JournalStore:
    from mcpnode.host import Host
    from mcpnode.tuning.journal import JournalStore

    if state_dir is None:
        return JournalStore(host, command=command, wait_s=wait_s)
    # Created 0755 whatever the umask (Host.makedirs), like /var/lib/mcpnode under the unit.
    Host("/").makedirs(str(state_dir.resolve()))
    return JournalStore(Host(state_dir), "/tuning-journal.json", command=command, wait_s=wait_s)


def _partition(host: Host, profile: Profile) -> CpuPartition | None:
    """The housekeeping CPUs and GPU slices a profile's `[irq]` places against: the published
    manifest's when current, else discovery's (a one-line notice says why); None when the
    profile has no such setting, so other profiles never pay for discovery."""
    from mcpnode.placement.source import partition_of, resolve
    from mcpnode.tuning.partition import needs_partition

    if not needs_partition(s.key for s in profile.settings):
        return None
    resolved = resolve(host)
    if resolved.notice is not None:
        click.echo(f"mcpnode: {resolved.notice}", err=True)
    return partition_of(resolved)


def _command_line(name: str, *args: str | None) -> str:
    """What a run waiting for the state lock is told holds it: `mcpnode apply --profile x`."""
    return " ".join(["mcpnode", name, *(a for a in args if a)])


@cli.group()
def profiles() -> None:
    """Tuning profiles: list them, show one resolved, explain a key."""


@profiles.command("list")
@root_option
@profiles_dir_option
@format_option
def profiles_list(root: str, profiles_dir: Path | None, fmt: str) -> None:
    """Every profile (system and /etc/mcpnode/profiles), with its includes and summary."""
    from mcpnode.cli import render_tuning
    from mcpnode.host import Host
    from mcpnode.tuning.profile import list_profiles

    with Host(root) as host:
        rows = list_profiles(host, profiles_dir)
    echo_rendered(fmt, rows, render_tuning.profiles_json, render_tuning.profiles_text)


@profiles.command("show")
@click.argument("name", shell_complete=complete.profile_names)
@root_option
@profiles_dir_option
@format_option
def profiles_show(name: str, root: str, profiles_dir: Path | None, fmt: str) -> None:
    """One profile with its includes merged: each value, where it comes from, and why."""
    from mcpnode.cli import render_tuning
    from mcpnode.host import Host
    from mcpnode.tuning.profile import load_profile

    with Host(root) as host:
        profile = load_profile(name, host, profiles_dir)
    echo_rendered(fmt, profile, render_tuning.profile_json, render_tuning.profile_text)


@profiles.command("explain")
@click.argument("key")
@root_option
@profiles_dir_option
@format_option
def profiles_explain(key: str, root: str, profiles_dir: Path | None, fmt: str) -> None:
    """What KEY does, its kernel default, which profiles set it and why, and its caveats
    (network namespaces, capabilities)."""
    from mcpnode.cli import render_tuning
    from mcpnode.host import Host
    from mcpnode.tuning.explain import explain

    with Host(root) as host:
        explanation = explain(key, host, profiles_dir)
    echo_rendered(fmt, explanation, render_tuning.explain_json, render_tuning.explain_text)


@profiles.command("recommend")
@root_option
@format_option
def profiles_recommend(root: str, fmt: str) -> None:
    """The shipped profile that fits this host (bare metal or VM, GPUs, NVSwitch, RDMA NICs,
    NUMA, SMT), with the reasons: what an Ansible role uses when no profile is configured."""
    from mcpnode.cli.commands import recommend_command

    click.echo(recommend_command(root, fmt=fmt), nl=False)


@profiles.command("active")
@root_option
@state_dir_option
@config_option(
    help="Agent configuration whose [tuning] profile counts as configured; under --root."
)
@format_option
def profiles_active(root: str, state_dir: Path | None, config_path: str, fmt: str) -> None:
    """The profile this host is tuned with, and where that answer comes from: the running
    agent, the journal, the persisted sysctl.d file, the agent config (not applied), or none."""
    from mcpnode.cli import render_tuning
    from mcpnode.host import Host
    from mcpnode.tuning.active import active_profile

    with Host(root) as host:
        active = active_profile(host, _journal_store(host, state_dir), config_path)
    echo_rendered(fmt, active, render_tuning.active_json, render_tuning.active_text)


@cli.command()
@click.option(
    "--profile",
    "profile_name",
    default="base",
    show_default=True,
    help=PROFILE_HELP,
    shell_complete=complete.profile_names,
)
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--persist", is_flag=True, help="Also write /etc/sysctl.d/90-mcpnode.conf.")
@root_option
@profiles_dir_option
@state_dir_option
@wait_option
@format_option
@click.pass_context
def apply(
    ctx: click.Context,
    profile_name: str,
    dry_run: bool,
    persist: bool,
    root: str,
    profiles_dir: Path | None,
    state_dir: Path | None,
    wait_s: float,
    fmt: str,
) -> None:
    """Apply a tuning profile: journal the originals, write, undo everything on a failure.
    Holds the state lock throughout (another run waits, then exits 75). Exits 1 when the kernel
    took a value only in part (fewer huge pages than asked): written, but not what was asked."""
    from mcpnode.cli import render_tuning
    from mcpnode.host import Host
    from mcpnode.logs import configure_logging
    from mcpnode.tuning.apply import apply_profile
    from mcpnode.tuning.profile import load_profile

    configure_logging()
    with Host(root) as host:
        profile = load_profile(profile_name, host, profiles_dir)
        command = _command_line(
            "apply", "--profile", profile_name, "--persist" if persist else None
        )
        store = _journal_store(host, state_dir, command, wait_s)
        partition = _partition(host, profile)
        result = apply_profile(
            host, profile, store, persist=persist, dry_run=dry_run, partition=partition
        )
    echo_rendered(fmt, result, render_tuning.apply_json, render_tuning.apply_text)
    if any(o.result == "partial" for o in result.writes):
        ctx.exit(EXIT_FINDINGS)


@cli.command()
@click.option(
    "--profile",
    "profile_name",
    default=None,
    shell_complete=complete.profile_names,
    help=PROFILE_HELP + " Default: the active profile (`mcpnode profiles active`).",
)
@root_option
@profiles_dir_option
@state_dir_option
@format_option
@click.pass_context
def verify(
    ctx: click.Context,
    profile_name: str | None,
    root: str,
    profiles_dir: Path | None,
    state_dir: Path | None,
    fmt: str,
) -> None:
    """Compare the host with a profile (default: the active one). Exit 0 compliant, 1 drift,
    3 unknown: a key could not be read, or no profile is active."""
    from mcpnode.cli import render_tuning
    from mcpnode.host import Host
    from mcpnode.tuning.active import active_profile
    from mcpnode.tuning.profile import load_profile
    from mcpnode.tuning.verify import verify as verify_profile

    with Host(root) as host:
        active = None
        if profile_name is None:
            active = active_profile(host, _journal_store(host, state_dir))
            if active.name is None:
                echo_rendered(
                    fmt, active, render_tuning.verify_none_json, render_tuning.verify_none_text
                )
                ctx.exit(EXIT_UNKNOWN)
            profile_name = active.name
        profile = load_profile(profile_name, host, profiles_dir)
        managed = _journal_store(host, state_dir).managed_irqs()
        report = verify_profile(host, profile, _partition(host, profile), managed)
    echo_rendered(
        fmt,
        report,
        lambda v: render_tuning.verify_json(v, active),
        lambda v: render_tuning.verify_text(v, active),
    )
    if report.compliant is False:
        ctx.exit(EXIT_FINDINGS)
    if report.compliant is None:
        ctx.exit(EXIT_UNKNOWN)


@cli.command()
@root_option
@state_dir_option
@wait_option
@format_option
def rollback(root: str, state_dir: Path | None, wait_s: float, fmt: str) -> None:
    """Restore the original values from the journal, remove the persisted file and journal.
    Holds the state lock throughout (another run waits, then exits 75)."""
    from mcpnode.cli import render_tuning
    from mcpnode.host import Host
    from mcpnode.logs import configure_logging
    from mcpnode.tuning.apply import rollback as rollback_tuning

    configure_logging()
    with Host(root) as host:
        store = _journal_store(host, state_dir, _command_line("rollback"), wait_s)
        result = rollback_tuning(host, store)
    echo_rendered(fmt, result, render_tuning.rollback_json, render_tuning.rollback_text)


# -- audit ------------------------------------------------------------------------------------


def _status_list(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[Status, ...]:
    from mcpnode.cli.render_audit import parse_statuses

    try:
        return parse_statuses(values)
    except ValueError as err:
        raise click.BadParameter(str(err), ctx=ctx, param=param) from err


def _finding_globs(name: str, text: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A repeatable option of finding-id globs (`gpu.*`), completed from the root's audit."""
    return click.option(
        name, multiple=True, metavar="GLOB", help=text, shell_complete=complete.finding_ids
    )


@cli.command()
@root_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "junit"]),
    default="text",
    show_default=True,
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    callback=check_output_dir,
    help="Write the report to FILE (atomically) instead of stdout.",
)
@_finding_globs("--only", "Only finding ids matching (repeat).")
@_finding_globs("--skip", "Drop finding ids matching (repeat).")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    metavar="LIST",
    callback=_status_list,
    help="Only findings of these statuses, comma-separated (FAIL,WARN), in every format; like "
    "--only, the summary and the exit status count only them.",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Text: list every finding by area (default: FAIL, WARN and SKIP, then counts per area).",
)
@click.option("--strict", is_flag=True, help="WARN fails the audit too (exit 1).")
@click.option(
    "--expect",
    "expect_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Expected inventory ([expect] table, `mcpnode expect --write`); default: the "
    "[expect] table of /etc/mcpnode/mcpnode.toml under --root, if any.",
)
@click.option(
    "--profile",
    "profile_name",
    default=None,
    shell_complete=complete.profile_names,
    help="Tuning profile to check compliance against (default: the active profile, "
    "`mcpnode profiles active`; none active: tuning checks are INFO).",
)
@profiles_dir_option
@click.option(
    "--probe",
    "with_probe",
    is_flag=True,
    help="Add the probe.* checks: measure (uses the GPUs), or replay a snapshot's probe run.",
)
@color_option
@click.pass_context
def audit(
    ctx: click.Context,
    root: str,
    fmt: str,
    output: Path | None,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    statuses: tuple[Status, ...],
    verbose: bool,
    strict: bool,
    expect_file: Path | None,
    profile_name: str | None,
    profiles_dir: Path | None,
    with_probe: bool,
    color: str | None,
) -> None:
    """Preflight: cgroups, kernel modules, GPU health (XIDs, throttling, NVLink), PCIe and
    InfiniBand health, P2P/ACS, NUMA, tuning, container stack, expected inventory.
    Exit 0 when nothing FAILed, 1 when something did, 2 when the audit could not run."""
    from mcpnode.audit.expect import load_expect_file
    from mcpnode.audit.run import AREAS, run_audit
    from mcpnode.cli import render_audit
    from mcpnode.host import Host

    areas = list(AREAS)
    if with_probe:
        from mcpnode.probe.area import AREA

        areas.append(AREA)
    expect = None
    if expect_file is not None:
        with Host("/") as live:
            expect = load_expect_file(live, str(expect_file.absolute()))
    with Host(root) as host:
        if profile_name is not None:
            _require_profile(host, profile_name, profiles_dir)
        report = run_audit(
            host,
            only=only,
            skip=skip,
            profile=profile_name,
            profiles_dir=None if profiles_dir is None else str(profiles_dir),
            areas=areas,
            expect=expect,
            expect_source=None if expect_file is None else str(expect_file),
        )
    if statuses:
        report = render_audit.filter_status(report, statuses)
    # A status filter chose what to list: list all of it.
    verbose = verbose or bool(statuses)
    if output is not None:
        text = render_audit.render(report, fmt, strict=strict, verbose=verbose)
        render_audit.write_atomic(output, text)
        click.echo(render_audit.summary_line(report, strict), err=True)
    else:
        colored = fmt == "text" and stdout_color(ctx, color)
        text = render_audit.render(report, fmt, colored, strict, verbose)
        click.echo(text, nl=False, color=colored)
    if render_audit.failed(report, strict):
        ctx.exit(EXIT_FINDINGS)


def _require_profile(host: Host, name: str, profiles_dir: Path | None) -> None:
    """Raise ProfileNotFound (exit 64) when no profile is called `name`: a name typed on the
    command line. A profile that exists but does not load is the audit's to report (a FAIL)."""
    from mcpnode.tuning.errors import ProfileError, ProfileNotFound
    from mcpnode.tuning.profile import load_profile

    try:
        load_profile(name, host, profiles_dir)
    except ProfileNotFound:
        raise
    except ProfileError:
        pass


# -- manifest ---------------------------------------------------------------------------------


@cli.group()
def manifest() -> None:
    """The topology manifest (/run/mcpnode/manifest.json, schema mcpnode.manifest/v1)."""


@manifest.command("publish")
@root_option
@housekeeping_option
@profiles_dir_option
@format_option
def manifest_publish(root: str, housekeeping: str, profiles_dir: Path | None, fmt: str) -> None:
    """Build the manifest and write it atomically (mode 0644) to run/mcpnode/manifest.json."""
    from mcpnode.cli import render_placement
    from mcpnode.host import Host
    from mcpnode.placement.build import make_manifest
    from mcpnode.placement.manifest import publish
    from mcpnode.placement.source import publication, read_stamp
    from mcpnode.probe.section import manifest_section

    with Host(root) as host:
        stamp = read_stamp(host)  # before discovery: an event during it makes the copy stale
        doc = make_manifest(
            host, housekeeping=housekeeping, profiles_dir=profiles_dir, probe=manifest_section
        )
        path = publish(host, doc, publication(stamp, os.getpid()))
    if fmt == "json":
        click.echo(render_placement.as_json(doc), nl=False)
    else:
        click.echo(render_placement.as_text(doc, published=path), nl=False)


@manifest.command("show")
@root_option
@housekeeping_option
@profiles_dir_option
@click.option("--published", is_flag=True, help="Show the published file (checked), not a new one.")
@format_option
def manifest_show(
    root: str, housekeeping: str, profiles_dir: Path | None, published: bool, fmt: str
) -> None:
    """Print the manifest this host would publish (or, with --published, the one it did)."""
    text = commands.manifest_show_command(
        root, published=published, fmt=fmt, housekeeping=housekeeping, profiles_dir=profiles_dir
    )
    _echo(text)


# -- exporters --------------------------------------------------------------------------------


@cli.command("export")
@click.argument("kind", type=click.Choice(["nfd", "prom", "slurm", "ansible"]))
@root_option
@click.option(
    "--dir",
    "directory",
    default=None,
    metavar="DIR",
    help="Write into DIR (absolute, under --root) instead of the kind's usual directory, e.g. "
    "node_exporter's --collector.textfile.directory.",
)
@click.option("--stdout", "to_stdout", is_flag=True, help="Print the file; write nothing.")
@click.option("--no-audit", is_flag=True, help="Leave the audit counts and drift out.")
@housekeeping_option
@click.option(
    "--slurm-type",
    type=click.Choice(["autodetect", "short"]),
    default="autodetect",
    show_default=True,
    help="slurm: Type= as AutoDetect=nvml spells it (nvidia_h100_80gb_hbm3), or short (h100).",
)
@click.option(
    "--expiry",
    "expiry_s",
    type=click.FloatRange(60, 7 * 86400),
    default=None,
    metavar="SECONDS",
    help="nfd: NFD drops the labels this long after the export (# +expiry-time=); "
    "for a cron job, a few times its interval. Default: no expiry.",
)
def export(
    kind: str,
    root: str,
    directory: str | None,
    to_stdout: bool,
    no_audit: bool,
    housekeeping: str,
    slurm_type: str,
    expiry_s: float | None,
) -> None:
    """Write the Kubernetes NFD feature file (nfd), node_exporter textfile (prom), Slurm
    gres.conf lines (slurm) or Ansible local facts (ansible), atomically, mode 0644."""
    from mcpnode.host import Host
    from mcpnode.placement.exporters.write import Options, build, write

    options = Options("short" if slurm_type == "short" else "autodetect", expiry_s)
    with Host(root) as host:
        result = build(
            host,
            kind,
            audit=not no_audit,
            directory=directory,
            housekeeping=housekeeping,
            options=options,
        )
        if not to_stdout:
            write(host, result)
    if to_stdout:
        click.echo(result.text, nl=False)
    else:
        click.echo(f"wrote {result.path} ({len(result.text.encode())} bytes)", err=True)


# -- process placement: exec, pin, systemd-dropin ---------------------------------------------


def placement_options(fn: Callable[..., None]) -> Callable[..., None]:
    """--gpu, --scope, --membind/--preferred, --housekeeping, --fresh, --root: what to place on,
    handed to the command as one `placement` (cli/placing.py)."""

    @functools.wraps(fn)
    def command(
        *,
        root: str,
        selector: str,
        scope: str,
        membind: bool,
        housekeeping: str | None,
        fresh: bool,
        **rest: Any,
    ) -> None:
        from mcpnode.cli.placing import PlacementRequest

        request = PlacementRequest(root, selector, scope, membind, housekeeping, fresh)
        fn(placement=request, **rest)

    command = click.option(
        "--fresh",
        is_flag=True,
        help="Discover the topology instead of using the published manifest.",
    )(command)
    command = click.option(
        "--housekeeping",
        default=None,
        metavar="first-core|none|CPULIST",
        help="CPUs kept out of every GPU's exclusive slice (default: the published manifest's "
        "policy, else first-core).",
    )(command)
    command = click.option(
        "--membind/--preferred",
        "membind",
        default=False,
        help="Memory policy: bind to the GPU's node (no fallback), or prefer it (default).",
    )(command)
    command = click.option(
        "--scope",
        type=click.Choice(["slice", "cache", "node", "socket"]),
        default="slice",
        show_default=True,
        help="The GPU's exclusive CPU slice, the L3 domain(s) of that slice, all CPUs of its "
        "NUMA node, or of its socket (torchrun's exclusive, core-complex, node, socket).",
    )(command)
    command = click.option(
        "--gpu",
        "selector",
        required=True,
        metavar="N|UUID|all-local|local-rank",
        help="GPU(s) to place on; local-rank (exec): the GPU of this rank, from LOCAL_RANK, "
        "SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK or MPI_LOCALRANKID.",
        shell_complete=complete.gpu_selectors,
    )(command)
    return root_option(command)


def _echo(text: str) -> None:
    """Print a command's output (cli/commands.py), which ends its own lines."""
    click.echo(text, nl=False)


def _say(line: str) -> None:
    """Print a notice line on stderr (the placement's source, when not the manifest)."""
    click.echo(line, err=True)


@cli.command(
    "exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@placement_options
@click.option("--dry-run", is_flag=True, help="Print what would be done; run nothing.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Of --dry-run's output (without it, exec replaces this process and prints nothing).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_command(
    placement: PlacementRequest, dry_run: bool, fmt: str, command: tuple[str, ...]
) -> None:
    """Run COMMAND (no shell) on the GPU's CPUs, memory node and environment:
    `mcpnode exec --gpu 0 -- python serve.py`. The placement is the published manifest's when it
    is current (else the topology under --root is discovered), clipped to the CPUs this process
    may use; the CPU affinity and memory policy are always set on this machine's kernel."""
    text = commands.exec_command(
        placement,
        command,
        os.environ,
        dry_run=dry_run,
        fmt=fmt,
        notice=_say,
    )
    _echo(text)  # only with --dry-run: without it, exec_command replaced this process


@cli.command()
@click.argument("pid", type=int)
@placement_options
@click.option("--force", is_flag=True, help="Re-pin a process someone else already narrowed.")
@format_option
@click.option(
    "--migrate",
    is_flag=True,
    help="Also move the process's memory to the GPU's node (migrate_pages), reporting its "
    "numa_maps before and after.",
)
def pin(pid: int, placement: PlacementRequest, force: bool, fmt: str, migrate: bool) -> None:
    """Set the CPU affinity of every thread of running process PID to the GPU's CPUs.
    Refuses kernel threads, and processes already narrowed by someone else unless --force."""
    from mcpnode.cli import render_exec
    from mcpnode.host import Host
    from mcpnode.placement.apply import pin_process

    live = Host("/")
    target, _ = commands.placement_target(live, placement, _say)
    result = pin_process(live, pid, target, force=force)
    move = None
    if migrate:
        from mcpnode.placement.memory import migrate_memory

        move = migrate_memory(live, pid, target)
    if fmt == "json":
        from mcpnode.cli.render_json import pin_json

        click.echo(pin_json(result, move), nl=False)
        return
    click.echo(render_exec.pin_text(result), nl=False)
    if move is not None:
        click.echo(render_exec.migrate_text(move), nl=False)


@cli.command("systemd-dropin")
@placement_options
@click.option("--unit", required=True, metavar="NAME", help="Service unit (NAME[.service]).")
@click.option(
    "--write", "do_write", is_flag=True, help="Write the drop-in under --root (atomically)."
)
@format_option
@click.option(
    "--slice",
    "slice_name",
    default=None,
    metavar="NAME",
    help="Also run the service in slice NAME (Slice=), outside a confined system.slice.",
)
def systemd_dropin(
    placement: PlacementRequest, unit: str, do_write: bool, fmt: str, slice_name: str | None
) -> None:
    """Print (or --write) etc/systemd/system/NAME.service.d/50-mcpnode-placement.conf:
    CPUAffinity=, NUMAPolicy=, NUMAMask= and Environment= for the GPU's placement."""
    from mcpnode.host import Host
    from mcpnode.placement import systemd

    name = systemd.unit_name(unit)
    slice_unit = systemd.slice_name(slice_name) if slice_name is not None else None
    target, _ = commands.placement_target(Host("/"), placement, _say)
    text = systemd.render_dropin(name, target, slice_unit)
    path = systemd.dropin_path(name)
    if do_write:
        with Host(placement.root) as host:
            path = systemd.write_dropin(host, name, text)
        click.echo(f"wrote {path}; run `systemctl daemon-reload` and restart {name}", err=True)
    if fmt == "json":
        from mcpnode.cli.render_json import dropin_json

        click.echo(dropin_json(name, path, text, target, written=do_write), nl=False)
    elif not do_write:
        click.echo(text, nl=False)


@cli.command()
@config_option(help="Agent configuration (docs/config.md); under --root.")
@root_option
@profiles_dir_option
@click.option("--inject-fd", type=int, default=None, hidden=True, help="Read JSON device events.")
def agent(config_path: str, root: str, profiles_dir: Path | None, inject_fd: int | None) -> None:
    """Run the node agent (systemd Type=notify): tune, watch devices and drift, publish."""
    sys.exit(
        commands.agent_command(root, config_path, profiles_dir=profiles_dir, inject_fd=inject_fd)
    )


def _register() -> None:
    # Groups defined in their own modules (they import nothing heavy at load time).
    from mcpnode.cli.config_cmd import config
    from mcpnode.cli.fleet import fleet_report
    from mcpnode.cli.health_cmd import expect
    from mcpnode.cli.placement_cmd import ps
    from mcpnode.cli.probe_cmd import probe

    cli.add_command(config)
    cli.add_command(fleet_report)
    cli.add_command(expect)
    cli.add_command(probe)
    cli.add_command(ps)


_register()


def main(argv: list[str] | None = None) -> None:
    """Entry point: mcpnode's errors end as one line and an exit code (cli/errors.py)."""
    try:
        rv = cli.main(args=argv, prog_name="mcpnode", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_ERROR)
    except click.UsageError as err:
        # One line, as every other mistake (click's own show() prints the usage, a hint and
        # the error on four): the command, what is wrong, where the options are listed.
        path = err.ctx.command_path if err.ctx is not None else "mcpnode"
        message = " ".join(err.format_message().split())
        click.echo(f"{path}: {message} (`{path} --help` lists the options)", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as err:
        err.show()
        sys.exit(EXIT_ERROR)
    except (McpnodeError, OSError) as err:
        # One line and the documented status for each (cli/errors.py, shared with cli/fast.py).
        said = error_line(err)
        if said is None:
            raise
        click.echo(said[0], err=True)
        sys.exit(said[1])
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)
