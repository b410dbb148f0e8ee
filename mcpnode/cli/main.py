"""The `mcpnode` command. Commands are thin: parse, call one core function, render.

Heavy modules (pynvml, pyroute2, pyudev, prometheus-client) are imported inside the commands
that need them so `mcpnode --help` stays fast.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from mcpnode import __version__
from mcpnode.errors import HostError, McpnodeError, RootError, UsageError

F = TypeVar("F", bound=Callable[..., Any])

# Exit codes, in one place (STYLE.md habit 7).
EXIT_OK = 0
EXIT_FINDINGS = 1  # the command ran and found something wrong (audit FAIL, drift)
EXIT_ERROR = 2  # the command could not do its job
EXIT_USAGE = 64  # EX_USAGE from sysexits.h


def root_option(fn: F) -> F:
    """`--root PATH`: read a snapshot, sysfs dump (dir or .tar.gz/.tar.bz2) instead of `/`."""
    return click.option(
        "--root",
        "root",
        default="/",
        show_default=True,
        type=click.Path(path_type=str),
        help="Machine root: / for this host, or a snapshot / sysfs dump (dir or tarball).",
    )(fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mcpnode")
def cli() -> None:
    """Node agent for GPU inference hosts: discover, tune, audit, place."""


@cli.command()
@root_option
@click.option("--tree", is_flag=True, help="NUMA -> host bridge -> switch -> device tree.")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def topo(root: str, tree: bool, fmt: str) -> None:
    """GPU/NIC topology matrix in `nvidia-smi topo -m` layout (or a tree, or JSON)."""
    from mcpnode.cli import render_topo
    from mcpnode.host import Host
    from mcpnode.topology.discover import discover_host

    with Host(root) as host:
        topology = discover_host(host)
    if fmt == "json":
        click.echo(render_topo.as_json(topology))
    elif tree:
        click.echo(render_topo.as_tree(topology), nl=False)
    else:
        click.echo(render_topo.as_matrix(topology), nl=False)


@cli.command()
@root_option
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def gpus(root: str, fmt: str) -> None:
    """Per-GPU table: bus id, NUMA, PCIe, NVLink, persistence, ECC, row remapping, MIG, fabric."""
    from mcpnode.cli import render_gpus
    from mcpnode.host import Host
    from mcpnode.topology.discover import discover_host

    with Host(root) as host:
        topology = discover_host(host)
    if fmt == "json":
        click.echo(render_gpus.as_json(topology))
    else:
        click.echo(render_gpus.as_text(topology), nl=False)


@cli.command()
@root_option
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Tarball to write (.tar.gz or .tar.bz2).",
)
def snapshot(root: str, output: Path) -> None:
    """Capture exactly the files discovery reads into a tarball usable as --root."""
    from mcpnode.host import Host
    from mcpnode.snapshot import write_snapshot

    with Host(root) as host:
        result = write_snapshot(host, output)
    click.echo(
        f"wrote {result.path}: {result.files} files, {result.links} symlinks, "
        f"{result.dirs} directories; {len(result.topology.gpus)} GPUs, "
        f"{len(result.topology.problems)} problems"
    )


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps mcpnode's errors to exit codes and one-line messages."""
    try:
        rv = cli.main(args=argv, prog_name="mcpnode", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_ERROR)
    except click.ClickException as err:
        err.show()
        sys.exit(EXIT_USAGE if isinstance(err, click.UsageError) else EXIT_ERROR)
    except UsageError as err:
        click.echo(f"mcpnode: {err}", err=True)
        sys.exit(EXIT_USAGE)
    except (RootError, HostError) as err:
        click.echo(f"mcpnode: {err}", err=True)
        sys.exit(EXIT_ERROR)
    except McpnodeError as err:
        click.echo(f"mcpnode: {type(err).__name__}: {err}", err=True)
        sys.exit(EXIT_ERROR)
    except OSError as err:
        # Output files (snapshot -o) are the only I/O outside Host; report them plainly.
        click.echo(f"mcpnode: {err}", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)
