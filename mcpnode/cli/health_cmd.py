"""`mcpnode expect [--write FILE]`: the expected inventory of a known-good host, as the
`[expect]` table `mcpnode audit --expect FILE` and the agent's configuration read
(audit/expect.py; docs/config.md). Registered by main.py's _register()."""

from __future__ import annotations

from pathlib import Path

import click

from mcpnode.cli.options import root_option


@click.command("expect")
@root_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["toml", "json"]),
    default="toml",
    show_default=True,
    help="What is printed: the [expect] table, or it as JSON (schema mcpnode.expect/v1).",
)
@click.option(
    "--write",
    "write_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the [expect] table to FILE (atomically) instead of printing it.",
)
def expect(root: str, fmt: str, write_file: Path | None) -> None:
    """Print (or --write) what this host has as an [expect] table: GPU count and model,
    NVLinks per GPU, GPU PCIe generation and width, RDMA NICs and their rate, NUMA nodes, the
    driver as the minimum. Run it on a known-good host of each kind."""
    from mcpnode.audit.expect import expectation_of, render, render_json
    from mcpnode.cli.render_audit import write_atomic
    from mcpnode.host import Host
    from mcpnode.topology.discover import discover_host

    if write_file is not None and fmt == "json":
        # The file is what `audit --expect` and the agent read: TOML only.
        raise click.UsageError("--write writes the [expect] TOML file; --format json prints")
    with Host(root) as host:
        topology = discover_host(host)
        source = topology.identity.hostname or root
        found = expectation_of(host, topology)
    text = render_json(found, source) if fmt == "json" else render(found, source)
    if write_file is None:
        click.echo(text, nl=False)
        return
    write_atomic(write_file, text)
    click.echo(f"wrote {write_file}", err=True)
